"""`specsim validate`: predict what the reference decoder will measure on this machine, then measure it.

Predictions come from the calibrated pieces only: the hardware profile `specsim calibrate machine`
wrote (hardware/local.toml), the decoder's stack (stacks/specsim-numba.toml, `specsim calibrate
steps --format bench --write-stack`) and the acceptance calibrations (data/calibrations, `specsim
calibrate acceptance`), through the same `resolve` and `predict` every other command uses.

1. Verify step time: one forward pass of M = 1..64 query tokens after L = 128, 512, 2048 cached ones
   (M = 3, 5, 9, the K = 2, 4, 8 chains' passes, among them: out of sample for the stack's fit, which
   `decoder bench` times at powers of two)
   (the cache filled with random keys and values, as `specsim decoder bench` does), the median of
   `repeats` passes with min and max. The prediction is `roofline.step_cost` (weights, LM head,
   attention, KV write, element-wise work, fixed costs). The measured pass is also split, by timing
   the same kernels on the same inputs: the matrix products of the pass, the attention of the pass,
   and the rest (element-wise kernels, copies, Python between kernels). Where the relative error is
   over 10 %, the term whose predicted share is furthest from its measured share is named.
2. Speculative decoding: for each drafter and K, plain and speculative tokens per second on the
   workload's prompts (median of `repeats` runs, with the range), against the prediction of the
   operating point (hardware, stack, target, the drafter's family and K, the calibrated acceptance at
   the run's mean context) with the band from the calibration's interval. A prompt-lookup cycle that
   finds no match is a plain step through the speculative path: the prediction weighs the drafting
   and the empty cycles by the calibration's fraction of cycles that drafted.
3. Break-even: every run gives a measured (α, speedup) point; where a drafter's points straddle a
   speedup of 1 the acceptance at which speculation stops paying is interpolated, beside the model's
   own break-even for that drafter and K (α with predicted speedup 1) and the seed's 50–60 %.

The machine is shared: every timed figure is a median of repeats with its range, and the 1-minute
load average before and after each part is reported. A reference pass (a plain step after 128 cached
tokens) is timed at the start and after each part and set against the calibrated model's time for it:
the machine's drift since its calibration, reported beside the errors and never used to correct them.
"""
from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import pandas as pd

from ..decoder import disturbance as D
from ..decoder.registry import validated
from ..errors import SpecError
from .acceptance_runs import fit_iid

PARTS = ("verify", "spec")
SEED_BREAK_EVEN = (0.50, 0.60)  # the seed article: below roughly 50-60 % acceptance, switch it off
CLASSES = {"matrix products": ("weights", "lm_head"), "attention": ("attention",),
           "other": ("kv_write", "activations", "overhead")}


@dataclass(frozen=True, slots=True, kw_only=True)
class ValidateConfig:
    model: Path | None = None
    hardware: str = "local"
    stack: str = "specsim-numba"
    target: str = "smollm2-135m-q4_1"
    calibration_prefix: str = "smollm2-135m"
    # 3, 5 and 9: the verify passes of K = 2, 4, 8 chains, which the stack's fit (decoder bench) never times
    m_values: tuple = (1, 2, 3, 4, 5, 8, 9, 16, 32, 64)
    contexts: tuple = (128, 512, 2048)
    repeats: int = 5
    drafters: tuple = validated()
    ks: tuple = (2, 4, 8)
    workloads: tuple = ("code-edit",)
    calibration_workload: str | None = None  # predict every run from this workload's calibration (held-out runs)
    layers: int | None = None
    n_prompts: int = 2
    tokens: int = 64
    seed: int = 0
    threads: int | None = None
    parts: tuple = PARTS
    split: bool = True  # time the kernels of each pass apart (the measured split)
    clock: str = "wall"  # "thread": this thread's CPU time (a machine shared with other work; needs threads = 1)
    # a profile of another machine or run predicts another machine: its errors measure nothing, so validate
    # refuses it unless told to run anyway (then the difference is said before any figure)
    other_machine: bool = False
    # figures that contradict themselves (a busy machine) are measured again (the verify passes, `attempts`
    # times in all) and then refused, unless forced: then reported, marked as disturbed
    attempts: int = 2
    force: bool = False

    def __post_init__(self) -> None:
        for name in ("repeats", "n_prompts", "tokens", "attempts"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise SpecError(f"--{name.replace('_', '-')} {v!r}: expected an integer >= 1")
        for name in ("m_values", "contexts", "ks"):
            v = getattr(self, name)
            if not v or any(isinstance(x, bool) or not isinstance(x, int) or x < 1 for x in v):
                raise SpecError(f"--{name.replace('_', '-')} {v!r}: expected integers >= 1")
        bad = [p for p in self.parts if p not in PARTS]
        if bad or not self.parts:
            raise SpecError(f"--parts {','.join(self.parts)}: expected among {', '.join(PARTS)}")
        if self.clock not in ("wall", "thread"):
            raise SpecError(f"--clock {self.clock!r}: expected wall or thread")
        if self.clock == "thread" and self.threads != 1:
            raise SpecError("--clock thread: needs --threads 1 (this thread's CPU time leaves out numba's other threads)")
        bad = [d for d in self.drafters if d not in validated()]
        if bad:
            raise SpecError(f"--drafters {bad[0]!r}: validate predicts the chain drafters {' and '.join(validated())}")


@dataclass(frozen=True, slots=True, kw_only=True)
class ValidateResult:
    config: ValidateConfig
    verify: pd.DataFrame
    spec: pd.DataFrame
    break_even: pd.DataFrame
    summary: dict
    notes: tuple = field(default=())

    def to_dict(self) -> dict:
        return {"summary": self.summary, "verify": self.verify.to_dict(orient="records"),
                "spec": self.spec.to_dict(orient="records"), "break_even": self.break_even.to_dict(orient="records"),
                "notes": list(self.notes)}


def load_1min() -> float:
    try:
        return float(os.getloadavg()[0])
    except OSError:
        return float("nan")


def _spread(xs) -> tuple[float, float, float]:
    xs = [float(x) for x in xs]
    return float(np.median(xs)), min(xs), max(xs)


# ---- 1. verify step time ---------------------------------------------------------------------------

def _pass_split(model, cache, ctx: int, m: int, repeats: int, timer=time.perf_counter) -> tuple[float, float]:
    """Median seconds of the pass's matrix products and of its attention, timed apart on the pass's own
    shapes (the same kernels, weights and cache)."""
    from ..decoder import kernels as K

    c = model.config
    rng = np.random.default_rng(1)
    x = rng.standard_normal((m, c.d_model)).astype(np.float32)
    xf = rng.standard_normal((m, c.n_ff)).astype(np.float32)
    ws = model._workspace(m, cache.capacity)

    def matmuls():
        for li in range(c.n_layer):
            lw, fw = model.layers[li], model.fused[li]
            if fw["qkv"] is not None:
                model._matmul(ws["qkv"], fw["qkv"], x)
            else:
                for n, o in (("attn_q", "q"), ("attn_k", "k"), ("attn_v", "v")):
                    model._matmul(ws[o], lw[n], x)
            model._matmul(ws["o"], lw["attn_output"], ws["att"])
            if fw["gate_up"] is not None:
                model._matmul(ws["gate_up"], fw["gate_up"], x)
            else:
                model._matmul(ws["gate"], lw["ffn_gate"], x)
                model._matmul(ws["up"], lw["ffn_up"], x)
            model._matmul(ws["down"], lw["ffn_down"], xf)
        model._matmul(ws["logits"], model.output, x)

    q = rng.standard_normal((m, c.n_head, c.head_dim)).astype(np.float32)
    mask = np.tril(np.ones((m, m), np.bool_))
    out = np.zeros_like(q)

    def attention():
        for li in range(c.n_layer):
            K.attention(out, ws["scores"], q, cache.k[li], cache.v[li], ctx, mask)

    cache.length = ctx + m
    res = []
    for fn in (matmuls, attention):
        fn()
        ts = []
        for _ in range(repeats):
            t0 = timer()
            fn()
            ts.append(timer() - t0)
        res.append(float(np.median(ts)))
    return res[0], res[1]


def _blame(pred: dict, meas: dict) -> str:
    """The term whose predicted time is furthest from its measured time, with both."""
    worst = max(pred, key=lambda k: abs(pred[k] - meas[k]))
    return f"{worst}: predicted {pred[worst] * 1e3:.2f} ms, measured {meas[worst] * 1e3:.2f} ms"


def validate_verify(model, op, config: ValidateConfig, *, say=None) -> pd.DataFrame:
    from ..cost.pricing import target_step_cost
    from ..decoder.generate import CLOCKS
    from ..speculation.trees import ancestor_mask, chain

    timer = CLOCKS[config.clock]
    dep = op.deployment
    rng = np.random.default_rng(config.seed)
    cap = max(config.contexts) + max(config.m_values)
    if cap > model.config.n_ctx:
        raise SpecError(f"--contexts/--m: {cap} tokens exceed the model's context of {model.config.n_ctx}")
    cache = model.new_cache(cap)
    cache.k[:] = rng.standard_normal(cache.k.shape, dtype=np.float32)
    cache.v[:] = rng.standard_normal(cache.v.shape, dtype=np.float32)
    # the reference step (M = 1 after REFERENCE_CTX cached), timed beside every pass: this shared machine's
    # speed moves by tens of percent within minutes, and a pass and its neighbour move together
    reference_step = _reference_step(model, rng)
    ref_pred = predicted_reference_s(op)
    # the repeats in rounds over every (context, M) point, not back to back: a burst of other work on this
    # shared machine then lands on one repeat of many points, which their medians drop
    points = []
    for ctx in config.contexts:
        for m in config.m_values:
            tree = chain(m - 1)
            points.append((ctx, m, rng.integers(0, model.config.n_vocab, m), ctx + tree.depths, ancestor_mask(tree)))
    pass_s = {(ctx, m): [] for ctx, m, *_ in points}
    ref_s = {(ctx, m): [] for ctx, m, *_ in points}
    for i in range(config.repeats + 1):  # round 0 untimed: it also compiles each new shape
        if say:
            say(f"verify passes M = {', '.join(map(str, config.m_values))} at contexts "
                f"{', '.join(map(str, config.contexts))}: round {i} of {config.repeats}" + (" (untimed)" if not i else ""))
        for ctx, m, toks, pos, mask in points:
            cache.length = ctx
            t0 = timer()
            model.forward(cache, toks, pos, mask)
            t1 = timer()
            reference_step()
            if i:
                pass_s[(ctx, m)].append(t1 - t0)
                ref_s[(ctx, m)].append(timer() - t1)
    rows = []
    for ctx in config.contexts:
        for m in config.m_values:
            ts, refs = pass_s[(ctx, m)], ref_s[(ctx, m)]
            med, lo, hi = _spread(ts)
            ref_med = float(np.median(refs))
            sc = target_step_cost(op.target, dep, batch_size=1, q_len=m, context_len=ctx)
            b = sc.breakdown()
            pred_cls = {cls: float(sum(b[f"{k}_time_s"] if k not in ("overhead",) else b["overhead_s"] for k in ks))
                        for cls, ks in CLASSES.items()}
            pred = float(sc.time_s)
            ratio_meas = float(np.median(np.asarray(ts) / np.asarray(refs)))
            row = dict(context_len=ctx, m=m, predicted_s=pred, measured_s=med, measured_min_s=lo, measured_max_s=hi,
                       relative_error=pred / med - 1.0, reference_measured_s=ref_med, reference_predicted_s=ref_pred,
                       reference_drift=ref_med / ref_pred - 1.0, measured_ratio_to_reference=ratio_meas,
                       predicted_ratio_to_reference=pred / ref_pred,
                       ratio_error=(pred / ref_pred) / ratio_meas - 1.0,
                       **{f"predicted_{k.replace(' ', '_')}_s": v for k, v in pred_cls.items()})
            if config.split:
                mm, att = _pass_split(model, cache, ctx, m, max(3, config.repeats // 2), timer)
                meas_cls = {"matrix products": mm, "attention": att, "other": max(med - mm - att, 0.0)}
                row.update({f"measured_{k.replace(' ', '_')}_s": v for k, v in meas_cls.items()})
                row["term"] = _blame(pred_cls, meas_cls) if abs(row["relative_error"]) > 0.10 else ""
            rows.append(row)
    df = pd.DataFrame(rows)
    base = df[df["m"] == df["m"].min()].set_index("context_len")["measured_s"]
    df["measured_ratio_to_m1"] = df["measured_s"] / df["context_len"].map(base)
    pbase = df[df["m"] == df["m"].min()].set_index("context_len")["predicted_s"]
    df["predicted_ratio_to_m1"] = df["predicted_s"] / df["context_len"].map(pbase)
    return df


def error_by_class(df: pd.DataFrame) -> list[dict]:
    """The verify passes' error split by operator class (CLASSES: the matrix products, attention, and the
    rest: element-wise kernels, the KV write and the host's fixed costs) and by where the pass sits: for
    each context and each M band (1, 2-5, 8-16, 32+), the median predicted/measured - 1 of each class
    (the measured split times each class's kernels apart on the pass's own shapes) and of the whole pass.
    Where the classes err in opposite directions the whole pass can look right for the wrong reason."""
    if "measured_matrix_products_s" not in df:
        return []
    bands = ((1, 1), (2, 5), (6, 16), (17, 10 ** 9))
    out = []
    for ctx, d in df.groupby("context_len"):
        for lo, hi in bands:
            b = d[(d["m"] >= lo) & (d["m"] <= hi)]
            if not len(b):
                continue
            row = {"context_len": int(ctx), "m": f"{lo}" if lo == hi else f"{lo}-{hi}" if hi < 10 ** 9 else f"{lo}+",
                   "pass": float(b["relative_error"].median())}
            for cls in CLASSES:
                k = cls.replace(" ", "_")
                meas = b[f"measured_{k}_s"]
                ok = meas > 0
                row[cls] = float((b.loc[ok, f"predicted_{k}_s"] / meas[ok] - 1.0).median()) if ok.any() else None
            out.append(row)
    return out


def check_verify(df: pd.DataFrame) -> list[str]:
    """What in the measured verify passes contradicts itself (see decoder.disturbance): repeats that
    spread too far, a pass that does not grow with M or context, or the reference step timed beside them
    moving by more than its own time within the part."""
    if not len(df):
        return []
    out = D.spread_problems(df.to_dict(orient="records"), what="verify passes",
                            label=lambda r: f"M = {r['m']} at context {r['context_len']}", time_key="measured_s",
                            min_key="measured_min_s", max_key="measured_max_s")
    for ctx, d in df.groupby("context_len"):
        out += D.must_grow(sorted(zip(d["m"], d["measured_s"])), what=f"the verify pass at context {ctx}", along="M")
    for m, d in df.groupby("m"):
        out += D.must_grow(sorted(zip(d["context_len"], d["measured_s"])), what=f"the verify pass of M = {m}",
                           along="context")
    ref = df["reference_measured_s"]
    if float(ref.max()) > (1.0 + D.SPREAD_LIMIT_FRAC) * float(ref.min()):
        out.append(f"the reference step timed beside the passes took {float(ref.min()) * 1e3:.2f} to "
                   f"{float(ref.max()) * 1e3:.2f} ms within the part")
    drift = float(df["reference_drift"].median()) if "reference_drift" in df else 0.0
    if abs(drift) > REFERENCE_DRIFT_LIMIT_FRAC:
        out.append(f"the reference step took {float(ref.median()) * 1e3:.2f} ms beside the passes, {drift:+.0%} against "
                   f"the {float(df['reference_predicted_s'].iloc[0]) * 1e3:.2f} ms of the calibration it checks (beyond "
                   f"{REFERENCE_DRIFT_LIMIT_FRAC:.0%}: the machine is not in the state it was calibrated in)")
    return out


def check_spec(df: pd.DataFrame) -> list[str]:
    """The speculative runs' repeats: tokens/s and speedups whose repeats spread too far."""
    if not len(df):
        return []
    rows = df.to_dict(orient="records")
    label = lambda r: f"{_who(r)} K = {r['k']} on {r['workload']}"  # noqa: E731
    return (D.spread_problems(rows, what="speculative runs' tokens/s", label=label, time_key="measured_tokens_per_s",
                              min_key="measured_tokens_per_s_min", max_key="measured_tokens_per_s_max")
            + D.spread_problems(rows, what="plain runs' tokens/s", label=label, time_key="measured_plain_tokens_per_s",
                                min_key="measured_plain_tokens_per_s_min", max_key="measured_plain_tokens_per_s_max"))


# ---- drift: the machine against its calibration, through the check ----------------------------------

REFERENCE_CTX, REFERENCE_M = 128, 1
# the plain step beside the verify passes against the calibration's own time for it: on this 2-core EPYC, thread
# clock, one thread, three validates straight after a calibration at load 1-3 found it +6..+27 %, +9..+24 % and
# +20..+65 %, the last with every pass 20 % off at the median: past a quarter the errors measure the machine's state
REFERENCE_DRIFT_LIMIT_FRAC = 0.25


def reference_pass_s(model, *, clock: str = "wall", repeats: int = 7, seed: int = 0) -> float:
    """Median seconds of one plain step (M = 1 after 128 cached tokens of random keys and values): the
    figure validate times before and after each part, so a drift of this shared machine between the
    calibration and the check (or within the check) shows beside the errors it causes. It is reported,
    never used to correct a prediction."""
    from ..decoder.generate import CLOCKS

    timer = CLOCKS[clock]
    step = _reference_step(model, np.random.default_rng(seed))
    ts = []
    for i in range(repeats + 1):  # the first is untimed (a shape the process may not have run yet)
        t0 = timer()
        step()
        if i:
            ts.append(timer() - t0)
    return float(np.median(ts))


def _reference_step(model, rng):
    """A callable that runs the reference step once: M = 1 after REFERENCE_CTX cached tokens of random
    keys and values, in a cache of its own."""
    cache = model.new_cache(REFERENCE_CTX + REFERENCE_M)
    cache.k[:] = rng.standard_normal(cache.k.shape, dtype=np.float32)
    cache.v[:] = rng.standard_normal(cache.v.shape, dtype=np.float32)
    tok, pos = np.array([1], np.int64), np.array([REFERENCE_CTX], np.int64)

    def step():
        cache.length = REFERENCE_CTX
        model.forward(cache, tok, pos)

    return step


def predicted_reference_s(op) -> float:
    """The calibrated model's time for the reference pass (priced as every prediction prices it)."""
    from ..cost.pricing import target_step_cost

    return float(target_step_cost(op.target, op.deployment, batch_size=1, q_len=REFERENCE_M,
                                  context_len=REFERENCE_CTX).time_s)


# ---- 2. speculative decoding ------------------------------------------------------------------------

def _scenario(config: ValidateConfig, *, drafter: str, workload: str, k: int, context_len: int, layers: int,
              lookup_s_per_ktoken: float):
    from ..specs.calibrations import calibration_path
    from ..specs.scenario import scenario_from_dict

    name = f"{config.calibration_prefix}/{drafter}/{config.calibration_workload or workload}"
    try:
        calibration_path(name)
    except SpecError:
        return None, name
    from ..decoder.registry import DRAFTERS

    entry = DRAFTERS[drafter]
    options = entry.scenario_options(layers, lookup_s_per_ktoken)
    raw = {"name": f"validate {drafter} K={k} on {workload}", "hardware": config.hardware, "stack": config.stack,
           "target": config.target, "method": entry.family, "k": k, "batch_size": 1, "context_len": int(context_len),
           "temperature": 0.0, "acceptance": {"calibrated": name, "workload": workload}, "drafter_options": options}
    return scenario_from_dict(raw, where=f"validate ({drafter}, K = {k}, {workload})"), name


def predict_decoder(op, *, draft_frac: float | None) -> dict:
    """The operating point's prediction as the decoder runs it: speculative tokens/s and speedup with
    the calibration's band; for a drafter whose cycles sometimes draft nothing (prompt lookup), the
    drafting and the empty cycles weighed by the fraction that drafted (an empty cycle: the plain step
    plus the cycle's host work and the search)."""
    from ..speculation.predict import predict, with_alpha

    def one(point) -> tuple[float, float, float, float]:
        p = predict(point, check_memory=False)
        c = p.cycle
        plain = float(c.target_step_time_s)
        tau, cyc = float(c.tokens_per_cycle), float(c.cycle_time_s)
        if draft_frac is not None and draft_frac < 1.0:
            work = point.work
            search = work.host_s_per_seq_per_ktoken * point.context_len / 1000.0
            empty = plain + point.deployment.cycle_overhead_s + search
            tau = draft_frac * tau + (1.0 - draft_frac)
            cyc = draft_frac * cyc + (1.0 - draft_frac) * empty
        return tau / cyc, 1.0 / plain, tau, cyc

    tps, base, tau, cyc = one(op)
    out = {"predicted_tokens_per_s": tps, "predicted_plain_tokens_per_s": base, "predicted_speedup": tps / base,
           "predicted_tokens_per_cycle": tau, "predicted_cycle_s": cyc, "alpha_predicted": op.alpha}
    cal = op.acceptance.calibration
    if cal is not None:
        for end, a in (("low", cal.alpha_low), ("high", cal.alpha_high)):
            t, b, _, _ = one(with_alpha(op, a))
            out[f"predicted_tokens_per_s_{end}"] = t
            out[f"predicted_speedup_{end}"] = t / b
        out["calibration_warnings"] = "; ".join(cal.coverage_warnings(
            context_len=op.context_len, temperature=op.temperature, method=op.method, workload=op.acceptance.workload,
            k=op.k))
    return out


def measure_run(model, drafter, prompts, tokens: int, *, repeats: int, seed: int = 0) -> dict:
    """Plain and speculative decoding of the prompts, `repeats` times: tokens/s medians and ranges
    (decoding only, prefills excluded, as `decoder run`), and the cycles' acceptance (the same every
    repeat: the same seeds give the same tokens)."""
    from ..decoder.generate import generate_plain, generate_speculative

    generate_speculative(model, drafter, prompts[0][:16], 4, seed=seed)  # compile every shape first
    generate_plain(model, prompts[0][:16], 2, seed=seed)
    plain_tps, spec_tps, speedups = [], [], []
    drafted, accepted, ctx = [], [], []
    for r in range(repeats):
        ps = pn = ss = sn = 0.0
        for i, prompt in enumerate(prompts):
            p = generate_plain(model, prompt, tokens, seed=seed, index=i)
            s = generate_speculative(model, drafter, prompt, tokens, seed=seed, index=i)
            ps, pn = ps + p.decode_s, pn + p.tokens.size - 1
            ss, sn = ss + s.decode_s, sn + s.tokens.size - 1
            if r == 0:
                length = len(prompt) + 1
                for c in s.cycles:
                    drafted.append(c.n_drafted)
                    accepted.append(c.n_accepted)
                    ctx.append(length)
                    length += c.n_accepted + 1
        plain_tps.append(pn / ps)
        spec_tps.append(sn / ss)
        speedups.append(spec_tps[-1] / plain_tps[-1])
    d, a = np.array(drafted), np.array(accepted)
    f = fit_iid(d, a, level=0.95) if np.any(d > 0) else None
    med = lambda xs: _spread(xs)  # noqa: E731
    out = {"n_cycles": int(d.size), "tau_measured": float(np.mean(a + 1)) if d.size else None,
           "draft_frac_measured": float(np.mean(d > 0)) if d.size else None,
           "alpha_measured": None if f is None else float(f.estimate),
           "alpha_measured_low": None if f is None else float(f.ci_low),
           "alpha_measured_high": None if f is None else float(f.ci_high),
           "mean_context": float(np.mean(ctx)) if ctx else None}
    for name, xs in (("tokens_per_s", spec_tps), ("plain_tokens_per_s", plain_tps), ("speedup", speedups)):
        m, lo, hi = med(xs)
        out.update({f"measured_{name}": m, f"measured_{name}_min": lo, f"measured_{name}_max": hi})
    return out


def validate_spec(model, config: ValidateConfig, *, say=None, workloads=None, ks=None, drafters=None,
                  layer_options=None) -> pd.DataFrame:
    from ..decoder.registry import DRAFTERS
    from ..decoder.workloads import chat_prompt, load_workload
    from ..speculation.operating_point import resolve
    from .decoder_stack import measure_prompt_lookup

    tok = model.tokenizer
    n_layer = model.config.n_layer
    lookup = measure_prompt_lookup(clock=config.clock)["s_per_ktoken"]
    rows = []
    for w in workloads or config.workloads:
        work = load_workload(w, config.n_prompts, seed=config.seed)
        prompts = [chat_prompt(tok, t, work.response_prefix) for t in work.prompts]
        for d in drafters or config.drafters:
            entry = DRAFTERS[d]
            by_layers = "layers" in entry.options
            for layers in (layer_options or [config.layers]) if by_layers else [None]:
                n = max(1, (4 * n_layer) // 5) if (by_layers and layers is None) else layers
                for k in ks or config.ks:
                    if say:
                        say(f"{d}{'' if n is None else f' ({n} layers)'} K = {k} on {w}")
                    cap = max(len(p) for p in prompts) + config.tokens + k + 8
                    drafter = entry.fixed_k(model, k, n, cap)
                    from ..decoder.generate import clock

                    with clock(config.clock):
                        meas = measure_run(model, drafter, prompts, config.tokens, repeats=config.repeats,
                                           seed=config.seed)
                    row = dict(drafter=d, layers=n, workload=w, k=k, load_1min=load_1min(), **meas)
                    scen, cal_name = _scenario(config, drafter=d, workload=w, k=k,
                                               context_len=int(round(meas["mean_context"] or 256)),
                                               layers=n or 1, lookup_s_per_ktoken=lookup)
                    row["calibration"] = cal_name
                    if scen is not None:
                        op = resolve(scen)
                        cal = op.acceptance.calibration
                        frac = None
                        if entry.empty_drafts:
                            ref = [r for r in cal.runs if float(r.get("temperature", -1)) == cal.reference_temperature]
                            frac = float(ref[0]["draft_frac"]) if ref and "draft_frac" in ref[0] else None
                        row.update(predict_decoder(op, draft_frac=frac))
                        row["draft_frac_calibrated"] = frac
                        row["relative_error"] = row["predicted_tokens_per_s"] / row["measured_tokens_per_s"] - 1.0
                        row["speedup_relative_error"] = row["predicted_speedup"] / row["measured_speedup"] - 1.0
                    rows.append(row)
    return pd.DataFrame(rows)


# ---- 3. break-even ----------------------------------------------------------------------------------

def break_even(spec: pd.DataFrame, model_alpha: dict | None = None) -> pd.DataFrame:
    """Per drafter (and layer count) and K: the measured (α, speedup) points sorted by α; where they
    straddle 1, the α at which the measured speedup crosses 1 (linear interpolation between the two
    points around it); beside it the model's break-even α (`model_alpha[(drafter, layers, k)]`)."""
    rows = []
    for (d, layers, k), g in spec.groupby(["drafter", spec["layers"].fillna(0).astype(int), "k"]):
        g = g.dropna(subset=["alpha_measured"]).sort_values("alpha_measured")
        a, s = g["alpha_measured"].to_numpy(float), g["measured_speedup"].to_numpy(float)
        cross = None
        for i in range(len(a) - 1):
            if (s[i] - 1.0) * (s[i + 1] - 1.0) <= 0 and a[i + 1] > a[i]:
                cross = float(a[i] + (1.0 - s[i]) * (a[i + 1] - a[i]) / (s[i + 1] - s[i]))
                break
        rows.append(dict(drafter=d, layers=layers or None, k=k, n_points=len(a),
                         points=", ".join(f"{x:.2f}:{y:.2f}x" for x, y in zip(a, s)),
                         measured_break_even_alpha=cross,
                         model_break_even_alpha=(model_alpha or {}).get((d, layers or None, k)),
                         seed_break_even=f"{SEED_BREAK_EVEN[0]:.0%}–{SEED_BREAK_EVEN[1]:.0%}"))
    return pd.DataFrame(rows)


def model_break_even(config: ValidateConfig, *, drafter: str, layers: int | None, k: int, context_len: int,
                     draft_frac: float | None = None) -> float | None:
    """The α at which the model's predicted speedup is 1 for this drafter and K (None if it never is in
    (0, 1))."""
    from scipy.optimize import brentq

    from ..specs.scenario import scenario_from_dict
    from ..speculation.operating_point import resolve

    from ..decoder.registry import DRAFTERS

    entry = DRAFTERS[drafter]
    options = entry.scenario_options(layers, None)
    op = resolve(scenario_from_dict({"hardware": config.hardware, "stack": config.stack, "target": config.target,
                                     "method": entry.family, "k": k, "context_len": int(context_len),
                                     "alpha": 0.5, "drafter_options": options}, where="validate break-even"))
    from ..speculation.predict import with_alpha

    f = lambda a: predict_decoder(with_alpha(op, a), draft_frac=draft_frac)["predicted_speedup"] - 1.0  # noqa: E731
    lo, hi = f(1e-6), f(1.0 - 1e-9)
    if lo * hi > 0:
        return None
    return float(brentq(f, 1e-6, 1.0 - 1e-9, xtol=1e-6))


# ---- all of it --------------------------------------------------------------------------------------

def validate(config: ValidateConfig, *, progress=None) -> ValidateResult:
    from ..decoder.run import load_target, run_machine
    from ..specs.scenario import scenario_from_dict
    from ..speculation.operating_point import resolve

    from dataclasses import asdict

    from ..specs.hardware import load_hardware
    from ..specs.catalog import resolve as resolve_path
    from ..specs.machine import check_machine, mismatch_message, this_machine, warn_if_other_machine

    say = progress or (lambda m: None)
    # first: does the profile describe this machine and this run? (said on stderr now, and atop the report)
    hw = load_hardware(config.hardware)
    if not config.other_machine:
        found = check_machine(hw, threads=config.threads, clock=config.clock)
        if found:
            raise SpecError(f"--hardware {config.hardware!r} ({resolve_path('hardware', config.hardware)}): "
                            f"{mismatch_message(hw, found, threads=config.threads, clock=config.clock)}; or pass "
                            "--other-machine to compare against it anyway")
    mismatched = warn_if_other_machine(hw, threads=config.threads, clock=config.clock, run=True)
    machine = {"here": asdict(this_machine(threads=config.threads, clock=config.clock)),
               "profile": asdict(hw.machine) if hw.machine is not None else None, "mismatches": mismatched,
               "message": mismatch_message(hw, mismatched, threads=config.threads, clock=config.clock)
               if mismatched else ""}
    model = load_target(config.model, config.threads)
    base = resolve(scenario_from_dict({"hardware": config.hardware, "stack": config.stack, "target": config.target,
                                       "method": "none", "k": 0, "context_len": 128}, where="validate"))
    load_before = load_1min()
    ref_pred = predicted_reference_s(base)
    drift = []

    def reference(when: str) -> None:
        say(f"reference pass ({when})")
        t = reference_pass_s(model, clock=config.clock, seed=config.seed)
        drift.append({"when": when, "measured_s": t, "predicted_s": ref_pred, "drift": t / ref_pred - 1.0,
                      "load_1min": load_1min()})

    reference("start")
    verify = pd.DataFrame()
    problems: list[str] = []
    threads = config.threads or run_machine(None, config.clock)["threads"]  # numba's pool as load_target left it
    if "verify" in config.parts:
        verify, found = D.measure_checked(lambda: validate_verify(model, base, config, say=say), check_verify,
                                          what="validate (verify passes)", threads=threads, clock=config.clock,
                                          attempts=config.attempts, force=config.force, say=say)
        problems += found
        reference("after the verify passes")
    spec = pd.DataFrame()
    if "spec" in config.parts:
        # the speculative runs are long: checked, and refused (or marked), but not run twice
        spec, found = D.measure_checked(lambda: validate_spec(model, config, say=say), check_spec,
                                        what="validate (speculative runs)", threads=threads, clock=config.clock,
                                        attempts=1, force=config.force, say=say)
        problems += found
        reference("after the speculative runs")
    load_after = load_1min()
    be = pd.DataFrame()
    if len(spec):
        models = {}
        for (d, layers, k), g in spec.groupby(["drafter", spec["layers"].fillna(0).astype(int), "k"]):
            frac = g["draft_frac_calibrated"].dropna().median() if "draft_frac_calibrated" in g else None
            ctx = int(g["mean_context"].median())
            models[(d, layers or None, k)] = model_break_even(config, drafter=d, layers=layers or None, k=int(k),
                                                              context_len=ctx,
                                                              draft_frac=None if frac is None or frac != frac else frac)
        be = break_even(spec, models)
    # the files the prediction read (a catalog id resolves to the package's copy): the loop closes only if
    # these are the files calibrate machine and calibrate steps wrote
    files = {"hardware": str(resolve_path("hardware", config.hardware).resolve()),
             "stack": str(resolve_path("stacks", config.stack).resolve())}
    summary = {"machine": machine, "files": files, "disturbed": problems,
               "load_1min_before": load_before, "load_1min_after": load_after, "repeats": config.repeats,
               "clock": config.clock,
               "threads": model._n_threads if hasattr(model, "_n_threads") else None,
               "reference_pass": drift,
               "reference_pass_drift_range": [min(d["drift"] for d in drift), max(d["drift"] for d in drift)]}
    if len(verify):
        summary["verify_median_abs_relative_error"] = float(verify["relative_error"].abs().median())
        summary["verify_worst_abs_relative_error"] = float(verify["relative_error"].abs().max())
        summary["verify_median_abs_ratio_error"] = float(verify["ratio_error"].abs().median())
        summary["verify_worst_abs_ratio_error"] = float(verify["ratio_error"].abs().max())
        summary["verify_reference_drift_range"] = [float(verify["reference_drift"].min()),
                                                   float(verify["reference_drift"].max())]
        summary["verify_error_by_class"] = error_by_class(verify)
        v8 = verify[verify["m"] == 8].set_index("context_len")["measured_ratio_to_m1"].to_dict()
        summary["verify_m8_ratio_to_m1_by_context"] = {int(k): float(v) for k, v in v8.items()}
    if len(spec) and "relative_error" in spec:
        e = spec["relative_error"].dropna().abs()
        summary["spec_tokens_per_s_median_abs_relative_error"] = float(e.median()) if len(e) else None
        e = spec["speedup_relative_error"].dropna().abs()
        summary["spec_speedup_median_abs_relative_error"] = float(e.median()) if len(e) else None
    notes = ("timings are medians of the repeats; the machine is shared (load average reported)",)
    return ValidateResult(config=config, verify=verify, spec=spec, break_even=be, summary=summary, notes=notes)


def _missing(x) -> bool:
    return x is None or x != x  # None, or the NaN a DataFrame column holds for it


def _who(row: dict) -> str:
    """The drafter as the report names it: layer skip with its layer count (a table column that is NaN
    for the drafters without one)."""
    layers = row.get("layers")
    keep = layers is not None and layers == layers and layers > 0
    return row["drafter"] + (f"-{int(layers)}" if keep else "")


def format_report(res: ValidateResult) -> str:
    s = res.summary
    lines = []
    mach = s.get("machine") or {}
    if mach.get("mismatches"):
        lines += [f"NOTE, before any figure: {mach['message']}", ""]
    if s.get("disturbed"):
        lines += [D.disturbed_note(s["disturbed"]), ""]
    lines += [f"specsim validate: prediction against the reference decoder on this machine (median of {s['repeats']} "
              f"repeats; 1-minute load {s['load_1min_before']:.2f} before, {s['load_1min_after']:.2f} after"
              + ("; timed with this thread's CPU time" if s.get("clock") == "thread" else "") + ")"]
    if mach.get("here"):
        h = mach["here"]
        lines.append(f"  machine: {h['cpu']} ({', '.join(h['instruction_sets'] or ['instruction sets unknown'])}); "
                     f"the decoder runs {h['block_matmul']} matmul tiles and {h['attention']} attention, "
                     f"{h['threads']} thread{'s' * (h['threads'] > 1)}, {h['clock']} clock"
                     + ("; the profile describes the same machine and run" if mach.get("profile") and
                        not mach.get("mismatches") else ""))
    ref = s.get("reference_pass") or []
    if ref:
        cells = "; ".join(f"{d['when']} {d['measured_s'] * 1e3:.2f} ms ({d['drift']:+.1%})" for d in ref)
        lines += ["", f"this machine against its calibration: a plain step after {REFERENCE_CTX} cached tokens, which the "
                      f"calibrated model puts at {ref[0]['predicted_s'] * 1e3:.2f} ms, measured {cells}",
                  "  (reported, not corrected for: a drift moves every error below by about as much)"]
    v = res.verify
    if len(v):
        lines += ["", "verify step time (one forward pass of M query tokens after L cached); 'x ref': the pass over the "
                      f"reference step (M = 1 after {REFERENCE_CTX}) timed beside it, measured/predicted, and the error of "
                      "that ratio (the machine's drift cancels in it)",
                  f"  {'L':>5} {'M':>3} {'predicted':>10} {'measured median [min–max]':>30} {'error':>7}  "
                  f"{'x ref meas/pred':>16} {'error':>7}  ref drift"]
        for r in v.itertuples():
            lines.append(f"  {r.context_len:>5} {r.m:>3} {r.predicted_s * 1e3:>8.2f}ms {r.measured_s * 1e3:>9.2f}ms "
                         f"[{r.measured_min_s * 1e3:.2f}–{r.measured_max_s * 1e3:.2f}] {r.relative_error:>+7.1%}  "
                         f"{r.measured_ratio_to_reference:>7.2f}/{r.predicted_ratio_to_reference:<7.2f} "
                         f"{r.ratio_error:>+7.1%}  {r.reference_drift:+.0%}"
                         + (f"   <- {r.term}" if getattr(r, "term", "") else ""))
        lines.append(f"  median |error| {s['verify_median_abs_relative_error']:.1%} (worst "
                     f"{s['verify_worst_abs_relative_error']:.1%}); of the ratio to the reference step "
                     f"{s['verify_median_abs_ratio_error']:.1%} (worst {s['verify_worst_abs_ratio_error']:.1%}); the "
                     f"reference step itself {s['verify_reference_drift_range'][0]:+.0%} to "
                     f"{s['verify_reference_drift_range'][1]:+.0%} against the calibrated model")
    by_class = s.get("verify_error_by_class") or []
    if by_class:
        lines += ["", "the verify passes' error by operator class (median predicted/measured - 1; each class's kernels "
                      "timed apart on the pass's shapes; 'other': element-wise kernels, the KV write and the host)",
                  f"  {'L':>5} {'M':>6} {'pass':>7} " + " ".join(f"{c:>16}" for c in CLASSES)]
        for r in by_class:
            cells = " ".join(f"{'—' if r[c] is None else format(r[c], '+.1%'):>16}" for c in CLASSES)
            lines.append(f"  {r['context_len']:>5} {r['m']:>6} {r['pass']:>+7.1%} {cells}")
    p = res.spec
    if len(p):
        lines += ["", "speculative decoding: tokens/s predicted [band from the calibration's interval] vs measured "
                      "median [min–max]; speedup over plain decoding"]
        for r in p.to_dict(orient="records"):
            who = _who(r)
            meas = (f"{r['measured_tokens_per_s']:.1f} [{r['measured_tokens_per_s_min']:.1f}–"
                    f"{r['measured_tokens_per_s_max']:.1f}]")
            if r.get("predicted_tokens_per_s") is None or r["predicted_tokens_per_s"] != r["predicted_tokens_per_s"]:
                lines.append(f"  {who:<16} K={r['k']} {r['workload']:<14} measured {meas} tok/s, speedup "
                             f"{r['measured_speedup']:.2f}x; no calibration {r['calibration']}")
                continue
            band = (f" [{r['predicted_tokens_per_s_low']:.1f}, {r['predicted_tokens_per_s_high']:.1f}]"
                    if r.get("predicted_tokens_per_s_low") is not None else "")
            lines.append(f"  {who:<16} K={r['k']} {r['workload']:<14} predicted {r['predicted_tokens_per_s']:.1f}{band} "
                         f"measured {meas} tok/s ({r['relative_error']:+.1%}); speedup {r['predicted_speedup']:.2f}x "
                         f"[{r.get('predicted_speedup_low', float('nan')):.2f}, {r.get('predicted_speedup_high', float('nan')):.2f}]"
                         f" vs {r['measured_speedup']:.2f}x [{r['measured_speedup_min']:.2f}–{r['measured_speedup_max']:.2f}];"
                         f" α cal {r['alpha_predicted']:.3f} run {r['alpha_measured'] if r['alpha_measured'] is not None else float('nan'):.3f}")
            if r.get("calibration_warnings"):
                lines.append(f"  {'':<16} warning: {r['calibration_warnings']}")
        if s.get("spec_tokens_per_s_median_abs_relative_error") is not None:
            lines.append(f"  median |error| of speculative tokens/s {s['spec_tokens_per_s_median_abs_relative_error']:.1%}; "
                         f"of the speedup (speculative over plain, run side by side) "
                         f"{s['spec_speedup_median_abs_relative_error']:.1%}")
    b = res.break_even
    if len(b):
        lines += ["", "break-even acceptance (speedup = 1): measured (interpolated between runs) vs the model vs the seed"]
        for r in b.to_dict(orient="records"):
            who = _who(r)
            mea = "not bracketed" if _missing(r["measured_break_even_alpha"]) else f"{r['measured_break_even_alpha']:.2f}"
            mod = ("none in (0, 1)" if _missing(r["model_break_even_alpha"])
                   else f"{r['model_break_even_alpha']:.2f}")
            lines.append(f"  {who:<16} K={r['k']}: measured {mea}, model {mod}, seed {r['seed_break_even']}  "
                         f"(α:speedup {r['points']})")
    return "\n".join(lines)


__all__ = ["error_by_class", "check_verify", "check_spec", "reference_pass_s", "predicted_reference_s", "ValidateConfig", "ValidateResult", "validate", "format_report", "predict_decoder", "measure_run",
           "break_even", "model_break_even", "validate_verify", "validate_spec", "load_1min"]
