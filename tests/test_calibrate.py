"""Calibration: the fitter recovers known efficiencies from roofline-generated times, and on the
published Splitwise profile it cuts the roofline's error, also on held-out tensor-parallel degrees.
The `specsim calibrate` command group: `steps` (those fits) and `operators` (a part's kernel curve
from Vidur's operator profiles)."""
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from specsim.calibration.fit import fit_efficiency, predict_rows, splitwise_rows
from specsim.cli import main
from specsim.errors import SpecError
from specsim.specs.data import data_dir
from specsim.specs.hardware import Efficiency, load_hardware
from specsim.specs.models import load_model

DATA = data_dir()
SPLITWISE = DATA / "perf" / "splitwise_sim" / "perf_model.csv"


def _synthetic_rows() -> pd.DataFrame:
    # two depths (32 and 16 layers) so the per-step and per-layer overheads are separately identifiable
    configs = [(m, tp, b, q, l) for m in ("llama-3.1-8b", "llama-3.2-1b") for tp in (1, 2, 4) for b in (1, 8, 64)
               for q in (1, 8) for l in (128, 4096)]
    configs += [("llama-3.1-8b", tp, b, 512, 0) for tp in (1, 4) for b in (1, 4)]  # prefills: compute bound
    # b200: a part without a measured kernel curve, so every fitted fraction moves the roofline
    return pd.DataFrame([{"hardware": "b200", "target": m, "tp": tp, "batch_size": b, "q_len": q,
                          "context_len": l, "logit_len": q, "measured_time_s": np.nan} for m, tp, b, q, l in configs])


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


def test_a_batch_that_cannot_have_fitted_is_refused():
    # the fuzz suite's 483,773,740,157-sequence row allocated an array per sequence (3.5 TiB) instead
    rows = _synthetic_rows().assign(measured_time_s=0.01)
    m = load_model(rows["target"].iloc[0])
    hw = load_hardware(rows["hardware"].iloc[0])
    span = int(rows["context_len"].iloc[0] + rows["q_len"].iloc[0])
    # by hand: sequences whose cache alone (layers · kv bytes a token · tokens) exceeds the device memory
    too_many = int(hw.memory_bytes // (m.kv_bytes_per_token * span)) + 1
    rows.loc[0, "batch_size"] = too_many * int(rows["tp"].iloc[0])
    with pytest.raises(SpecError, match=r"line 2: field 'batch_size'.*a batch whose KV cache fits"):
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
    # fitted on tp 2 and 8, the tp 4 steps must come within 25 % and cut the error by at least 30 %.
    # (Before the parts carried Vidur's measured kernel curve and all-reduce figures the defaults were
    # about 51 % off and the test asked for a halving; the measured device costs now take the
    # defaults to 28 % (H100) and 29 % (A100), and the fit, left with the overheads, the all-reduce
    # latency and attention's fractions to move, to 17 % on both.)
    assert after < 0.25 and after < 0.7 * before, (before, after)


@needs_splitwise
def test_cli_steps(capsys, tmp_path):
    out = tmp_path / "rows.csv"
    assert main(["calibrate", "steps", str(SPLITWISE), "--format", "splitwise", "--hardware", "h100-sxm", "--phase",
                 "decode", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "bandwidth_frac" in text and "fitted" in text
    assert set(pd.read_csv(out).columns) >= {"measured_time_s", "predicted_before_s", "predicted_after_s"}
    assert main(["calibrate", "steps", str(SPLITWISE), "--format", "splitwise"]) == 2  # two parts in one fit


def test_cli_calibrate_needs_a_subcommand(capsys):
    assert main(["calibrate"]) == 2
    assert "steps" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exc:  # the pre-group form is refused by argparse, naming the choices
        main(["calibrate", "rows.csv"])
    assert exc.value.code == 2
    assert "invalid choice: 'rows.csv'" in capsys.readouterr().err


VIDUR = DATA / "perf" / "vidur"


def _small_vidur(tmp_path: Path) -> Path:
    """A Vidur-layout folder with two H100 models at tp 1 and 2, 1..4096 tokens in powers of two."""
    root = tmp_path / "vidur"
    for path in ("compute/h100/meta-llama/Llama-2-7b-hf/mlp.csv", "compute/h100/codellama/CodeLlama-34b-Instruct-hf/mlp.csv"):
        raw = pd.read_csv(VIDUR / path)
        keep = raw["num_tensor_parallel_workers"].isin([1, 2]) & raw["num_tokens"].isin([2**i for i in range(13)])
        (root / path).parent.mkdir(parents=True)
        raw[keep].to_csv(root / path, index=False)
    net = root / "network" / "h100_dgx"
    net.mkdir(parents=True)
    (net / "all_reduce.csv").write_text((VIDUR / "network" / "h100_dgx" / "all_reduce.csv").read_text())
    return root


@pytest.mark.skipif(not (VIDUR / "compute").is_dir(), reason="Vidur profiles not found")
def test_cli_operators(capsys, tmp_path):
    data, out = _small_vidur(tmp_path), tmp_path / "fit"
    assert main(["calibrate", "operators", "--hardware", "h100-sxm", "--data", str(data), "--train", "Llama-2-7b-hf",
                 "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "CodeLlama-34b-Instruct-hf   held-out" in text and "Llama-2-7b-hf               train" in text
    assert "[kernels]" in text and "gemm_overlap_exponent" in text and "all-reduce (h100_dgx)" in text
    assert "Splitwise Llama-2-70B decode step" in text
    for name in ("operator_fit.csv", "errors.csv", "all_reduce.csv", "splitwise_decode.csv", "kernels-h100-sxm.toml",
                 "operator_fit.png", "manifest.json"):
        assert (out / name).is_file(), name
    errors = pd.read_csv(out / "errors.csv").set_index("model")
    assert errors.loc["CodeLlama-34b-Instruct-hf", "split"] == "held-out"
    assert errors.loc["CodeLlama-34b-Instruct-hf", "median_after"] < errors.loc["CodeLlama-34b-Instruct-hf", "median_before"]
    # the table written is the one printed, and it loads as a hardware file's tables
    import tomllib

    table = tomllib.loads((out / "kernels-h100-sxm.toml").read_text())
    assert set(table) == {"kernels", "all_reduce", "sources"}
    # a second run into the same folder is refused without --force
    assert main(["calibrate", "operators", "--hardware", "h100-sxm", "--data", str(data), "--out", str(out)]) == 5
    assert main(["calibrate", "operators", "--hardware", "h100-sxm", "--data", str(data), "--train", "Llama-9"]) == 2
