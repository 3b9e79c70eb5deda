"""The closed loop on the machine that runs the tests (issue 37): a short machine calibration, a few
(M, context) decoder points, the step fit and validate, each through the same library calls the
README's commands make, at a small size; then validate's verify passes against what the calibrated
model predicts for them. A second test plants another machine's profile and checks that the loop refuses
it in one line.

A shared, noisy machine: every timing reads this thread's CPU time with one numba thread (the thread
clock leaves out the waits for a CPU that another xdist worker causes), the timing commands check their
own figures (decoder.disturbance) and measure again before they refuse, validate times its passes in
rounds over every point with a reference step beside each (interleaved), and every figure is a median of
repeats. The bound on each pass is set from the spread validate measured for it (stated at BOUND_*).
If the machine is too busy to measure at all, the timing commands refuse (DisturbedError) and the
test skips with their one-line reason: a refusal is the loop working, not closing or failing to.

Under pytest-xdist with several workers the tests skip and say where they run instead: beside another
worker the calibration itself is measured disturbed (memory traffic inflates even the thread clock: one
full-suite run here saw validate's reference step at 6.70 ms against 10.17 ms calibrated and refuse), so
`.ci/run` runs this file alone after the parallel suite, on a machine nothing else is using.

Costs about a minute and a half on 2 idle cores (SmolLM2-135M, the real target: the loop is about its
kernels and shapes; skipped when the GGUF is not in the cache)."""
from __future__ import annotations

import json
import os

import pytest

from specsim.errors import DisturbedError

pytestmark = [pytest.mark.realmodel, pytest.mark.slow]

# the bench's points (the step fit's rows) and validate's (M = 3, 5, 9: the K = 2, 4, 8 chains' passes,
# which the fit never saw)
BENCH_M, BENCH_CONTEXTS = (1, 2, 4, 8, 16), (128, 512)
CHECK_M, CHECK_CONTEXTS = (1, 3, 5, 9), (128, 512)
REPEATS = 5
# a pass closes when its error against the reference step timed beside it (validate's ratio_error: predicted
# pass / predicted reference over measured pass / measured reference, less 1) is within BOUND_BASE_FRAC +
# BOUND_SPREAD_WEIGHT x the pass's own measured spread ((max - min) / median over its repeats): the README's goal
# on a quiet machine is 10 % at the median and the shipped calibration's worst pass was 19.7 %, so 20 % plus
# what the machine's noise adds; and the median over every pass within BOUND_MEDIAN_FRAC (the target,
# 10 %, plus half again for a loop of 3 repeats at a tenth of the README's size).
# Why against the reference: this machine's speed moves between the calibration and the check by itself. Six
# runs of this file alone here (December 2026) found the reference step -18 % to +25 % off its calibrated time
# (validate refuses beyond 25 %) and every pass of a run moved with it (M = 1 at 512: +42.7 % in one run, -15.9 %
# in another), while the errors against the reference stayed within -14.0 to +15.5 %. The drift is the
# machine's state, not the model's; the plain errors must still be explained by it: their median within
# BOUND_MEDIAN_FRAC plus the median drift.
BOUND_BASE_FRAC = 0.20
BOUND_SPREAD_WEIGHT = 1.0
BOUND_MEDIAN_FRAC = 0.15


def _model_path():
    from specsim.decoder.fetch import default_model_path

    path = default_model_path()
    if not path.is_file():
        pytest.skip(f"SmolLM2-135M GGUF not in the cache at {path}; run `specsim decoder fetch`")
    return path


def _or_skip(fn):
    """fn(), or a skip that says why when the machine is too busy to measure (the commands refused)."""
    try:
        return fn()
    except DisturbedError as exc:
        pytest.skip(f"the machine is too busy to measure: {exc}")


@pytest.fixture(scope="module")
def calibrated(tmp_path_factory):
    """The loop's first three steps, as `calibrate machine --threads 1 --clock thread`, `decoder bench` and
    `calibrate steps --format bench --write-stack` run them, at a small size: the profile, the bench and
    the stack written into a temporary folder."""
    from specsim.calibration.decoder_stack import (bench_machine_mismatches, bench_rows, check_bench_file,
                                                   check_host, check_step_fit, measure_host_in_loop, stack_toml)
    from specsim.calibration.fit import fit_efficiency
    from specsim.calibration.machine import MachineConfig, measure_machine_checked
    from specsim.decoder.bench import check_bench
    from specsim.decoder.disturbance import measure_checked
    from specsim.decoder.run import BenchConfig, bench

    if int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) > 1:
        pytest.skip("the closed loop times this machine's CPU and must have it alone: beside other pytest-xdist "
                    "workers its calibration is measured disturbed; run `.venv/bin/python -m pytest -q "
                    "tests/test_closed_loop.py` (.ci/run does, after the parallel suite)")
    model = _model_path()
    d = tmp_path_factory.mktemp("closed-loop")
    # the layer format only (the [kernels] curve is fitted to it), M = 1, 2, 3, 4, 8, 16 (with 1, 4, 8, 16 alone
    # the single-row pass's cost is read from M = 1, where the read hides it, and M = 3 came out 60 % over), no
    # 1 GiB read (a note only)
    cfg = MachineConfig(repeats=3, threads=(1,), formats=("Q4_1",), m_values=(1, 2, 3, 4, 8, 16),
                        contexts=BENCH_CONTEXTS, clock="thread", dram_read=False)
    prof = _or_skip(lambda: measure_machine_checked(cfg, attempts=3))
    hw = d / "local.toml"
    hw.write_text(prof.toml(command="tests/test_closed_loop.py: calibrate machine --threads 1 --clock thread"))

    bcfg = BenchConfig(model=model, m_values=BENCH_M, contexts=BENCH_CONTEXTS, repeats=REPEATS, threads=1, clock="thread")
    res, _ = _or_skip(lambda: measure_checked(lambda: bench(bcfg), lambda r: check_bench(list(r.rows)),
                                              what="decoder bench", threads=1, clock="thread", attempts=3))
    (d / "bench").mkdir()
    (d / "bench" / "bench.json").write_text(res.to_json())
    assert bench_machine_mismatches(d / "bench", str(hw)) == []  # the bench and the profile: one machine, one run

    cal = fit_efficiency(bench_rows(d / "bench", hardware=str(hw)),
                         fit=("bandwidth_frac", "compute_frac", "step_overhead_s", "per_layer_overhead_s"))
    problems = check_bench_file(d / "bench") + check_step_fit(cal)
    assert problems == [], problems  # the bench passed its checks above; its fit must explain it
    host, _ = _or_skip(lambda: measure_checked(lambda: measure_host_in_loop(tokens=16, repeats=3, clock="thread",
                                                                            threads=1),
                                               check_host, what="calibrate steps (host work)", threads=1,
                                               clock="thread", attempts=3))
    stack = d / "specsim-numba.toml"
    stack.write_text(stack_toml(cal, host, stack_id="specsim-numba",
                                command="tests/test_closed_loop.py: calibrate steps --format bench --write-stack",
                                bench_path=str(d / "bench"), hardware=str(hw)))
    return dict(model=model, hardware=hw, stack=stack, dir=d)


def test_the_loop_closes_on_this_machine(calibrated):
    """validate's verify passes (M = 1, 3, 5, 9 at contexts 128 and 512) against the model calibrated minutes
    before, each against the reference step timed beside it: every pass within its bound, the median within
    BOUND_MEDIAN_FRAC, and the plain errors' median within that plus the machine's drift; a pass that is off
    is named with its M, context, both times and the operator class furthest from its measured share."""
    from specsim.calibration.validate import ValidateConfig, validate

    cfg = ValidateConfig(model=calibrated["model"], hardware=str(calibrated["hardware"]), stack=str(calibrated["stack"]),
                         m_values=CHECK_M, contexts=CHECK_CONTEXTS, repeats=REPEATS, parts=("verify",), threads=1,
                         clock="thread", attempts=3)
    res = _or_skip(lambda: validate(cfg))
    v = res.verify
    assert len(v) == len(CHECK_M) * len(CHECK_CONTEXTS) and res.summary["disturbed"] == []
    print("\n".join(f"M = {r.m} at {r.context_len}: {r.relative_error:+.1%}, against the reference {r.ratio_error:+.1%} "
                    f"(reference drift {r.reference_drift:+.1%})" for r in v.itertuples()))  # with -s
    spread = (v["measured_max_s"] - v["measured_min_s"]) / v["measured_s"]
    bound = BOUND_BASE_FRAC + BOUND_SPREAD_WEIGHT * spread
    off = v[v["ratio_error"].abs() > bound]
    lines = [f"verify pass M = {r.m} at context {r.context_len}: predicted {r.predicted_s * 1e3:.2f} ms, measured "
             f"{r.measured_s * 1e3:.2f} ms [{r.measured_min_s * 1e3:.2f}-{r.measured_max_s * 1e3:.2f}] "
             f"({r.relative_error:+.1%}; against the reference step beside it {r.ratio_error:+.1%}, bound {b:.1%}); "
             f"{r.term or 'no class named'}" for r, b in zip(off.itertuples(), bound[off.index])]
    assert not lines, "the loop does not close:\n" + "\n".join(lines)
    median = float(v["ratio_error"].abs().median())
    assert median <= BOUND_MEDIAN_FRAC, (f"the loop does not close: median |error| against the reference step "
                                         f"{median:.1%} over {len(v)} passes (bound {BOUND_MEDIAN_FRAC:.0%}); worst M = "
                                         f"{int(v.loc[v['ratio_error'].abs().idxmax(), 'm'])}")
    drift = float(v["reference_drift"].median())
    plain = float(v["relative_error"].abs().median())
    assert plain <= BOUND_MEDIAN_FRAC + abs(drift), (
        f"the loop does not close: median |error| {plain:.1%} over {len(v)} passes, more than the "
        f"{BOUND_MEDIAN_FRAC:.0%} bound plus the machine's drift since its calibration ({drift:+.1%})")


def test_the_loop_refuses_another_machine_s_profile(calibrated, tmp_path, capsys):
    """The profile just measured, its [machine] edited to another CPU: validate and `calibrate steps --format
    bench` refuse it in one line naming the difference, before any pass is timed or any file written."""
    from specsim.cli import main

    text = calibrated["hardware"].read_text()
    cpu = json.loads(text.split("\n[machine]\ncpu = ", 1)[1].split("\n", 1)[0])
    planted = tmp_path / "other.toml"
    planted.write_text(text.replace(f"[machine]\ncpu = {json.dumps(cpu)}", '[machine]\ncpu = "Some Other CPU 9000"'))
    stack = tmp_path / "stack.toml"
    argv = ["validate", "--model", str(calibrated["model"]), "--hardware", str(planted), "--stack",
            str(calibrated["stack"]), "--m", "1", "--contexts", "128", "--repeats", "1", "--parts", "verify",
            "--threads", "1", "--clock", "thread", "--out", str(tmp_path / "v")]
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "CPU: 'Some Other CPU 9000' there" in err
    assert not (tmp_path / "v").exists() or not any((tmp_path / "v").iterdir())
    assert main(["calibrate", "steps", str(calibrated["dir"] / "bench"), "--format", "bench", "--bench-hardware",
                 str(planted), "--write-stack", str(stack)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Some Other CPU 9000" in err and not stack.exists()
