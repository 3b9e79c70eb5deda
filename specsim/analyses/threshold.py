"""The production on/off policy for an operating point, and the config lines that apply it.

The switch-off batch comes from one function, `analyses.switch_off.switch_off_point`, under
each assumption it can make; the policy prints them side by side and recommends one:
- under the scenario's workload (the serving view: prefill shares the iterations) when the scenario
  has a `[workload]`, else decode only;
- with the scenario's K (what vLLM and SGLang deploy: one K for every batch size);
- memory included (speculation cannot run past the largest batch its drafter and slots fit).
Where the decode-only and serving answers differ, the policy says so. The K per batch band (K
re-tuned, decode only or under the workload as recommended) gives TensorRT-LLM's schedule; the
acceptance below which speculation stops paying comes from the same grid.

Config lines, each labelled with the version semantics it assumes:
- vLLM (V1 engine, 0.24 and later) `--speculative-config` JSON: `num_speculative_tokens` and the
  dynamic schedule `num_speculative_tokens_per_batch_size`, a list of inclusive [lo, hi, K] ranges
  of the step's batch size, K = 0 meaning no speculation (vllm-project/vllm PR #32374, "[V1][Spec
  Decode] Add Dynamic SD", merged May 2026). The gate becomes [[1, gate − 1, K], [gate, limit, 0]],
  the same rule the simulator's `DisableByBatchSize` applies. `disable_by_batch_size` is accepted but
  read by nothing since V0 was removed in 0.10 (PR #35060, which drops it), so it is not printed for V1.
- vLLM V0 (0.5–0.9) `disable_by_batch_size`: the docs word it "disable speculative decoding for new
  incoming requests when the number of enqueued requests is larger than this value", but the V0
  spec-decode worker (`SpecDecodeWorker._should_disable_all_speculation`) switches it off for the
  whole step while `running_queue_size >= disable_by_batch_size`; we follow the code.
- SGLang server flags `--speculative-algorithm/-num-steps/-eagle-topk/-num-draft-tokens`; SGLang has
  no batch-size gate (a fallback for n-gram, sgl-project/sglang PR #13376, was closed unmerged, and a
  per-request switch, PR #30264, is an RFC as of July 2026), so the gate is printed for a router.
- TensorRT-LLM LLM API `speculative_config` (1.3+, DecodingBaseConfig): `max_draft_len`,
  `max_concurrency` (speculation off above it), `draft_len_schedule` ({4: 4, 8: 2, 32: 1} means
  batch 1–4 → 4 drafts, 5–8 → 2, 9–32 → 1, 33+ → 0; NVIDIA/TensorRT-LLM PR #10860), and
  `acceptance_rate_threshold` (rolling accepted / drafted below which speculation is disabled).
Serving stacks report acceptance as accepted drafts / drafted tokens = (τ − 1)/K; the policy gives
both that ratio and the i.i.d. α it corresponds to.

`[threshold]` keys: margin (default 0.05), k_max (K candidates 1..k_max; default: the largest K the
acceptance speaks for, at most 8 — see below), batch_sizes (the grid of the band and acceptance
tables), alphas (acceptance grid), batch_limit (largest batch examined, default 1024), drafter_model
(the path or HF id to paste into configs).

Advice stays inside the evidence. The acceptance a scenario gives speaks for draft positions up to
a K (`observed_k`): the K its τ was measured at, the positions of its per-position rates, the K the
calibration's runs drafted, or, for an α given alone, the scenario's K. Extending an i.i.d. α past
that K assumes positions nobody observed accept as often as the first ones, which overstates long
drafts most for heads (EAGLE, Medusa, MTP), whose acceptance falls with position; a calibration
that measured per-position rates keeps their shape up to the positions it ran
(`Acceptance.position_ratios`). So the K candidates stop at `observed_k` unless `[threshold] k_max`
asks for more, and then every band whose K lies above it says "extrapolated", and so do the
TensorRT-LLM lines written from those bands. A band is never on where its speedup is below 1.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field

import numpy as np

from ..errors import field_error
from ..specs import checks as C
from ..specs.analysis_tables import DEFAULT_BATCH_SIZES, DEFAULT_MARGIN
from ..speculation.acceptance import tokens_per_cycle_iid
from ..speculation.cycle import acceptance_threshold
from ..speculation.families import FAMILIES
from ..speculation.operating_point import OperatingPoint
from ..speculation.predict import grid
from ..speculation.switch_off import SwitchOff, WorkloadMix
from ..serving.cost import ServingCost
from .switch_off import switch_off_point, workload_speedup



def observed_k(op: OperatingPoint) -> int | None:
    """The largest draft position the point's acceptance was given or calibrated for (see the module
    docstring); None for a family without a draft length (Lookahead)."""
    if not op.speculative or not op.drafter.family.uses_k:
        return None
    acc = op.require_acceptance()
    cal = acc.calibration
    if cal is not None:
        return int(max([int(cal.k), *(int(k) for k in (cal.ks or ())), len(cal.conditional or ())]))
    if acc.model.conditional is not None:
        return len(acc.model.conditional)
    if acc.tau_given is not None and acc.tau_point is not None:
        return int(acc.tau_point[0])
    return int(op.scenario.k) if op.scenario is not None else int(op.k)


def evidence_text(op: OperatingPoint) -> str:
    """Where observed_k comes from, in words."""
    acc = op.acceptance
    if acc.calibration is not None:
        return f"the calibration {acc.calibration.name} drafted up to K = {observed_k(op)}"
    if acc.model is not None and acc.model.conditional is not None:
        return f"per-position rates are given for {observed_k(op)} positions"
    if acc.tau_given is not None:
        return f"τ was given at K = {observed_k(op)}"
    return f"α was given for the scenario's K = {observed_k(op)}"


@dataclass(frozen=True, slots=True, kw_only=True)
class ThresholdSettings:
    margin: float = DEFAULT_MARGIN
    k_max: int = 8
    k_observed: int | None = None  # the largest K the acceptance speaks for (observed_k)
    batch_sizes: tuple = DEFAULT_BATCH_SIZES
    alphas: tuple = tuple(np.round(np.linspace(0.0, 1.0, 101), 4))
    batch_limit: int = 1024
    drafter_model: str | None = None


def threshold_settings(op: OperatingPoint, *, margin: float | None = None) -> ThresholdSettings:
    """The point's `[threshold]` table (checked when the scenario loaded: `specs.analysis_tables`), with
    what needs the resolved point: k_max, when the table leaves it, the largest K the acceptance speaks
    for (at most 8). margin: a flag's value replaces the file's."""
    t = op.scenario.tables.threshold
    where = f"scenario {op.scenario.path or op.name!r} [threshold]"
    if margin is not None:
        C.number(where, "margin", margin, lo=0.0, hi=10.0, hi_open=True, unit="a safety margin: 0.1 = require a "
                 "1.1× speedup")
    k_obs = observed_k(op) if op.speculative and op.acceptance.model is not None else None
    k_max = t.k_max if "k_max" in op.section("threshold") else (min(8, k_obs) if k_obs else 8)
    return ThresholdSettings(margin=float(t.margin if margin is None else margin), k_max=k_max, k_observed=k_obs,
                             batch_sizes=tuple(sorted(t.batch_sizes)),
                             alphas=ThresholdSettings().alphas if t.alphas is None else tuple(sorted(map(float, t.alphas))),
                             batch_limit=t.batch_limit, drafter_model=t.drafter_model)


@dataclass(frozen=True, slots=True, kw_only=True)
class ThresholdPolicy:
    """The on/off policy for one operating point.

    recommended: the switch-off to deploy (see the module docstring); answers: every view computed,
    by name; batch_off: recommended.batch_off. alpha_off: acceptance below which speculation does not
    pay at the smallest batch with K re-tuned (None: never pays on the grid); alpha_off_deployed_k:
    the same at the deployed K, and alpha_off_ratio the accepted/drafted ratio it means. bands:
    [{batch_min, batch_max, k, speedup_min}] with k = 0 meaning off. notes: where answers differ."""

    scenario: str
    method: str
    hardware: str
    target: str
    drafter: str | None
    alpha: float
    context_len: int
    margin: float
    deployed_k: int
    recommended: SwitchOff
    answers: dict
    alpha_off: float | None
    alpha_off_deployed_k: float | None
    alpha_off_ratio: float | None
    bands: list
    per_batch: list
    notes: list = field(default_factory=list)
    configs: dict = field(default_factory=dict)
    band: dict | None = None  # a calibrated acceptance's interval carried through (speculation.predict.acceptance_band)
    k_observed: int | None = None  # the largest K the acceptance speaks for (observed_k)
    evidence: str = ""  # where k_observed comes from, in words

    @property
    def batch_off(self) -> int | None:
        return self.recommended.batch_off

    def to_dict(self) -> dict:
        out = {k: getattr(self, k) for k in ("scenario", "method", "hardware", "target", "drafter", "alpha",
                                            "context_len", "margin", "deployed_k", "alpha_off",
                                            "alpha_off_deployed_k", "alpha_off_ratio", "bands", "per_batch", "notes",
                                            "configs", "band", "k_observed", "evidence")}
        out["batch_off"] = self.batch_off
        out["recommended"] = self.recommended.to_dict()
        out["answers"] = {name: a.to_dict() for name, a in self.answers.items()}
        return out


def batch_rows(op: OperatingPoint, batch_sizes, *, ks, workload: WorkloadMix | None = None,
               max_batch: int | None = None) -> list[dict]:
    """At each batch size (sorted, each once): the best K among `ks` and its speedup, evaluated at that
    batch (decode only: `predict.grid`; under a workload: `analyses.switch_off.workload_speedup`, the same
    function the switch-off search uses), and whether speculation fits there (max_batch)."""
    bs = np.asarray(sorted({int(b) for b in batch_sizes}), dtype=np.int64)
    ks = [int(k) for k in ks]
    if workload is None:
        s = grid(op, k=ks, batch_size=[int(b) for b in bs]).speedup[:, 0, :, 0, 0]  # (nK, nB)
    else:
        cost = ServingCost(op)  # built once: its tables serve every batch and K
        s = np.array([[workload_speedup(op, workload, b=int(b), k=k, cost=cost) for b in bs] for k in ks])
    best = np.argmax(s, axis=0)
    return [{"batch_size": int(b), "best_k": ks[int(best[j])], "best_speedup": float(s[best[j], j]),
             "fits": bool(max_batch is None or b <= max_batch)} for j, b in enumerate(bs)]


def bands_from_rows(rows: list, *, margin: float, gate: int | None = None, min_batch: int | None = None,
                    k_observed: int | None = None) -> list:
    """Consecutive batch sizes with one K: [{batch_min, batch_max, k, speedup_min, extrapolated}], k = 0
    meaning off. A batch runs its best K where that pays 1 + margin; where a deployed gate (chosen by
    simulation) keeps speculation on, also where it merely does not slow decoding (speedup ≥ 1); never
    where it is slower than plain decoding, does not fit, lies at or above the gate or below
    `min_batch`. speedup_min: the lowest speedup of the band's K over its batches; extrapolated: its K
    lies above the largest K the acceptance speaks for (`observed_k`)."""
    bands: list = []
    for r in rows:
        b, s = r["batch_size"], r["best_speedup"]
        on = (r["fits"] and (gate is None or b < gate) and (min_batch is None or b >= min_batch)
              and (s >= 1.0 + margin or (gate is not None and s >= 1.0)))
        k = int(r["best_k"]) if on else 0
        if bands and bands[-1]["k"] == k:
            bands[-1]["batch_max"] = int(b)
            bands[-1]["speedup_min"] = float(min(bands[-1]["speedup_min"], s))
        else:
            bands.append({"batch_min": int(b), "batch_max": int(b), "k": k, "speedup_min": float(s),
                          "extrapolated": bool(k_observed is not None and k > k_observed)})
    return bands


def off_words(so: SwitchOff) -> str:
    """A switch-off's answer in words, never 'None': off at batch ≥ N, never pays, or pays to the limit."""
    if so.batch_off is None:
        return f"it pays at every batch to {so.batch_limit}"
    if so.batch_off <= 1:
        return "it never pays"
    return f"off at batch ≥ {so.batch_off}"


def threshold_policy(op: OperatingPoint, *, workload: WorkloadMix | None = None, max_batch_serving: int | None = None,
                     margin: float | None = None) -> ThresholdPolicy:
    """The policy for `op`. workload: the scenario's workload mix (see serving.setup.workload_mix),
    which makes the serving view the recommended one; max_batch_serving: the largest batch the
    serving engine's KV cache holds while speculating (default: the decode-only memory fit)."""
    if not op.speculative:
        raise field_error(f"scenario {op.name!r}", "method", op.method, "a drafter family (the policy switches it on or off)")
    op.require_acceptance()
    st = threshold_settings(op, margin=margin)
    m = st.margin
    kw = dict(margin=m, k_max=st.k_max, batch_limit=st.batch_limit)
    answers = {"decode-only, scenario K": switch_off_point(op, retune_k=False, **kw),
               "decode-only, K re-tuned": switch_off_point(op, retune_k=True, **kw)}
    if workload is not None:
        answers["workload, scenario K"] = switch_off_point(op, retune_k=False, workload=workload,
                                                           max_batch_speculative=max_batch_serving, **kw)
        answers["workload, K re-tuned"] = switch_off_point(op, retune_k=True, workload=workload,
                                                           max_batch_speculative=max_batch_serving, **kw)
        recommended = answers["workload, scenario K"]
    else:
        recommended = answers["decode-only, scenario K"]
    notes = []
    d, r = answers["decode-only, scenario K"], recommended
    if workload is not None and d.batch_off != r.batch_off:
        notes.append(f"decode-only analytics say {off_words(d)}, but under the scenario's workload prompts share the "
                     f"iterations and {off_words(r)}: the workload answer is recommended")
    rt = answers["decode-only, K re-tuned"]
    if rt.batch_off != d.batch_off:
        notes.append(f"re-tuning K per batch (K = 1..{st.k_max}): decode-only, {off_words(rt)} (a stack with a K "
                     f"schedule, e.g. TensorRT-LLM's draft_len_schedule, can use the bands below)")
    k_obs = st.k_observed
    if k_obs is not None and st.k_max > k_obs:
        notes.append(f"K above {k_obs} is extrapolated: {evidence_text(op)}, and [threshold] k_max = {st.k_max} extends "
                     f"its acceptance to positions nobody observed (bands with such a K say so)")

    # bands and the acceptance thresholds on the [threshold] grid, K re-tuned, each batch evaluated
    bs = np.asarray(st.batch_sizes, dtype=np.int64)
    ks = np.arange(1, st.k_max + 1) if op.drafter.family.uses_k else np.array([op.k])
    retuned = answers["workload, K re-tuned" if workload is not None else "decode-only, K re-tuned"]
    max_b = retuned.max_batch_speculative
    rows = batch_rows(op, bs, ks=ks, workload=workload, max_batch=max_b)
    bands = bands_from_rows(rows, margin=m, k_observed=k_obs)
    alphas = np.asarray(st.alphas)
    ga = grid(op, k=list(ks), batch_size=list(bs), alpha=list(alphas))
    sa = ga.speedup[:, 0, :, 0, :].max(axis=0)  # (nB, nα): best K at each (B, α), decode only
    per_batch = []
    for j, row in enumerate(rows):
        fits = row["fits"]
        per_batch.append({**row, "alpha_off": acceptance_threshold(alphas, sa[j], margin=m) if fits else None,
                          "pays": bool(row["best_speedup"] >= 1.0 + m and fits)})
    alpha_off = per_batch[0]["alpha_off"]
    k_dep = op.k
    if op.drafter.family.uses_k:
        gk = grid(op, k=[k_dep], batch_size=[int(bs[0])], alpha=list(alphas))
        alpha_off_k = acceptance_threshold(alphas, gk.speedup[0, 0, 0, 0, :], margin=m)
    else:
        alpha_off_k = alpha_off
    ratio = None
    if alpha_off_k is not None and op.drafter.family.uses_k and k_dep > 0:
        ratio = float((tokens_per_cycle_iid(alpha_off_k, k_dep) - 1.0) / k_dep)
    drafter = op.drafter.drafter.id if op.drafter.drafter is not None else None
    policy = ThresholdPolicy(scenario=op.name, method=op.method, hardware=op.hardware.id, target=op.target.id,
                             drafter=drafter, alpha=float(op.alpha), context_len=op.context_len, margin=m,
                             deployed_k=k_dep, recommended=recommended, answers=answers, alpha_off=alpha_off,
                             alpha_off_deployed_k=alpha_off_k, alpha_off_ratio=ratio, bands=bands, per_batch=per_batch,
                             notes=notes, k_observed=k_obs, evidence=evidence_text(op) if k_obs is not None else "")
    configs = stack_configs(policy, drafter_model=st.drafter_model)
    band = _acceptance_band(op, recommended, workload=workload, max_batch_serving=max_batch_serving, kw=kw)
    return ThresholdPolicy(**{**{k: getattr(policy, k) for k in policy.__dataclass_fields__}, "configs": configs,
                              "band": band})


def _acceptance_band(op: OperatingPoint, recommended: SwitchOff, *, workload, max_batch_serving, kw) -> dict | None:
    """With a calibrated acceptance: the speedup band at the point and the recommended switch-off batch
    under the same assumption at each end of the calibration's α interval."""
    from ..speculation.predict import acceptance_band, with_alpha

    band = acceptance_band(op)
    if band is None:
        return None
    cal = op.acceptance.calibration
    retune = recommended.retune_k
    for end, a in (("low", cal.alpha_low), ("high", cal.alpha_high)):
        x = with_alpha(op, a)
        off = switch_off_point(x, retune_k=retune, workload=workload,
                               max_batch_speculative=max_batch_serving if workload is not None else None, **kw)
        band[f"batch_off_{end}"] = off.batch_off
    return band


def recommended_switch_off(op: OperatingPoint, *, decode_only: bool = False, margin: float | None = None) -> SwitchOff:
    """The switch-off point to deploy, as `threshold` recommends it: under the scenario's workload when
    it has one (else decode only), with the scenario's K, the [threshold] margin, memory included.
    The sweep plot, `simulate` and the report show this same answer."""
    from ..serving.setup import workload_mix

    st = threshold_settings(op, margin=margin)
    mix = None if decode_only else workload_mix(op)
    return switch_off_point(op, margin=st.margin, k_max=st.k_max, batch_limit=st.batch_limit,
                            workload=mix[0] if mix else None, max_batch_speculative=mix[1] if mix else None)


VLLM_V1 = "vLLM 0.24+ (V1 engine)"
VLLM_V1_CAVEAT = ("under the V1 model runner a per-batch schedule switches vLLM's CUDA-graph mode from "
                  "FULL_AND_PIECEWISE to PIECEWISE (vLLM issue #49548 measured 59.6 -> 50.0 tok/s single-stream, "
                  "about 14 %, which specsim does not model; the V2 model runner keeps full graphs with it, PR #45953, "
                  "June 2026), and that issue reports aggregate throughput collapsing under concurrency at the "
                  "schedule's threshold (open as of July 2026): measure both configurations before deploying")
VLLM_V0 = "vLLM 0.5-0.9 (V0 engine)"


def vllm_schedule(k: int, *, gate: int | None, min_batch: int | None, limit: int) -> list:
    """vLLM V1's `num_speculative_tokens_per_batch_size`: inclusive [lo, hi, K] ranges covering batch
    1..limit (K = 0: no speculation), on from `min_batch` (None: 1) and off from `gate` (None: never)."""
    lo = 1 if min_batch is None else int(min_batch)
    hi = int(limit) if gate is None else int(gate) - 1
    out = []
    if lo > 1:
        out.append([1, lo - 1, 0])
    if hi >= lo:
        out.append([lo, hi, int(k)])
    if gate is not None and gate <= limit:
        out.append([int(gate), int(limit), 0])
    return out


def stack_configs(policy: ThresholdPolicy, *, drafter_model: str | None = None, min_batch: int | None = None) -> dict:
    """Ready-to-paste configs for vLLM (V1 and V0), SGLang and TensorRT-LLM, each labelled with the
    version semantics it assumes. vLLM and SGLang get the deployed K and the recommended gate; vLLM V1
    also `min_batch` (speculation on only from that running batch; its schedule can say so, the
    others get a warning from the caller); TensorRT-LLM the K schedule by batch band. `drafter_model`:
    the path or HF id of the draft weights."""
    method = policy.method
    fam = FAMILIES[method]
    k = policy.deployed_k
    off = policy.batch_off
    limit = max(int(policy.recommended.batch_limit), int(off or 0))
    model = drafter_model or (f"<path or HF id of {policy.drafter}>" if policy.drafter else
                              f"<path or HF id of the {method} weights>")
    out: dict = {}
    never = off is not None and off <= 1
    name = fam.stack_name("vllm")
    if never:
        for key, label in (("vllm", VLLM_V1), ("vllm-v0", VLLM_V0)):
            out[key] = {"semantics": label, "config": None,
                        "note": "speculation does not pay at any batch size here: leave --speculative-config out"}
    elif name:
        base: dict = {}
        base.update(fam.stacks["vllm"].extra)
        if fam.weights:
            base["model"] = model
        base["num_speculative_tokens"] = int(k)
        # V1 names every method, a separate draft model too ("draft_model", PR #24322); V0 inferred it
        v1 = {"method": name, **base}
        base = base if method == "draft_model" else {"method": name, **base}
        if off is not None or min_batch is not None:
            v1["num_speculative_tokens_per_batch_size"] = vllm_schedule(k, gate=off, min_batch=min_batch, limit=limit)
        out["vllm"] = {
            "semantics": f"{VLLM_V1} --speculative-config JSON: num_speculative_tokens_per_batch_size lists inclusive "
                         "[lo, hi, K] ranges of the step's batch size, K = 0 = no speculation (PR #32374); the last "
                         f"range ends at the largest batch examined ({limit}): stretch it to your max_num_seqs",
            "config": v1, "command_line": f"--speculative-config '{json.dumps(v1)}'",
            "switch_off_assumes": policy.recommended.assumptions, "expresses_min_batch": True,
        }
        if "num_speculative_tokens_per_batch_size" in v1:
            out["vllm"]["caveat"] = VLLM_V1_CAVEAT
        v0 = dict(base)
        if off is not None:
            v0["disable_by_batch_size"] = int(off)
        out["vllm-v0"] = {
            "semantics": f"{VLLM_V0} --speculative-config JSON: speculation is off for the whole step while the "
                         "running batch holds >= disable_by_batch_size requests; one K for all batch sizes "
                         "(vLLM 0.10+ accepts disable_by_batch_size but ignores it: use the V1 line)",
            "config": v0, "command_line": f"--speculative-config '{json.dumps(v0)}'",
            "switch_off_assumes": policy.recommended.assumptions,
        }
    else:
        for key, label in (("vllm", VLLM_V1), ("vllm-v0", VLLM_V0)):
            out[key] = {"semantics": label, "config": None,
                        "note": f"vLLM does not ship {method!r} in the versions assumed"}
    name = fam.stack_name("sglang")
    if name and not never:
        flags = ["--speculative-algorithm", name]
        if fam.weights:
            flags += ["--speculative-draft-model-path", model]
        flags += ["--speculative-num-steps", str(k), "--speculative-eagle-topk", "1",
                  "--speculative-num-draft-tokens", str(k + 1)]
        out["sglang"] = {
            "semantics": "SGLang server arguments (0.4 and later); topk 1 = a chain of K drafts (num_draft_tokens = "
                         "K + 1). SGLang has no batch-size gate (PR #13376 closed unmerged; PR #30264 an RFC, July "
                         "2026): apply the switch-off in the router / front end"
                         + (f" (off at batch >= {off})" if off is not None else ""),
            "flags": flags, "command_line": " ".join(flags),
        }
    name = fam.stack_name("trtllm")
    on = [b for b in policy.bands if b["k"] > 0]
    if name and on:
        schedule = {int(b["batch_max"]): int(b["k"]) for b in on}
        cfg = {"decoding_type": name, "max_draft_len": int(max(schedule.values()))}
        if fam.weights:
            cfg["speculative_model"] = model
        last_on = max(schedule)
        if policy.bands[-1]["k"] == 0:
            cfg["max_concurrency"] = last_on
            cfg["draft_len_schedule"] = schedule
        if policy.alpha_off_ratio is not None:
            cfg["acceptance_rate_threshold"] = round(float(policy.alpha_off_ratio), 3)
        out["trtllm"] = {
            "semantics": "TensorRT-LLM 1.3+ LLM API speculative_config (DecodingBaseConfig): max_concurrency = "
                         "speculation off above this batch size; draft_len_schedule {B_max: K} (batch sizes above "
                         "the largest key run without speculation, PR #10860); acceptance_rate_threshold on the "
                         "rolling accepted/drafted ratio; the schedule re-tunes K per batch band",
            "config": cfg,
        }
        ext = [b for b in on if b.get("extrapolated")]
        if ext:
            out["trtllm"]["warning"] = (
                f"max_draft_len {cfg['max_draft_len']} and draft_len_schedule "
                + ", ".join(f"K = {b['k']} at batch {b['batch_min']}–{b['batch_max']}" for b in ext)
                + f" are extrapolated: {policy.evidence}; a K above {policy.k_observed} assumes the positions past it "
                  f"accept as often as those observed")
    if policy.k_observed is not None and k > policy.k_observed:
        for key in ("vllm", "vllm-v0", "sglang"):
            if key in out and (out[key].get("config") is not None or out[key].get("flags")):
                out[key]["warning"] = (f"K = {k} is extrapolated: {policy.evidence}; positions past "
                                       f"{policy.k_observed} were never observed")
    return out


__all__ = ["ThresholdPolicy", "ThresholdSettings", "threshold_policy", "threshold_settings", "stack_configs",
           "vllm_schedule", "recommended_switch_off"]
