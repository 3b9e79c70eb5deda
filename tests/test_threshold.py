"""The on/off policy: thresholds checked against `predict` at the neighbouring points (a second path
through the cost model), and the serving configs' shape and semantics."""
import json

import pytest

from specsim.cli import main
from specsim.errors import SpecError
from specsim.speculation.predict import predict
from specsim.specs.scenario import load_scenario
from specsim.presentation.threshold import threshold_policy

SEED70 = load_scenario("seed-70b-hbm")


@pytest.fixture(scope="module")
def policy():
    return threshold_policy(SEED70)


def _best_speedup(scenario, ks=range(1, 9)):
    return max(float(predict(scenario.with_overrides(k=k, tau=None, alpha=scenario.alpha)).cycle.speedup) for k in ks)


def test_batch_threshold_is_where_the_best_k_stops_clearing_the_margin(policy):
    s = SEED70.with_overrides(alpha=policy.alpha)
    b = policy.batch_off
    assert b is not None
    margin = policy.margin
    assert _best_speedup(s.with_overrides(batch_size=b - 1)) >= 1 + margin
    assert _best_speedup(s.with_overrides(batch_size=b)) < 1 + margin


def test_acceptance_threshold_at_b1(policy):
    a = policy.alpha_off
    margin = policy.margin
    assert _best_speedup(SEED70.with_overrides(alpha=min(a + 0.01, 1.0))) >= 1 + margin
    assert _best_speedup(SEED70.with_overrides(alpha=max(a - 0.01, 0.0))) < 1 + margin
    # the deployed K is fixed: its threshold is at least the re-tuned one
    k = policy.deployed_k
    assert policy.alpha_off_deployed_k >= a - 1e-9
    s = SEED70.with_overrides(k=k, alpha=policy.alpha_off_deployed_k + 0.01)
    assert float(predict(s).cycle.speedup) >= 1 + margin


def test_bands_shrink_k_with_batch_and_end_off(policy):
    ks = [b["k"] for b in policy.bands]
    assert ks[-1] == 0 and ks[0] > 0
    on = [k for k in ks if k > 0]
    assert on == sorted(on, reverse=True)
    assert policy.bands[-1]["batch_min"] <= policy.batch_off


def test_configs_for_vllm_sglang_trtllm(policy):
    v = policy.configs["vllm"]
    assert "vLLM" in v["semantics"]
    assert v["config"]["num_speculative_tokens"] == policy.bands[0]["k"]
    # vLLM V0 turns speculation off while running_queue_size >= disable_by_batch_size
    assert v["config"]["disable_by_batch_size"] == policy.batch_off
    assert json.loads(v["command_line"].split("'")[1]) == v["config"]
    sg = policy.configs["sglang"]
    assert "--speculative-num-steps" in sg["flags"] and "SGLang" in sg["semantics"]
    t = policy.configs["trtllm"]["config"]
    assert t["max_concurrency"] == policy.batch_off - 1
    sched = t["draft_len_schedule"]
    assert list(sched) == sorted(sched) and max(sched) < policy.batch_off
    assert t["max_draft_len"] == max(sched.values())
    assert 0 < t["acceptance_rate_threshold"] < 1


def test_cli_json_and_text(capsys):
    assert main(["threshold", "seed-7b-ddr5", "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    for key in ("batch_off", "alpha_off", "bands", "per_batch", "configs", "margin"):
        assert key in r
    assert main(["threshold", "seed-7b-ddr5", "--margin", "0.5"]) == 0
    out = capsys.readouterr().out
    assert "switch OFF" in out and "1.50×" in out


def test_method_none_has_no_policy():
    with pytest.raises(SpecError, match="method"):
        threshold_policy(SEED70.with_overrides(method="none"))
