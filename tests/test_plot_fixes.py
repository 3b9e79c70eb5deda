"""The plot fixes of issue 11, each checked on the artists the functions return: the heatmap's colour
bar has ticks on both sides of 1 and its speedup = 1 contour is named in the legend (no label on the
line); configurations that do not fit in memory are marked; roofline labels sit beside their points;
the throughput comparison has a relative panel; SLO limits are drawn on the latency plots."""
from __future__ import annotations

from dataclasses import replace

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

from specsim.presentation import plots, serving_plots  # noqa: E402
from specsim.presentation.sweep import (drafter_roofline_points, heatmap_grid, run_sweep,  # noqa: E402
                                        verify_roofline_points)
from specsim.serving import SLO  # noqa: E402
from specsim.specs.scenario import load_scenario  # noqa: E402
from specsim.speculation.operating_point import resolve, resolve_id  # noqa: E402


@pytest.fixture(scope="module")
def seed_df():
    s = load_scenario("seed-70b-hbm")
    s = replace(s, sections={"sweep": {"hardware": ["seed-hbm-2tbs", "seed-ddr5-90gbs"], "k": [1, 2, 4],
                                       "tree_size": [4, 16, 64], "batch_size": [1, 8, 64, 512],
                                       "context_len": [256], "alpha": [0.5, 0.8]}})
    return run_sweep(resolve(s))


def test_heatmap_colour_bar_has_ticks_below_one_and_the_contour_is_in_the_legend():
    op = resolve_id("seed-70b-hbm")
    hm = heatmap_grid(op)  # the fine (B, α) grid: 40 batch sizes × 61 acceptance rates
    assert hm["batch_size"].nunique() >= 30 and hm["alpha"].nunique() >= 50
    fig, ax = plt.subplots()
    plots.speedup_heatmap(ax, hm)
    cbar_ax = fig.axes[-1]
    ticks = [float(t) for t in cbar_ax.get_yticks()]
    assert any(t < 1.0 for t in ticks) and 1.0 in ticks and any(t > 1.0 for t in ticks)
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "speedup = 1 (break-even)" in labels
    assert not [t for t in ax.texts if "speedup" in t.get_text()]  # no label sitting on the line
    plt.close(fig)


def test_what_does_not_fit_is_marked(seed_df):
    # the 70B (140 GB of weights) does not fit the 64 GB desktop: its tree-size line says so
    trees = seed_df[seed_df["is_tree"] & (seed_df["batch_size"] == 1) & (seed_df["alpha"] == 0.8)]
    assert not trees[trees["hardware"] == "seed-ddr5-90gbs"]["fits"].any()
    fig, ax = plt.subplots()
    plots.speedup_vs_tree_size(ax, trees)
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert any(lbl.startswith("seed-ddr5-90gbs") and "does not fit in memory" in lbl for lbl in labels)
    assert any(lbl == "seed-hbm-2tbs" for lbl in labels)
    plt.close(fig)
    # on the batch plot, batches past the memory limit are × markers with one legend entry
    chat = resolve_id("llama-70b-h100-chat")
    df = run_sweep(chat.with_overrides(sections={"sweep": {"k": [2, 4], "batch_size": [1, 64, 512, 1024]}}))
    assert not df["fits"].all() and df["fits"].any()
    fig, ax = plt.subplots()
    plots.speedup_vs_batch(ax, df)
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels.count(plots.NOFIT_LABEL) == 1
    plt.close(fig)


def test_roofline_labels_sit_beside_their_points():
    op = resolve_id("seed-70b-hbm")
    pts = verify_roofline_points(op, batch_sizes=(1, 64))
    drafter = drafter_roofline_points(op, batch_sizes=(1, 4, 16, 64))
    assert drafter["target"].iloc[0] == "seed-1b"
    fig, ax = plt.subplots()
    artists = plots.roofline_chart(ax, pts, drafter=drafter)
    notes = [a for a in artists if isinstance(a, matplotlib.text.Annotation)]
    assert len(notes) >= 4
    xs = np.concatenate([pts["intensity_flops_per_byte"], drafter["intensity_flops_per_byte"]])
    ys = np.concatenate([pts["attained_flops_per_s"], drafter["attained_flops_per_s"]]) / 1e12
    for n in notes:
        x, y = n.xy
        assert np.min(np.hypot(np.log(xs / x), np.log(ys / y))) < 1e-9  # anchored on a data point
        dx, dy = n.xyann
        assert n.anncoords == "offset points" and np.hypot(dx, dy) <= 20  # a few points away, joined by a line
        assert n.arrow_patch is not None
    plt.close(fig)


def _table():
    rows = []
    for rate in (1.0, 4.0, 16.0):
        for p, tpot, thr in (("never", 0.03, 100 * rate), ("static", 0.015, 103 * rate), ("gate", 0.016, 102 * rate)):
            rows.append({"policy": p, "rate_per_s": rate, "tpot_p50_s": tpot * rate, "tpot_p99_s": 2 * tpot * rate,
                         "ttft_p50_s": 0.1 * rate, "ttft_p99_s": 0.3 * rate, "throughput_tokens_per_s": thr,
                         "goodput_requests_per_s": rate / (1 + 0.1 * rate), "throughput_ratio": thr / (100 * rate),
                         "speedup_tpot_p50": 0.03 / tpot})
    t = pd.DataFrame(rows)
    t.attrs["baseline_policy"] = "never"
    return t


def test_throughput_ratio_separates_what_the_absolute_plot_overlaps():
    t = _table()
    fig, ax = plt.subplots()
    lines = serving_plots.throughput_ratio_vs_rate(ax, t)
    static = next(a for a in lines if a.get_label() == "static")
    assert np.allclose(static.get_ydata(), 1.03)  # 103 / 100 at every rate, by construction
    assert "never" not in [a.get_label() for a in lines[:-1]]
    plt.close(fig)


def test_slo_limits_are_drawn_on_latency_and_goodput_plots():
    t = _table()
    slo = SLO(ttft_s=2.0, tpot_s=0.05)
    figs = {"latency_vs_rate.png": serving_plots.latency_figure(t, slo=slo, title="x"),
            "goodput_vs_rate.png": serving_plots.goodput_figure(t, slo=slo, title="x")}
    tpot_ax, ttft_ax = figs["latency_vs_rate.png"].axes
    for ax, limit_ms in ((tpot_ax, 50.0), (ttft_ax, 2000.0)):
        hlines = [ln for ln in ax.get_lines() if ln.get_label().startswith("SLO")]
        assert len(hlines) == 1 and np.allclose(hlines[0].get_ydata(), limit_ms)
    assert "TPOT ≤ 50 ms" in figs["goodput_vs_rate.png"].axes[0].get_title()


def test_validate_figure_draws_only_the_parts_that_were_run():
    # a verify-only run shows one panel, a speculative-only run two; each titled, none left empty
    import pandas as pd

    from specsim.presentation.validate_plots import close, validate_figure

    verify = pd.DataFrame({"context_len": [128, 128], "m": [1, 8], "predicted_s": [0.016, 0.043],
                           "measured_s": [0.015, 0.031], "measured_min_s": [0.014, 0.029], "measured_max_s": [0.016, 0.033]})
    spec = pd.DataFrame({"drafter": ["prompt-lookup"], "layers": [float("nan")], "k": [4], "workload": ["code-edit"],
                         "predicted_tokens_per_s": [95.1], "predicted_tokens_per_s_low": [67.8],
                         "predicted_tokens_per_s_high": [117.9], "measured_tokens_per_s": [95.4],
                         "measured_tokens_per_s_min": [94.2], "measured_tokens_per_s_max": [96.5],
                         "measured_plain_tokens_per_s": [56.0], "alpha_measured": [0.81], "measured_speedup": [1.70],
                         "predicted_speedup": [1.64]})
    for v, s, titles in ((verify, spec.iloc[0:0], ["verify step time"]),
                         (verify.iloc[0:0], spec, ["speculative decoding", "where speculation stops paying"]),
                         (verify, spec, ["verify step time", "speculative decoding", "where speculation stops paying"])):
        fig = validate_figure(v, s)
        assert [ax.get_title() for ax in fig.axes] == titles
        assert all(ax.has_data() for ax in fig.axes)
        close(fig)
