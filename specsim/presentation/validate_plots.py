"""Plots of `specsim validate`: the prediction against the reference decoder's measurement.

Each function takes `(ax, df, ...)`, draws, returns the artists it made and never calls `show`;
`validate_figure` lays out the panels of the parts that were run. Nothing is computed here but units
for display.
"""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")  # files only; never a window
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402


def verify_panel(ax, df: pd.DataFrame):
    """Verify step time against M, one colour per context: the prediction as a line, the measured
    median as dots with the min–max range as error bars."""
    artists = []
    cmap = plt.get_cmap("viridis")
    ctxs = sorted(df["context_len"].unique())
    for i, ctx in enumerate(ctxs):
        g = df[df["context_len"] == ctx].sort_values("m")
        c = cmap(i / max(1, len(ctxs) - 1) * 0.85)
        artists += ax.plot(g["m"], g["predicted_s"] * 1e3, color=c, lw=1.5, label=f"L = {ctx} predicted")
        err = np.vstack([(g["measured_s"] - g["measured_min_s"]) * 1e3, (g["measured_max_s"] - g["measured_s"]) * 1e3])
        artists.append(ax.errorbar(g["m"], g["measured_s"] * 1e3, yerr=err, fmt="o", ms=4, color=c, capsize=2,
                                   label=f"L = {ctx} measured"))
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("query tokens in the pass, M")
    ax.set_ylabel("verify pass (ms)")
    ax.set_title("verify step time")
    ax.legend(fontsize=6, ncol=2)
    return artists


def spec_panel(ax, df: pd.DataFrame):
    """Speculative tokens/s per (drafter, K, workload): predicted bar with the calibration's band,
    measured median with its range."""
    artists = []
    d = df.dropna(subset=["predicted_tokens_per_s"]) if "predicted_tokens_per_s" in df else df.iloc[0:0]
    labels = [f"{r.drafter}{'' if pd.isna(r.layers) else f'-{int(r.layers)}'}\nK={r.k} {r.workload}" for r in d.itertuples()]
    x = np.arange(len(d))
    if len(d):
        lo = d["predicted_tokens_per_s"] - d.get("predicted_tokens_per_s_low", d["predicted_tokens_per_s"])
        hi = d.get("predicted_tokens_per_s_high", d["predicted_tokens_per_s"]) - d["predicted_tokens_per_s"]
        artists.append(ax.bar(x - 0.2, d["predicted_tokens_per_s"], width=0.4, color="tab:blue", alpha=0.6,
                              yerr=np.vstack([lo, hi]), capsize=2, label="predicted [calibration band]"))
        err = np.vstack([d["measured_tokens_per_s"] - d["measured_tokens_per_s_min"],
                         d["measured_tokens_per_s_max"] - d["measured_tokens_per_s"]])
        artists.append(ax.bar(x + 0.2, d["measured_tokens_per_s"], width=0.4, color="tab:orange", alpha=0.8,
                              yerr=err, capsize=2, label="measured median [min–max]"))
        artists.append(ax.scatter(x, d["measured_plain_tokens_per_s"], marker="_", s=200, color="k",
                                  label="plain decoding (measured)"))
    ax.set_xticks(x, labels, fontsize=6, rotation=45, ha="right")
    ax.set_ylabel("tokens/s")
    ax.set_title("speculative decoding")
    ax.legend(fontsize=6)
    return artists


def break_even_panel(ax, spec: pd.DataFrame):
    """Measured speedup against the run's measured acceptance, one marker per drafter; speedup 1 and
    the seed's 50–60 % band."""
    artists = [ax.axhline(1.0, color="k", lw=0.8), ax.axvspan(0.5, 0.6, color="0.85", label="seed: 50–60 %")]
    d = spec.dropna(subset=["alpha_measured"]) if "alpha_measured" in spec else spec.iloc[0:0]
    for i, (key, g) in enumerate(d.groupby(["drafter", d["layers"].fillna(0).astype(int), "k"])):
        name = f"{key[0]}{'' if not key[1] else f'-{key[1]}'} K={key[2]}"
        artists.append(ax.scatter(g["alpha_measured"], g["measured_speedup"], s=18, label=name,
                                  marker="os^vD<>"[i % 7]))
        if "predicted_speedup" in g:
            artists.append(ax.scatter(g["alpha_measured"], g["predicted_speedup"], s=18, facecolors="none",
                                      edgecolors="0.3", marker="os^vD<>"[i % 7]))
    ax.set_xlim(0, 1)
    ax.set_xlabel("acceptance α measured in the run (i.i.d. fit)")
    ax.set_ylabel("speedup (filled: measured, open: predicted)")
    ax.set_title("where speculation stops paying")
    ax.legend(fontsize=6)
    return artists


def validate_figure(verify: pd.DataFrame, spec: pd.DataFrame):
    """One panel per part that was run (verify; speculative runs and where they stop paying), so a run
    of one part shows no empty axes."""
    panels = ([lambda ax: verify_panel(ax, verify)] if len(verify) else []) + \
        ([lambda ax: spec_panel(ax, spec), lambda ax: break_even_panel(ax, spec)] if len(spec) else [])
    fig, axes = plt.subplots(1, max(1, len(panels)), figsize=(6 * max(1, len(panels)) - 1, 5), squeeze=False)
    for draw, ax in zip(panels, axes[0]):
        draw(ax)
    if not panels:
        axes[0][0].text(0.5, 0.5, "nothing was measured", ha="center", va="center")
        axes[0][0].set_axis_off()
    fig.tight_layout()
    return fig


def close(fig) -> None:
    plt.close(fig)


__all__ = ["verify_panel", "spec_panel", "break_even_panel", "validate_figure", "close"]
