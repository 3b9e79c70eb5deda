"""Plots of sweep results (matplotlib lives here and nowhere else in the library).

Every function takes `(ax, df, ...)`, draws on `ax`, returns the artists it made, and never calls
`show`. They select and group rows of a tidy sweep DataFrame (`presentation.sweep.COLUMNS`) and
draw; the numbers come from the sweep. Which figures exist, the rows each draws and how they are
laid out are declared once in `presentation.figures`.
"""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only; never a window
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from .selection import best_rows  # noqa: E402

REGRESSION_COLOR = "#f4c7c3"
NOFIT_LABEL = "does not fit in memory (×)"


def _fits(g: pd.DataFrame) -> np.ndarray:
    return g["fits"].to_numpy(dtype=bool) if "fits" in g else np.ones(len(g), dtype=bool)


def _line(ax, x, y, fits, *, label: str, **style) -> list:
    """A line whose points that do not fit in memory are drawn as × on a dashed segment: the time model
    still applies (to a larger box), but this configuration cannot run here. A line none of whose
    points fit is dashed throughout and says so in its label."""
    x, y, fits = np.asarray(x), np.asarray(y), np.asarray(fits, dtype=bool)
    if fits.all():
        return ax.plot(x, y, label=label, **style)
    style = {k: v for k, v in style.items() if k not in ("marker", "ms", "ls", "lw")}
    artists = []
    if not fits.any():
        (ln,) = ax.plot(x, y, ls="--", marker="x", ms=5, label=f"{label} — does not fit in memory", **style)
        return [ln]
    (ln,) = ax.plot(x, y, ls=":", lw=1.0, **style)
    artists.append(ln)
    color = ln.get_color()
    style.pop("color", None)
    artists += ax.plot(np.where(fits, x, np.nan), np.where(fits, y, np.nan), marker="o", ms=3, label=label, color=color,
                       **style)
    artists.append(ax.scatter(x[~fits], y[~fits], marker="x", s=30, color=color, zorder=4,
                              label=NOFIT_LABEL if not _has_label(ax, NOFIT_LABEL) else None))
    return artists


def _has_label(ax, label: str) -> bool:
    return any(a.get_label() == label for a in ax.get_children())


def _log2_axis(ax, values) -> None:
    ax.set_xscale("log", base=2)
    ticks = sorted(set(int(v) for v in values))
    if len(ticks) <= 14:
        ax.set_xticks(ticks)
        ax.set_xticklabels([str(t) for t in ticks])


def verdict_curve(ax, data: pd.DataFrame, *, title: str = ""):
    """The verdict's curve (`figures` "verdict_curve" rows): speedup with the scenario's K against the
    running batch, the speedup at the two ends of the acceptance band shaded around it, the
    regression region (speedup < 1) shaded, the analytic switch-off, where it starts paying when it
    does not at batch 1, and the serving simulation's gate when there is one, on one axis."""
    b = data["batch_size"].to_numpy(dtype=float)
    s = data["speedup"].to_numpy(dtype=float)
    lo, hi = data["speedup_low"].to_numpy(dtype=float), data["speedup_high"].to_numpy(dtype=float)
    top = np.nanmax(np.concatenate([s, hi[np.isfinite(hi)]])) if np.isfinite(s).any() else 2.0
    artists = [ax.axhspan(0, 1.0, color=REGRESSION_COLOR, alpha=0.6, lw=0, label="regression (speedup < 1)"),
               ax.axhline(1.0, color="k", lw=0.8)]
    if np.isfinite(lo).any():
        kind = "calibrated" if bool(data["band_calibrated"].iloc[0]) else "assumed"
        artists.append(ax.fill_between(b, lo, hi, color="#7aa6d6", alpha=0.35, lw=0,
                                       label=f"α {data['alpha_low'].iloc[0]:.2f}–{data['alpha_high'].iloc[0]:.2f} "
                                             f"({kind} band)"))
    artists += ax.plot(b, s, color="#1f4e8c", lw=2.0,
                       label=f"K = {int(data['k'].iloc[0])}, α = {data['alpha'].iloc[0]:.2f} "
                             f"({str(data['view'].iloc[0]).split(' (')[0]})")
    marks = (("min_batch", "seagreen", "--", "pays from B ≥ {}"),
             ("switch_off_batch", "crimson", "--", "switch off at B ≥ {} (analytic)"),
             ("gate_batch", "darkorange", "-.", "simulated gate: off at B ≥ {}"))
    for col, color, ls, text in marks:
        v = float(data[col].iloc[0])
        if np.isfinite(v):
            artists.append(ax.axvline(v, color=color, ls=ls, lw=1.5, label=text.format(int(v))))
    ax.set_xscale("log", base=2)
    ticks = [int(2 ** i) for i in range(0, int(np.log2(b.max())) + 1)]
    ax.set_xticks(ticks)
    ax.set_xticklabels([str(t) for t in ticks])
    ax.set_xlim(1, b.max())
    ax.set_ylim(0, max(float(top) * 1.1, 1.3))
    ax.set_xlabel("running batch B (sequences)")
    ax.set_ylabel("speedup over plain decoding (×)")
    ax.set_title(title or "Speedup against the running batch", fontsize=10)
    ax.legend(fontsize=7.5, loc="upper right", framealpha=0.92)
    ax.grid(alpha=0.3)
    return artists


def speedup_vs_batch(ax, df: pd.DataFrame, *, line="k", threshold=None, title: str = "", on_from: int | None = None,
                     gate: tuple[int, str] | None = None):
    """Speedup against batch size, one line per value of `line` (K by default; for trees the best
    tree size at each K and B). The regression region (speedup < 1) is shaded, batches that do not
    fit in memory are drawn as ×, and the switch-off point is marked: `threshold` is a
    speculation.switch_off.SwitchOff (its label says what it assumes) or a batch size; without one,
    where the best line drops below 1 on the data. on_from: the batch from which speculation pays when it
    does not at batch 1 (a long context); gate: (batch, label) of a deployed gate chosen elsewhere (the
    serving simulation), drawn beside the analytic switch-off."""
    artists = []
    data = best_rows(df, [line, "batch_size"])
    for value, g in data.groupby(line, observed=True):
        artists += _line(ax, g["batch_size"], g["speedup"], _fits(g), label=f"{line} = {value}", marker="o", ms=3)
    best = data.groupby("batch_size")["speedup"].max()
    label = None
    if threshold is None:
        off = best.index[best.values < 1.0]
        threshold = int(off[0]) if len(off) else None
        label = "best K below 1 on this grid"
    elif not isinstance(threshold, (int, np.integer)):
        label = threshold.assumptions
        threshold = threshold.batch_off
    ymax = max(float(best.max()) * 1.08, 1.2)
    artists.append(ax.axhspan(0, 1.0, color=REGRESSION_COLOR, alpha=0.6, lw=0, label="regression (speedup < 1)"))
    artists.append(ax.axhline(1.0, color="k", lw=0.8))
    if threshold is not None and on_from is not None and threshold <= on_from:
        threshold = None  # a switch-off at or below where it starts paying says nothing more
    if on_from is not None:
        artists.append(ax.axvline(on_from, color="seagreen", ls="--", lw=1.2, label=f"pays from B ≥ {on_from}"))
    if gate is not None:
        artists.append(ax.axvline(gate[0], color="darkorange", ls="-.", lw=1.4, label=f"{gate[1]}: off at B ≥ {gate[0]}"))
    if threshold is not None:
        artists.append(ax.axvline(threshold, color="crimson", ls="--", lw=1.2,
                                  label=f"switch off at B ≥ {threshold}"))
        if label:
            artists.append(ax.text(0.01, 0.01, f"switch-off assumes: {label}", transform=ax.transAxes, fontsize=6,
                                   va="bottom", ha="left", color="crimson", wrap=True))
    _log2_axis(ax, data["batch_size"])
    ax.set_ylim(0, ymax)
    ax.set_xlabel("batch size B (sequences)")
    ax.set_ylabel("speedup over plain decoding (×)")
    ax.set_title(title or "Speedup against batch size")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), framealpha=0.9)  # beside, not over, the lines
    ax.grid(alpha=0.3)
    return artists


def _context_label(t: int) -> str:
    if t >= 1024 and t % 1024 == 0:
        return f"{t // 1024}k"
    if t >= 10000:
        return f"{t / 1000:.0f}k"
    return str(t)


def speedup_vs_context(ax, df: pd.DataFrame, *, line="attention", title: str = ""):
    """Speedup of the best K (or tree) against context length, one line per value of `line`
    (attention kernel by default: naive re-reads the cache per query token, fused reads it once);
    contexts whose cache does not fit in memory are drawn as ×."""
    artists = []
    data = best_rows(df, [line, "context_len"])
    for value, g in data.groupby(line, observed=True):
        artists += _line(ax, g["context_len"], g["speedup"], _fits(g), label=f"{line}: {value}", marker="o", ms=3)
    artists.append(ax.axhspan(0, 1.0, color=REGRESSION_COLOR, alpha=0.6, lw=0, label="regression"))
    artists.append(ax.axhline(1.0, color="k", lw=0.8))
    ax.set_xscale("log", base=2)
    ticks = sorted(set(int(v) for v in data["context_len"] if v > 0))
    if len(ticks) <= 12:
        ax.set_xticks(ticks)
        ax.set_xticklabels([_context_label(t) for t in ticks])
    ax.set_ylim(0, max(float(data["speedup"].max()) * 1.08, 1.2))
    ax.set_xlabel("context length L (tokens in the KV cache)")
    ax.set_ylabel("speedup of the best K (×)")
    ax.set_title(title or "Speedup against context length")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    return artists


def _colorbar_ticks(vmin: float, vmax: float) -> list[float]:
    """Ticks on both sides of 1 for a speedup colour bar centred at 1 (below 1: up to three evenly
    spaced values from the minimum; above: a nice locator's values)."""
    from matplotlib.ticker import MaxNLocator

    below = []
    if vmin < 0.995:
        below = sorted({float(np.ceil(v * 100) / 100) for v in np.linspace(vmin, 1.0, 4)[:-1]})
    above = [float(v) for v in MaxNLocator(nbins=5).tick_values(1.0, vmax) if 1.0 < v <= vmax]
    # a tick outside [vmin, vmax] has no place on a two-slope bar (matplotlib maps it to NaN)
    return [t for t in below if vmin <= t < 1.0] + [1.0] + above


def speedup_heatmap(ax, df: pd.DataFrame, *, title: str = ""):
    """Best speedup over (batch size, acceptance rate) with the speedup = 1 contour (named in the
    legend, off the line): the on/off boundary a production gate should follow. The colour bar is
    centred at 1 with ticks on both sides; cells whose batch does not fit in memory are hatched. A
    fine grid of B and α (the report's and the sweep's heatmap grid) draws a smooth contour."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    data = best_rows(df, ["batch_size", "alpha"])
    grid = data.pivot(index="alpha", columns="batch_size", values="speedup")
    bs = np.asarray(grid.columns, dtype=float)
    al = np.asarray(grid.index, dtype=float)
    z = grid.to_numpy()
    x = np.log2(bs)
    vmin, vmax = min(float(np.nanmin(z)), 0.99), max(float(np.nanmax(z)), 1.01)
    norm = matplotlib.colors.TwoSlopeNorm(vmin=vmin, vcenter=1.0, vmax=vmax)
    mesh = ax.pcolormesh(x, al, z, shading="nearest", cmap="RdYlGn", norm=norm)
    artists = [mesh]
    handles = []
    if np.nanmin(z) < 1.0 < np.nanmax(z) and len(bs) > 1 and len(al) > 1:
        cs = ax.contour(x, al, z, levels=[1.0], colors="k", linewidths=1.6)
        artists.append(cs)
        handles.append(Line2D([], [], color="k", lw=1.6, label="speedup = 1 (break-even)"))
    if "fits" in data and not data["fits"].all():
        nofit = data.pivot(index="alpha", columns="batch_size", values="fits").to_numpy(dtype=float) < 0.5
        if nofit.any() and len(bs) > 1 and len(al) > 1:
            artists.append(ax.contourf(x, al, nofit.astype(float), levels=[0.5, 1.5], colors="none", hatches=["xx"]))
            handles.append(Patch(facecolor="none", edgecolor="k", hatch="xx", label="does not fit in memory"))
    cbar = ax.figure.colorbar(mesh, ax=ax, label="best speedup (×)")
    ticks = _colorbar_ticks(vmin, vmax)
    cbar.set_ticks(ticks)
    cbar.set_ticklabels([f"{t:g}" for t in ticks])
    lo, hi = int(np.floor(x.min())), int(np.ceil(x.max()))
    ticks_x = [t for t in range(lo, hi + 1) if x.min() - 1e-9 <= t <= x.max() + 1e-9]
    if len(ticks_x) > 12:
        ticks_x = ticks_x[:: int(np.ceil(len(ticks_x) / 10))]
    ax.set_xticks(ticks_x)
    ax.set_xticklabels([f"{int(2 ** t)}" for t in ticks_x])
    ax.set_xlabel("batch size B (sequences, log scale)")
    ax.set_ylabel("acceptance rate α")
    ax.set_title(title or "Where speculation pays: best speedup over (B, α)")
    if handles:
        artists.append(ax.legend(handles=handles, fontsize=7, loc="lower left", framealpha=0.9))
    return artists


def speedup_vs_k(ax, df: pd.DataFrame, *, line="alpha", title: str = ""):
    """Speedup against draft length K, one line per acceptance rate (best tree size when trees)."""
    artists = []
    data = best_rows(df, [line, "k"])
    groups = list(data.groupby(line, observed=True))
    colors = plt.cm.viridis(np.linspace(0.0, 0.92, max(len(groups), 1)))
    for (value, g), color in zip(groups, colors):
        label = f"α = {value:.2f}" if line == "alpha" else f"{line} = {value}"
        artists += _line(ax, g["k"], g["speedup"], _fits(g), label=label, marker="o", ms=3, color=color)
    artists.append(ax.axhspan(0, 1.0, color=REGRESSION_COLOR, alpha=0.6, lw=0))
    artists.append(ax.axhline(1.0, color="k", lw=0.8))
    ax.set_ylim(0, max(float(data["speedup"].max()) * 1.08, 1.2))
    ax.set_xlabel("draft length K (tokens, or tree depth)")
    ax.set_ylabel("speedup over plain decoding (×)")
    ax.set_title(title or "Speedup against K")
    ax.legend(fontsize=7, ncol=2)
    ax.grid(alpha=0.3)
    return artists


def speedup_vs_tree_size(ax, df: pd.DataFrame, *, line="hardware", title: str = ""):
    """Speedup against tree size M (best depth at each M), one line per `line`, the best M of each
    line marked: where the verify pass leaves the bandwidth plateau, wider trees stop paying. A line
    whose configuration does not fit in memory is dashed with × markers and says so."""
    artists = []
    data = best_rows(df, [line, "tree_size"])
    for value, g in data.groupby(line, observed=True):
        fits = _fits(g)
        label = str(value)
        if not fits.any() and "memory_per_device_bytes" in g:
            label += f" (needs {g['memory_per_device_bytes'].min() / 1e9:.0f} GB a device)"
        lines = _line(ax, g["tree_size"], g["speedup"], fits, label=label, marker=".", ms=4)
        artists += lines
        i = g["speedup"].idxmax()
        artists.append(ax.plot([g.loc[i, "tree_size"]], [g.loc[i, "speedup"]], marker="*", ms=12,
                               color=lines[0].get_color(), mfc="none" if not fits.any() else None,
                               label=f"best M = {int(g.loc[i, 'tree_size'])}")[0])
    artists.append(ax.axhline(1.0, color="k", lw=0.8))
    _log2_axis(ax, data["tree_size"])
    ax.set_xlabel("tree size M (nodes verified per sequence, root included)")
    ax.set_ylabel("speedup over plain decoding (×)")
    ax.set_title(title or "Hardware-aware tree size")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    return artists


def _annotate_point(ax, text: str, xy, *, offset, color="k"):
    """A label a few points from its point, joined to it by a short line."""
    return ax.annotate(text, xy, xytext=offset, textcoords="offset points", fontsize=7, color=color,
                       ha="left" if offset[0] >= 0 else "right", va="center",
                       bbox=dict(boxstyle="round,pad=0.15", fc="white", ec="none", alpha=0.85),
                       arrowprops=dict(arrowstyle="-", lw=0.6, color=color, shrinkA=0, shrinkB=2))


def roofline_chart(ax, points: pd.DataFrame, *, drafter: pd.DataFrame | None = None, title: str = ""):
    """Operational intensity against attainable FLOP/s, with the target's verify pass over M = 1…64
    tokens marked (`sweep.verify_roofline_points`), one series per batch size, and, when given, the
    drafter's decode step per batch size (same columns, `tree_size` = 1). The first and last points of
    the first and last series are labelled right beside them."""
    peak = float(points["peak_flops_per_s"].iloc[0])
    bw = float(points["peak_bandwidth_bytes_per_s"].iloc[0])
    allpts = points if drafter is None else pd.concat([points, drafter], ignore_index=True)
    lo = min(allpts["intensity_flops_per_byte"].min() / 2, 0.5)
    hi = max(allpts["intensity_flops_per_byte"].max() * 2, peak / bw * 4)
    x = np.geomspace(lo, hi, 200)
    artists = [ax.plot(x, np.minimum(peak, bw * x) / 1e12, color="k", lw=1.5, label="roofline")[0]]
    artists.append(ax.axvline(peak / bw, color="grey", ls=":", lw=1, label=f"ridge {peak / bw:.0f} FLOP/B"))
    groups = list(points.groupby("batch_size"))
    for i, (b, g) in enumerate(groups):
        sc = ax.scatter(g["intensity_flops_per_byte"], g["attained_flops_per_s"] / 1e12, s=12, marker="os^D"[i % 4],
                        label=f"target verify, B = {b}, M = 1…{int(g['tree_size'].max())}", zorder=3)
        artists.append(sc)
        if i in (0, len(groups) - 1):
            color = sc.get_facecolor()[0]
            for m in (int(g["tree_size"].min()), int(g["tree_size"].max())):
                row = g[g["tree_size"] == m].iloc[0]
                xy = (row["intensity_flops_per_byte"], row["attained_flops_per_s"] / 1e12)
                on_roof = row["intensity_flops_per_byte"] >= peak / bw
                offset = (-10, -14) if on_roof else (10, -10)
                artists.append(_annotate_point(ax, f"B={b}, M={m}", xy, offset=offset, color=color))
    if drafter is not None and len(drafter):
        sc = ax.scatter(drafter["intensity_flops_per_byte"], drafter["attained_flops_per_s"] / 1e12, s=22, marker="v",
                        facecolors="none", edgecolors="purple", zorder=3,
                        label=f"drafter {drafter['target'].iloc[0]} decode step, B = "
                              f"{int(drafter['batch_size'].min())}…{int(drafter['batch_size'].max())}")
        artists.append(sc)
        for _, row in drafter.iloc[[0, -1]].iterrows():
            xy = (row["intensity_flops_per_byte"], row["attained_flops_per_s"] / 1e12)
            artists.append(_annotate_point(ax, f"drafter B={int(row['batch_size'])}", xy, offset=(-10, 10),
                                           color="purple"))
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("operational intensity (FLOP / byte)")
    ax.set_ylabel("attained (TFLOP/s)")
    ax.set_title(title or "Roofline: the verify pass over M tokens")
    ax.legend(fontsize=7, loc="lower right")
    ax.grid(alpha=0.3, which="both")
    return artists


def verify_cost_vs_tokens(ax, points: pd.DataFrame, *, title: str = "", measured: pd.DataFrame | None = None):
    """Verify-pass time over the one-token step against tokens in flight B·M, with the ops:byte
    ratio marked: the cost stays near 1 until B·M passes it (seed article). `measured`
    (`sweep.measured_verify_points`): one layer's operators as measured on the part, and specsim's
    charge for the same operators, over the one-token time."""
    artists = []
    for b, g in points.groupby("batch_size"):
        (ln,) = ax.plot(g["tokens_in_flight"], g["time_vs_one_token"], marker=".", label=f"B = {int(b)}")
        artists.append(ln)
    if measured is not None and len(measured):
        top = float(points["tokens_in_flight"].max())
        m = measured[measured["tokens_in_flight"] <= top]
        who = f"{m['vidur_model'].iloc[0]}, tp {int(m['tp'].iloc[0])}"
        meas, model = m[m["series"] == "measured"], m[m["series"] == "specsim"]
        (ln,) = ax.plot(meas["tokens_in_flight"], meas["time_vs_one_token"], "ks", ms=4, mfc="none",
                        label=f"measured: one layer's projections, norms, activation (Vidur, {who})")
        artists.append(ln)
        (ln,) = ax.plot(model["tokens_in_flight"], model["time_vs_one_token"], "k--", lw=1.2,
                        label="specsim: the same operators")
        artists.append(ln)
    ridge = float(points["ridge_flops_per_byte"].iloc[0])
    tokens = float(points["ridge_tokens_in_flight"].iloc[0])
    artists.append(ax.axvline(tokens, color="crimson", ls="--",
                              label=f"ops:byte {ridge:.0f} FLOP/B → compute bound at B·M ≈ {tokens:.0f}"))
    artists.append(ax.axhline(1.0, color="k", lw=0.8))
    ax.set_xscale("log", base=2)
    ax.set_xlabel("tokens in flight B·M")
    ax.set_ylabel("verify time / one-token step time")
    ax.set_title(title or "Verify cost against B·M")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    return artists


def new_figure(name: str, draw, *, size=(7, 4.5)):
    """A new figure of `size` inches with one axis, drawn by draw(ax); `name` labels it for a reader
    of a traceback."""
    fig, ax = plt.subplots(figsize=size)
    try:
        draw(ax)
    except Exception:
        plt.close(fig)
        raise
    fig.set_label(name)
    return fig


def save_figure(fig, path_without_suffix) -> list[Path]:
    """Save as PNG and SVG: `path_without_suffix` is a Path, or (OutputDir, name) to stage the files."""
    if isinstance(path_without_suffix, tuple):
        out, name = path_without_suffix
        paths = []
        for suffix in (".png", ".svg"):
            fig.savefig(out.file(name + suffix), dpi=130 if suffix == ".png" else None, bbox_inches="tight")
            paths.append(out.path / (name + suffix))
        plt.close(fig)
        return paths
    return _save_paths(fig, path_without_suffix)


def _save_paths(fig, path_without_suffix) -> list[Path]:
    """Write `<path>.png` (150 dpi) and `<path>.svg`; close the figure; return both paths."""
    base = Path(path_without_suffix)
    base.parent.mkdir(parents=True, exist_ok=True)
    out = [base.with_suffix(".png"), base.with_suffix(".svg")]
    fig.savefig(out[0], dpi=150, bbox_inches="tight")
    fig.savefig(out[1], bbox_inches="tight")
    plt.close(fig)
    return out


def png_bytes(fig, *, dpi: int = 96) -> bytes:
    """The figure as a compact PNG (a 256-colour palette, which plots lose nothing to); closes it."""
    import io

    from PIL import Image

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight")
    plt.close(fig)
    buf.seek(0)
    img = Image.open(buf).convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT)
    out = io.BytesIO()
    img.save(out, format="PNG", optimize=True)
    return out.getvalue()


__all__ = ["verdict_curve", "speedup_vs_batch", "speedup_vs_context", "speedup_heatmap", "speedup_vs_k",
           "speedup_vs_tree_size", "roofline_chart", "verify_cost_vs_tokens", "new_figure", "save_figure", "png_bytes"]
