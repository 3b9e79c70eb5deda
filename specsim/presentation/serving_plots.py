"""Plots of serving rate sweeps (matplotlib is imported here and nowhere else in the simulator).

Each `(ax, table, ...)` function draws one panel from the long-form table of
`simulate.sweep` (one row per policy and rate), returns its artists, computes nothing and never
calls `show`. `serving_figures` lays out the standard set and writes PNG files.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

SLOWDOWN_COLOR = "#f4c7c3"


def _policies(table: pd.DataFrame) -> list[str]:
    return list(dict.fromkeys(table["policy"]))


def _colors(table: pd.DataFrame) -> dict:
    cycle = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf"]
    return {p: cycle[i % len(cycle)] for i, p in enumerate(_policies(table))}


def _rate_axis(ax, table: pd.DataFrame) -> None:
    rates = sorted(set(table["rate_per_s"].dropna()))
    ax.set_xscale("log", base=2)
    if rates and len(rates) <= 12:
        ax.set_xticks(rates)
        ax.set_xticklabels([f"{r:g}" for r in rates])
    ax.set_xlabel("arrival rate (requests/s)")
    ax.grid(True, which="major", alpha=0.3)


def latency_vs_rate(ax, table: pd.DataFrame, *, metric: str = "tpot", title: str = ""):
    """p50 (solid) and p99 (dashed) of `metric` ('tpot' or 'ttft') against rate, one colour per policy."""
    artists = []
    colors = _colors(table)
    for p in _policies(table):
        t = table[table["policy"] == p].sort_values("rate_per_s")
        artists += ax.plot(t["rate_per_s"], t[f"{metric}_p50_s"] * 1e3, "-o", color=colors[p], ms=4, label=f"{p} p50")
        artists += ax.plot(t["rate_per_s"], t[f"{metric}_p99_s"] * 1e3, "--", color=colors[p], alpha=0.7,
                           label=f"{p} p99")
    _rate_axis(ax, table)
    ax.set_yscale("log")
    ax.set_ylabel(f"{metric.upper()} (ms)")
    ax.set_title(title or f"{metric.upper()} against arrival rate")
    ax.legend(fontsize=7, ncol=2)
    return artists


def throughput_vs_rate(ax, table: pd.DataFrame, *, title: str = ""):
    """Output tokens per second against rate, one line per policy."""
    artists = []
    colors = _colors(table)
    for p in _policies(table):
        t = table[table["policy"] == p].sort_values("rate_per_s")
        artists += ax.plot(t["rate_per_s"], t["throughput_tokens_per_s"], "-o", color=colors[p], ms=4, label=p)
    _rate_axis(ax, table)
    ax.set_ylabel("throughput (output tokens/s)")
    ax.set_title(title or "Throughput against arrival rate")
    ax.legend(fontsize=8)
    return artists


def speedup_vs_rate(ax, table: pd.DataFrame, *, crossovers: dict | None = None, column: str = "speedup_tpot_p50",
                    title: str = ""):
    """Speedup of p50 TPOT over the baseline policy against rate, one line per policy; the region
    below 1 (speculation hurts) is shaded and each policy's crossover rate is marked."""
    artists = []
    colors = _colors(table)
    base = table.attrs.get("baseline_policy")
    vals = table[column].to_numpy(dtype=float)
    top = max(1.2, float(np.nanmax(vals)) * 1.1) if np.isfinite(vals).any() else 2.0
    bottom = min(0.8, float(np.nanmin(vals)) * 0.9) if np.isfinite(vals).any() else 0.5
    artists.append(ax.axhspan(bottom, 1.0, color=SLOWDOWN_COLOR, alpha=0.5, lw=0, label="slower than no speculation"))
    artists.append(ax.axhline(1.0, color="black", lw=0.8))
    for p in _policies(table):
        if p == base:
            continue
        t = table[table["policy"] == p].sort_values("rate_per_s")
        artists += ax.plot(t["rate_per_s"], t[column], "-o", color=colors[p], ms=4, label=p)
        x = (crossovers or {}).get(p)
        if x is not None:
            artists.append(ax.axvline(x, color=colors[p], ls=":", lw=1.2))
            artists.append(ax.annotate(f"{p}: crossover {x:.1f} req/s", (x, 0.03), xycoords=("data", "axes fraction"),
                                       xytext=(-3, 0), textcoords="offset points", fontsize=7, color=colors[p],
                                       rotation=90, va="bottom", ha="right"))
    _rate_axis(ax, table)
    ax.set_ylim(bottom, top)
    ax.set_ylabel(f"p50 TPOT speedup over '{base}'" if column == "speedup_tpot_p50" else column)
    ax.set_title(title or "Speculation speedup against arrival rate")
    ax.legend(fontsize=8, loc="upper right")
    return artists


def serving_figures(table: pd.DataFrame, out_dir, *, crossovers: dict | None = None, title: str = "") -> list[Path]:
    """Write latency_vs_rate.png (TPOT and TTFT), throughput_vs_rate.png and speedup_vs_rate.png."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    fig = Figure(figsize=(11, 4.5), layout="constrained")
    a1, a2 = fig.subplots(1, 2)
    latency_vs_rate(a1, table, metric="tpot")
    latency_vs_rate(a2, table, metric="ttft")
    if title:
        fig.suptitle(title)
    paths.append(out / "latency_vs_rate.png")
    fig.savefig(paths[-1], dpi=120)
    fig = Figure(figsize=(6, 4.5), layout="constrained")
    throughput_vs_rate(fig.subplots(), table, title=f"Throughput: {title}" if title else "")
    paths.append(out / "throughput_vs_rate.png")
    fig.savefig(paths[-1], dpi=120)
    if "speedup_tpot_p50" in table:
        fig = Figure(figsize=(6.5, 4.5), layout="constrained")
        speedup_vs_rate(fig.subplots(), table, crossovers=crossovers, title=f"Speedup: {title}" if title else "")
        paths.append(out / "speedup_vs_rate.png")
        fig.savefig(paths[-1], dpi=120)
    return paths
