"""Cost-model plots (specsim.presentation.cost_plots): they draw the numbers they are given, in ms,
and lay out one row per GPU."""
import numpy as np
import pandas as pd

from specsim.presentation import cost_plots


def _sums() -> pd.DataFrame:
    rows = []
    for gpu in ("a100", "h100"):
        for model, split in (("m-train", "train"), ("m-held", "held-out")):
            for tp in (1, 2):
                for t in (1, 64, 512):
                    measured = 1e-4 * t ** 0.5 / tp
                    rows.append({"gpu": gpu, "model": model, "split": split, "tp": tp, "n_tokens": t,
                                 "measured_s": measured, "before_s": 0.8 * measured, "after_s": 1.05 * measured})
    return pd.DataFrame(rows)


def test_measured_vs_predicted_plots_the_given_points_in_ms():
    import matplotlib.pyplot as plt

    df = _sums()
    d = df[df["gpu"] == "h100"]
    fig, ax = plt.subplots()
    artists = cost_plots.measured_vs_predicted(ax, d)
    scatters = [a for a in artists if hasattr(a, "get_offsets") and len(a.get_offsets()) == 6]
    assert len(scatters) == 2  # one per (model, split); 2 tp × 3 token counts each
    pts = np.concatenate([s.get_offsets() for s in scatters])
    expected = np.column_stack([d["measured_s"], d["after_s"]]) * 1e3
    assert sorted(map(tuple, np.round(pts, 12))) == sorted(map(tuple, np.round(expected, 12)))
    cost_plots.close(fig)


def test_time_vs_tokens_draws_measured_fitted_and_roofline_for_one_tp():
    import matplotlib.pyplot as plt

    df = _sums()
    fig, ax = plt.subplots()
    artists = cost_plots.time_vs_tokens(ax, df[df["gpu"] == "a100"], tp=2, models=["m-held"])
    assert len(artists) == 3
    measured, fitted, roofline = artists
    sel = df[(df["gpu"] == "a100") & (df["tp"] == 2) & (df["model"] == "m-held")].sort_values("n_tokens")
    assert np.allclose(measured.get_ydata(), sel["measured_s"] * 1e3)
    assert np.allclose(fitted.get_ydata(), sel["after_s"] * 1e3)
    assert np.allclose(roofline.get_ydata(), sel["before_s"] * 1e3)
    cost_plots.close(fig)


def test_figure_has_a_row_per_gpu():
    fig = cost_plots.operator_fit_figure(_sums())
    assert len(fig.axes) == 4
    assert [ax.get_title().split(":")[0] for ax in fig.axes] == ["A100", "A100", "H100", "H100"]
    cost_plots.close(fig)
