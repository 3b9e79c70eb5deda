"""Plots of serving rate sweeps (matplotlib is imported here and nowhere else in the simulator).

Each `(ax, table, ...)` function draws one panel from the long-form table of
`simulate.sweep` (one row per policy and rate), returns its artists, computes nothing and never
calls `show`. The `*_figure` functions lay out the standard figures (`presentation.figures` declares
them, and writes them for `simulate`).
"""
from __future__ import annotations


import numpy as np
import pandas as pd
from matplotlib.figure import Figure

SLOWDOWN_COLOR = "#f4c7c3"


def _policies(table: pd.DataFrame) -> list[str]:
    return list(dict.fromkeys(table["policy"]))


def _colors(table: pd.DataFrame) -> dict:
    cycle = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf"]
    return {p: cycle[i % len(cycle)] for i, p in enumerate(_policies(table))}


_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
_DASHES = ("-", "--", "-.", ":")


def _style(table: pd.DataFrame) -> dict:
    """Colour, marker and line style per policy, so overlapping lines stay tellable apart."""
    colors = _colors(table)
    return {p: dict(color=colors[p], marker=_MARKERS[i % len(_MARKERS)], ls=_DASHES[i % len(_DASHES)])
            for i, p in enumerate(_policies(table))}


def _rate_axis(ax, table: pd.DataFrame) -> None:
    rates = sorted(set(table["rate_per_s"].dropna()))
    ax.set_xscale("log", base=2)
    if rates and len(rates) <= 12:
        ax.set_xticks(rates)
        ax.set_xticklabels([f"{r:g}" for r in rates])
    ax.set_xlabel("arrival rate (requests/s)")
    ax.grid(True, which="major", alpha=0.3)


def latency_vs_rate(ax, table: pd.DataFrame, *, metric: str = "tpot", title: str = "", slo_s: float | None = None):
    """p50 (solid) and p99 (dashed) of `metric` ('tpot' or 'ttft') against rate, one colour per
    policy; the SLO limit, when given, as a horizontal line. A run whose every output is one token
    has no TPOT (the time between two output tokens): the panel says so and draws no lines."""
    values = table[[f"{metric}_p50_s", f"{metric}_p99_s"]].to_numpy(dtype=float)
    if not (np.isfinite(values) & (values > 0)).any():  # nothing to place a log axis on
        return _no_values(ax, table, f"no {metric.upper()} at any rate\n(it needs outputs of two tokens or more)",
                          title=title or f"{metric.upper()} against arrival rate")
    artists = []
    colors = _colors(table)
    for i, p in enumerate(_policies(table)):
        t = table[table["policy"] == p].sort_values("rate_per_s")
        m = _MARKERS[i % len(_MARKERS)]
        artists += ax.plot(t["rate_per_s"], t[f"{metric}_p50_s"] * 1e3, "-", marker=m, color=colors[p], ms=4,
                           label=f"{p} p50")
        artists += ax.plot(t["rate_per_s"], t[f"{metric}_p99_s"] * 1e3, "--", marker=m, mfc="none", color=colors[p],
                           alpha=0.7, ms=4, label=f"{p} p99")
    if slo_s is not None and np.isfinite(slo_s):
        artists.append(ax.axhline(slo_s * 1e3, color="black", ls=(0, (6, 3)), lw=1.2, label=f"SLO {slo_s * 1e3:g} ms"))
    _rate_axis(ax, table)
    ax.set_yscale("log")
    ax.set_ylabel(f"{metric.upper()} (ms)")
    ax.set_title(title or f"{metric.upper()} against arrival rate")
    ax.legend(fontsize=7, ncol=2)
    return artists


def _no_values(ax, table: pd.DataFrame, why: str, *, title: str) -> list:
    """A panel with nothing to draw: the rates on the axis, `why` in the middle."""
    _rate_axis(ax, table)
    rates = table["rate_per_s"].dropna().to_numpy(dtype=float)
    if rates.size:  # no point placed the log axis: place it on the rates run
        ax.set_xlim(rates.min() / 1.5, rates.max() * 1.5)
    ax.set_yticks([])
    ax.set_title(title)
    return [ax.text(0.5, 0.5, why, transform=ax.transAxes, ha="center", va="center", fontsize=9, color="0.3")]


def throughput_vs_rate(ax, table: pd.DataFrame, *, title: str = ""):
    """Output tokens per second against rate, one line per policy (its own marker and dash: at low
    load every policy serves what arrives and the lines coincide; `throughput_ratio_vs_rate` shows
    them apart)."""
    artists = []
    style = _style(table)
    for i, p in enumerate(_policies(table)):
        t = table[table["policy"] == p].sort_values("rate_per_s")
        artists += ax.plot(t["rate_per_s"], t["throughput_tokens_per_s"], ms=max(6 - i, 3), mfc="none", label=p,
                           **style[p])
    _rate_axis(ax, table)
    ax.set_ylabel("throughput (output tokens/s)")
    ax.set_title(title or "Throughput against arrival rate")
    ax.legend(fontsize=8)
    return artists


def throughput_ratio_vs_rate(ax, table: pd.DataFrame, *, title: str = ""):
    """Each policy's throughput over the baseline policy's at the same rate (`throughput_ratio`):
    where every policy serves what arrives the ratio is 1; past saturation the policies part."""
    artists = []
    style = _style(table)
    base = table.attrs.get("baseline_policy")
    if "throughput_ratio" not in table:
        return artists
    for i, p in enumerate(_policies(table)):
        if p == base:
            continue
        t = table[table["policy"] == p].sort_values("rate_per_s")
        artists += ax.plot(t["rate_per_s"], t["throughput_ratio"], ms=max(6 - i, 3), mfc="none", label=p, **style[p])
    artists.append(ax.axhline(1.0, color="black", lw=0.8, label=f"'{base}'" if base else None))
    _rate_axis(ax, table)
    ax.set_ylabel(f"throughput / '{base}' throughput" if base else "throughput ratio")
    ax.set_title(title or "Throughput relative to no speculation")
    ax.legend(fontsize=8)
    return artists


def goodput_vs_rate(ax, table: pd.DataFrame, *, title: str = "", slo=None):
    """Requests per second that meet the SLO (TTFT and TPOT) against rate, one line per policy."""
    artists = []
    style = _style(table)
    for i, p in enumerate(_policies(table)):
        t = table[table["policy"] == p].sort_values("rate_per_s")
        artists += ax.plot(t["rate_per_s"], t["goodput_requests_per_s"], ms=6 - i, mfc="none", label=p, **style[p])
    rates = sorted(set(table["rate_per_s"].dropna()))
    if rates:
        artists += ax.plot(rates, rates, color="0.6", lw=0.8, ls=":", label="every request on time")
    _rate_axis(ax, table)
    ax.set_ylabel("goodput (requests/s within the SLO)")
    slo_text = "" if slo is None else f" (TTFT ≤ {slo.ttft_s:g} s, TPOT ≤ {slo.tpot_s * 1e3:g} ms)"
    ax.set_title(title or f"Goodput against arrival rate{slo_text}")
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


def latency_figure(table: pd.DataFrame, *, crossovers=None, title: str = "", slo=None) -> Figure:
    """TPOT and TTFT p50 and p99 against rate side by side, the SLO limits drawn (latency_vs_rate)."""
    fig = Figure(figsize=(11, 4.5), layout="constrained")
    a1, a2 = fig.subplots(1, 2)
    latency_vs_rate(a1, table, metric="tpot", slo_s=None if slo is None else slo.tpot_s)
    latency_vs_rate(a2, table, metric="ttft", slo_s=None if slo is None else slo.ttft_s)
    if title:
        fig.suptitle(title)
    return fig


def throughput_figure(table: pd.DataFrame, *, crossovers=None, title: str = "", slo=None) -> Figure:
    """Throughput against rate, absolute and relative to no speculation (throughput_vs_rate)."""
    fig = Figure(figsize=(11, 4.5), layout="constrained")
    a1, a2 = fig.subplots(1, 2)
    throughput_vs_rate(a1, table, title=f"Throughput: {title}" if title else "")
    throughput_ratio_vs_rate(a2, table)
    return fig


def goodput_figure(table: pd.DataFrame, *, crossovers=None, title: str = "", slo=None) -> Figure:
    """Goodput against rate (goodput_vs_rate)."""
    fig = Figure(figsize=(6, 4.5), layout="constrained")
    goodput_vs_rate(fig.subplots(), table, slo=slo)
    return fig


def speedup_figure(table: pd.DataFrame, *, crossovers=None, title: str = "", slo=None) -> Figure:
    """p50 TPOT speedup over no speculation against rate, crossovers marked (speedup_vs_rate)."""
    fig = Figure(figsize=(6.5, 4.5), layout="constrained")
    speedup_vs_rate(fig.subplots(), table, crossovers=crossovers, title=f"Speedup: {title}" if title else "")
    return fig


__all__ = ["latency_vs_rate", "throughput_vs_rate", "throughput_ratio_vs_rate", "goodput_vs_rate", "speedup_vs_rate",
           "latency_figure", "throughput_figure", "goodput_figure", "speedup_figure"]
