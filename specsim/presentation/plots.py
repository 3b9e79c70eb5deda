"""Plots of sweep results (matplotlib lives here and nowhere else in the library).

Every function takes `(ax, df, ...)`, draws on `ax`, returns the artists it made, and never calls
`show`. They select and group rows of a tidy sweep DataFrame (`specsim.sweep.COLUMNS`) and draw;
the numbers come from the sweep. `sweep_figures` makes the standard set for a sweep and writes PNG
and SVG files.
"""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only; never a window
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

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


def _best(df: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    """Rows with the highest speedup within each group of `by` (the best K / tree size there)."""
    idx = df.groupby(by, observed=True)["speedup"].idxmax()
    return df.loc[idx.values].sort_values(by)


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
    data = _best(df, [line, "batch_size"])
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
    data = _best(df, [line, "context_len"])
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

    data = _best(df, ["batch_size", "alpha"])
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
    data = _best(df, [line, "k"])
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
    data = _best(df, [line, "tree_size"])
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


def _nearest(values, wanted):
    values = np.asarray(sorted(set(values)))
    return values[np.argmin(np.abs(values - wanted))]


FIGURES = ("speedup_vs_batch", "speedup_vs_context", "heatmap_batch_alpha", "speedup_vs_k", "speedup_vs_tree_size",
           "roofline", "verify_cost")


def figure_data(df: pd.DataFrame, *, reference: dict, roofline: pd.DataFrame | None = None,
                drafter_roofline: pd.DataFrame | None = None, heatmap: pd.DataFrame | None = None,
                which=("all",), measured_verify: pd.DataFrame | None = None) -> dict:
    """The rows each standard figure draws, by figure name: {name: (DataFrame, title)}.

    reference: the operating point the slices go through (keys hardware, target, method, stack,
    attention, batch_size, context_len, alpha); the nearest grid value is used for numeric keys.
    heatmap: a finer (B, α) grid for the heatmap (same columns as the sweep), else the sweep's.
    measured_verify: the measured layer curve for the verify-cost chart (sweep.measured_verify_points),
    drawn beside the model and written with its rows (column `series`: model, measured, specsim).
    The report writes each DataFrame as the CSV behind its figure; `draw` draws one."""
    want = set(which)
    ok = lambda name: "all" in want or name in want  # noqa: E731
    out: dict = {}
    base = df
    for key in ("target", "method", "stack"):
        if key in reference and reference[key] is not None and (df[key] == reference[key]).any():
            base = base[base[key] == reference[key]]
    hw0 = reference.get("hardware")
    on_hw = base[base["hardware"] == hw0] if hw0 is not None and (base["hardware"] == hw0).any() else base
    attn = reference.get("attention", "fused")
    on = on_hw[on_hw["attention"] == attn] if (on_hw["attention"] == attn).any() else on_hw
    b0 = _nearest(on["batch_size"], reference.get("batch_size", 1))
    l0 = _nearest(on["context_len"], reference.get("context_len", 0))
    a0 = _nearest(on["alpha"], reference.get("alpha", 0.8))
    chains = on[~on["is_tree"]] if (~on["is_tree"]).any() else on  # one line per K: linear drafts
    label = f"{on['target'].iloc[0]} on {on['hardware'].iloc[0]}, {on['method'].iloc[0]}"
    if on["drafter"].iloc[0] and not str(on["drafter"].iloc[0]).startswith("("):
        label += f" ({on['drafter'].iloc[0]})"

    if ok("speedup_vs_batch") and on["batch_size"].nunique() > 1:
        out["speedup_vs_batch"] = (chains[(chains["context_len"] == l0) & (chains["alpha"] == a0)],
                                   f"Speedup vs batch size — {label}\nL = {l0}, α = {a0:.2f}")
    if ok("speedup_vs_context") and on_hw["context_len"].nunique() > 1:
        ch = on_hw[~on_hw["is_tree"]] if (~on_hw["is_tree"]).any() else on_hw
        out["speedup_vs_context"] = (ch[(ch["batch_size"] == b0) & (ch["alpha"] == a0)],
                                     f"Speedup vs context — {label}\nB = {b0}, α = {a0:.2f}, best K per point")
    hm = heatmap if heatmap is not None and len(heatmap) else chains[chains["context_len"] == l0]
    if len(hm):
        hm = _best(hm, ["batch_size", "alpha"])  # what the heatmap draws: the best K in each cell
    if ok("heatmap_batch_alpha") and hm["batch_size"].nunique() > 1 and hm["alpha"].nunique() > 1:
        lh = int(hm["context_len"].iloc[0])
        out["heatmap_batch_alpha"] = (hm, f"Best speedup over (B, α) — {label}, best K\nL = {lh}")
    if ok("speedup_vs_k") and on["k"].nunique() > 1:
        out["speedup_vs_k"] = (chains[(chains["batch_size"] == b0) & (chains["context_len"] == l0)],
                               f"Speedup vs K — {label}\nB = {b0}, L = {l0}")
    trees = df[df["is_tree"]]
    for key in ("target", "method"):
        if key in reference and (trees[key] == reference[key]).any():
            trees = trees[trees[key] == reference[key]]
    tree_line = "hardware" if trees["hardware"].nunique() > 1 or trees["stack"].nunique() < 2 else "stack"
    if tree_line == "stack":
        trees = trees.assign(stack=trees["stack"].astype(str).replace({"": "idealised part (no stack)"}))
    if ok("speedup_vs_tree_size") and len(trees) and trees["tree_size"].nunique() > 1:
        attn_t = trees[trees["attention"] == attn] if (trees["attention"] == attn).any() else trees
        sub = attn_t[(attn_t["batch_size"] == _nearest(attn_t["batch_size"], b0))
                     & (attn_t["context_len"] == _nearest(attn_t["context_len"], l0))
                     & (attn_t["alpha"] == _nearest(attn_t["alpha"], a0))]
        out["speedup_vs_tree_size"] = (sub.assign(line=tree_line),
                                       f"Speedup vs tree size — {sub['target'].iloc[0]}, {sub['method'].iloc[0]}\n"
                                       f"B = {b0}, L = {l0}, α = {a0:.2f}, best depth per M")
    if roofline is not None and ok("roofline"):
        roof = roofline.assign(model="target")
        if drafter_roofline is not None and len(drafter_roofline):
            roof = pd.concat([roof, drafter_roofline.assign(model="drafter")], ignore_index=True)
        who = f"{roofline['target'].iloc[0]}" + (f" and drafter {drafter_roofline['target'].iloc[0]}"
                                                  if drafter_roofline is not None and len(drafter_roofline) else "")
        out["roofline"] = (roof, f"Roofline — {who} on {roofline['hardware'].iloc[0]}")
    if roofline is not None and ok("verify_cost"):
        verify = roofline.assign(series="model")
        if measured_verify is not None and len(measured_verify):
            verify = pd.concat([verify, measured_verify], ignore_index=True)
        out["verify_cost"] = (verify, f"Verify cost vs B·M — {roofline['target'].iloc[0]} on "
                                      f"{roofline['hardware'].iloc[0]}")
    return out


def draw(name: str, data: pd.DataFrame, *, title: str = "", switch_off=None, size=(7, 4.5), on_from: int | None = None,
         gate: tuple[int, str] | None = None):
    """A new figure of the standard figure `name` (FIGURES) drawn from `data` (figure_data's rows);
    switch_off, on_from and gate go to the batch plot (see speedup_vs_batch)."""
    fig, ax = plt.subplots(figsize=(size[0] + 2.0, size[1]) if name == "speedup_vs_batch" else size)
    if name == "speedup_vs_batch":
        speedup_vs_batch(ax, data, threshold=switch_off, title=title, on_from=on_from, gate=gate)
    elif name == "speedup_vs_context":
        speedup_vs_context(ax, data, title=title)
    elif name == "heatmap_batch_alpha":
        speedup_heatmap(ax, data, title=title)
    elif name == "speedup_vs_k":
        speedup_vs_k(ax, data, title=title)
    elif name == "speedup_vs_tree_size":
        line = str(data["line"].iloc[0]) if "line" in data else "hardware"
        speedup_vs_tree_size(ax, data, line=line, title=title)
    elif name == "roofline":
        target = data[data["model"] == "target"] if "model" in data else data
        drafter = data[data["model"] == "drafter"] if "model" in data else None
        roofline_chart(ax, target, drafter=drafter if drafter is not None and len(drafter) else None, title=title)
    elif name == "verify_cost":
        if "series" in data:
            model = data[data["series"] == "model"]
            verify_cost_vs_tokens(ax, model, title=title, measured=data[data["series"] != "model"])
        else:
            verify_cost_vs_tokens(ax, data, title=title)
    else:
        plt.close(fig)
        raise ValueError(f"unknown figure {name!r}; expected one of {', '.join(FIGURES)}")
    return fig


def sweep_figures(df: pd.DataFrame, out_dir, *, reference: dict, roofline: pd.DataFrame | None = None,
                  which=("all",), switch_off=None, progress=None, heatmap: pd.DataFrame | None = None,
                  drafter_roofline: pd.DataFrame | None = None,
                  measured_verify: pd.DataFrame | None = None) -> list[Path]:
    """The standard figures of a sweep, written as PNG + SVG into out_dir (a Path, or an OutputDir).

    reference: the operating point the slices go through (see figure_data). switch_off: the
    operating point's recommended SwitchOff, marked on the batch plot with what it assumes.
    heatmap: a finer (B, α) grid for the heatmap. progress(name) is called as each figure is done."""
    out: list[Path] = []
    for name, (data, title) in figure_data(df, reference=reference, roofline=roofline, heatmap=heatmap,
                                           drafter_roofline=drafter_roofline, which=which,
                                           measured_verify=measured_verify).items():
        fig = draw(name, data, title=title, switch_off=switch_off)
        out += save_figure(fig, (out_dir, name) if hasattr(out_dir, "file") else Path(out_dir) / name)
        if progress is not None:
            progress(name)
    return out


__all__ = ["speedup_vs_batch", "speedup_vs_context", "speedup_heatmap", "speedup_vs_k", "speedup_vs_tree_size",
           "roofline_chart", "verify_cost_vs_tokens", "save_figure", "sweep_figures", "figure_data", "draw",
           "png_bytes", "FIGURES"]
