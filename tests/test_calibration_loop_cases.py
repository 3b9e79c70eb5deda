"""The loop's commands on input they must refuse or handle (issue 37's cases), each in one line naming the
flag, the value and the rule, and each before any measurement: `calibrate steps --format bench` against a
GPU part, `--other-machine` (and `--force`) with `--format rows`, `calibrate machine --out` and `calibrate
steps --write-stack` onto a folder or a read-only file. Nothing here measures (a planted measurement fails
the test if it is reached), so each case takes well under 10 s."""
from __future__ import annotations

import json
import os
import stat
import time

import pytest

from specsim.cli import main


def _bench_file(tmp_path):
    """A bench.json as `decoder bench --out` writes it for the fetched GGUF (two passes, times by hand)."""
    (tmp_path / "bench").mkdir()
    rows = [{"context_len": 128, "m": m, "verify_s": t, "per_token_s": t / m, "ratio_to_m1": t / 0.008,
             "verify_min_s": t * 0.98, "verify_max_s": t * 1.02} for m, t in ((1, 0.008), (4, 0.010), (16, 0.024))]
    (tmp_path / "bench" / "bench.json").write_text(json.dumps(
        {"model": "/x/SmolLM2-135M-Instruct.Q4_1.gguf", "config": {"threads": 1, "clock": "thread"}, "rows": rows}))
    return tmp_path / "bench"


def _one_line(capsys) -> str:
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    return err


def test_steps_against_a_gpu_part_is_refused(tmp_path, capsys):
    t0 = time.perf_counter()
    rc = main(["calibrate", "steps", str(_bench_file(tmp_path)), "--format", "bench", "--bench-hardware", "h100-sxm"])
    err = _one_line(capsys)
    assert rc == 2 and "--bench-hardware: field 'kind' = 'h100-sxm is a gpu part'" in err
    assert "the CPU profile of the machine the bench ran on" in err and time.perf_counter() - t0 < 10


@pytest.mark.parametrize("flag", ["--other-machine", "--force"])
def test_bench_only_flags_with_rows_are_refused(tmp_path, capsys, flag):
    rows = tmp_path / "rows.csv"
    rows.write_text("hardware,target,tp,batch_size,q_len,context_len,logit_len,measured_time_s\n"
                    "ddr5-5600-2ch,smollm2-135m-q4_1,1,1,1,128,1,0.01\n")
    rc = main(["calibrate", "steps", str(rows), flag])
    err = _one_line(capsys)
    assert rc == 2 and f"{flag}: applies to --format bench only" in err and "--format rows" in err


def _no_measurement(monkeypatch):
    import specsim.calibration.machine as M

    def planted(*a, **k):
        raise AssertionError("measured before the output path was checked")
    monkeypatch.setattr(M, "measure_machine_checked", planted)
    monkeypatch.setattr(M, "measure_machine", planted)


@pytest.mark.parametrize("force", [[], ["--force"]])
def test_machine_out_onto_a_folder_is_refused_before_measuring(tmp_path, capsys, monkeypatch, force):
    _no_measurement(monkeypatch)
    rc = main(["calibrate", "machine", "--out", str(tmp_path), *force])
    assert rc == 5 and f"--out {str(tmp_path)!r} is a folder; expected a file path" in _one_line(capsys)
    rc = main(["calibrate", "machine", "--out", str(tmp_path / "new") + "/", *force])
    assert rc == 5 and "ends with a separator" in _one_line(capsys)


def test_machine_out_onto_a_read_only_file_is_refused_before_measuring(tmp_path, capsys, monkeypatch):
    _no_measurement(monkeypatch)
    out = tmp_path / "local.toml"
    out.write_text("kept\n")
    out.chmod(stat.S_IRUSR | stat.S_IRGRP)  # 0440: its owner asked that it not be replaced
    rc = main(["calibrate", "machine", "--out", str(out), "--force"])
    err = _one_line(capsys)
    assert rc == 5 and f"--out {str(out)!r} is read-only (mode 0440)" in err and out.read_text() == "kept\n"
    out.chmod(0o640)
    rc = main(["calibrate", "machine", "--out", str(out), "--attempts", "0", "--force"])
    assert rc == 2 and "--attempts 0: expected an integer >= 1" in _one_line(capsys)


def test_steps_write_stack_onto_a_read_only_file_is_refused_before_the_fit(tmp_path, capsys, monkeypatch):
    import specsim.calibration.fit as F

    monkeypatch.setattr(F, "fit_efficiency", lambda *a, **k: pytest.fail("fitted before --write-stack was checked"))
    stack = tmp_path / "stack.toml"
    stack.write_text("kept\n")
    os.chmod(stack, 0o444)
    rc = main(["calibrate", "steps", str(_bench_file(tmp_path)), "--format", "bench", "--write-stack", str(stack)])
    assert rc == 5 and "--write-stack" in _one_line(capsys) and stack.read_text() == "kept\n"


def test_a_written_stack_says_which_machine_it_describes(tmp_path):
    """The stack `calibrate steps --write-stack` writes names the machine and run of its bench (its `machine`
    as `decoder bench` records it), in a comment at its top and in its notes."""
    import pandas as pd

    from specsim.calibration.decoder_stack import stack_toml
    from specsim.calibration.fit import fit_efficiency
    from specsim.specs.stacks import load_stack

    rows = pd.DataFrame([dict(hardware="ddr5-5600-2ch", target="smollm2-135m-q4_1", tp=1, batch_size=1, q_len=m,
                              context_len=c, logit_len=m, measured_time_s=0.004 + 0.0004 * m + 1e-6 * c)
                         for m in (1, 4, 16) for c in (128, 1024)])
    cal = fit_efficiency(rows, fit=("bandwidth_frac", "compute_frac", "step_overhead_s", "per_layer_overhead_s"))
    host = {"step_s": 1.5e-4, "cycle_s": 6e-4, "draft_token_s": 2e-4, "k": 4, "accepted": 2, "repeats": 3}
    machine = {"cpu": "AMD EPYC", "block_matmul": "vnni", "attention": "vector", "threads": 1, "clock": "thread"}
    text = stack_toml(cal, host, stack_id="s", command="test", bench_path="b", hardware="h", machine=machine)
    assert "# It describes AMD EPYC (vnni matmul tiles, vector attention), 1 thread, thread clock" in text
    path = tmp_path / "s.toml"
    path.write_text(text)
    assert load_stack(str(path)).notes.startswith("Describes AMD EPYC (vnni matmul tiles, vector attention)")
