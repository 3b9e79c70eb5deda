"""SGLang's prefill batches (specs.regimes `prefill_batches`, [engine] mixed_prefill): its scheduler runs a
new prefill batch first, alone, and the running decodes wait (Scheduler.get_next_batch_to_run: "Run prefill
first if possible"); vLLM's chunked prefill mixes the prefill chunks into the decodes' iterations. The
stack decides where the scenario does not; what the simulated engine then does is checked on its step
records: no iteration of an SGLang run both prefills and decodes, and a vLLM run has such iterations."""
import pytest

from specsim.errors import SpecError
from specsim.serving.rates import run_one
from specsim.serving.setup import build_serving
from specsim.specs.regimes import entry_from_dict
from specsim.specs.scenario import Scenario
from specsim.speculation.operating_point import resolve


def _scenario(stack: str, version: str, *, method="prompt_lookup", k=3, engine=None) -> Scenario:
    # a closed loop whose requests arrive while others decode: 8 users, prompts of 40 tokens, outputs of
    # 24, and a budget of 32 tokens an iteration, so a prompt also spans two prefill chunks
    wl = {"kind": "closed_loop", "n_users": 8, "n_requests": 32, "prompt": {"kind": "fixed", "tokens": 40},
          "output": {"kind": "fixed", "tokens": 24}}
    sections = {"workload": wl, "engine": {"max_num_batched_tokens": 32, **(engine or {})}}
    base = dict(name="t", hardware="h100-sxm", target="smollm2-135m", stack=stack, stack_version=version,
                method=method, k=k, alpha=0.6, batch_size=8, context_len=64)
    return Scenario(**base, sections=sections, given=frozenset(base))


def test_sglang_prefills_alone_and_says_so():
    setup = build_serving(resolve(_scenario("sglang", "0.5.9")))
    assert setup.config.mixed_prefill is False and setup.plain_config.mixed_prefill is False
    [note] = [n for n in setup.notes if "prefill" in n]
    assert "Run prefill first if possible" in note and "mixed_prefill" in note
    for policy in ("never", "static_k3"):
        steps = run_one(setup, policy, None).steps
        prefilling = steps["n_prefill"] > 0
        assert prefilling.any() and (steps["n_decode"] > 0).any()
        assert (steps.loc[prefilling, "n_decode"] == 0).all(), policy  # the decodes waited
        # a 40-token prompt over a 32-token budget: a chunk of 32, then the rest, each alone
        assert (steps.loc[prefilling, "n_batched_tokens"] <= 32).all()


def test_vllm_mixes_the_chunks_into_the_decodes():
    setup = build_serving(resolve(_scenario("vllm", "0.10.1")))
    assert setup.config.mixed_prefill is True and not any("prefill" in n for n in setup.notes)
    steps = run_one(setup, "static_k3", None).steps
    assert ((steps["n_prefill"] > 0) & (steps["n_decode"] > 0)).any()


def test_the_scenario_decides_over_the_stack():
    given = build_serving(resolve(_scenario("sglang", "0.5.9", engine={"mixed_prefill": True})))
    assert given.config.mixed_prefill is True and not any("prefill" in n for n in given.notes)
    steps = run_one(given, "static_k3", None).steps
    assert ((steps["n_prefill"] > 0) & (steps["n_decode"] > 0)).any()
    vllm_alone = build_serving(resolve(_scenario("vllm", "0.10.1", engine={"mixed_prefill": False})))
    assert vllm_alone.config.mixed_prefill is False


@pytest.mark.parametrize("value", [0, "false", None])
def test_a_prefill_batches_entry_needs_a_boolean(value):
    raw = {"property": "prefill_batches", "versions": "*", "status": "code", "source": "a test"}
    if value is not None:
        raw["mixed"] = value
    with pytest.raises(SpecError, match="'mixed'"):
        entry_from_dict(raw, where="t")


def test_an_engine_table_refuses_a_mixed_prefill_that_is_no_boolean():
    with pytest.raises(SpecError, match="'mixed_prefill'"):
        build_serving(resolve(_scenario("sglang", "0.5.9", engine={"mixed_prefill": 1})))
