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


def speedup_vs_batch(ax, df: pd.DataFrame, *, line="k", threshold=None, title: str = ""):
    """Speedup against batch size, one line per value of `line` (K by default; for trees the best
    tree size at each K and B). The regression region (speedup < 1) is shaded, and the switch-off
    point is marked: `threshold` is a speculation.switch_off.SwitchOff (its label says what it
    assumes) or a batch size; without one, where the best line drops below 1 on the data."""
    artists = []
    data = _best(df, [line, "batch_size"])
    for value, g in data.groupby(line, observed=True):
        (ln,) = ax.plot(g["batch_size"], g["speedup"], marker="o", ms=3, label=f"{line} = {value}")
        artists.append(ln)
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
    ax.legend(fontsize=7, ncol=2, loc="upper right", framealpha=0.9)
    ax.grid(alpha=0.3)
    return artists


def speedup_vs_context(ax, df: pd.DataFrame, *, line="attention", title: str = ""):
    """Speedup of the best K (or tree) against context length, one line per value of `line`
    (attention kernel by default: naive re-reads the cache per query token, fused reads it once)."""
    artists = []
    data = _best(df, [line, "context_len"])
    for value, g in data.groupby(line, observed=True):
        (ln,) = ax.plot(g["context_len"], g["speedup"], marker="o", ms=3, label=f"{line}: {value}")
        artists.append(ln)
    artists.append(ax.axhspan(0, 1.0, color=REGRESSION_COLOR, alpha=0.6, lw=0, label="regression"))
    artists.append(ax.axhline(1.0, color="k", lw=0.8))
    ax.set_xscale("log", base=2)
    ticks = sorted(set(int(v) for v in data["context_len"] if v > 0))
    if len(ticks) <= 12:
        ax.set_xticks(ticks)
        ax.set_xticklabels([f"{t // 1024}k" if t >= 1024 and t % 1024 == 0 else str(t) for t in ticks])
    ax.set_ylim(0, max(float(data["speedup"].max()) * 1.08, 1.2))
    ax.set_xlabel("context length L (tokens in the KV cache)")
    ax.set_ylabel("speedup of the best K (×)")
    ax.set_title(title or "Speedup against context length")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    return artists


def speedup_heatmap(ax, df: pd.DataFrame, *, title: str = ""):
    """Best speedup over (batch size, acceptance rate) with the speedup = 1 contour: the on/off
    boundary a production gate should follow."""
    data = _best(df, ["batch_size", "alpha"])
    grid = data.pivot(index="alpha", columns="batch_size", values="speedup")
    bs = np.asarray(grid.columns, dtype=float)
    al = np.asarray(grid.index, dtype=float)
    z = grid.to_numpy()
    x = np.log2(bs)
    mesh = ax.pcolormesh(x, al, z, shading="nearest", cmap="RdYlGn",
                         norm=matplotlib.colors.TwoSlopeNorm(vmin=min(z.min(), 0.99), vcenter=1.0,
                                                             vmax=max(z.max(), 1.01)))
    artists = [mesh]
    if z.min() < 1.0 < z.max() and len(bs) > 1 and len(al) > 1:
        cs = ax.contour(x, al, z, levels=[1.0], colors="k", linewidths=1.5)
        ax.clabel(cs, fmt={1.0: "speedup = 1"}, fontsize=7)
        artists.append(cs)
    ax.figure.colorbar(mesh, ax=ax, label="best speedup (×)")
    ticks = x if len(x) <= 12 else x[:: max(1, len(x) // 10)]
    ax.set_xticks(ticks)
    ax.set_xticklabels([f"{int(2 ** t)}" for t in ticks])
    ax.set_xlabel("batch size B (sequences, log scale)")
    ax.set_ylabel("acceptance rate α")
    ax.set_title(title or "Where speculation pays: best speedup over (B, α)")
    return artists


def speedup_vs_k(ax, df: pd.DataFrame, *, line="alpha", title: str = ""):
    """Speedup against draft length K, one line per acceptance rate (best tree size when trees)."""
    artists = []
    data = _best(df, [line, "k"])
    groups = list(data.groupby(line, observed=True))
    colors = plt.cm.viridis(np.linspace(0.0, 0.92, max(len(groups), 1)))
    for (value, g), color in zip(groups, colors):
        label = f"α = {value:.2f}" if line == "alpha" else f"{line} = {value}"
        (ln,) = ax.plot(g["k"], g["speedup"], marker="o", ms=3, label=label, color=color)
        artists.append(ln)
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
    line marked: where the verify pass leaves the bandwidth plateau, wider trees stop paying."""
    artists = []
    data = _best(df, [line, "tree_size"])
    for value, g in data.groupby(line, observed=True):
        (ln,) = ax.plot(g["tree_size"], g["speedup"], marker=".", ms=4, label=str(value))
        i = g["speedup"].idxmax()
        artists.append(ln)
        artists.append(ax.plot([g.loc[i, "tree_size"]], [g.loc[i, "speedup"]], marker="*", ms=12,
                               color=ln.get_color(), label=f"best M = {int(g.loc[i, 'tree_size'])}")[0])
    artists.append(ax.axhline(1.0, color="k", lw=0.8))
    ax.set_xscale("log", base=2)
    ax.set_xlabel("tree size M (nodes verified per sequence, root included)")
    ax.set_ylabel("speedup over plain decoding (×)")
    ax.set_title(title or "Hardware-aware tree size")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    return artists


def roofline_chart(ax, points: pd.DataFrame, *, title: str = ""):
    """Operational intensity against attainable FLOP/s, with the verify pass over M = 1…64 tokens
    marked (`sweep.verify_roofline_points`), one series per batch size."""
    peak = float(points["peak_flops_per_s"].iloc[0])
    bw = float(points["peak_bandwidth_bytes_per_s"].iloc[0])
    lo = min(points["intensity_flops_per_byte"].min() / 2, 0.5)
    hi = max(points["intensity_flops_per_byte"].max() * 2, peak / bw * 4)
    x = np.geomspace(lo, hi, 200)
    artists = [ax.plot(x, np.minimum(peak, bw * x) / 1e12, color="k", lw=1.5, label="roofline")[0]]
    artists.append(ax.axvline(peak / bw, color="grey", ls=":", lw=1, label=f"ridge {peak / bw:.0f} FLOP/B"))
    groups = list(points.groupby("batch_size"))
    for i, (b, g) in enumerate(groups):
        sc = ax.scatter(g["intensity_flops_per_byte"], g["attained_flops_per_s"] / 1e12, s=12, marker="os^D"[i % 4],
                        label=f"verify pass, B = {b}, M = 1…{int(g['tree_size'].max())}", zorder=3)
        artists.append(sc)
        if i in (0, len(groups) - 1):  # label the ends of the first and last series
            for m in (int(g["tree_size"].min()), int(g["tree_size"].max())):
                row = g[g["tree_size"] == m]
                artists.append(ax.annotate(f"B={b}, M={m}", (row["intensity_flops_per_byte"].iloc[0],
                                                             row["attained_flops_per_s"].iloc[0] / 1e12),
                                           fontsize=7, xytext=(4, -12) if i == 0 else (-60, 8),
                                           textcoords="offset points"))
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("operational intensity (FLOP / byte)")
    ax.set_ylabel("attained (TFLOP/s)")
    ax.set_title(title or "Roofline: the verify pass over M tokens")
    ax.legend(fontsize=7, loc="lower right")
    ax.grid(alpha=0.3, which="both")
    return artists


def verify_cost_vs_tokens(ax, points: pd.DataFrame, *, title: str = ""):
    """Verify-pass time over the one-token step against tokens in flight B·M, with the ops:byte
    ratio marked: the cost stays near 1 until B·M passes it (seed article)."""
    artists = []
    for b, g in points.groupby("batch_size"):
        (ln,) = ax.plot(g["tokens_in_flight"], g["time_vs_one_token"], marker=".", label=f"B = {b}")
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


def _nearest(values, wanted):
    values = np.asarray(sorted(set(values)))
    return values[np.argmin(np.abs(values - wanted))]


def sweep_figures(df: pd.DataFrame, out_dir, *, reference: dict, roofline: pd.DataFrame | None = None,
                  which=("all",), switch_off=None, progress=None) -> list[Path]:
    """The standard figures of a sweep, written as PNG + SVG into out_dir (a Path, or an OutputDir).

    reference: the operating point the slices go through (keys hardware, target, method, stack,
    attention, batch_size, context_len, alpha); the nearest grid value is used for numeric keys.
    switch_off: the operating point's recommended SwitchOff, marked on the batch plot with what it
    assumes. progress(name) is called as each figure is done."""
    want = set(which)
    ok = lambda name: "all" in want or name in want  # noqa: E731
    out: list[Path] = []

    def emit(fig, name: str) -> list[Path]:
        paths = save_figure(fig, (out_dir, name) if hasattr(out_dir, "file") else Path(out_dir) / name)
        if progress is not None:
            progress(name)
        return paths

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
        fig, ax = plt.subplots(figsize=(7, 4.5))
        speedup_vs_batch(ax, chains[(chains["context_len"] == l0) & (chains["alpha"] == a0)], threshold=switch_off,
                         title=f"Speedup vs batch size — {label}\nL = {l0}, α = {a0:.2f}")
        out += emit(fig, "speedup_vs_batch")
    if ok("speedup_vs_context") and on_hw["context_len"].nunique() > 1:
        fig, ax = plt.subplots(figsize=(7, 4.5))
        ch = on_hw[~on_hw["is_tree"]] if (~on_hw["is_tree"]).any() else on_hw
        sub = ch[(ch["batch_size"] == b0) & (ch["alpha"] == a0)]
        speedup_vs_context(ax, sub, title=f"Speedup vs context — {label}\nB = {b0}, α = {a0:.2f}, best K per point")
        out += emit(fig, "speedup_vs_context")
    if ok("heatmap") and on["batch_size"].nunique() > 1 and on["alpha"].nunique() > 1:
        fig, ax = plt.subplots(figsize=(7, 4.5))
        speedup_heatmap(ax, chains[chains["context_len"] == l0],
                        title=f"Best speedup over (B, α) — {label}, best K\nL = {l0}")
        out += emit(fig, "heatmap_batch_alpha")
    if ok("speedup_vs_k") and on["k"].nunique() > 1:
        fig, ax = plt.subplots(figsize=(7, 4.5))
        speedup_vs_k(ax, chains[(chains["batch_size"] == b0) & (chains["context_len"] == l0)],
                     title=f"Speedup vs K — {label}\nB = {b0}, L = {l0}")
        out += emit(fig, "speedup_vs_k")
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
        fig, ax = plt.subplots(figsize=(7, 4.5))
        speedup_vs_tree_size(ax, sub, line=tree_line, title=f"Speedup vs tree size — {sub['target'].iloc[0]}, "
                                            f"{sub['method'].iloc[0]}\nB = {b0}, L = {l0}, α = {a0:.2f}, best depth per M")
        out += emit(fig, "speedup_vs_tree_size")
    if roofline is not None and ok("roofline"):
        fig, ax = plt.subplots(figsize=(7, 4.5))
        roofline_chart(ax, roofline, title=f"Roofline — verify pass of {roofline['target'].iloc[0]} on "
                                           f"{roofline['hardware'].iloc[0]}")
        out += emit(fig, "roofline")
        fig, ax = plt.subplots(figsize=(7, 4.5))
        verify_cost_vs_tokens(ax, roofline, title=f"Verify cost vs B·M — {roofline['target'].iloc[0]} on "
                                                  f"{roofline['hardware'].iloc[0]}")
        out += emit(fig, "verify_cost")
    return out


__all__ = ["speedup_vs_batch", "speedup_vs_context", "speedup_heatmap", "speedup_vs_k", "speedup_vs_tree_size",
           "roofline_chart", "verify_cost_vs_tokens", "save_figure", "sweep_figures"]
