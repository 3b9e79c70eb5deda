"""The production on/off policy: when to switch speculation off, and the config line that does it.

From a scenario (hardware, target, drafter family, acceptance, context) we evaluate the best K at
every batch size of a grid (`speculation.evaluate_grid`) and derive
- the batch size from which even the best K no longer pays at least 1 + margin (switch off above),
- the acceptance rate below which it stops paying (at B = 1 and at every batch size of the grid),
- the best K per batch-size band (a schedule: K shrinks as the batch grows, then 0),
and render them as ready-to-paste configuration for the serving stacks that have the knob:

- vLLM `--speculative-config` JSON: `num_speculative_tokens`, `disable_by_batch_size`. vLLM's docs
  word it "disable speculative decoding for new incoming requests when the number of enqueued
  requests is larger than this value", but the V0 spec-decode worker
  (`SpecDecodeWorker._should_disable_all_speculation`, vLLM 0.5–0.6) switches it off for the whole
  step while `running_queue_size >= disable_by_batch_size`; we follow the code, as the serving
  simulator's `DisableByBatchSize` policy does, so the value printed is the batch size at which
  speculation goes off. vLLM has no per-batch-size K schedule in those versions.
- SGLang server flags `--speculative-algorithm/-num-steps/-eagle-topk/-num-draft-tokens`
  (SGLang 0.4–0.5). SGLang has no documented batch-size gate in those versions: the policy is printed
  for a router/front end to apply.
- TensorRT-LLM LLM API `speculative_config` (1.3+, DecodingBaseConfig): `max_draft_len`,
  `max_concurrency` (speculation off above it), `draft_len_schedule` ({4: 4, 8: 2, 32: 1} means
  batch 1–4 → 4 drafts, 5–8 → 2, 9–32 → 1, 33+ → 0; NVIDIA/TensorRT-LLM PR #10860), and
  `acceptance_rate_threshold` (rolling accepted_draft_tokens / drafted_tokens below which speculation
  is disabled for good).
Serving stacks report acceptance as accepted drafts / drafted tokens = (τ − 1)/K; the policy gives
both that ratio and the i.i.d. α it corresponds to.

`[threshold]` keys: margin (default 0.05), batch_sizes, alphas (grid for the acceptance threshold),
k (candidate draft lengths, default 1..8), alpha (the operating acceptance; default the scenario's),
context_len (default the scenario's), drafter_model (the path/HF id to paste into configs).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..speculation import families as drafters
from ..speculation.acceptance import alpha_from_tau
from ..errors import field_error, reject_unknown_keys
from ..specs.hardware import load_hardware
from ..specs.models import load_model
from ..specs.scenario import Scenario
from ..speculation.cycle import Deployment, acceptance_threshold, batch_size_threshold, evaluate_grid, tokens_per_cycle_iid
from ..specs.stacks import load_stack

THRESHOLD_KEYS = ("margin", "batch_sizes", "alphas", "k", "alpha", "context_len", "drafter_model")
DEFAULT_BATCH_SIZES = (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512)
VLLM_METHOD = {"draft_model": None, "prompt_lookup": "ngram", "eagle": "eagle", "medusa": "medusa",
               "mtp": "deepseek_mtp"}
SGLANG_ALGORITHM = {"eagle": "EAGLE", "mtp": "EAGLE", "draft_model": "STANDALONE", "prompt_lookup": "NGRAM"}
TRTLLM_DECODING = {"draft_model": "DraftTarget", "prompt_lookup": "NGram", "eagle": "Eagle", "medusa": "Medusa",
                   "mtp": "MTP", "lookahead": "Lookahead"}


@dataclass(frozen=True, slots=True, kw_only=True)
class ThresholdPolicy:
    """The on/off policy for one scenario. batch_off: switch off for B ≥ batch_off (None: it pays
    on the whole grid). alpha_off: acceptance below which it does not pay at B = 1 (None: never pays).
    bands: [{batch_min, batch_max, k, speedup}], k = 0 meaning off. per_batch: one dict per grid B."""

    scenario: str
    method: str
    hardware: str
    target: str
    drafter: str | None
    alpha: float
    context_len: int
    margin: float
    batch_off: int | None
    alpha_off: float | None
    deployed_k: int
    alpha_off_deployed_k: float | None
    alpha_off_ratio: float | None
    bands: list
    per_batch: list
    configs: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def _bands(batch_sizes, best_k, best_speedup, margin) -> list:
    """Consecutive batch sizes with the same best K (0 where it does not pay) as bands."""
    bands: list = []
    for b, k, s in zip(batch_sizes, best_k, best_speedup):
        k = int(k) if s >= 1.0 + margin else 0
        if bands and bands[-1]["k"] == k:
            bands[-1]["batch_max"] = int(b)
            bands[-1]["speedup_min"] = float(min(bands[-1]["speedup_min"], s))
        else:
            bands.append({"batch_min": int(b), "batch_max": int(b), "k": k, "speedup_min": float(s)})
    return bands


def threshold_policy(scenario: Scenario) -> ThresholdPolicy:
    raw = dict(scenario.section("threshold"))
    where = f"scenario {scenario.path or scenario.name!r} [threshold]"
    reject_unknown_keys(where, raw, THRESHOLD_KEYS)
    margin = float(raw.get("margin", 0.05))
    if not 0.0 <= margin < 10:
        raise field_error(where, "margin", margin, "a safety margin >= 0 (0.1 = require a 1.1x speedup)")
    bs = np.asarray(raw.get("batch_sizes", DEFAULT_BATCH_SIZES), dtype=np.int64)
    ks = np.asarray(raw.get("k", list(range(1, 9))), dtype=np.int64)
    alphas = np.asarray(raw.get("alphas", np.round(np.linspace(0.0, 1.0, 101), 4)), dtype=float)
    if "alpha" in raw:
        alpha = float(raw["alpha"])
    elif scenario.alpha is not None:
        alpha = float(scenario.alpha)
    elif scenario.tau is not None:
        alpha = alpha_from_tau(float(scenario.tau), scenario.k)
    else:
        raise field_error(where, "alpha", None, "the operating acceptance (alpha here or at the top level)")
    ctx = int(raw.get("context_len", scenario.context_len))
    method = scenario.method
    if method == "none":
        raise field_error(where, "method", method, "a drafter family (the policy switches it on or off)")

    hw = load_hardware(scenario.hardware)
    target = load_model(scenario.target)
    if scenario.target_dtype:
        target = target.with_weight_format(scenario.target_dtype)
    stack = load_stack(scenario.stack) if scenario.stack else None
    dep = Deployment.from_stack(hw, stack, n_devices=scenario.tp, attention=scenario.attention)
    options = scenario.section("sweep").get("drafter_options", {})
    cfg = drafters.make_config(method, target, drafter=scenario.drafter, drafter_tp=scenario.drafter_tp,
                               allow_cross_tokenizer=scenario.allow_cross_tokenizer, options=options, where=where)
    grid_k = ks if method != "lookahead" else ks[:1]
    g = evaluate_grid(cfg, target, dep, k=grid_k, batch_size=bs, context_len=[ctx], alpha=[alpha])
    s = g.speedup[:, 0, :, 0, 0]  # (nK, nB)
    best_i = np.argmax(s, axis=0)
    best_k = grid_k[best_i]
    best_s = s[best_i, np.arange(bs.size)]
    batch_off = batch_size_threshold(bs, best_s, margin=margin)
    if batch_off is not None and batch_off > bs[0]:
        # refine between the last grid point that pays and the first that does not, one B at a time
        lo = int(bs[np.searchsorted(bs, batch_off) - 1])
        fine = np.arange(lo + 1, batch_off + 1)
        gf = evaluate_grid(cfg, target, dep, k=grid_k, batch_size=fine, context_len=[ctx], alpha=[alpha])
        batch_off = batch_size_threshold(fine, gf.speedup[:, 0, :, 0, 0].max(axis=0), margin=margin)

    ga = evaluate_grid(cfg, target, dep, k=grid_k, batch_size=bs, context_len=[ctx], alpha=alphas)
    sa = ga.speedup[:, 0, :, 0, :].max(axis=0)  # (nB, nα): best K at each (B, α)
    per_batch = []
    for j, b in enumerate(bs):
        a_off = acceptance_threshold(alphas, sa[j], margin=margin)
        per_batch.append({"batch_size": int(b), "best_k": int(best_k[j]), "best_speedup": float(best_s[j]),
                          "alpha_off": a_off, "pays": bool(best_s[j] >= 1.0 + margin)})
    alpha_off = per_batch[0]["alpha_off"]
    # the deployed K is fixed: the acceptance at which *it* stops paying at the smallest batch size
    k_at_b1 = int(best_k[0])
    i_k = int(np.flatnonzero(grid_k == k_at_b1)[0])
    alpha_off_k = acceptance_threshold(alphas, ga.speedup[i_k, 0, 0, 0, :], margin=margin)
    ratio = None
    if alpha_off_k is not None and method != "lookahead":
        ratio = float((tokens_per_cycle_iid(alpha_off_k, k_at_b1) - 1.0) / k_at_b1)
    bands = _bands(bs, best_k, best_s, margin)
    policy = dict(scenario=scenario.name, method=method, hardware=hw.id, target=target.id,
                  drafter=cfg.drafter.id if cfg.drafter is not None else None, alpha=alpha, context_len=ctx,
                  margin=margin, batch_off=batch_off, alpha_off=alpha_off, deployed_k=k_at_b1,
                  alpha_off_deployed_k=alpha_off_k, alpha_off_ratio=ratio, bands=bands,
                  per_batch=per_batch)
    policy["configs"] = stack_configs(policy, drafter_model=raw.get("drafter_model"))
    return ThresholdPolicy(**policy)


def stack_configs(policy: dict, *, drafter_model: str | None = None) -> dict:
    """Ready-to-paste configs for vLLM, SGLang and TensorRT-LLM, each labelled with the version
    semantics it assumes. `drafter_model`: the path or HF id of the draft weights (a placeholder when
    not given)."""
    method = policy["method"]
    bands = policy["bands"]
    on = [b for b in bands if b["k"] > 0]
    k1 = on[0]["k"] if on else 0
    model = drafter_model or (f"<path or HF id of {policy['drafter']}>" if policy["drafter"] else
                              f"<path or HF id of the {method} weights>")
    out: dict = {}
    # vLLM: one K and a batch-size cut-off
    if method in VLLM_METHOD and k1:
        cfg: dict = {}
        if VLLM_METHOD[method]:
            cfg["method"] = VLLM_METHOD[method]
        if method == "prompt_lookup":
            cfg.update({"prompt_lookup_max": 4, "prompt_lookup_min": 2})
        elif method != "mtp":
            cfg["model"] = model
        cfg["num_speculative_tokens"] = int(k1)
        if policy["batch_off"] is not None:
            cfg["disable_by_batch_size"] = int(policy["batch_off"])
        import json
        out["vllm"] = {
            "semantics": "vLLM 0.5-0.6 (V0 spec-decode worker) --speculative-config JSON: speculation is off for the "
                         "whole step while the running batch holds >= disable_by_batch_size requests; one K for "
                         "all batch sizes (no per-batch schedule)",
            "config": cfg,
            "command_line": f"--speculative-config '{json.dumps(cfg)}'",
        }
    elif k1:
        out["vllm"] = {"semantics": "vLLM 0.5-0.6", "config": None,
                       "note": f"vLLM has no {method!r} drafter in the versions assumed"}
    # SGLang: the algorithm flags; no batch gate
    if method in SGLANG_ALGORITHM and k1:
        flags = ["--speculative-algorithm", SGLANG_ALGORITHM[method]]
        if method in ("eagle", "draft_model"):
            flags += ["--speculative-draft-model-path", model]
        flags += ["--speculative-num-steps", str(k1), "--speculative-eagle-topk", "1",
                  "--speculative-num-draft-tokens", str(k1 + 1)]
        out["sglang"] = {
            "semantics": "SGLang 0.4-0.5 server arguments; topk 1 = a chain of K drafts (num_draft_tokens = K + 1). "
                         "No batch-size gate in these versions: apply batch_off in the router / front end",
            "flags": flags, "command_line": " ".join(flags),
        }
    # TensorRT-LLM: the full schedule
    if method in TRTLLM_DECODING and k1:
        schedule = {int(b["batch_max"]): int(b["k"]) for b in bands if b["k"] > 0}
        cfg = {"decoding_type": TRTLLM_DECODING[method], "max_draft_len": int(max(schedule.values()))}
        if method in ("draft_model", "eagle", "medusa"):
            cfg["speculative_model"] = model
        if policy["batch_off"] is not None:
            cfg["max_concurrency"] = int(policy["batch_off"]) - 1
            cfg["draft_len_schedule"] = schedule
        if policy["alpha_off_ratio"] is not None:
            cfg["acceptance_rate_threshold"] = round(float(policy["alpha_off_ratio"]), 3)
        out["trtllm"] = {
            "semantics": "TensorRT-LLM 1.3+ LLM API speculative_config (DecodingBaseConfig): max_concurrency = "
                         "speculation off above this batch size; draft_len_schedule {B_max: K} (batch sizes above "
                         "the largest key run without speculation, PR #10860); acceptance_rate_threshold on the "
                         "rolling accepted/drafted ratio",
            "config": cfg,
        }
    return out


def format_policy(p: ThresholdPolicy) -> str:
    lines = [f"specsim threshold: {p.scenario}",
             f"  {p.method} on {p.target} / {p.hardware}" + (f", drafter {p.drafter}" if p.drafter else ""),
             f"  operating acceptance α = {p.alpha:.3f}, context {p.context_len}, safety margin {p.margin:.2f} "
             f"(speculate only where speedup ≥ {1 + p.margin:.2f}×)", ""]
    lines.append(f"  switch OFF at batch size ≥ {p.batch_off}" if p.batch_off is not None
                 else "  pays at every batch size of the grid")
    if p.alpha_off is None:
        lines.append("  never pays at the smallest batch size on the acceptance grid: keep it off")
    else:
        lines.append(f"  with K re-tuned to the acceptance: off when α < {p.alpha_off:.3f}")
    if p.alpha_off_deployed_k is not None:
        ratio = f" (accepted/drafted < {p.alpha_off_ratio:.2f})" if p.alpha_off_ratio is not None else ""
        lines.append(f"  with the deployed K = {p.deployed_k}: switch OFF when α < {p.alpha_off_deployed_k:.3f}{ratio}")
    lines += ["", "  batch band      best K   worst speedup in band"]
    for b in p.bands:
        band = f"{b['batch_min']}-{b['batch_max']}"
        lines.append(f"  {band:<14}  {('off' if b['k'] == 0 else b['k']):>6}   {b['speedup_min']:.2f}×")
    lines += ["", "  acceptance threshold by batch size:"]
    for r in p.per_batch:
        a = "never pays" if r["alpha_off"] is None else f"α ≥ {r['alpha_off']:.3f}"
        lines.append(f"    B = {r['batch_size']:<5} {a}")
    for name, c in p.configs.items():
        lines += ["", f"  [{name}] ({c['semantics']})"]
        if c.get("command_line"):
            lines.append(f"    {c['command_line']}")
        elif c.get("config") is not None:
            lines.append(f"    speculative_config = {c['config']!r}")
        else:
            lines.append(f"    {c.get('note', '')}")
    return "\n".join(lines)


__all__ = ["ThresholdPolicy", "threshold_policy", "stack_configs", "format_policy"]
