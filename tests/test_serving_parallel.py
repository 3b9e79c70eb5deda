"""Independent points on a process pool and a Dask cluster give exactly the serial results, and an
interrupted sweep resumes from the points already written without ever looking finished."""
from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from specsim.cli import main
from specsim.errors import SpecError
from specsim.presentation.output import MANIFEST
from specsim.presentation.parallel import POINTS_PREFIX, PointStore, run_points
from specsim.presentation.simulation import compare_policies
from specsim.presentation.sweep import run_sweep
from specsim.specs.scenario import load_scenario
from specsim.speculation.operating_point import resolve, resolve_id

SCENARIO = """
name = "tiny-fleet"
hardware = "h100-sxm"
target = "llama-3.1-8b"
drafter = "llama-3.2-1b"
method = "draft_model"
k = 3
alpha = 0.8
[workload]
kind = "trace"
trace = "{trace}"
rates = [1.0, 3.0, 6.0]
[engine]
max_num_seqs = 8
max_num_batched_tokens = 512
[fleet]
n_replicas = 2
router = "least_outstanding"
[policies]
never = {{ kind = "never" }}
static = {{ kind = "static", k = 3 }}
gate = {{ kind = "disable_by_batch_size", k = 3, threshold = 3 }}
"""


def _scenario(tmp_path: Path, n: int = 30) -> Path:
    trace = tmp_path / "trace.csv"
    rows = [f"{i * 0.4},{64 + 7 * i},{8 + (i % 5) * 6}" for i in range(n)]
    trace.write_text("arrival_time_s,prompt_tokens,output_tokens\n" + "\n".join(rows) + "\n")
    path = tmp_path / "tiny.toml"
    path.write_text(SCENARIO.format(trace=trace))
    return path


def _same(a, b) -> None:
    pd.testing.assert_frame_equal(a.table, b.table)
    assert a.results.keys() == b.results.keys()
    for key in a.results:
        pd.testing.assert_frame_equal(a.results[key].requests, b.results[key].requests)
        pd.testing.assert_frame_equal(a.results[key].steps, b.results[key].steps)


def test_pool_and_a_two_worker_local_cluster_match_the_serial_run(tmp_path):
    from distributed import Client, LocalCluster

    op = resolve_id(str(_scenario(tmp_path)))
    serial = compare_policies(op, seed=7, workers=1)
    assert len(serial.results) == 9 and serial.setup.fleet.n_replicas == 2
    pool = compare_policies(op, seed=7, workers=2)
    _same(serial, pool)
    # the analytic sweep's combinations, too
    grid = op.with_overrides(sections={"sweep": {"method": ["draft_model", "eagle", "medusa"], "k": [1, 2, 4],
                                                 "batch_size": [1, 8, 64], "stack": ["", "vllm"]}})
    sweep_serial = run_sweep(grid, workers=1)
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                      silence_logs=logging.CRITICAL) as cluster, Client(cluster) as client:
        dask = compare_policies(op, seed=7, cluster=client)
        sweep_dask = run_sweep(grid, cluster=client)
    _same(serial, dask)
    pd.testing.assert_frame_equal(sweep_serial, sweep_dask)
    assert len(sweep_serial) == 3 * 3 * 3 * 2


def _count_and_maybe_stop(shared, point):
    """A point function that records each call in a file and stops the run at a chosen point."""
    log, stop_at = shared
    with open(log, "a") as f:
        f.write(f"{point}\n")
    if point == stop_at:
        raise KeyboardInterrupt
    return point * point


def test_an_interrupted_run_resumes_from_the_points_already_written(tmp_path):
    log = tmp_path / "calls.txt"
    store = PointStore(tmp_path / "out", {"what": "squares"})
    with pytest.raises(KeyboardInterrupt):
        run_points(_count_and_maybe_stop, (str(log), 3), list(range(6)), workers=1, store=store)
    assert sorted(p.name for p in store.path.iterdir()) == ["point-000000.pkl", "point-000001.pkl", "point-000002.pkl"]
    assert store.path.name.startswith(POINTS_PREFIX)
    seen = []
    got = run_points(_count_and_maybe_stop, (str(log), -1), list(range(6)), workers=1, store=store,
                     progress=lambda i, n, p: seen.append((i, n)))
    assert got == [p * p for p in range(6)]
    assert log.read_text().split() == ["0", "1", "2", "3", "3", "4", "5"]  # 0-2 never ran again
    assert seen == [(i, 6) for i in range(1, 7)]
    # another command's points are not this one's
    other = PointStore(tmp_path / "out", {"what": "cubes"})
    assert other.path != store.path and other.load(6) == {}


def test_simulate_cli_resumes_and_never_looks_finished_before_it_is(tmp_path, monkeypatch, capsys):
    path = _scenario(tmp_path, n=16)
    out = tmp_path / "out"
    import specsim.serving.rates as rates

    real = rates.run_point
    calls = []
    stop = [4]  # the first run is interrupted at its 4th point (Ctrl-C), the rerun is not

    def flaky(setup, point):
        calls.append(point)
        if len(calls) == stop[0]:
            raise KeyboardInterrupt
        return real(setup, point)

    monkeypatch.setattr(rates, "run_point", flaky)
    args = ["simulate", str(path), "--out", str(out), "--workers", "1", "--no-plots", "--quiet", "--json"]
    assert main(args) == 130  # interrupted
    left = sorted(p.name for p in out.iterdir())
    assert len(left) == 1 and left[0].startswith(POINTS_PREFIX) and not (out / MANIFEST).exists()
    assert len(list((out / left[0]).iterdir())) == 3
    calls.clear()
    stop[0] = 0
    capsys.readouterr()
    assert main(args) == 0
    assert len(calls) == 9 - 3  # only the points not yet written
    manifest = json.loads((out / MANIFEST).read_text())
    assert "summary.csv" in manifest["files"]
    assert not any(p.name.startswith(POINTS_PREFIX) for p in out.iterdir())
    # the resumed table equals an uninterrupted one
    monkeypatch.setattr(rates, "run_point", real)
    fresh = tmp_path / "fresh"
    assert main(["simulate", str(path), "--out", str(fresh), "--workers", "1", "--no-plots", "--quiet", "--json"]) == 0
    pd.testing.assert_frame_equal(pd.read_csv(out / "summary.csv"), pd.read_csv(fresh / "summary.csv"))


def test_bad_workers_and_cluster_are_refused(tmp_path, capsys):
    path = _scenario(tmp_path, n=4)
    assert main(["simulate", str(path), "--workers", "0", "--quiet"]) == 2
    assert "--workers 0" in capsys.readouterr().err
    assert main(["simulate", str(path), "--cluster", "localhost:1", "--quiet"]) == 2
    assert "tcp://HOST:PORT" in capsys.readouterr().err
    with pytest.raises(SpecError, match="--workers"):
        run_points(_count_and_maybe_stop, None, [1], workers=-1)
