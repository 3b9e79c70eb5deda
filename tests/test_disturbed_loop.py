"""The timing commands under a planted disturbance (issue 37): a busy loop on every CPU, started by the test
and ended by it (each loop also ends itself after SPIN_S), while `decoder bench`, `calibrate machine` and
validate's verify passes measure. Nothing nonsensical may be written: each command either refuses in one
line naming what disagreed and that the machine looks busy (DisturbedError, exit status 7) and leaves no
output, or writes figures that pass its own checks (decoder.disturbance). One numba thread, wall clock,
one measurement each (the retry is tests/test_decoder_disturbance.py's), the tiny model and the quick
machine shapes: each command a few seconds of measuring."""
from __future__ import annotations

import json
import subprocess
import sys
from contextlib import contextmanager

import pytest

from specsim.decoder.disturbance import n_cpus
from specsim.errors import DisturbedError

SPIN_S = 60  # the longest a planted busy loop can outlive a test that failed to end it


@contextmanager
def busy_every_cpu():
    """One spinning process per CPU this process may use, ended on exit (by the ids this test started)."""
    code = f"import time\nend = time.monotonic() + {SPIN_S}\nwhile time.monotonic() < end:\n    pass\n"
    spinners = [subprocess.Popen([sys.executable, "-c", code]) for _ in range(n_cpus())]
    try:
        yield
    finally:
        for p in spinners:
            p.kill()
        for p in spinners:
            p.wait(timeout=10)


def _refused(message: str) -> None:
    assert "\n" not in message and "nothing written: its figures disagree" in message
    assert "the machine looks busy" in message and "--force" in message


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from tiny_loop import write_tiny_loop

    d = tmp_path_factory.mktemp("disturbed")
    gguf = write_tiny_loop(d, n_ctx=512)
    from specsim.decoder.run import BenchConfig, bench

    # the kernels loaded (compiled or read from numba's cache) before any busy loop: the planted disturbance
    # is on the measurements, not on a minute of compiling
    bench(BenchConfig(model=gguf, m_values=(1, 4), contexts=(16,), repeats=1, threads=1))
    return d, gguf


def test_decoder_bench_under_a_busy_loop_on_every_cpu(tiny, tmp_path, capsys):
    from specsim.cli import main
    from specsim.decoder.bench import check_bench

    _, gguf = tiny
    out = tmp_path / "bench"
    with busy_every_cpu():
        rc = main(["decoder", "bench", "--model", str(gguf), "--m", "1,4", "--contexts", "16,64", "--repeats", "2",
                   "--threads", "1", "--attempts", "1", "--out", str(out)])
    err = capsys.readouterr().err
    if rc == 7:
        _refused(err.strip().splitlines()[-1])
        assert "specsim: error: decoder bench:" in err and not (out / "bench.json").exists()
    else:
        assert rc == 0
        data = json.loads((out / "bench.json").read_text())
        assert "disturbed" not in data and check_bench(data["rows"]) == []


def test_calibrate_machine_under_a_busy_loop_on_every_cpu():
    from specsim.calibration.machine import MachineConfig, check_profile, measure_machine_checked

    cfg = MachineConfig(repeats=2, threads=(1,), formats=("Q4_1",), m_values=(1, 8), contexts=(32, 64), quick=True)
    with busy_every_cpu():
        try:
            prof = measure_machine_checked(cfg, attempts=1)
        except DisturbedError as exc:
            _refused(str(exc))
            assert str(exc).startswith("calibrate machine: nothing written")
            return
    assert prof.disturbed == () and check_profile(prof) == []


def test_validate_under_a_busy_loop_on_every_cpu(tiny):
    from specsim.calibration.validate import ValidateConfig, check_verify, validate

    d, gguf = tiny
    cfg = ValidateConfig(model=gguf, hardware=str(d / "cpu.toml"), stack=str(d / "stack.toml"),
                         target=str(d / "tiny-model.toml"), m_values=(1, 4), contexts=(16, 64), repeats=2,
                         parts=("verify",), split=False, threads=1, attempts=1)
    with busy_every_cpu():
        try:
            res = validate(cfg)
        except DisturbedError as exc:
            _refused(str(exc))
            assert str(exc).startswith("validate (verify passes): nothing written")
            return
    assert res.summary["disturbed"] == [] and check_verify(res.verify) == []
