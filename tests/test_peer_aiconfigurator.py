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


# Two more real outputs (AIConfigurator 0.12.0, 2026-12-07), the summary boxes as printed. ONE_STEP_*: the replay
# protocol's pair for row vllm-issue20780-llama3.1-8b-eagle3-k3-b1 (`--model meta-llama/Meta-Llama-3.1-8B --system
# h100_sxm --backend vllm --backend-version 0.24.0 --estimate-mode static_gen --isl 512 --osl 2 --batch-size 1 --tp 1`,
# then `--nextn 3 --nextn-accepted 1.7900`). PROBE / FITTED: the sweep protocol's pair for yuqiz7's vLLM EAGLE-3
# sweep at concurrency 1 (Qwen/Qwen3-8B, --isl 65 --osl 256, --nextn 3 at accepted 0 and at 1.2753).
_BOX = """============================================================
  Performance Estimate (static_gen)
============================================================
  Model:            {model}
  System:           h100_sxm
  Backend:          vllm (0.24.0)
------------------------------------------------------------
  ISL:              {isl}
  OSL:              {osl}
{mtp}  Batch Size:       1
  TP Size:          1
  PP Size:          1
------------------------------------------------------------
  Generation lat.:  {gen} ms
  TPOT:             {tpot} ms
  Power (per GPU):  unavailable (0.0% coverage)
------------------------------------------------------------
  tokens/s:         {tps}
  tokens/s/gpu:     {tps}
  tokens/s/user:    {tps}
  seq/s:            {seqs}
  Concurrency:      1
  Memory (GPU):     {mem} GB
============================================================
"""
LLAMA, QWEN = "meta-llama/Meta-Llama-3.1-8B", "Qwen/Qwen3-8B"
ONE_STEP_PLAIN = _BOX.format(model=LLAMA, isl=512, osl=2, mtp="", gen="6.168", tpot="6.168", tps="162.13",
                             seqs="162.126", mem="18.59")
ONE_STEP_SPEC = _BOX.format(model=LLAMA, isl=512, osl=2, mtp="  MTP nextn:        3 (nextn_accepted=1.79)\n",
                            gen="2.578", tpot="2.578", tps="387.82", seqs="387.818", mem="18.79")
PROBE = _BOX.format(model=QWEN, isl=65, osl=256, mtp="  MTP nextn:        3 (nextn_accepted=0.0)\n",
                    gen="1817.793", tpot="7.129", tps="140.28", seqs="0.550", mem="19.07")
FITTED = _BOX.format(model=QWEN, isl=65, osl=256, mtp="  MTP nextn:        3 (nextn_accepted=1.2753)\n",
                     gen="798.925", tpot="3.133", tps="319.18", seqs="1.251", mem="19.07")


def test_one_step_box():
    p, s = peer.parse_estimate(ONE_STEP_PLAIN), peer.parse_estimate(ONE_STEP_SPEC)
    # osl 2 is one generation step: the generation latency is that step's TPOT (osl - 1 = 1)
    assert p["generation_latency_ms"] == p["tpot_ms"] == 6.168 and s["generation_latency_ms"] == s["tpot_ms"] == 2.578
    assert (p["nextn"], p["nextn_accepted"]) == (0, 0.0) and (s["nextn"], s["nextn_accepted"]) == (3, 1.79)


def test_accepted_divides_the_iteration():
    """The sweep protocol's closed form rests on AIC dividing its iteration by 1 + accepted: the two runs differ
    only in --nextn-accepted, so their generation latencies are in the ratio 1 + 1.2753 = 2.2753 (to the printed
    3 decimals of ms: 1817.793 / 798.925 = 2.27530)."""
    a, b = peer.parse_estimate(PROBE), peer.parse_estimate(FITTED)
    assert a["generation_latency_ms"] / b["generation_latency_ms"] == pytest.approx(1 + b["nextn_accepted"], abs=2e-5)


def _cache(tmp_path, monkeypatch, pairs):
    monkeypatch.setattr(peer, "CACHE", tmp_path)
    for argv, text in pairs:
        key = peer.hashlib.sha256(peer.json.dumps([peer.AIC_VERSION] + argv).encode()).hexdigest()[:20]
        (tmp_path / f"{key}.json").write_text(peer.json.dumps({"argv": argv, "stdout": text}))


ROW = {"id": "vllm-issue20780-llama3.1-8b-eagle3-k3-b1", "hardware": "h100-sxm", "n_devices": 1, "stack": "vllm",
       "target": "llama-3.1-8b-instruct", "drafter": None, "method": "eagle", "k": 3.0, "tree_size": float("nan"),
       "batch_size": 1, "context_len": float("nan"), "tau": 2.79, "alpha": float("nan"), "measured_speedup": 1.7286,
       "drafter_options": "eagle_version=3"}


def test_replay_row_through_the_cache(tmp_path, monkeypatch):
    """A replay row's two AIC commands, answered from a cache holding the real outputs (no AIC run): the argv is
    the protocol's (catalog alias resolved to AIC's config, isl = replay's default 512, osl 2, nextn = K,
    accepted = tau - 1 = 1.79), and the speedup is plain over speculative, 6.168 / 2.578 = 2.3926 by hand."""
    base = ["--model", LLAMA, "--system", "h100_sxm", "--backend", "vllm", "--backend-version", "0.24.0",
            "--estimate-mode", "static_gen", "--isl", "512", "--osl", "2", "--batch-size", "1", "--tp", "1"]
    _cache(tmp_path, monkeypatch, [(base, ONE_STEP_PLAIN), (base + ["--nextn", "3", "--nextn-accepted", "1.7900"],
                                                             ONE_STEP_SPEC)])
    out = peer.aic_replay_row(tmp_path / "no-aic-here", ROW)
    assert out["speedup"] == pytest.approx(6.168 / 2.578, rel=1e-12) and out["basis"] == "tau - 1"
    assert out["speedup"] == pytest.approx(2.3926, abs=1e-4)


def test_accepted_from_the_row():
    # tau includes the bonus token: 2.79 - 1 = 1.79 accepted drafts a step
    assert peer.replay_accepted(dict(ROW))[0] == pytest.approx(1.79, abs=1e-12)
    # alpha only, a chain of K = 3: alpha + alpha^2 + alpha^3 = 0.8 + 0.64 + 0.512 = 1.952
    acc, basis = peer.replay_accepted(dict(ROW, tau=float("nan"), alpha=0.8))
    assert acc == pytest.approx(1.952, abs=1e-12) and basis.startswith("alpha")


@pytest.mark.parametrize("change, reason", [
    ({"method": "prompt_lookup", "drafter_options": ""}, "method prompt_lookup: n-gram"),
    ({"method": "draft_model", "drafter": "llama-3.2-1b"}, "method draft_model: a separate draft model"),
    ({"method": "medusa"}, "method medusa"),
    ({"tree_size": 16.0, "drafter_options": "eagle_version=3;eagle_top_k=4"}, "tree (16 nodes, top-k 4)"),
    ({"hardware": "a100-sxm-40gb"}, "hardware a100-sxm-40gb: AIC's a100_sxm is the 80 GB part"),
    ({"hardware": "rtx-3090"}, "hardware rtx-3090: AIC 0.12.0 has no tables"),
    ({"stack": "hf-eager"}, "stack hf-eager: AIC's backends"),
    ({"stack": float("nan")}, "no stack"),
    ({"stack": "vllm-v0"}, "stack vllm-v0"),
    ({"target": "qwen2.5-7b-instruct"}, "target qwen2.5-7b-instruct (qwen2.5-7b): AIC ships no model config"),
    ({"tau": 5.2}, "accepted 4.200 (tau - 1) outside AIC's [0, K = 3]"),
])
def test_rows_aic_cannot_express(change, reason):
    """Each reason from what AIC 0.12.0 holds (its --help, model_configs, systems/data, query_versions.yaml) and
    what the row says; no AIC command runs (a refused row never reaches one)."""
    out = peer.aic_replay_row(Path("/no-aic-here"), dict(ROW, **change))
    assert isinstance(out, str) and reason in out


def test_a_chain_written_as_k_plus_one_nodes_is_a_chain():
    inp = peer.aic_config(stack="sglang-specforge", hardware="h100-sxm", n_devices=2, target="qwen3-30b-a3b",
                          target_dtype=None, kv_cache_dtype=None, method="eagle", k=3, tree_size=4, top_k="1")
    assert inp == {"model": "Qwen/Qwen3-30B-A3B", "system": "h100_sxm", "backend": "sglang", "version": "0.5.14",
                   "tp": 2, "k": 3, "gemm": None, "kv": None}
    argv = peer._argv(inp, isl=512, osl=2, batch=4, nextn=3, accepted=0.86)
    assert argv[-6:] == ["--moe-tp-size", "2", "--nextn", "3", "--nextn-accepted", "0.8600"]


def test_counts_by_hand():
    """Slowdown below 0.95 on a sweep and below 1 on a replay row; missed at >= 1.05; a false slowdown is < 1
    where measured > 1.05. Records built by hand, figures worked by hand."""
    recs = [{"set": "sweep", "measured": 0.90, "p": 1.10},   # slowdown, missed; |e| = 0.2222
            {"set": "sweep", "measured": 0.97, "p": 1.20},   # not a sweep slowdown (>= 0.95); |e| = 0.2371
            {"set": "replay", "measured": 0.97, "p": 0.90},  # replay slowdown (< 1), called; |e| = 0.0722
            {"set": "replay", "measured": 1.20, "p": 0.98},  # false slowdown; |e| = 0.1833
            {"set": "replay", "measured": 1.04, "p": 0.99},  # < 1 but measured not > 1.05: not false; |e| = 0.0481
            {"set": "replay", "measured": 1.50, "p": None}]  # no prediction: not counted
    c = peer.counts(recs, "p")
    assert (c["n"], c["n_slowdowns"], c["missed"], c["false_slowdowns"]) == (5, 2, 1, 1)
    assert c["median_abs_error"] == pytest.approx(0.22 / 1.20, rel=1e-12)  # the middle of the five |errors|
