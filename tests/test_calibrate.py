"""Calibration: the fitter recovers known efficiencies from roofline-generated times, and on the
published Splitwise profile it cuts the roofline's error, also on held-out tensor-parallel degrees."""
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from specsim.calibration.fit import fit_efficiency, predict_rows, splitwise_rows
from specsim.cli import main
from specsim.errors import SpecError
from specsim.specs.data import data_dir
from specsim.specs.hardware import Efficiency

DATA = data_dir()
SPLITWISE = DATA / "perf" / "splitwise_sim" / "perf_model.csv"


def _synthetic_rows() -> pd.DataFrame:
    # two depths (32 and 16 layers) so the per-step and per-layer overheads are separately identifiable
    configs = [(m, tp, b, q, l) for m in ("llama-3.1-8b", "llama-3.2-1b") for tp in (1, 2, 4) for b in (1, 8, 64)
               for q in (1, 8) for l in (128, 4096)]
    configs += [("llama-3.1-8b", tp, b, 512, 0) for tp in (1, 4) for b in (1, 4)]  # prefills: compute bound
    return pd.DataFrame([{"hardware": "h100-sxm", "target": m, "tp": tp, "batch_size": b, "q_len": q,
                          "ctx_len": l, "logit_len": q, "measured_time_s": np.nan} for m, tp, b, q, l in configs])


def test_fit_recovers_known_parameters():
    truth = Efficiency(bandwidth_frac=0.7, compute_frac=0.45, step_overhead_s=200e-6, per_layer_overhead_s=20e-6)
    rows = _synthetic_rows()
    rows["measured_time_s"] = predict_rows(rows, truth, 15e-6)
    cal = fit_efficiency(rows)
    assert cal.success
    assert cal.efficiency.bandwidth_frac == pytest.approx(0.7, rel=1e-3)
    assert cal.efficiency.compute_frac == pytest.approx(0.45, rel=1e-3)
    assert cal.efficiency.step_overhead_s == pytest.approx(200e-6, rel=1e-2)
    assert cal.efficiency.per_layer_overhead_s == pytest.approx(20e-6, rel=1e-2)
    assert cal.interconnect_latency_s == pytest.approx(15e-6, rel=1e-2)
    assert cal.summary()["worst_relative_error_after"] < 1e-4


def test_bad_rows_are_refused():
    rows = _synthetic_rows().drop(columns=["q_len"])
    with pytest.raises(SpecError, match="q_len"):
        fit_efficiency(rows)
    rows = _synthetic_rows()
    rows["measured_time_s"] = -1.0
    with pytest.raises(SpecError, match="measured_time_s.*> 0"):
        fit_efficiency(rows)


needs_splitwise = pytest.mark.skipif(not SPLITWISE.is_file(), reason=f"Splitwise profile not found at {SPLITWISE}")


@needs_splitwise
def test_splitwise_rows_say_what_they_leave_out():
    rows, skipped = splitwise_rows(SPLITWISE)
    # the published file: 2 models × parts × tp; 105 source rows per (model, part, tp) combination
    assert any("bloom-176b" in s and "not in the catalog" in s for s in skipped)
    assert any("h100-80gb-pcap" in s for s in skipped)
    assert set(rows["target"]) == {"llama-2-70b"} and set(rows["tp"]) == {2, 4, 8}


@needs_splitwise
@pytest.mark.parametrize("hardware", ["a100-sxm-80gb", "h100-sxm"])
def test_calibration_on_held_out_tensor_parallel_degree(hardware):
    rows, _ = splitwise_rows(SPLITWISE, hardware=hardware)
    decode = rows[rows["phase"] == "decode"].reset_index(drop=True)
    train, test = decode[decode["tp"] != 4], decode[decode["tp"] == 4].reset_index(drop=True)
    cal = fit_efficiency(train)
    measured = test["measured_time_s"].to_numpy()
    before = np.median(np.abs(predict_rows(test) / measured - 1))
    after = np.median(np.abs(predict_rows(test, cal.efficiency, cal.interconnect_latency_s) / measured - 1))
    # the catalog's defaults miss Splitwise's fixed costs (its tp 8 step is barely faster than tp 2);
    # fitted on tp 2 and 8, the tp 4 steps must come within 25 % and at least halve the error
    assert after < 0.25 and after < before / 2, (before, after)


@needs_splitwise
def test_cli(capsys, tmp_path):
    out = tmp_path / "rows.csv"
    assert main(["calibrate", str(SPLITWISE), "--format", "splitwise", "--hardware", "h100-sxm", "--phase", "decode",
                 "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "bandwidth_frac" in text and "fitted" in text
    assert set(pd.read_csv(out).columns) >= {"measured_time_s", "predicted_before_s", "predicted_after_s"}
    assert main(["calibrate", str(SPLITWISE), "--format", "splitwise"]) == 2  # two parts in one fit
