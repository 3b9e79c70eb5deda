"""Sweeps: an operating point's `[sweep]` grid evaluated into one tidy DataFrame, one row per point.

The categorical axes (hardware, target, method, drafter, stack, tp, attention, temperature) are
looped over, each combination resolved into its own operating point (`OperatingPoint.with_overrides`);
the numeric axes (K, tree size M, batch size B, context L, acceptance α) are evaluated in one
broadcast per combination (`speculation.predict.grid`), so a 10⁶-point sweep costs a few numpy
passes, not 10⁶ Python calls.

`[sweep]` keys (each a value or a list; a missing key takes the scenario's top-level value):
  hardware, target, drafter, method, stack, tp, attention, temperature   categorical axes
  k, tree_size, batch_size, context_len, alpha, tau                       numeric axes
  tau_k             the K at which the given τ values were measured (default: the scenario's k)
  plots             which figures to draw: "all" (the default) or names of presentation.figures.SWEEP_PLOTS
tree_size applies to the families that verify trees; they also run as chains (tree_size = K + 1).
τ values are converted to the i.i.d. α that gives them at tau_k. Acceptance falls with context and
temperature as the scenario's `[acceptance]` says (column alpha_effective). `stack = ""` is the
hardware's own efficiency. Columns (SI units in the names): see COLUMNS.
"""
from __future__ import annotations

import itertools

import numpy as np
import pandas as pd

from ..errors import SpecError, field_error
from ..specs.analysis_tables import SWEEP_KEYS, SweepTable
from ..speculation.acceptance import alpha_from_tau
from ..speculation.families import FAMILIES, TREE_METHODS
from ..speculation.operating_point import OperatingPoint, check_context, memory_parts
from ..speculation.predict import band_grid, grid

COLUMNS = ("hardware", "target", "drafter", "method", "stack", "tp", "attention", "temperature", "k", "tree_size",
           "is_tree", "batch_size", "context_len", "alpha", "tokens_per_cycle", "draft_time_s", "verify_time_s",
           "cycle_overhead_s", "cycle_time_s", "target_step_time_s", "verify_q_len", "tokens_per_s",
           "baseline_tokens_per_s", "speedup", "regression", "memory_per_device_bytes", "fits", "alpha_effective",
           "speedup_low", "speedup_high",  # a calibrated acceptance's interval carried through (else NaN)
           "priced_by")  # what priced the passes (cost.pricing: the measured tables or the roofline), in words


def sweep_axes(op: OperatingPoint) -> dict:
    """The grid an operating point's `[sweep]` table describes, over its own values. The table was
    checked when the scenario loaded (`specs.analysis_tables.SweepTable`); what needs the resolved point
    or the families is checked here: τ against the point's K where tau_k is not given, the method
    names, the figure names."""
    t = op.scenario.tables.sweep or SweepTable()
    where = f"scenario {op.scenario.path or op.name!r} [sweep]"
    drafter_id = op.drafter.drafter.id if op.drafter is not None and op.drafter.drafter is not None else op.scenario.drafter
    axes = {
        "hardware": t.axis("hardware", op.hardware.id),
        "target": t.axis("target", op.scenario.target),
        "method": t.axis("method", op.scenario.method),
        "drafter": t.axis("drafter", drafter_id),
        "stack": [s if s else "" for s in t.axis("stack", op.stack.id if op.stack else "")],
        "tp": t.axis("tp", op.deployment.n_devices),
        "attention": t.axis("attention", op.deployment.attention),
        "temperature": t.axis("temperature", op.temperature),
        "k": t.axis("k", op.k),
        "tree_size": list(t.tree_size) if t.tree_size is not None else None,
        "batch_size": t.axis("batch_size", op.batch_size),
        "context_len": t.axis("context_len", op.context_len),
    }
    if t.alpha is not None:
        alphas = list(t.alpha)
    elif t.tau is not None:
        tau_k = t.tau_k if t.tau_k is not None else op.k
        if tau_k < 1:
            raise field_error(where, "tau_k", tau_k, "an integer >= 1 (the K the τ values were measured at): set "
                              "tau_k where the point's own k is 0")
        for tau in t.tau:
            if tau > tau_k + 1:
                raise field_error(where, "tau", tau, f"mean tokens per cycle in [1, tau_k + 1] = [1, {tau_k + 1}]")
        alphas = [alpha_from_tau(float(tau), tau_k) for tau in t.tau]
    else:
        alphas = [None]  # the operating point's own acceptance
    axes["alpha"] = alphas
    for m in axes["method"]:
        if m not in FAMILIES:
            raise field_error(where, "method", m, f"drafter families among {', '.join(FAMILIES)}")
    from .figures import check_sweep_plots

    axes["plots"] = check_sweep_plots(where, list(t.plots))
    return axes


def n_points(axes: dict) -> int:
    """How many rows the sweep will have (before any combination is skipped)."""
    numeric = len(axes["k"]) * len(axes["batch_size"]) * len(axes["context_len"]) * len(axes["alpha"])
    total = 0
    for method in axes["method"]:
        per = numeric * (1 + len(axes["tree_size"]) if axes["tree_size"] and method in TREE_METHODS else 1)
        n_drafters = len(axes["drafter"]) if FAMILIES[method].needs_drafter_model else 1
        total += per * n_drafters
    other = (len(axes["hardware"]) * len(axes["target"]) * len(axes["stack"]) * len(axes["tp"])
             * len(axes["attention"]) * len(axes["temperature"]))
    return total * other


def _combos(axes: dict):
    """(hardware, target, method, drafter, stack, tp, attention, temperature, tree?) per evaluation.
    A family that verifies trees runs twice when tree sizes are given: as a chain and as trees."""
    for hw, tgt, method, stack, tp, attn, temp in itertools.product(
            axes["hardware"], axes["target"], axes["method"], axes["stack"], axes["tp"], axes["attention"],
            axes["temperature"]):
        topologies = (False, True) if axes["tree_size"] and method in TREE_METHODS else (False,)
        for drafter in (axes["drafter"] if FAMILIES[method].needs_drafter_model else [None]):
            for tree in topologies:
                yield hw, tgt, method, drafter, stack, tp, attn, temp, tree


def run_sweep(op: OperatingPoint, *, progress: bool = False, skipped: list | None = None, workers: int | None = 1,
              cluster=None, store=None) -> pd.DataFrame:
    """Evaluate the point's grid; one row per point (COLUMNS). Combinations that cannot be
    evaluated at all (a tokenizer mismatch, a family the stack does not ship, an MTP method on a target
    without MTP layers, a tree on a chain-only stack, a context past a model's maximum) are appended
    to `skipped` with the reason, if given (else the first one raises).

    The combinations are independent points: workers / cluster / store run them on a local process
    pool (None: every CPU; 1: here, in turn), on a Dask cluster, and resumably, as
    presentation.parallel does; the table is the same whichever ran them."""
    from tqdm.auto import tqdm

    from .parallel import run_points

    axes = sweep_axes(op)
    frames = []
    combos = list(_combos(axes))
    alphas = None if axes["alpha"] == [None] else axes["alpha"]
    with tqdm(total=len(combos), disable=not progress, desc="sweep", unit="combo") as bar:
        outs = run_points(_evaluate_combo, (op, axes, alphas), combos, workers=workers, cluster=cluster, store=store,
                          progress=lambda i, n, combo: bar.update(1))
    for cols, skips, error in outs:
        if skips:
            if skipped is None:
                raise error
            skipped.extend(skips)
        if cols is not None:
            frames.append((cols["_n"], cols))
    if not frames:
        return pd.DataFrame({c: [] for c in COLUMNS})
    return _assemble(frames)


def _evaluate_combo(shared, combo):
    """One categorical combination of the grid (a point of run_sweep): (its columns or None, the
    reasons it or some of its contexts were skipped, the first such error)."""
    op, axes, alphas = shared
    hw_id, tgt_id, method, drafter_id, stack_id, tp, attn, temp, tree = combo
    skips: list = []
    first: list = []

    def skip(exc):
        skips.append({"hardware": hw_id, "target": tgt_id, "method": method, "drafter": drafter_id,
                      "stack": stack_id, "tp": tp, "tree": tree, "reason": str(exc)})
        first.append(exc)

    try:
        point = op.with_overrides(hardware=hw_id, target=tgt_id, method=method, drafter=drafter_id or "",
                                  stack=stack_id or "", tp=int(tp), attention=attn, temperature=float(temp),
                                  tree_size=max(axes["tree_size"]) if tree else 0)
        if tree and not point.deployment.supports_tree:
            raise field_error(f"stack {point.deployment.stack_id!r}", "tree_verification", "none",
                              "a stack that verifies trees (the chain rows are kept)")
        q_max = (max(axes["tree_size"]) if tree else max(axes["k"]) + 1) if point.drafter.family.uses_k \
            else point.verify_q_len
        contexts = []
        for ctx in axes["context_len"]:
            try:
                check_context(((point.target, "target"),
                               (point.drafter.drafter if point.drafter else None, "drafter")),
                              int(ctx), int(q_max), where=f"[sweep] {tgt_id}")
                contexts.append(ctx)
            except SpecError as exc:  # drop this context for this combination, and say so
                skip(exc)
        if not contexts:
            return None, skips, first[0] if first else None
        g = grid(point, k=axes["k"], tree_size=axes["tree_size"] if tree else None,
                 batch_size=axes["batch_size"], context_len=contexts, alpha=alphas)
    except SpecError as exc:
        skip(exc)
        return None, skips, first[0]
    n = g.speedup.size
    mem = _memory(point, g)
    cols = {
        "hardware": hw_id, "target": tgt_id,
        "drafter": drafter_id or FAMILIES[method].self_label, "method": method,
        "stack": stack_id or "", "tp": int(tp), "attention": attn, "temperature": float(temp or 0.0),
        "k": g.k.ravel().astype(np.int64), "tree_size": g.tree_size.ravel().astype(np.int64),
        "is_tree": np.full(n, g.is_tree), "batch_size": g.batch_size.ravel().astype(np.int64),
        "context_len": g.context_len.ravel().astype(np.int64), "alpha": g.alpha.ravel(),
        "tokens_per_cycle": g.tokens_per_cycle.ravel(), "draft_time_s": g.draft_time_s.ravel(),
        "verify_time_s": g.verify_time_s.ravel(), "cycle_overhead_s": g.overhead_s.ravel(),
        "cycle_time_s": g.cycle_time_s.ravel(), "target_step_time_s": g.target_step_time_s.ravel(),
        "verify_q_len": g.verify_q_len.ravel(), "tokens_per_s": g.tokens_per_s.ravel(),
        "baseline_tokens_per_s": g.baseline_tokens_per_s.ravel(), "speedup": g.speedup.ravel(),
    }
    cols["regression"] = cols["speedup"] < 1.0
    cols["memory_per_device_bytes"] = np.broadcast_to(mem, g.shape).ravel()
    cols["fits"] = cols["memory_per_device_bytes"] <= point.hardware.memory_bytes
    cols["alpha_effective"] = g.alpha_effective.ravel()
    ends = band_grid(point, k=axes["k"], tree_size=axes["tree_size"] if tree else None, batch_size=axes["batch_size"],
                     context_len=contexts) if alphas is None else None
    cols["speedup_low"] = ends[0].speedup.ravel() if ends else np.full(n, np.nan)
    cols["speedup_high"] = ends[1].speedup.ravel() if ends else np.full(n, np.nan)
    cols["priced_by"] = point.pricing_label()
    cols["_n"] = n
    return cols, skips, first[0] if first else None


def _assemble(frames) -> pd.DataFrame:
    """One DataFrame from per-combination column dicts: numeric columns concatenated, constant
    string columns built once as Categoricals from codes (no per-row string objects)."""
    sizes = np.array([n for n, _ in frames])
    out = {}
    for c in COLUMNS:
        values = [cols[c] for _, cols in frames]
        if isinstance(values[0], str):
            cats = sorted(set(values))
            codes = np.repeat(np.array([cats.index(v) for v in values], dtype=np.int32), sizes)
            out[c] = pd.Categorical.from_codes(codes, categories=cats)
        elif np.isscalar(values[0]):
            out[c] = np.repeat(np.array(values), sizes)
        else:
            out[c] = np.concatenate(values)
    return pd.DataFrame(out)


def _memory(point: OperatingPoint, g) -> np.ndarray:
    """Per-device bytes at each grid point (the fullest device), from the same parts as the point's
    memory fit: target weights and cache of L + 1, plus the drafter's weights, cache and slots."""
    k, m = g.k[:, :, :1, :1, :1], g.tree_size[:, :, :1, :1, :1]
    parts = memory_parts(point.target, point.deployment, point.drafter, batch_size=g.batch_size,
                         context_len=g.context_len, k=k, tree_size=m if g.is_tree else None)
    total = 0.0
    for v in parts.values():
        total = total + np.asarray(v, dtype=float)
    return np.asarray(total, dtype=float)


def write_sweep(df: pd.DataFrame, out) -> dict:
    """sweep.csv and sweep.parquet into an OutputDir (specsim.presentation.output); returns the paths."""
    df.to_csv(out.file("sweep.csv"), index=False)
    df.to_parquet(out.file("sweep.parquet"), index=False)
    return {"csv": out.path / "sweep.csv", "parquet": out.path / "sweep.parquet"}


def write_sweep_outputs(op: OperatingPoint, out, *, plots: bool = True, progress: bool = False,
                        on_figure=None, workers: int | None = 1, cluster=None,
                        resume: bool = False) -> tuple[pd.DataFrame, dict, list, list]:
    """The sweep command's work: the grid (run_sweep), sweep.csv and sweep.parquet, the figures with
    the recommended switch-off point marked, and switch_off.json saying what the plot marks, into
    `out` (an OutputDir). Returns (table, table paths, figure paths, skipped combinations).
    workers / cluster: where the grid's combinations run (run_sweep); resume: keep finished
    combinations in the output folder until the outputs are written (presentation.parallel)."""
    import json

    from .parallel import PointStore

    skipped: list = []
    store = PointStore(out.path, {"command": "sweep", "scenario": op.scenario.to_dict() if op.scenario else op.name}) \
        if resume else None
    df = run_sweep(op, progress=progress, skipped=skipped, workers=workers, cluster=cluster, store=store)
    paths = write_sweep(df, out)
    figures: list = []
    if plots and not df.empty:
        from ..analyses.threshold import recommended_switch_off
        from .figures import FigureInputs, sweep_figures  # matplotlib only when a figure is drawn

        axes = sweep_axes(op)
        switch_off = recommended_switch_off(op) if op.speculative and op.acceptance.model is not None else None
        if switch_off is not None:
            out.write_text("switch_off.json", json.dumps(switch_off.to_dict(), indent=2) + "\n")
        ref = {"hardware": axes["hardware"][0], "target": axes["target"][0], "method": axes["method"][0],
               "stack": axes["stack"][0] or "", "attention": op.deployment.attention, "batch_size": op.batch_size,
               "context_len": op.context_len, "alpha": op.alpha if op.alpha is not None else axes["alpha"][0]}
        roof = verify_roofline_points(op, batch_sizes=(1, 4, 16, 64))
        hm = heatmap_grid(op, axes) if "all" in axes["plots"] or "heatmap_batch_alpha" in axes["plots"] else None
        inputs = FigureInputs(point=op, sweep=df, reference=ref, roofline=roof, heatmap=hm, switch_off=switch_off,
                              drafter_roofline=drafter_roofline_points(op, batch_sizes=(1, 4, 16, 64)),
                              measured_verify=measured_verify_points(op))
        figures = sweep_figures(inputs, out, which=axes["plots"], progress=on_figure)
    if store is not None:
        store.clear()  # the outputs are staged; the finished points are no longer needed
    return df, paths, figures, skipped


def heatmap_grid(op: OperatingPoint, axes: dict | None = None, *, n_batch: int = 40, n_alpha: int = 61) -> pd.DataFrame:
    """The heatmap's (B, α) plane on a fine grid, so its speedup = 1 contour is smooth: the point's
    hardware, target, method, stack and attention, the first context of the grid, K over the grid's
    K values (best K per cell), B log-spaced over the grid's range, α evenly spaced over it. Empty
    when the grid has one batch size or one α."""
    axes = axes or sweep_axes(op)
    alphas = [a for a in axes["alpha"] if a is not None] or ([op.alpha] if op.alpha is not None else [])
    bs = [int(b) for b in axes["batch_size"]]
    if len(set(bs)) < 2 or len(set(alphas)) < 2 or not op.speculative:
        return pd.DataFrame({c: [] for c in COLUMNS})
    fine_b = sorted({int(round(b)) for b in np.geomspace(min(bs), max(bs), n_batch)} | set(bs))
    fine_a = sorted({round(float(a), 4) for a in np.linspace(min(alphas), max(alphas), n_alpha)})
    ctx = sorted(int(c) for c in axes["context_len"])
    ctx0 = min(ctx, key=lambda c: abs(c - op.context_len))
    point = op.with_overrides(sections={"sweep": {"k": [int(k) for k in axes["k"]], "batch_size": fine_b,
                                                  "context_len": [ctx0], "alpha": fine_a}})
    return run_sweep(point)


def drafter_roofline_points(op: OperatingPoint, *, batch_sizes=(1, 4, 16, 64)) -> pd.DataFrame:
    """The drafter's one-token pass at each batch size as roofline points (the columns of
    verify_roofline_points, `target` naming the drafting model, tree_size 1), priced as the cycle prices
    it (`cost.pricing`, at the family's pass efficiency); empty for families that run no drafting model
    (prompt lookup, Lookahead)."""
    from ..cost.pricing import price_pass
    from ..speculation.families import pass_efficiency

    if not op.speculative:
        return pd.DataFrame()
    dep = op.deployment
    work = op.work
    model = work.pass_model
    if model is None:
        return pd.DataFrame()
    hw = op.hardware
    b = np.asarray(list(batch_sizes), dtype=float)
    c = price_pass(model, dep, batch_size=b, q_len=1, context_len=op.context_len, tp=work.pass_tp,
                   efficiency=pass_efficiency(work, dep))
    flops = np.broadcast_to(c.flops, c.time_s.shape)
    bytes_ = np.broadcast_to(c.bytes, c.time_s.shape)
    dtype = hw.compute_dtype_for(model.compute_dtype)
    return pd.DataFrame({
        "hardware": hw.id, "target": model.id, "source": c.source, "batch_size": b.astype(int), "tree_size": 1,
        "tokens_in_flight": b.astype(int), "flops": flops, "bytes": bytes_, "intensity_flops_per_byte": flops / bytes_,
        "attained_flops_per_s": flops / c.time_s, "time_s": c.time_s, "time_vs_one_token": 1.0,
        "peak_flops_per_s": hw.peak_flops_per_s[dtype] * dep.eff.compute_frac,
        "peak_bandwidth_bytes_per_s": hw.mem_bandwidth_bytes_per_s * dep.eff.bandwidth_frac,
        "ridge_flops_per_byte": hw.ridge_flops_per_byte(model.compute_dtype),
        "ridge_tokens_in_flight": hw.ridge_flops_per_byte(model.compute_dtype) * model.weight_bytes_per_param / 2.0,
    })


def verify_roofline_points(op: OperatingPoint, *, tree_sizes=range(1, 65), batch_sizes=(1,)) -> pd.DataFrame:
    """The point's verify pass over M = tree_sizes query tokens per sequence, as roofline points: one
    row per (B, M) with FLOPs, bytes, operational intensity, attained FLOP/s, time, and time
    relative to the one-token step at the same B (the seed's 'barely more than over 1' ratio). Times
    are the target's passes as every path prices them (`cost.pricing.target_step_cost`, hops included)."""
    from ..cost.pricing import target_step_cost

    hw, target, dep = op.hardware, op.target, op.deployment
    m = np.asarray(list(tree_sizes), dtype=float)[None, :]
    b = np.asarray(list(batch_sizes), dtype=float)[:, None]
    c = target_step_cost(target, dep, batch_size=b, q_len=m, context_len=op.context_len)
    one = target_step_cost(target, dep, batch_size=b, q_len=1, context_len=op.context_len)
    flops = np.broadcast_to(c.flops, c.time_s.shape)
    bytes_ = np.broadcast_to(c.bytes, c.time_s.shape)
    bb, mm = np.broadcast_arrays(b, m)
    dtype = hw.compute_dtype_for(target.compute_dtype)
    return pd.DataFrame({
        "hardware": hw.id, "target": target.id, "source": c.source, "batch_size": bb.ravel().astype(int),
        "tree_size": mm.ravel().astype(int), "tokens_in_flight": (bb * mm).ravel().astype(int),
        "flops": flops.ravel(), "bytes": bytes_.ravel(), "intensity_flops_per_byte": (flops / bytes_).ravel(),
        "attained_flops_per_s": (flops / c.time_s).ravel(), "time_s": c.time_s.ravel(),
        "time_vs_one_token": (c.time_s / one.time_s).ravel(),
        "peak_flops_per_s": hw.peak_flops_per_s[dtype] * dep.eff.compute_frac,
        "peak_bandwidth_bytes_per_s": hw.mem_bandwidth_bytes_per_s * dep.eff.bandwidth_frac,
        "ridge_flops_per_byte": hw.ridge_flops_per_byte(target.compute_dtype),
        # each token in flight does 2 FLOP per weight byte-count of weight_bytes_per_param: the weight
        # GEMMs turn compute bound at B·M = ridge × bytes_per_weight / 2 (156 for fp16 on the seed part)
        "ridge_tokens_in_flight": hw.ridge_flops_per_byte(target.compute_dtype) * target.weight_bytes_per_param / 2.0,
    })


def measured_verify_points(op: OperatingPoint) -> pd.DataFrame:
    """The measured side of the verify-cost chart: one layer's operators (Vidur's GPU profiles,
    `calibration.profiles.measured_layer_curve`) for the point's part, target layer shape and tensor-
    parallel degree, as time over the one-token time against tokens in the step, with specsim's
    charge for the same operators beside it. Rows carry `series` = "measured" or "specsim" and the
    profiled model; empty when no profile matches (see measured_layer_curve)."""
    from ..calibration.profiles import VIDUR_GPUS, load_operator_profiles, measured_layer_curve

    columns = ["hardware", "target", "series", "vidur_model", "tp", "tokens_in_flight", "time_s", "time_vs_one_token"]
    dep = op.deployment
    if op.hardware.id not in VIDUR_GPUS.values():
        return pd.DataFrame({c: [] for c in columns})
    gpu = next(g for g, hw_id in VIDUR_GPUS.items() if hw_id == op.hardware.id)
    curve = measured_layer_curve(load_operator_profiles(gpus=(gpu,)), op.hardware, op.target, dep.tp, dep.eff)
    if curve.empty or not (curve["n_tokens"] == 1).any():
        return pd.DataFrame({c: [] for c in columns})
    frames = []
    for series, col in (("measured", "measured_s"), ("specsim", "predicted_s")):
        one = float(curve.loc[curve["n_tokens"] == 1, col].iloc[0])
        frames.append(pd.DataFrame({
            "hardware": op.hardware.id, "target": op.target.id, "series": series,
            "vidur_model": curve["vidur_model"], "tp": dep.tp, "tokens_in_flight": curve["n_tokens"].astype(int),
            "time_s": curve[col], "time_vs_one_token": curve[col] / one}))
    return pd.concat(frames, ignore_index=True)[columns]


__all__ = ["run_sweep", "sweep_axes", "n_points", "write_sweep", "write_sweep_outputs", "verify_roofline_points",
           "heatmap_grid", "drafter_roofline_points", "measured_verify_points",
           "COLUMNS", "SWEEP_KEYS"]
