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
import os
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
    here = os.getcwd()
    os.chdir(base)  # the manifest's own --out (reports/NAME), under the temporary folder: the page shows that command
    try:
        for name in NAMES:
            argv = shlex.split(_manifest(name)["command"])
            assert argv[:2] == ["specsim", "report"], argv
            argv = argv[1:]
            assert argv[argv.index("--out") + 1] == f"reports/{name}", argv
            assert main(argv + ["--quiet"]) == 0, argv
            out[name] = base / "reports" / name
    finally:
        os.chdir(here)
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


FIRST_SCREEN = REPORTS / "seed-70b-hbm" / "first_screen.png"
FIRST_SCREEN_ENV = REPORTS / "seed-70b-hbm" / "first_screen.json"
WRITE_FLAG = "SPECSIM_WRITE_FIRST_SCREEN"
# "equal": at most this share of the pixels differs by more than PIXEL_LEVELS (of 255) in a channel. The same
# Chromium and fonts render the same page to the same pixels; one changed line of text (the V0 line the
# README once showed where the page had V1) moves about a thousand pixels, ten times this bound.
MAX_DIFFERING_FRAC = 1e-4
PIXEL_LEVELS = 48


def _first_screen(regenerated, name):
    from browser_check import check_page, find_chromium

    if find_chromium() is None:
        pytest.skip("chromium is not installed (Debian: apt-get install -y chromium; .ci/run installs it)")
    return check_page(regenerated[name] / "report.html", rects=(".verdict", "#verdict_curve img", "#paste"))


@pytest.mark.slow
@pytest.mark.parametrize("name", ["seed-70b-hbm", "llama-70b-h100-chat"])
def test_the_first_screen_shows_the_verdict_and_its_curve_without_scrolling(regenerated, name):
    page = _first_screen(regenerated, name)
    verdict, img, paste = (page.rects[s] for s in (".verdict", "#verdict_curve img", "#paste"))
    assert img is not None and img["loaded"] and img["visible"], img
    width, height = 1280, 900
    for box in (verdict, img):  # wholly inside the first screen
        assert 0 <= box["top"] and box["bottom"] <= height and 0 <= box["left"] and box["right"] <= width, box
    assert img["width"] >= 500 and img["height"] >= 300  # a figure one can read, not a thumbnail
    assert img["left"] >= verdict["right"]  # beside the verdict, not under it
    assert max(img["bottom"], verdict["bottom"]) <= paste["top"] < height  # the paste lines start below, on screen
    # what the figure draws is the verdict's: its switch-off, its gate (simulated for a [workload] scenario), its band
    rows = pd.read_csv(regenerated[name] / "verdict_curve.csv")
    verdict_json = json.loads((regenerated[name] / "verdict.json").read_text())
    off = verdict_json["analytic_switch_off"]["batch_off"]
    assert set(rows["switch_off_batch"].dropna()) == ({off} if off is not None else set())
    if verdict_json["serving"] is not None:
        assert set(rows["gate_batch"]) == {verdict_json["gate_batch"]}
    else:
        assert rows["gate_batch"].isna().all()
    assert (rows["speedup_low"] <= rows["speedup"] + 1e-9).all() and (rows["speedup"] <= rows["speedup_high"] + 1e-9).all()
    b1 = rows[rows["batch_size"] == 1].iloc[0]
    ends = sorted(r["speedup_b1"] for r in verdict_json["uncertainty"]["rows"])
    assert (b1["speedup_low"], b1["speedup_high"]) == pytest.approx(tuple(ends), rel=1e-5)


def _environment() -> dict:
    import subprocess

    from browser_check import chromium_version

    try:
        font = subprocess.run(["fc-match", "Helvetica"], capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        font = ""
    return {"chromium": chromium_version(), "font": font, "viewport": [1280, 900]}


@pytest.mark.slow
def test_the_readme_picture_is_the_first_screen_this_test_renders(regenerated, tmp_path):
    """The README's picture is this test's screenshot of the freshly made report: with
    SPECSIM_WRITE_FIRST_SCREEN=1 the test writes it (and the browser and font it was rendered with);
    otherwise it renders again and compares, so a change to the first screen fails here until the
    picture is rewritten."""
    from PIL import Image, ImageChops

    page = _first_screen(regenerated, "seed-70b-hbm")
    env = _environment()
    if os.environ.get(WRITE_FLAG) == "1":
        FIRST_SCREEN.write_bytes(page.screenshot_png)
        FIRST_SCREEN_ENV.write_text(json.dumps(env, indent=2) + "\n")
        return
    assert FIRST_SCREEN.is_file(), f"{FIRST_SCREEN} is missing: run this test with {WRITE_FLAG}=1"
    recorded = json.loads(FIRST_SCREEN_ENV.read_text())
    if {k: recorded.get(k) for k in ("chromium", "font")} != {k: env[k] for k in ("chromium", "font")}:
        pytest.skip(f"{FIRST_SCREEN.name} was rendered by {recorded.get('chromium')!r} with {recorded.get('font')!r}; "
                    f"this machine has {env['chromium']!r} with {env['font']!r}: pixels compare only in the same "
                    f"browser and fonts (rewrite it with {WRITE_FLAG}=1)")
    fresh = Image.open(__import__("io").BytesIO(page.screenshot_png)).convert("RGB")
    committed = Image.open(FIRST_SCREEN).convert("RGB")
    assert committed.size == fresh.size == (1280, 900)
    diff = ImageChops.difference(fresh, committed)
    levels = np.asarray(diff).max(axis=2)
    differing = int((levels > PIXEL_LEVELS).sum())
    if differing > MAX_DIFFERING_FRAC * levels.size:
        fresh.save(tmp_path / "first_screen_now.png")
        pytest.fail(f"the report's first screen differs from {FIRST_SCREEN.relative_to(REPORTS.parent)} in {differing} "
                    f"pixels (bound {MAX_DIFFERING_FRAC * levels.size:.0f}); now: {tmp_path / 'first_screen_now.png'}; "
                    f"rewrite it with {WRITE_FLAG}=1 .venv/bin/python -m pytest tests/test_reports.py -k readme_picture")
