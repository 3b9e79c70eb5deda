"""The on/off policy: switch-off points checked against `predict` at the neighbouring batch sizes (a
second path through the cost model), the workload view against its own flow-balance arithmetic,
and the serving configs' shape and semantics."""
import json

import numpy as np
import pytest

from specsim.cli import main
from specsim.errors import SpecError
from specsim.analyses.threshold import threshold_policy
from specsim.specs.scenario import load_scenario
from specsim.speculation.operating_point import resolve
from specsim.speculation.predict import predict
from specsim.analyses.switch_off import switch_off_point, workload_speedup
from specsim.speculation.switch_off import WorkloadMix

SEED70 = resolve(load_scenario("seed-70b-hbm"))


@pytest.fixture(scope="module")
def policy():
    return threshold_policy(SEED70)


def _speedup(op, **kw) -> float:
    return float(predict(op.with_overrides(**kw), check_memory=False).cycle.speedup)


def _best_speedup(op, ks=range(1, 9), **kw) -> float:
    kw.setdefault("alpha", op.alpha)
    return max(_speedup(op, k=k, **kw) for k in ks)


def test_scenario_k_switch_off_is_where_predict_stops_clearing_the_margin(policy):
    b, m = policy.batch_off, policy.margin
    assert b is not None and policy.deployed_k == 5  # the scenario's K, not a re-tuned one
    assert _speedup(SEED70, batch_size=b - 1) >= 1 + m
    assert _speedup(SEED70, batch_size=b) < 1 + m


def test_retuned_switch_off_is_where_the_best_k_stops_paying(policy):
    a = policy.answers["decode-only, K re-tuned"]
    assert a.retune_k and a.batch_off > policy.batch_off
    assert _best_speedup(SEED70, batch_size=a.batch_off - 1) >= 1 + a.margin
    assert _best_speedup(SEED70, batch_size=a.batch_off) < 1 + a.margin


def test_acceptance_threshold_at_b1(policy):
    a, m = policy.alpha_off, policy.margin
    assert _best_speedup(SEED70, alpha=min(a + 0.01, 1.0)) >= 1 + m
    assert _best_speedup(SEED70, alpha=max(a - 0.01, 0.0)) < 1 + m
    # the deployed K is fixed: its threshold is at least the re-tuned one
    assert policy.alpha_off_deployed_k >= a - 1e-9
    assert _speedup(SEED70, k=5, tau=None, alpha=policy.alpha_off_deployed_k + 0.01) >= 1 + m


def test_unsorted_threshold_grids_give_the_same_answer():
    shuffled = SEED70.with_overrides(sections={"threshold": {"margin": 0.1, "alphas": [0.9, 0.1, 0.5, 0.3, 0.7, 0.0, 1.0],
                                                              "batch_sizes": [64, 1, 16, 4]}})
    ordered = SEED70.with_overrides(sections={"threshold": {"margin": 0.1, "alphas": [0.0, 0.1, 0.3, 0.5, 0.7, 0.9, 1.0],
                                                             "batch_sizes": [1, 4, 16, 64]}})
    a, b = threshold_policy(shuffled), threshold_policy(ordered)
    assert a.alpha_off == b.alpha_off and a.bands == b.bands and a.per_batch[0]["batch_size"] == 1


def test_bands_shrink_k_with_batch_and_end_off(policy):
    ks = [b["k"] for b in policy.bands]
    assert ks[-1] == 0 and ks[0] > 0
    on = [k for k in ks if k > 0]
    assert on == sorted(on, reverse=True)


def test_configs_for_vllm_sglang_trtllm(policy):
    v0 = policy.configs["vllm-v0"]
    assert "V0" in v0["semantics"]
    assert v0["config"]["num_speculative_tokens"] == policy.deployed_k == 5
    # vLLM V0 turns speculation off while running_queue_size >= disable_by_batch_size
    assert v0["config"]["disable_by_batch_size"] == policy.batch_off
    assert json.loads(v0["command_line"].split("'")[1]) == v0["config"]
    # vLLM V1 reads no disable_by_batch_size (PR #35060): the same gate as a per-batch K schedule of
    # inclusive ranges, K up to the batch before the gate, 0 from the gate to the largest batch examined
    v = policy.configs["vllm"]
    assert "V1" in v["semantics"] and "disable_by_batch_size" not in v["config"]
    assert v["config"]["method"] == "draft_model" and v["config"]["num_speculative_tokens"] == 5
    off = policy.batch_off
    assert v["config"]["num_speculative_tokens_per_batch_size"] == [[1, off - 1, 5], [off, 1024, 0]]
    assert json.loads(v["command_line"].split("'")[1]) == v["config"] and "PIECEWISE" in v["caveat"]
    sg = policy.configs["sglang"]
    assert "--speculative-num-steps" in sg["flags"] and "SGLang" in sg["semantics"]
    assert sg["flags"][sg["flags"].index("--speculative-num-steps") + 1] == "5"
    t = policy.configs["trtllm"]["config"]
    sched = t["draft_len_schedule"]
    assert list(sched) == sorted(sched) and t["max_concurrency"] == max(sched)
    assert t["max_draft_len"] == max(sched.values())
    assert 0 < t["acceptance_rate_threshold"] < 1


def test_memory_caps_the_switch_off():
    # an 8B + 1B pair on an L40S (48 GB) at 8k context: speculation's drafter and slots run out of
    # memory before it stops paying, so the answer is the memory limit, labelled as such
    op = resolve(load_scenario("seed-70b-hbm"), hardware="l40s", target="llama-3.1-8b", drafter="llama-3.2-1b",
                 context_len=8192, tau=None, alpha=0.8, k=1)
    so = switch_off_point(op, retune_k=True)
    assert so.memory_limited and so.batch_off == op.memory.max_batch_speculative + 1
    assert not op.with_overrides(batch_size=so.batch_off).memory.fits


def test_workload_view_by_flow_balance_arithmetic():
    """At batch B a plain iteration carries B·p̄/ō prompt tokens and a speculative one B·τ·p̄/ō
    (prompt tokens per output token = p̄/ō in a steady state). With no prompts (p̄ = 0) the serving
    view is the decode-only one; with prompts it stops paying at a smaller batch."""
    op = resolve(load_scenario("llama-70b-h100-chat"))
    no_prompts = WorkloadMix(mean_prompt_tokens=0.0, mean_output_tokens=200.0, decode_context_len=op.context_len)
    for b in (1, 16, 96):
        assert workload_speedup(op, no_prompts, b=b, k=4) == pytest.approx(_speedup(op, batch_size=b), rel=1e-9)
    mix = WorkloadMix(mean_prompt_tokens=1000.0, mean_output_tokens=200.0, decode_context_len=op.context_len)
    decode = switch_off_point(op)
    serving = switch_off_point(op, workload=mix)
    assert serving.batch_off < decode.batch_off
    assert workload_speedup(op, mix, b=serving.batch_off - 1, k=4) >= 1.0 > workload_speedup(op, mix, b=serving.batch_off, k=4)


def test_threshold_recommends_the_workload_answer_and_says_why(capsys):
    assert main(["threshold", "llama-70b-h100-chat"]) == 0
    out = capsys.readouterr().out
    assert "RECOMMENDED: switch OFF at batch size ≥" in out and "under the workload" in out
    assert "decode-only analytics say off" in out
    assert main(["threshold", "llama-70b-h100-chat", "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["recommended"]["view"].startswith("under the workload")
    assert r["configs"]["vllm-v0"]["config"]["disable_by_batch_size"] == r["batch_off"]
    assert r["configs"]["vllm"]["config"]["num_speculative_tokens_per_batch_size"][-1][:2] == [r["batch_off"], 1024]
    assert r["deployed_k"] == 4 and r["configs"]["vllm"]["config"]["num_speculative_tokens"] == 4


def test_cli_json_and_text(capsys):
    assert main(["threshold", "seed-7b-ddr5", "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    for key in ("batch_off", "alpha_off", "bands", "per_batch", "configs", "margin", "recommended", "answers"):
        assert key in r
    assert main(["threshold", "seed-7b-ddr5", "--margin", "0.5"]) == 0
    out = capsys.readouterr().out
    assert "1.50×" in out and "RECOMMENDED" in out


def test_method_none_has_no_policy():
    with pytest.raises(SpecError, match="method"):
        threshold_policy(SEED70.with_overrides(method="none"))


def test_moved_threshold_keys_are_refused():
    with pytest.raises(SpecError, match="k_max"):
        threshold_policy(SEED70.with_overrides(sections={"threshold": {"k": [1, 2]}}))
    assert np.isfinite(threshold_policy(SEED70.with_overrides(sections={"threshold": {"k_max": 3}})).alpha_off)


def test_vllm_schedule_ranges_by_hand():
    from specsim.analyses.threshold import vllm_schedule

    # on at every batch below the gate, off from the gate to the limit
    assert vllm_schedule(4, gate=79, min_batch=None, limit=1024) == [[1, 78, 4], [79, 1024, 0]]
    # on only from a running batch of 8 (a long-context sparse-KV draft), off again from 300
    assert vllm_schedule(2, gate=300, min_batch=8, limit=1024) == [[1, 7, 0], [8, 299, 2], [300, 1024, 0]]
    # no gate: on from min_batch to the limit; neither: one range
    assert vllm_schedule(3, gate=None, min_batch=8, limit=512) == [[1, 7, 0], [8, 512, 3]]
    assert vllm_schedule(3, gate=None, min_batch=None, limit=512) == [[1, 512, 3]]
