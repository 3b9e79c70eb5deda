"""Plots: each function draws on the axes it is given, returns its artists, writes PNG and SVG; the
figure registry declares each figure once and refuses a plot name it does not know."""
from dataclasses import replace
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from specsim.presentation import figures, plots  # noqa: E402
from specsim.presentation.sweep import run_sweep, verify_roofline_points  # noqa: E402
from specsim.specs.scenario import load_scenario  # noqa: E402
from specsim.speculation.operating_point import resolve  # noqa: E402

SEED70 = resolve(load_scenario("seed-70b-hbm"))


@pytest.fixture(scope="module")
def df():
    s = load_scenario("scenarios/seed-70b-hbm.toml")
    s = replace(s, sections={"sweep": {"k": [1, 2, 4], "tree_size": [4, 16, 64], "batch_size": [1, 8, 64, 512],
                                       "context_len": [256, 130000], "alpha": [0.5, 0.8],
                                       "attention": ["fused", "naive"]}})
    return run_sweep(resolve(s))


def test_speedup_vs_batch_marks_the_threshold_and_shades_the_regression(df):
    fig, ax = plt.subplots()
    d = df[~df["is_tree"] & (df["context_len"] == 256) & (df["alpha"] == 0.8) & (df["attention"] == "fused")]
    artists = plots.speedup_vs_batch(ax, d)
    labels = [a.get_label() for a in artists]
    assert sum(lbl.startswith("k = ") for lbl in labels) == 3
    assert any("regression" in lbl for lbl in labels)
    assert any(lbl.startswith("switch off at B ≥") for lbl in labels)
    assert "batch size" in ax.get_xlabel() and "speedup" in ax.get_ylabel()
    plt.close(fig)
    # given the operating point's switch-off, the plot marks that batch and says what it assumes
    from specsim.analyses.switch_off import switch_off_point
    so = switch_off_point(SEED70.with_overrides(alpha=0.8), retune_k=True)
    fig, ax = plt.subplots()
    artists = plots.speedup_vs_batch(ax, d, threshold=so)
    assert any(a.get_label() == f"switch off at B ≥ {so.batch_off}" for a in artists)
    assert any("K re-tuned per batch" in getattr(a, "get_text", lambda: "")() for a in artists)
    plt.close(fig)


@pytest.mark.parametrize("fn,select", [
    ("speedup_vs_context", lambda d: d[~d["is_tree"] & (d["batch_size"] == 1) & (d["alpha"] == 0.8)]),
    ("speedup_heatmap", lambda d: d[~d["is_tree"] & (d["context_len"] == 256) & (d["attention"] == "fused")]),
    ("speedup_vs_k", lambda d: d[~d["is_tree"] & (d["batch_size"] == 1) & (d["context_len"] == 256)]),
    ("speedup_vs_tree_size", lambda d: d[d["is_tree"] & (d["batch_size"] == 1) & (d["context_len"] == 256)
                                         & (d["alpha"] == 0.8)]),
])
def test_every_sweep_plot_returns_artists_and_labels_its_axes(df, fn, select):
    fig, ax = plt.subplots()
    artists = getattr(plots, fn)(ax, select(df))
    assert artists and ax.get_xlabel() and ax.get_ylabel() and ax.get_title()
    plt.close(fig)


def test_roofline_and_verify_cost(tmp_path):
    pts = verify_roofline_points(SEED70, batch_sizes=(1, 16))
    fig, (a, b) = plt.subplots(1, 2)
    assert plots.roofline_chart(a, pts) and plots.verify_cost_vs_tokens(b, pts)
    assert "FLOP / byte" in a.get_xlabel() and "B·M" in b.get_xlabel()
    paths = plots.save_figure(fig, tmp_path / "roof")
    assert [p.suffix for p in paths] == [".png", ".svg"] and all(p.stat().st_size > 5000 for p in paths)


def test_sweep_figures_write_the_standard_set(df, tmp_path):
    pts = verify_roofline_points(SEED70)
    ref = {"hardware": "seed-hbm-2tbs", "target": "seed-70b", "method": "draft_model", "attention": "fused",
           "batch_size": 1, "context_len": 256, "alpha": 0.8}
    paths = figures.sweep_figures(figures.FigureInputs(point=SEED70, sweep=df, reference=ref, roofline=pts), tmp_path)
    names = [p.stem for p in paths if p.suffix == ".png"]
    assert names == ["roofline", "verify_cost", "speedup_vs_k", "speedup_vs_tree_size", "speedup_vs_batch",
                     "speedup_vs_context", "heatmap_batch_alpha"]  # every figure `[sweep] plots` may name, in order
    assert tuple(names) == figures.SWEEP_PLOTS
    assert plt.get_fignums() == []  # every figure closed, none shown
    only = figures.sweep_figures(figures.FigureInputs(point=SEED70, sweep=df, reference=ref, roofline=pts),
                                 tmp_path / "two", which=["verify_cost", "speedup_vs_k"])
    assert sorted(p.stem for p in only if p.suffix == ".png") == ["speedup_vs_k", "verify_cost"]


def test_the_registry_declares_each_figure_once():
    names = [f.name for f in figures.FIGURES]
    assert len(names) == len(set(names)) and figures.FIGURE_NAMES == tuple(names)
    assert set(figures.SWEEP_PLOTS) < set(names) and "verdict_curve" not in figures.SWEEP_PLOTS
    assert set(figures.SERVING_FIGURES) == {"latency_vs_rate", "throughput_vs_rate", "goodput_vs_rate", "speedup_vs_rate"}
    # without a sweep grid, roofline points or a verdict nothing applies: no figure is drawn from nothing
    assert [f.name for f in figures.FIGURES if f.applies(figures.FigureInputs(point=SEED70))] == []


@pytest.mark.parametrize("plots_value, shown", [
    ("speedup_vs_bacth", "'speedup_vs_bacth'"),
    (["roofline", "latency_vs_rate"], "'latency_vs_rate'"),  # a report-only figure: `sweep` does not simulate
    (3, "3"),
    ([], "plots' = "),  # an empty list (written [] or ())
])
def test_an_unknown_plot_name_is_refused_naming_the_field_and_the_known_names(tmp_path, plots_value, shown):
    from specsim.errors import SpecError
    from specsim.presentation.sweep import sweep_axes

    s = load_scenario("seed-70b-hbm")
    with pytest.raises(SpecError) as e:  # refused on load (the scenario's checks) or, at the latest, by the sweep
        sweep_axes(resolve(replace(s, sections={**s.sections, "sweep": {"k": [1, 2], "plots": plots_value}})))
    msg = str(e.value)
    assert "[sweep]" in msg and "plots" in msg and shown in msg
    if isinstance(plots_value, str) or (isinstance(plots_value, list) and plots_value):  # a name it does not know
        assert all(n in msg for n in figures.SWEEP_PLOTS)


def test_the_sweep_command_refuses_an_unknown_plot_name_before_any_work(tmp_path, capsys):
    from specsim.cli import main

    src = (Path(__file__).resolve().parents[1] / "scenarios" / "seed-70b-hbm.toml").read_text()
    bad = tmp_path / "bad.toml"
    bad.write_text(src.replace("[threshold]", 'plots = ["speedup_vs_batch", "speedup_vs_kk"]\n\n[threshold]'))
    rc = main(["sweep", str(bad), "--out", str(tmp_path / "out"), "--quiet", "--workers", "1"])
    err = capsys.readouterr().err
    assert rc != 0 and "plots" in err and "speedup_vs_kk" in err and "heatmap_batch_alpha" in err
    assert not (tmp_path / "out" / "sweep.csv").exists()
