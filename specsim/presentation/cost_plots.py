"""Plots of the step-cost model against measurement (matplotlib stays in presentation/).

Each function takes `(ax, df, ...)`, draws, returns the artists it made and never calls `show`.
`df` is the per-configuration table of an operator fit (`OperatorFit.sums`: gpu, model, tp,
n_tokens, split, measured_s, before_s, after_s); nothing is computed here but ratios for display.
`operator_fit_figure` lays out one row per GPU.
"""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")  # files only; never a window
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402


def _colors(models) -> dict:
    cmap = plt.get_cmap("tab10")
    return {m: cmap(i % 10) for i, m in enumerate(sorted(models))}


def measured_vs_predicted(ax, df: pd.DataFrame, *, title: str = ""):
    """Predicted against measured layer time (all operators of one layer summed), log-log, one
    colour per model; held-out models as filled dots, training models as open ones; the 1:1 line
    and ±8 % band."""
    artists = []
    colors = _colors(df["model"].unique())
    lo = float(min(df["measured_s"].min(), df["after_s"].min())) * 1e3
    hi = float(max(df["measured_s"].max(), df["after_s"].max())) * 1e3
    x = np.geomspace(lo, hi, 50)
    artists.append(ax.plot(x, x, color="k", lw=0.8)[0])
    artists.append(ax.fill_between(x, x / 1.08, x * 1.08, color="0.85", label="±8 %"))
    for (model, split), g in df.groupby(["model", "split"], sort=True):
        held = split == "held-out"
        artists.append(ax.scatter(g["measured_s"] * 1e3, g["after_s"] * 1e3, s=5, alpha=0.6,
                                  facecolors=colors[model] if held else "none", edgecolors=colors[model], linewidths=0.5,
                                  label=f"{model} ({split})"))
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("measured layer time (ms)")
    ax.set_ylabel("predicted layer time (ms)")
    ax.set_title(title or "Layer operator sum: predicted vs measured")
    ax.legend(fontsize=6, markerscale=2)
    ax.grid(alpha=0.3, which="both")
    return artists


def time_vs_tokens(ax, df: pd.DataFrame, *, tp: int = 1, models=None, title: str = ""):
    """Layer time against tokens in the step at one tensor-parallel degree: measured (dots), the
    fitted kernel curve (line) and the pure roofline (dashed), one colour per model."""
    artists = []
    d = df[df["tp"] == tp]
    if models is not None:
        d = d[d["model"].isin(list(models))]
    colors = _colors(d["model"].unique())
    for model, g in d.groupby("model", sort=True):
        g = g.sort_values("n_tokens")
        c = colors[model]
        artists.append(ax.plot(g["n_tokens"], g["measured_s"] * 1e3, ".", ms=3, color=c, label=f"{model} measured")[0])
        artists.append(ax.plot(g["n_tokens"], g["after_s"] * 1e3, "-", lw=1.2, color=c, label=f"{model} fitted curve")[0])
        artists.append(ax.plot(g["n_tokens"], g["before_s"] * 1e3, "--", lw=0.8, color=c, alpha=0.7,
                               label=f"{model} roofline")[0])
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("tokens in the step")
    ax.set_ylabel("layer time (ms)")
    ax.set_title(title or f"Layer time against tokens, tp = {tp}")
    ax.legend(fontsize=6)
    ax.grid(alpha=0.3, which="both")
    return artists


def operator_fit_figure(sums: pd.DataFrame, *, tp: int = 1):
    """One row per GPU in `sums`: predicted vs measured, and time against tokens for the held-out
    models at `tp`. Returns the figure (the caller saves it)."""
    gpus = sorted(sums["gpu"].unique())
    fig, axes = plt.subplots(len(gpus), 2, figsize=(12, 5 * len(gpus)), squeeze=False)
    for row, gpu in zip(axes, gpus):
        d = sums[sums["gpu"] == gpu]
        measured_vs_predicted(row[0], d, title=f"{gpu.upper()}: layer operator sum, every model, tp and token count")
        held = sorted(d.loc[d["split"] == "held-out", "model"].unique()) or sorted(d["model"].unique())
        time_vs_tokens(row[1], d, tp=tp, models=held, title=f"{gpu.upper()}: held-out models, tp = {tp}")
    fig.tight_layout()
    return fig


def close(fig) -> None:
    plt.close(fig)
