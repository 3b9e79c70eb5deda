"""The figures of the report and of `specsim sweep`, each declared once.

A `FigureSpec` names a figure and says everything about it: its title, the report section it sits
in, the rows it draws (`rows(inputs)`: a DataFrame and the figure's own title, or None where the
figure does not apply to this scenario or grid), how it is drawn from those rows (`draw`), the
caption the report prints under it (numbers read from the same rows), the CSV that holds the rows,
and whether `specsim sweep` draws it (then `[sweep] plots` may name it). `FIGURES` lists them in the
report's order; the report, the sweep's plots, the serving comparison's plots and the check of
`[sweep] plots` all read this one tuple, so adding a figure touches this module and `plots`.

`FigureInputs` holds what the figures are drawn from: the operating point, the sweep grid and the
point the slices go through, the roofline points, the fine (B, α) grid, the measured verify curve,
and, in a report, the verdict (`analyses.advise.Advice`, whose serving evaluation feeds the serving
figures). Nothing here draws until `draw` is called: matplotlib is imported then, so the names and
their check (`SWEEP_PLOTS`, `check_sweep_plots`) import without it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Callable

import numpy as np

from ..errors import field_error
from .selection import best_rows, nearest

SECTION_VERDICT = "Verdict"
SECTION_ROOFLINE = "Roofline: target and drafter"
SECTION_SPEEDUP = "Speedup"
SECTION_SERVING = "Serving: gating policies under load"

CSV_COLUMNS = ("model", "series", "vidur_model", "line", "hardware", "target", "drafter", "method", "stack", "tp",
               "attention", "k", "tree_size", "is_tree", "batch_size", "context_len", "alpha", "alpha_effective",
               "tokens_per_cycle", "draft_time_s", "verify_time_s", "cycle_time_s", "target_step_time_s",
               "tokens_per_s", "baseline_tokens_per_s", "speedup", "fits", "memory_per_device_bytes",
               "tokens_in_flight", "flops", "bytes", "intensity_flops_per_byte", "attained_flops_per_s", "time_s",
               "time_vs_one_token", "peak_flops_per_s", "peak_bandwidth_bytes_per_s", "ridge_flops_per_byte",
               "ridge_tokens_in_flight")
HEATMAP_COLUMNS = ("hardware", "target", "method", "attention", "context_len", "batch_size", "alpha", "k", "tree_size",
                   "speedup", "fits")
SERVING_COLUMNS = ("policy", "rate_per_s", "kind", "threshold", "reused", "n_requests", "n_done", "ttft_p50_s",
                   "ttft_p99_s", "tpot_p50_s", "tpot_p99_s", "e2e_p50_s", "throughput_tokens_per_s",
                   "goodput_requests_per_s", "slo_attainment_frac", "batch_size_mean", "batch_size_max",
                   "kv_used_frac_mean", "n_preemptions", "mean_acceptance_length", "speedup_tpot_p50",
                   "throughput_ratio", "regret")


@dataclass(frozen=True, kw_only=True)
class FigureInputs:
    """What the figures are drawn from (see the module docstring). reference: the operating point the
    slices of the grid go through (keys hardware, target, method, stack, attention, batch_size,
    context_len, alpha; the nearest grid value is used for numeric keys). switch_off: the switch-off
    the sweep's batch plot marks (a report marks its verdict's instead)."""

    point: object = None
    sweep: object = None
    reference: dict = field(default_factory=dict)
    roofline: object = None
    drafter_roofline: object = None
    heatmap: object = None
    measured_verify: object = None
    advice: object = None
    switch_off: object = None

    @cached_property
    def grid(self) -> "_GridSlices | None":
        return None if self.sweep is None or not len(self.sweep) else _GridSlices(self.sweep, self.reference)

    @cached_property
    def serving(self) -> "_ServingRows | None":
        a = self.advice
        if a is None or a.gates is None:
            return None
        rows = _ServingRows(a)
        return rows if rows.n_rates >= 2 else None


@dataclass(frozen=True, kw_only=True)
class FigureSpec:
    """One figure (see the module docstring). rows(inputs) -> (DataFrame, title) or None; draw(data,
    title, inputs) -> a matplotlib Figure; caption(data, inputs) -> str; csv: the file its rows are
    written to (serving figures share one); csv_columns: the columns kept there (None: all);
    in_sweep: `specsim sweep` draws it."""

    name: str
    title: str
    section: str
    rows: Callable
    draw: Callable
    caption: Callable | None = None
    csv: str = ""
    csv_columns: tuple | None = CSV_COLUMNS
    in_sweep: bool = False

    @property
    def csv_name(self) -> str:
        return self.csv or f"{self.name}.csv"

    def applies(self, inputs: FigureInputs) -> bool:
        """Whether the figure has rows to draw for these inputs (a scenario without trees has no tree
        figure, one without a simulated workload no serving figures)."""
        return self.rows(inputs) is not None

    def csv_rows(self, data):
        """The rows as written beside the figure: its columns in one order whatever order the grid was
        evaluated in (the CSVs are compared across runs)."""
        if self.csv_columns is None:
            return data
        out = data[[c for c in self.csv_columns if c in data]]
        keys = [c for c in ("model", "series", "hardware", "target", "drafter", "method", "stack", "tp", "attention",
                            "is_tree", "k", "tree_size", "batch_size", "context_len", "alpha") if c in out]
        return out.astype({c: str for c in keys if out[c].dtype == object or str(out[c].dtype) == "category"}) \
            .sort_values(keys, kind="stable", na_position="first").reset_index(drop=True)


# ---- the sweep grid's slices ----------------------------------------------------------------------

class _GridSlices:
    """The slices of a sweep grid through the reference point, shared by the grid's figures."""

    def __init__(self, df, reference: dict):
        base = df
        for key in ("target", "method", "stack"):
            if key in reference and reference[key] is not None and (df[key] == reference[key]).any():
                base = base[base[key] == reference[key]]
        hw0 = reference.get("hardware")
        self.on_hw = base[base["hardware"] == hw0] if hw0 is not None and (base["hardware"] == hw0).any() else base
        self.attention = attn = reference.get("attention", "fused")
        on = self.on_hw[self.on_hw["attention"] == attn] if (self.on_hw["attention"] == attn).any() else self.on_hw
        self.on = on
        self.df = df
        self.reference = reference
        self.b0 = nearest(on["batch_size"], reference.get("batch_size", 1))
        self.l0 = nearest(on["context_len"], reference.get("context_len", 0))
        self.a0 = nearest(on["alpha"], reference.get("alpha", 0.8))
        self.chains = on[~on["is_tree"]] if (~on["is_tree"]).any() else on  # one line per K: linear drafts
        label = f"{on['target'].iloc[0]} on {on['hardware'].iloc[0]}, {on['method'].iloc[0]}"
        if on["drafter"].iloc[0] and not str(on["drafter"].iloc[0]).startswith("("):
            label += f" ({on['drafter'].iloc[0]})"
        self.label = label


def _rows_speedup_vs_batch(x: FigureInputs):
    g = x.grid
    if g is None or g.on["batch_size"].nunique() < 2:
        return None
    c = g.chains
    return (c[(c["context_len"] == g.l0) & (c["alpha"] == g.a0)],
            f"Speedup vs batch size — {g.label}\nL = {g.l0}, α = {g.a0:.2f}")


def _rows_speedup_vs_context(x: FigureInputs):
    g = x.grid
    if g is None or g.on_hw["context_len"].nunique() < 2:
        return None
    ch = g.on_hw[~g.on_hw["is_tree"]] if (~g.on_hw["is_tree"]).any() else g.on_hw
    return (ch[(ch["batch_size"] == g.b0) & (ch["alpha"] == g.a0)],
            f"Speedup vs context — {g.label}\nB = {g.b0}, α = {g.a0:.2f}, best K per point")


def _rows_heatmap(x: FigureInputs):
    g = x.grid
    if g is None:
        return None
    hm = x.heatmap if x.heatmap is not None and len(x.heatmap) else g.chains[g.chains["context_len"] == g.l0]
    if not len(hm):
        return None
    hm = best_rows(hm, ["batch_size", "alpha"])  # what the heatmap draws: the best K in each cell
    if hm["batch_size"].nunique() < 2 or hm["alpha"].nunique() < 2:
        return None
    return hm, f"Best speedup over (B, α) — {g.label}, best K\nL = {int(hm['context_len'].iloc[0])}"


def _rows_speedup_vs_k(x: FigureInputs):
    g = x.grid
    if g is None or g.on["k"].nunique() < 2:
        return None
    c = g.chains
    return c[(c["batch_size"] == g.b0) & (c["context_len"] == g.l0)], f"Speedup vs K — {g.label}\nB = {g.b0}, L = {g.l0}"


def _rows_tree_size(x: FigureInputs):
    g = x.grid
    if g is None:
        return None
    ref = g.reference
    trees = g.df[g.df["is_tree"]]
    for key in ("target", "method"):
        if key in ref and (trees[key] == ref[key]).any():
            trees = trees[trees[key] == ref[key]]
    if not len(trees) or trees["tree_size"].nunique() < 2:
        return None
    line = "hardware" if trees["hardware"].nunique() > 1 or trees["stack"].nunique() < 2 else "stack"
    if line == "stack":
        trees = trees.assign(stack=trees["stack"].astype(str).replace({"": "idealised part (no stack)"}))
    t = trees[trees["attention"] == g.attention] if (trees["attention"] == g.attention).any() else trees
    sub = t[(t["batch_size"] == nearest(t["batch_size"], g.b0)) & (t["context_len"] == nearest(t["context_len"], g.l0))
            & (t["alpha"] == nearest(t["alpha"], g.a0))]
    return (sub.assign(line=line), f"Speedup vs tree size — {sub['target'].iloc[0]}, {sub['method'].iloc[0]}\n"
                                   f"B = {g.b0}, L = {g.l0}, α = {g.a0:.2f}, best depth per M")


def _rows_roofline(x: FigureInputs):
    roof = x.roofline
    if roof is None or not len(roof):
        return None
    import pandas as pd

    out = roof.assign(model="target")
    d = x.drafter_roofline
    if d is not None and len(d):
        out = pd.concat([out, d.assign(model="drafter")], ignore_index=True)
    who = f"{roof['target'].iloc[0]}" + (f" and drafter {d['target'].iloc[0]}" if d is not None and len(d) else "")
    return out, f"Roofline — {who} on {roof['hardware'].iloc[0]}"


def _rows_verify_cost(x: FigureInputs):
    roof = x.roofline
    if roof is None or not len(roof):
        return None
    import pandas as pd

    verify = roof.assign(series="model")
    m = x.measured_verify
    if m is not None and len(m):
        verify = pd.concat([verify, m], ignore_index=True)
    return verify, f"Verify cost vs B·M — {roof['target'].iloc[0]} on {roof['hardware'].iloc[0]}"


# ---- the verdict's curve --------------------------------------------------------------------------

def _rows_verdict(x: FigureInputs):
    """The verdict's own analytic curve (the scenario's K, under the workload when there is one) at
    every batch the switch-off search evaluated, with the speedup at the two ends of the acceptance
    band on the same batches, and the markers the figure draws as constant columns."""
    a = x.advice
    if a is None:
        return None
    import pandas as pd

    so = a.analytic
    b = np.asarray(so.batch_sizes, dtype=float)
    lo_hi = []
    for curve_b, curve_s in a.band.curves:  # each end on its own batches: put it on the verdict's
        lo_hi.append(np.interp(np.log(b), np.log(np.asarray(curve_b, dtype=float)), np.asarray(curve_s, dtype=float)))
    if len(lo_hi) == 2:
        low, high = np.minimum(*lo_hi), np.maximum(*lo_hi)
    else:
        low = high = np.full(b.size, np.nan)
    ends = [r["alpha"] for r in a.band.rows]
    data = pd.DataFrame({
        "batch_size": b.astype(np.int64), "k": int(a.k), "view": so.view, "speedup": np.asarray(so.speedup, dtype=float),
        "speedup_low": low, "speedup_high": high, "alpha": float(a.band.alpha),
        "alpha_low": min(ends) if ends else np.nan, "alpha_high": max(ends) if ends else np.nan,
        "band_calibrated": bool(a.band.calibrated),
        "switch_off_batch": np.nan if so.batch_off is None else float(so.batch_off),
        "gate_batch": np.nan if a.gates is None or a.gate_batch is None else float(a.gate_batch),
        "min_batch": np.nan if a.min_batch is None else float(a.min_batch),
        "margin": float(a.margin),
    })
    op = a.point
    what = op.method + (f" ({op.drafter.drafter.id})" if op.drafter is not None and op.drafter.drafter else "")
    return data, f"{what}, K = {a.k}: speedup against the running batch ({so.view.split(' (')[0]})"


def _caption_verdict(data, x: FigureInputs) -> str:
    a = x.advice
    s1 = float(data["speedup"].iloc[0])
    text = f"K = {a.k}: {s1:.2f}× at B = {int(data['batch_size'].iloc[0])} ({a.analytic.assumptions})"
    off = data["switch_off_batch"].iloc[0]
    text += f"; the analytic curve stops paying {1 + a.margin:.2f}× at B ≥ {int(off)} (dashed red)" if off == off else \
        "; it pays at every batch examined"
    g = data["gate_batch"].iloc[0]
    if g == g:
        text += f"; the serving simulation's gate switches it off at B ≥ {int(g)} (orange)"
    lo, hi = data["alpha_low"].iloc[0], data["alpha_high"].iloc[0]
    if lo == lo:
        kind = "the calibrated interval" if bool(data["band_calibrated"].iloc[0]) else "an assumed ± band"
        text += f"; shaded blue: α from {lo:.3f} to {hi:.3f} ({kind}); shaded red: a slowdown"
    return text + "."


def _draw_verdict(data, title, x: FigureInputs):
    from . import plots

    return plots.new_figure("verdict_curve", lambda ax: plots.verdict_curve(ax, data, title=title), size=(7.4, 4.4))


# ---- captions of the grid's figures ---------------------------------------------------------------

def _caption_roofline(data, x) -> str:
    t = data[data["model"] == "target"] if "model" in data else data
    text = f"Ridge point {float(t['ridge_flops_per_byte'].iloc[0]):.0f} FLOP/byte."
    if "model" in data and (data["model"] == "drafter").any():
        d = data[data["model"] == "drafter"]
        text += (f" The drafter's step reaches {d['intensity_flops_per_byte'].max():.1f} FLOP/byte at batch "
                 f"{int(d['batch_size'].max())}: it stays bandwidth bound.")
    return text


def _caption_verify_cost(data, x) -> str:
    op = x.point
    model = data[data["series"] == "model"] if "series" in data else data
    b1 = model[model["batch_size"] == model["batch_size"].min()]
    q = int(op.verify_q_len)
    row = b1[b1["tree_size"] == min(q, int(b1["tree_size"].max()))]
    text = (f"At B = {int(b1['batch_size'].iloc[0])} the verify pass over M = {q} tokens costs "
            f"{float(row['time_vs_one_token'].iloc[0]):.2f}× the one-token step; the weight GEMMs turn compute "
            f"bound near B·M ≈ {float(model['ridge_tokens_in_flight'].iloc[0]):.0f}.")
    if "series" in data and (data["series"] == "measured").any():
        meas = data[data["series"] == "measured"].set_index("tokens_in_flight")["time_vs_one_token"]
        ours = data[data["series"] == "specsim"].set_index("tokens_in_flight")["time_vs_one_token"]
        n = max(t for t in meas.index if t <= 256)
        who = data.loc[data["series"] == "measured", "vidur_model"].iloc[0]
        text += (f" Measured on the same part (Vidur's operator profiles of {who}, one layer's projections, "
                 f"norms and activation): {int(n)} tokens cost {float(meas[n]):.2f}× one token, where specsim "
                 f"charges {float(ours[n]):.2f}× for the same operators.")
    return text


def _caption_speedup_vs_batch(data, x) -> str:
    from ..analyses.advise import describe_pays

    op, advice = x.point, x.advice
    best = data.groupby("batch_size")["speedup"].max()
    reg = best.index[best.values < 1.0]
    at_k = data[data["k"] == op.k].set_index("batch_size")["speedup"].dropna()
    so = advice.analytic
    here = (f"K = {op.k}: {float(at_k.iloc[0]):.2f}× at B = {int(at_k.index[0])}" if len(at_k) else
            f"K = {op.k} (the scenario's) is not on this grid")
    text = (f"{here}; the best K is below 1 at "
            + (", ".join(f"B = {int(b)}" for b in reg[:3]) + ("…" if len(reg) > 3 else "") if len(reg)
               else "no batch on this grid")
            + f" (shaded: regression). Marked: the analytic curve with the scenario's K, "
            f"{describe_pays(so, advice.margin)} [{so.assumptions}]")
    if advice.gates is not None and advice.gate_batch is not None:
        text += f"; and the verdict's gate from the serving simulation, off at B ≥ {advice.gate_batch}"
    return text + "."


def _caption_speedup_vs_context(data, x) -> str:
    parts = []
    for attn, g in data.groupby("attention", observed=True):
        b = g.groupby("context_len")["speedup"].max()
        parts.append(f"{attn}: {b.iloc[0]:.2f}× at L = {int(b.index[0])} → {b.iloc[-1]:.2f}× at L = {int(b.index[-1])}")
    return "Best K at each context — " + "; ".join(parts) + "."


def _caption_heatmap(data, x) -> str:
    best = data.groupby(["batch_size", "alpha"])["speedup"].max().reset_index()
    a = float(best["alpha"].iloc[(best["alpha"] - x.point.alpha).abs().argmin()])
    row = best[best["alpha"] == a]
    pays = row[row["speedup"] >= 1.0]["batch_size"]
    return (f"At α = {a:.2f} the best K pays up to B = {int(pays.max()) if len(pays) else 0} on this grid; "
            f"the black line is speedup = 1.")


def _caption_speedup_vs_k(data, x) -> str:
    op = x.point
    a = float(data["alpha"].iloc[(data["alpha"] - op.alpha).abs().argmin()])
    g = data[data["alpha"] == a].groupby("k")["speedup"].max()
    mine = g.get(op.k)
    said = (f"K = {op.k} gives {mine:.2f}×" if mine is not None and np.isfinite(mine) else
            f"K = {op.k} (the scenario's) is not on this grid")
    return f"At α = {a:.2f} the best K is {int(g.idxmax())} ({g.max():.2f}×); {said}."


def _caption_tree_size(data, x) -> str:
    parts = []
    line = str(data["line"].iloc[0]) if "line" in data else "hardware"
    for v, g in data.groupby(line, observed=True):
        b = g.groupby("tree_size")["speedup"].max()
        fits = bool(g["fits"].all()) if "fits" in g else True
        parts.append(f"{v}: best M = {int(b.idxmax())} ({b.max():.2f}×)" + ("" if fits else ", does not fit in memory"))
    return "; ".join(parts) + "."


# ---- drawing the grid's figures -------------------------------------------------------------------

def _draw_with(panel: str, *, size=(7, 4.5), **fixed):
    """A draw function that puts plots.<panel>(ax, data, title=..., **fixed) on a new figure."""
    def draw(data, title, x: FigureInputs):
        from . import plots

        return plots.new_figure(panel, lambda ax: getattr(plots, panel)(ax, data, title=title, **fixed), size=size)
    return draw


def _draw_speedup_vs_batch(data, title, x: FigureInputs):
    from . import plots

    extra = dict(threshold=x.switch_off)
    a = x.advice
    if a is not None:  # the report marks its verdict's switch-off, where it starts paying and the simulated gate
        extra = dict(threshold=a.analytic, on_from=a.min_batch,
                     gate=(a.gate_batch, "the verdict's gate (serving simulation)")
                     if a.gates is not None and a.gate_batch is not None else None)
    return plots.new_figure("speedup_vs_batch", lambda ax: plots.speedup_vs_batch(ax, data, title=title, **extra),
                            size=(9, 4.5))


def _draw_tree_size(data, title, x):
    from . import plots

    line = str(data["line"].iloc[0]) if "line" in data else "hardware"
    return plots.new_figure("speedup_vs_tree_size",
                            lambda ax: plots.speedup_vs_tree_size(ax, data, line=line, title=title))


def _draw_roofline(data, title, x):
    from . import plots

    target = data[data["model"] == "target"] if "model" in data else data
    drafter = data[data["model"] == "drafter"] if "model" in data else None
    return plots.new_figure("roofline", lambda ax: plots.roofline_chart(
        ax, target, drafter=drafter if drafter is not None and len(drafter) else None, title=title))


def _draw_verify_cost(data, title, x):
    from . import plots

    if "series" in data:
        model, measured = data[data["series"] == "model"], data[data["series"] != "model"]
    else:
        model, measured = data, None
    return plots.new_figure("verify_cost",
                            lambda ax: plots.verify_cost_vs_tokens(ax, model, title=title, measured=measured))


# ---- the serving comparison's figures -------------------------------------------------------------

class _ServingRows:
    """The serving evaluation's rows the figures draw: the policies shown (never, always on, the chosen
    gate and the scenario's own), their crossover rates and the SLO."""

    def __init__(self, advice):
        from ..serving.rates import crossover_rate

        g = advice.gates
        t = g.table
        static = t[t["kind"] == "static"]["policy"].iloc[0]
        never = t[t["kind"] == "never"]["policy"].iloc[0]
        own = [n for n in dict.fromkeys(t["policy"]) if n in advice.point.section("policies")]
        self.policies = list(dict.fromkeys([never, static, g.chosen, *own]))
        shown = t[t["policy"].isin(self.policies)].copy()
        shown.attrs = dict(t.attrs)
        self.table = shown
        self.n_rates = int(shown["rate_per_s"].dropna().nunique())
        self.crossovers = {}
        if self.n_rates:
            self.crossovers = {p: crossover_rate(shown, p) for p in self.policies
                               if p != shown.attrs.get("baseline_policy")}
        self.slo = g.slo
        self.title = advice.point.name
        data = shown.reset_index(drop=True)
        self.data = data[[c for c in SERVING_COLUMNS if c in data]]


def shown_policies(advice) -> list:
    """The policies the serving figures draw: never, always on, the chosen gate and the scenario's own."""
    return _ServingRows(advice).policies


def _rows_serving(x: FigureInputs):
    s = x.serving
    return None if s is None else (s.data, "")


def _rows_serving_speedup(x: FigureInputs):
    s = x.serving
    if s is None or "speedup_tpot_p50" not in s.table:
        return None
    # no finite TPOT speedup at any rate (every output one token: no TPOT to compare): nothing to draw,
    # and a caption would read "pays at every rate" from crossovers that were never found
    if not np.isfinite(s.table["speedup_tpot_p50"].to_numpy(dtype=float)).any():
        return None
    return s.data, ""


def _serving_draw(builder: str):
    def draw(data, title, x: FigureInputs):
        from . import serving_plots

        s = x.serving
        return getattr(serving_plots, builder)(s.table, crossovers=s.crossovers, title=s.title, slo=s.slo)
    return draw


def slo_text(slo) -> str:
    """An SLO's limits as a reader wants them: a limit the scenario does not set (infinite, the default
    of a scenario without [slo], such as one `calibrate load --write-scenario` writes) is said as
    such rather than printed as 'inf'."""
    tt, tp = np.isfinite(slo.ttft_s), np.isfinite(slo.tpot_s)
    if not (tt or tp):
        return "none set (no [slo]: every completed request counts as within it)"
    return ", ".join([f"TTFT ≤ {slo.ttft_s:g} s" if tt else "TTFT no limit",
                      f"TPOT ≤ {slo.tpot_s * 1e3:g} ms" if tp else "TPOT no limit"])


def _caption_latency(data, x) -> str:
    slo = x.serving.slo
    if not np.isfinite(x.serving.table[["tpot_p50_s", "tpot_p99_s"]].to_numpy(dtype=float)).any():
        return (f"p50 (solid) and p99 (dashed) TTFT; no TPOT at any rate: every output is one token, and TPOT is the "
                f"time between two output tokens (SLO: {slo_text(slo)}).")
    if not (np.isfinite(slo.tpot_s) or np.isfinite(slo.ttft_s)):
        return "p50 (solid) and p99 (dashed) TPOT and TTFT; no SLO limits drawn (the scenario sets none)."
    return f"p50 (solid) and p99 (dashed) TPOT and TTFT; dashed black: the SLO limits ({slo_text(slo)})."


def _caption_speedup_rate(data, x) -> str:
    c = x.serving.crossovers
    return "p50 TPOT speedup over never speculating; " + (
        "; ".join(f"{p} stops paying at about {r:.1f} req/s" if r is not None else f"{p} pays at every rate"
                  for p, r in c.items()) or "no crossover")


FIGURES: tuple[FigureSpec, ...] = (
    FigureSpec(name="verdict_curve", title="The verdict: speedup against the running batch", section=SECTION_VERDICT,
               rows=_rows_verdict, draw=_draw_verdict, caption=_caption_verdict, csv_columns=None),
    FigureSpec(name="roofline", title="Roofline: the verify pass and the drafter's step", section=SECTION_ROOFLINE,
               rows=_rows_roofline, draw=_draw_roofline, caption=_caption_roofline, in_sweep=True),
    FigureSpec(name="verify_cost", title="Verify cost against tokens in flight", section=SECTION_ROOFLINE,
               rows=_rows_verify_cost, draw=_draw_verify_cost, caption=_caption_verify_cost, in_sweep=True),
    FigureSpec(name="speedup_vs_k", title="Speedup against K", section=SECTION_SPEEDUP, rows=_rows_speedup_vs_k,
               draw=_draw_with("speedup_vs_k"), caption=_caption_speedup_vs_k, in_sweep=True),
    FigureSpec(name="speedup_vs_tree_size", title="Speedup against tree size", section=SECTION_SPEEDUP,
               rows=_rows_tree_size, draw=_draw_tree_size, caption=_caption_tree_size, in_sweep=True),
    FigureSpec(name="speedup_vs_batch", title="Speedup against batch size", section=SECTION_SPEEDUP,
               rows=_rows_speedup_vs_batch, draw=_draw_speedup_vs_batch, caption=_caption_speedup_vs_batch,
               in_sweep=True),
    FigureSpec(name="speedup_vs_context", title="Speedup against context length", section=SECTION_SPEEDUP,
               rows=_rows_speedup_vs_context, draw=_draw_with("speedup_vs_context"),
               caption=_caption_speedup_vs_context, in_sweep=True),
    FigureSpec(name="heatmap_batch_alpha", title="Where speculation pays over (B, α)", section=SECTION_SPEEDUP,
               rows=_rows_heatmap, draw=_draw_with("speedup_heatmap"), caption=_caption_heatmap,
               csv_columns=HEATMAP_COLUMNS, in_sweep=True),
    FigureSpec(name="latency_vs_rate", title="Latency against rate", section=SECTION_SERVING, rows=_rows_serving,
               draw=_serving_draw("latency_figure"), caption=_caption_latency, csv="serving_policies.csv",
               csv_columns=None),
    FigureSpec(name="throughput_vs_rate", title="Throughput against rate", section=SECTION_SERVING,
               rows=_rows_serving, draw=_serving_draw("throughput_figure"),
               caption=lambda data, x: "Output tokens per second, and each policy's over never speculating.",
               csv="serving_policies.csv", csv_columns=None),
    FigureSpec(name="goodput_vs_rate", title="Goodput against rate", section=SECTION_SERVING, rows=_rows_serving,
               draw=_serving_draw("goodput_figure"),
               caption=lambda data, x: "Requests per second that meet both SLO limits; dotted: every request on time.",
               csv="serving_policies.csv", csv_columns=None),
    FigureSpec(name="speedup_vs_rate", title="Speedup against rate", section=SECTION_SERVING,
               rows=_rows_serving_speedup, draw=_serving_draw("speedup_figure"), caption=_caption_speedup_rate,
               csv="serving_policies.csv", csv_columns=None),
)
BY_NAME = {f.name: f for f in FIGURES}
FIGURE_NAMES = tuple(BY_NAME)
# the names `[sweep] plots` may list ("all": every one of them)
SWEEP_PLOTS = tuple(f.name for f in FIGURES if f.in_sweep)
SERVING_FIGURES = tuple(f.name for f in FIGURES if f.section == SECTION_SERVING)


def check_sweep_plots(where: str, value) -> list:
    """`[sweep] plots` as a list of figure names, refused naming the field, the value and the names it
    may hold (a string is one name; "all" is every figure `specsim sweep` draws)."""
    names = [value] if isinstance(value, str) else value
    expected = f"\"all\" or a list of figure names among {', '.join(SWEEP_PLOTS)}"
    if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
        raise field_error(where, "plots", value, expected)
    unknown = [n for n in names if n != "all" and n not in SWEEP_PLOTS]
    if unknown:
        raise field_error(where, "plots", unknown[0] if len(unknown) == 1 else unknown, expected)
    return list(names)


def sweep_figures(inputs: FigureInputs, out_dir, *, which=("all",), progress=None) -> list:
    """The sweep's figures (those of FIGURES with in_sweep, or the names in `which`) written as PNG and
    SVG into out_dir (a Path, or an OutputDir); progress(name) is called as each is done."""
    from pathlib import Path

    from . import plots

    want = set(which)
    paths: list = []
    for spec in FIGURES:
        if not spec.in_sweep or not ("all" in want or spec.name in want):
            continue
        sl = spec.rows(inputs)
        if sl is None:
            continue
        fig = spec.draw(sl[0], sl[1], inputs)
        paths += plots.save_figure(fig, (out_dir, spec.name) if hasattr(out_dir, "file") else Path(out_dir) / spec.name)
        if progress is not None:
            progress(spec.name)
    return paths


def serving_figures(table, out, *, crossovers: dict | None = None, title: str = "", slo=None) -> list:
    """The serving figures of FIGURES drawn from a comparison table (`presentation.simulation`: every
    policy it ran) as PNG files into `out` (an OutputDir)."""
    from . import serving_plots

    builders = {"latency_vs_rate": serving_plots.latency_figure, "throughput_vs_rate": serving_plots.throughput_figure,
                "goodput_vs_rate": serving_plots.goodput_figure, "speedup_vs_rate": serving_plots.speedup_figure}
    paths = []
    for name in SERVING_FIGURES:
        if name == "speedup_vs_rate" and "speedup_tpot_p50" not in table:
            continue
        fig = builders[name](table, crossovers=crossovers, title=title, slo=slo)
        fig.savefig(out.file(f"{name}.png"), dpi=120)
        paths.append(out.path / f"{name}.png")
    return paths


__all__ = ["FigureSpec", "FigureInputs", "FIGURES", "BY_NAME", "FIGURE_NAMES", "SWEEP_PLOTS", "SERVING_FIGURES",
           "check_sweep_plots", "sweep_figures", "serving_figures", "shown_policies", "CSV_COLUMNS", "HEATMAP_COLUMNS"]
