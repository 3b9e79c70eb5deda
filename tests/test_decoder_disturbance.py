"""Measurements that know when they are disturbed (decoder.disturbance and the checks of each timing
command: calibration.machine.check_profile, decoder.bench.check_bench, calibration.decoder_stack's
check_step_fit and check_host, calibration.validate.check_verify). Every figure here is planted by hand,
so each check is seen to fire on the contradiction it names and to stay quiet on consistent figures;
nothing is timed."""
from __future__ import annotations

import math
from dataclasses import replace
from types import SimpleNamespace

import pandas as pd
import pytest

from specsim.decoder import disturbance as D
from specsim.errors import DisturbedError


# ---- the shared pieces --------------------------------------------------------------------------------

def test_must_grow_finds_the_fall_and_forgives_ties():
    # the issue's bench: a one-token pass at context 512 timed at 1,172 ms and a two-token pass at 216 ms
    found = D.must_grow([(1, 1.172), (2, 0.216), (4, 0.230)], what="the verify pass at context 512", along="M")
    assert len(found) == 1 and "at M 2 takes 216 ms, 82% less than at M 1 (1.17e+03 ms)" in found[0]
    # a tie within the tolerance (a tiny model's pass over 16 or 64 cached tokens) is no contradiction;
    # 0.80 of the largest earlier point is within DIP_TOLERANCE_FRAC = 0.25, 0.74 is not
    assert D.must_grow([(16, 1.0), (64, 0.99)], what="x", along="context") == []
    assert D.must_grow([(1, 1.0), (3, 1.1), (4, 0.8 * 1.1)], what="x", along="M") == []
    assert D.must_grow([(1, 1.0), (3, 1.1), (4, 0.74 * 1.1)], what="x", along="M")


def test_spread_counts_figures_past_their_median():
    rows = [dict(time_s=1.0, time_min_s=0.9, time_max_s=1.1, name=str(i)) for i in range(8)]
    assert D.spread_problems(rows, what="figures", label=lambda r: r["name"]) == []
    # two of eight figures spread past 100 % of their median: 25 %, at the limit, not past it
    wide = [dict(r, time_max_s=2.5) for r in rows[:2]] + rows[2:]
    assert D.spread_problems(wide, what="figures", label=lambda r: r["name"]) == []
    # three of eight (37.5 % > 25 %): refused, naming the worst, (3.5 - 0.9) / 1 = 260 %
    wide = [dict(rows[0], time_max_s=3.5)] + [dict(r, time_max_s=2.5) for r in rows[1:3]] + rows[3:]
    found = D.spread_problems(wide, what="figures", label=lambda r: r["name"])
    assert found == ["3 of 8 figures spread over more than 100% of their median between repeats (worst 0: 260%)"]


def test_others_cpus_is_the_busy_time_less_this_process():
    a = D.CpuSnapshot(wall_s=10.0, busy_s=100.0, own_s=5.0)
    # 2 s of wall time; every CPU's busy time grew by 3.0 s, this process's by 1.0 s: others 2.0 / 2 = 1.0
    b = D.CpuSnapshot(wall_s=12.0, busy_s=103.0, own_s=6.0)
    assert D.others_cpus(a, b) == pytest.approx(1.0, abs=1e-12)
    assert D.others_cpus(a, replace(b, busy_s=None)) is None
    assert D.others_cpus(a, replace(b, wall_s=10.1)) is None  # shorter than /proc/stat's ticks can tell


def test_oversubscription(monkeypatch):
    monkeypatch.setattr(D, "n_cpus", lambda: 2)
    assert "numba runs 4 threads on 2 CPUs" in D.oversubscription(4, None)[0]
    # one thread beside one CPU of other work on two CPUs: each has its CPU (the xdist workers of CI)
    assert D.oversubscription(1, 1.0) == []
    assert D.oversubscription(1, 1.0 + D.OTHERS_SLACK_CPUS + 0.01)  # past the slack
    assert "other processes used 0.5 of 2 CPUs" in D.oversubscription(2, 0.5)[0]
    assert D.oversubscription(2, 0.2) == []
    # the thread clock leaves the waits for a CPU out: other work is the figures' checks' business
    assert D.oversubscription(1, 2.0, clock="thread") == []
    assert D.oversubscription(4, None, clock="thread")


def test_measure_checked_measures_again_then_refuses_in_one_line(monkeypatch):
    monkeypatch.setattr(D, "oversubscription", lambda *a, **k: [])
    calls = []

    def measure():
        calls.append(1)
        return len(calls)

    # fails on the first figures, passes on the second: one retry, no problem left
    result, problems = D.measure_checked(measure, lambda r: ["first try disturbed"] if r == 1 else [], what="x",
                                         threads=1)
    assert (result, problems, len(calls)) == (2, [], 2)
    calls.clear()
    with pytest.raises(DisturbedError) as exc:
        D.measure_checked(measure, lambda r: [f"figure {r} disagrees"], what="decoder bench", threads=1, attempts=3)
    msg = str(exc.value)
    assert len(calls) == 3 and "\n" not in msg and DisturbedError.exit_status == 7
    assert msg.startswith("decoder bench: nothing written: its figures disagree after 3 measurements: figure 3 disagrees")
    assert "the machine looks busy" in msg and "--force" in msg
    calls.clear()
    result, problems = D.measure_checked(measure, lambda r: ["always"], what="x", threads=1, attempts=2, force=True)
    assert (result, problems) == (2, ["always"])
    assert D.disturbed_note(problems).startswith("DISTURBED: written with --force")


# ---- calibrate machine ---------------------------------------------------------------------------------

def _clean_profile():
    """A profile fitted to tables planted from the cost curve (memory and compute add), attention growing
    with M and context at 60 ns per cached token per M, every repeat within 5 % of its median."""
    from specsim.calibration.machine import BITS, SHAPES, fit_profile

    rows = []
    for name, n, k, out_bytes, _ in SHAPES:
        for m in (1, 2, 4, 8, 16, 64):
            t = 5e-6 + (k * n * BITS["Q4_1"] / 8) / 20e9 + math.ceil(m / 8) * 2 * 8 * n * k / 2e11
            for fmt in ("Q4_1", "Q8_0", "Q4_0"):  # the same time: read rates within 8.5 / 4.5 = 1.9x
                rows.append(dict(format=fmt, shape=name, n=n, k=k, threads=1, m=m, out_bytes=out_bytes,
                                 bytes=n * k * BITS[fmt] / 8, flops=2.0 * m * n * k, time_s=t,
                                 time_min_s=t * 0.97, time_max_s=t * 1.03))
    att = [dict(threads=1, m=m, context_len=c, flops=4.0 * m * 9 * (c + m) * 64, time_s=2e-6 + 60e-9 * c * m,
                time_min_s=2e-6 + 58e-9 * c * m, time_max_s=2e-6 + 62e-9 * c * m)
           for m in (1, 4, 16) for c in (128, 512, 2048)]
    ew = [dict(kind=kind, threads=1, m=m, row_elems=r, time_s=1e-6 + m * r * 1e-10, time_min_s=1e-6, time_max_s=1.1e-6
               + m * r * 1e-10) for kind, r in (("norm", 576), ("rope", 576), ("act", 1536), ("add", 576), ("embed", 576))
          for m in (1, 8, 64)]
    ew += [dict(kind="gemm_floor", threads=1, m=1, time_s=5e-6, time_min_s=5e-6, time_max_s=5e-6),
           dict(kind="parallel_floor", threads=1, m=1, time_s=1e-6, time_min_s=1e-6, time_max_s=1e-6)]
    bw = pd.DataFrame([dict(size_bytes=2 ** 27, threads=1, time_s=2 ** 27 / 20e9, time_min_s=2 ** 27 / 21e9,
                            time_max_s=2 ** 27 / 19e9)])
    fma = pd.DataFrame([dict(threads=1, flops_per_s=5e10, flops_per_s_min=5e10, flops_per_s_max=5e10)])
    return fit_profile(bandwidth=bw, gemm=pd.DataFrame(rows), attention=pd.DataFrame(att), elementwise=pd.DataFrame(ew),
                       fma=fma, threads=1, repeats=5)


def test_a_consistent_profile_passes_and_the_issue_s_nonsense_is_named():
    from specsim.calibration.machine import check_profile

    prof = _clean_profile()
    assert check_profile(prof) == []
    # the issue's busy-machine profile: attention at context 2048 cheaper than at 128 (a negative cost per
    # cached token), Q4_0's matrix-vector read at 2.0 GB/s beside Q8_0's 28.5 GB/s, a 12 ms GEMM floor
    att = prof.attention.copy()
    late = (att["m"] == 4) & (att["context_len"] == 2048)
    att.loc[late, "time_s"] = 1e-6
    found = check_profile(replace(prof, attention=att))
    assert any("attention over M = 4 (1 thread(s)) at context 2048 takes 1 us" in f for f in found)
    assert any("costs" in f and "ns per cached token per layer: a cost that cannot be negative" in f for f in found)
    gemm = prof.gemm.copy()
    head1 = (gemm["shape"] == "head") & (gemm["m"] == 1)
    gemm.loc[head1 & (gemm["format"] == "Q8_0"), "time_s"] = float(
        gemm.loc[head1 & (gemm["format"] == "Q8_0"), "bytes"].iloc[0]) / 28.5e9
    gemm.loc[head1 & (gemm["format"] == "Q4_0"), "time_s"] = float(
        gemm.loc[head1 & (gemm["format"] == "Q4_0"), "bytes"].iloc[0]) / 2.0e9
    found = check_profile(replace(prof, gemm=gemm))
    assert any(f.startswith("Q4_0 matrix-vector products read 2.00 GB/s beside Q8_0's 28.50 GB/s") for f in found)
    floor = replace(prof.kernels, gemm_floor_s=12e-3)
    found = check_profile(replace(prof, kernels=floor))
    assert any(f.startswith("the fitted GEMM floor 1.2e+04 us exceeds the fastest product it explains") for f in found)


def test_a_profile_written_anyway_says_so(tmp_path):
    from specsim.specs.hardware import load_hardware

    prof = replace(_clean_profile(), disturbed=("other processes used 1.7 of 2 CPUs",))
    path = tmp_path / "local.toml"
    path.write_text(prof.toml(command="test"))
    text = path.read_text()
    assert "# DISTURBED: written with --force although its figures disagree" in text
    assert "DISTURBED" in load_hardware(path).notes  # the loaded profile carries the mark too


# ---- decoder bench, calibrate steps, validate ---------------------------------------------------------

def test_bench_rows_that_contradict_themselves():
    from specsim.decoder.bench import check_bench

    # a pass that costs 10 ms + 1 ms per M + 2 us per cached token, repeats within 10 %
    rows = [dict(context_len=c, m=m, verify_s=0.01 + 0.001 * m + 2e-6 * c, verify_min_s=0.01, verify_max_s=0.011 + 0.001 * m
                 + 2e-6 * c) for c in (128, 512) for m in (1, 2, 4)]
    assert check_bench(rows) == []
    bad = [dict(r, verify_s=1.172) if (r["m"], r["context_len"]) == (1, 512) else r for r in rows]
    found = check_bench(bad)
    # M = 2 at 512: 10 + 2 + 1.024 = 13.0 ms, 1 - 13.024 / 1172 = 98.9 % below M = 1's planted 1,172 ms
    assert found[0].startswith("the verify pass at context 512 at M 2 takes 13 ms, 99% less than at M 1 (1.17e+03 ms)")
    assert check_bench([dict(rows[0], verify_s=0.0)])[-1].endswith("expected a time > 0")


def test_a_step_fit_whose_overhead_exceeds_its_passes_is_named():
    from specsim.calibration.decoder_stack import check_host, check_step_fit
    from specsim.specs.hardware import Efficiency

    rows = pd.DataFrame([dict(target="smollm2-135m-q4_1", q_len=m, context_len=128, measured_time_s=t,
                              relative_error_after=e) for m, t, e in ((1, 0.02, 0.01), (8, 0.03, -0.02))])
    eff = Efficiency(bandwidth_frac=0.7, compute_frac=0.8, step_overhead_s=1e-3, per_layer_overhead_s=50e-6)

    Cal = SimpleNamespace(efficiency=eff, rows=rows)  # the two fields of fit.Calibration check_step_fit reads
    assert check_step_fit(Cal) == []
    # the issue's fit: 131 ms a step and 13 ms a layer for a 135M model (30 layers): 521 ms of fixed cost
    Cal.efficiency = replace(eff, step_overhead_s=0.131, per_layer_overhead_s=0.013)
    found = check_step_fit(Cal)
    assert found == ["the fitted fixed cost per pass (131000 us a step + 13000.0 us a layer = 521.00 ms) is no less than "
                     "the fastest pass it explains (20.00 ms)"]
    Cal.efficiency, Cal.rows = eff, rows.assign(relative_error_after=[0.37, -0.40])
    assert "misses its own passes by 38% at the median" in check_step_fit(Cal)[0]  # |0.37|, |-0.40| -> 0.385
    assert check_host({"step_s": 1e-4, "cycle_s": 3e-4}) == []
    assert "below a plain step's" in check_host({"step_s": 3e-4, "cycle_s": 1e-4})[0]


def test_validate_names_the_verify_passes_that_contradict_themselves():
    from specsim.calibration.validate import check_verify

    rows = [dict(context_len=c, m=m, measured_s=0.01 * m + 1e-5 * c, measured_min_s=0.0098 * m + 1e-5 * c,
                 measured_max_s=0.0102 * m + 1e-5 * c, reference_measured_s=0.011) for c in (128, 512) for m in (1, 4)]
    assert check_verify(pd.DataFrame(rows)) == []
    rows[0]["reference_measured_s"] = 0.03  # the reference step beside them moved from 11 to 30 ms within the part
    assert check_verify(pd.DataFrame(rows)) == ["the reference step timed beside the passes took 11.00 to 30.00 ms "
                                               "within the part"]
    # the reference step against the calibration's 10 ms for it: +10 % passes, +30 % (a quarter past) is named
    rows = [dict(r, reference_measured_s=0.011, reference_predicted_s=0.010, reference_drift=0.10) for r in rows]
    assert check_verify(pd.DataFrame(rows)) == []
    rows = [dict(r, reference_measured_s=0.013, reference_drift=0.30) for r in rows]
    assert check_verify(pd.DataFrame(rows)) == ["the reference step took 13.00 ms beside the passes, +30% against the "
                                               "10.00 ms of the calibration it checks (beyond 25%: the machine is not in "
                                               "the state it was calibrated in)"]


def test_validate_s_error_by_operator_class_by_hand():
    """Two passes at context 128 in the band M = 2-5: the matrix products predicted 10 % and 30 % over what
    was timed apart (median +20 %), attention 10 % under both times, the rest -50 % and -70 % (median -60 %),
    the whole pass +1 % and +3 % (median +2 %)."""
    from specsim.calibration.validate import error_by_class

    rows = pd.DataFrame([dict(context_len=128, m=m, relative_error=e, predicted_matrix_products_s=mp,
                              measured_matrix_products_s=1.0, predicted_attention_s=0.9, measured_attention_s=1.0,
                              predicted_other_s=o, measured_other_s=1.0)
                         for m, e, mp, o in ((3, 0.01, 1.1, 0.5), (4, 0.03, 1.3, 0.3))])
    (band,) = error_by_class(rows)
    assert band["context_len"] == 128 and band["m"] == "2-5"
    assert band["pass"] == pytest.approx(0.02, abs=1e-12)
    assert band["matrix products"] == pytest.approx(0.20, abs=1e-12)
    assert band["attention"] == pytest.approx(-0.10, abs=1e-12)
    assert band["other"] == pytest.approx(-0.60, abs=1e-12)
