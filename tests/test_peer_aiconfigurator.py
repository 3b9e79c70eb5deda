"""The AIConfigurator output parser of benchmarks/peer_aiconfigurator.py, on a real run's output.

The fixture is the stdout of `aiconfigurator cli estimate --model Qwen/Qwen3-8B --system h100_sxm
--backend sglang --backend-version 0.5.14 --estimate-mode static_gen --isl 65 --osl 256 --batch-size 8
--tp 1 --nextn 3 --nextn-accepted 1.2` (AIConfigurator 0.12.0, 2026-12-06); the expected values are read
off that text by hand, and the identities between them worked by hand."""
import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("peer_aic", ROOT / "benchmarks" / "peer_aiconfigurator.py")
peer = importlib.util.module_from_spec(spec)
spec.loader.exec_module(peer)
TEXT = (ROOT / "tests" / "data" / "aic_0.12.0_estimate_static_gen.txt").read_text()


def test_fields_read_off_the_box():
    r = peer.parse_estimate(TEXT)
    assert (r["backend"], r["backend_version"]) == ("sglang", "0.5.14")
    assert (r["nextn"], r["nextn_accepted"]) == (3, 1.2)
    assert (r["isl"], r["osl"], r["batch_size"], r["tp"]) == (65, 256, 8, 1)
    assert r["generation_latency_ms"] == 875.940 and r["tpot_ms"] == 3.435
    assert r["tokens_per_s"] == 2328.93  # the thousands separator dropped


def test_identities_of_the_box():
    r = peer.parse_estimate(TEXT)
    # TPOT is the generation latency over osl - 1 steps: 875.94 / 255 = 3.4351 ms (to the printed 3 decimals)
    assert r["generation_latency_ms"] / (r["osl"] - 1) == pytest.approx(r["tpot_ms"], abs=5e-4)
    # tokens/s = batch (osl - 1) / generation latency: 8 * 255 / 0.87594 s = 2328.9
    assert r["batch_size"] * (r["osl"] - 1) / (r["generation_latency_ms"] / 1e3) == pytest.approx(r["tokens_per_s"], rel=1e-4)


def test_output_without_the_box_is_refused():
    with pytest.raises(peer.PeerError, match="static_gen"):
        peer.parse_estimate("Traceback ...\nValueError: nextn_accepted (5) must be within [0, nextn=3].")
    with pytest.raises(peer.PeerError, match="tpot_ms"):
        peer.parse_estimate(TEXT.replace("  TPOT:", "  TPOTX:"))
