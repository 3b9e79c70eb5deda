"""The committed reports (reports/<scenario>/) never drift from the code, and a report is what it says:
one self-contained page that opens in a browser with no errors, a Markdown twin, and the CSV behind
every figure, whose numbers are the ones in the text.

Each committed report's manifest.json records the command that made it; the test reruns that command
into a temporary folder and compares every committed CSV with the regenerated one: the same rows, the
same text in text columns, numbers equal to REL_TOL (the CSVs carry 7 significant digits). When the
cost model or the simulator changes on purpose, regenerate them (reports/README.md says how).
"""
from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from specsim.cli import main
from specsim.specs.catalog import catalog_ids

REPORTS = Path(__file__).resolve().parents[1] / "reports"
NAMES = sorted(p.name for p in REPORTS.glob("*") if (p / "manifest.json").is_file())
REL_TOL = 1e-5


def _manifest(name: str) -> dict:
    return json.loads((REPORTS / name / "manifest.json").read_text())


@pytest.fixture(scope="session")
def regenerated(tmp_path_factory) -> dict:
    """Every committed report rerun from its manifest's command into a temporary folder."""
    out = {}
    base = tmp_path_factory.mktemp("reports")
    for name in NAMES:
        argv = shlex.split(_manifest(name)["command"])
        assert argv[:2] == ["specsim", "report"], argv
        argv = argv[1:]
        i = argv.index("--out")
        argv[i + 1] = str(base / name)
        argv = [a for a in argv if a != "--force"] + ["--quiet"]
        assert main(argv) == 0, argv
        out[name] = base / name
    return out


# the shipped scenarios whose reports are committed: every scenario not measured on the machine at hand
# (a scenario on `hardware = "local"` is this machine as `specsim calibrate machine` measured it, so
# its numbers differ from machine to machine and a committed copy could not be checked)
MACHINE_LOCAL = {"local"}


def test_every_shipped_scenario_has_a_committed_report():
    from specsim.specs.scenario import load_scenario

    shipped = {s for s in catalog_ids("scenarios") if load_scenario(s).hardware not in MACHINE_LOCAL}
    assert {"seed-70b-hbm", "seed-7b-ddr5", "llama-70b-h100-chat", "llama-8b-h100-code-pld",
            "llama-8b-128k-sparse-kv"} <= shipped
    assert shipped <= set(NAMES), shipped - set(NAMES)
    for name in NAMES:
        files = set(_manifest(name)["files"])
        assert {"report.html", "report.md", "verdict.json"} <= files
        assert all((REPORTS / name / f).is_file() for f in files)
        size = sum((REPORTS / name / f).stat().st_size for f in files)
        assert size < 1_500_000, (name, size)  # committed reports stay small


def _compare_csv(committed: Path, fresh: Path) -> None:
    a, b = pd.read_csv(committed), pd.read_csv(fresh)
    missing = set(a.columns) - set(b.columns)
    assert not missing, f"{committed.name}: columns gone from the regenerated file: {sorted(missing)}"
    assert len(a) == len(b), f"{committed.name}: {len(a)} rows committed, {len(b)} regenerated"
    for c in a.columns:
        x, y = a[c], b[c]
        if pd.api.types.is_numeric_dtype(x) and pd.api.types.is_numeric_dtype(y):
            xv, yv = x.to_numpy(float), y.to_numpy(float)
            same_nan = np.isnan(xv) == np.isnan(yv)
            assert same_nan.all(), f"{committed.name} column {c}: missing values differ"
            ok = np.isclose(xv, yv, rtol=REL_TOL, atol=1e-12, equal_nan=True)
            assert ok.all(), (f"{committed.name} column {c}: {int((~ok).sum())} values differ beyond {REL_TOL:g}, "
                              f"first at row {int(np.flatnonzero(~ok)[0])}: {xv[~ok][0]!r} committed, {yv[~ok][0]!r} now")
        else:
            same = (x.astype(object).fillna("").astype(str) == y.astype(object).fillna("").astype(str)).to_numpy()
            assert same.all(), (f"{committed.name} column {c}: text differs at {int((~same).sum())} rows, first at "
                                f"row {int(np.flatnonzero(~same)[0])}: {x[~same].iloc[0]!r} committed, "
                                f"{y[~same].iloc[0]!r} now")


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_committed_csvs_match_a_fresh_run(regenerated, name):
    csvs = [f for f in _manifest(name)["files"] if f.endswith(".csv")]
    assert csvs
    for f in csvs:
        _compare_csv(REPORTS / name / f, regenerated[name] / f)
    # the verdict too
    old = json.loads((REPORTS / name / "verdict.json").read_text())
    new = json.loads((regenerated[name] / "verdict.json").read_text())
    for key in ("on", "gate_batch", "min_batch", "k", "headline"):
        assert old[key] == new[key], (name, key)


@pytest.mark.slow
def test_a_report_is_self_contained_and_its_text_reads_its_csvs(regenerated):
    d = regenerated["seed-70b-hbm"]
    html = (d / "report.html").read_text()
    assert not re.search(r"""(src|href)=['"](https?:)?//""", html)  # nothing fetched from the network
    assert "<script" not in html
    imgs = re.findall(r"<img src='data:image/png;base64,", html)
    manifest = json.loads((d / "manifest.json").read_text())
    pngs = [f for f in manifest["files"] if f.endswith(".png")]
    assert len(imgs) == len(pngs) >= 6
    md = (d / "report.md").read_text()
    for png in pngs:  # the Markdown twin shows the same figures, each with its CSV named
        assert f"]({png})" in md
    for section in ("Verdict", "Configuration and sources", "Roofline: target and drafter", "Speedup",
                    "Serving: gating policies under load", "Calibration status"):
        assert f"## {section}" in md and f">{section}</h2>" in html
    # a number in the text is the CSV's: the batch-plot caption's speedup of K = 5 at B = 1
    rows = pd.read_csv(d / "speedup_vs_batch.csv")
    s = rows[(rows["k"] == 5) & (rows["batch_size"] == 1)]["speedup"].iloc[0]
    assert f"K = 5: {s:.2f}× at B = 1" in md and f"K = 5: {s:.2f}× at B = 1" in html
    verdict = json.loads((d / "verdict.json").read_text())
    assert verdict["headline"] in md and str(verdict["gate_batch"]) in verdict["headline"]
    assert f'"disable_by_batch_size": {verdict["gate_batch"]}' in md  # vLLM V0
    assert f'[{verdict["gate_batch"]}, 1024, 0]' in md  # vLLM V1's per-batch schedule: off from the gate


@pytest.mark.slow
def test_the_serving_report_shows_the_comparison_it_chose_from(regenerated):
    d = regenerated["llama-70b-h100-chat"]
    gates = pd.read_csv(d / "serving_gates.csv")
    verdict = json.loads((d / "verdict.json").read_text())
    chosen = verdict["serving"]["chosen"]
    worst = gates[gates["policy"] == chosen]["regret"].max()
    assert worst == pytest.approx(verdict["serving"]["worst_regret"], rel=1e-5)
    assert worst <= 1.0
    md = (d / "report.md").read_text()
    assert f"chosen: **{chosen}**" in md and "SLO: TTFT ≤ 2 s, TPOT ≤ 50 ms" in md
    for fig in ("latency_vs_rate.png", "throughput_vs_rate.png", "goodput_vs_rate.png"):
        assert f"]({fig})" in md


@pytest.mark.slow
def test_the_report_opens_in_headless_chromium(regenerated, tmp_path):
    from browser_check import check_page, find_chromium

    if find_chromium() is None:
        pytest.skip("chromium is not installed (Debian: apt-get install -y chromium; .ci/run installs it)")
    for name in ("seed-70b-hbm", "llama-70b-h100-chat"):
        page = check_page(regenerated[name] / "report.html")
        assert page.console_errors == [], page.console_errors
        assert page.broken_images == [], page.broken_images
        assert page.external_refs == []
        assert page.title == f"specsim report: {name}"
        assert page.text_chars > 3000 and len(page.images) >= 6
        shot = tmp_path / f"{name}.png"
        shot.write_bytes(page.screenshot_png)
        from PIL import Image

        img = Image.open(shot)
        assert img.size == (1280, 900)
        assert len(img.convert("RGB").getcolors(maxcolors=1 << 20) or []) > 20  # not a blank page
