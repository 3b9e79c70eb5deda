"""specsim.decoder.run: the decoder's measurements as library calls returning frozen results, the
config's checks (named by flag), and what the draft time of a cycle holds (issue 10, item 7)."""
from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

pytest.importorskip("numba")

from specsim.decoder import drafters as D  # noqa: E402
from specsim.decoder import generate as G  # noqa: E402
from specsim.decoder.gguf_model import load_gguf  # noqa: E402
from specsim.decoder.model import Transformer  # noqa: E402
from specsim.decoder.run import (BenchConfig, RunConfig, bench, option_conflicts, parse_tree,  # noqa: E402
                                 pass_weight_bytes, read_prompt_file, run)
from specsim.decoder.testing import write_tiny_gguf  # noqa: E402
from specsim.errors import InputError, SpecError  # noqa: E402


@pytest.fixture(scope="module")
def tiny_path(tmp_path_factory):
    return write_tiny_gguf(tmp_path_factory.mktemp("gguf") / "tiny.gguf", n_ctx=1024)


@pytest.fixture(scope="module")
def tiny(tiny_path):
    return Transformer(load_gguf(tiny_path))


def test_run_returns_a_frozen_result_with_strict_json(tiny_path, tmp_path):
    prompts = tmp_path / "p.txt"
    prompts.write_text("the cat and the dog and the cat and the\r\n---\r\nin the end and the")
    result = run(RunConfig(model=tiny_path, prompt_file=prompts, drafter="layer-skip", layers=2, k=3, tokens=10,
                           repeats=2))
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.same_tokens = False
    assert result.prompts == ("the cat and the dog and the cat and the", "in the end and the")  # CRLF files too
    assert len(result.measurements) == 2 and result.same_tokens
    assert result.measurement.greedy_match and len(result.output_texts) == 2
    data = json.loads(result.to_json(), parse_constant=lambda c: pytest.fail(f"JSON constant {c}"))
    assert data["config"]["layers"] == 2 and data["config"]["model"] == str(tiny_path)
    report = result.format_report()
    assert "a layer-skip draft pass runs 2 of 3 layers and the whole LM head" in report
    assert "timings over 2 repeats" in report


def test_bench_returns_rows(tiny_path):
    result = bench(BenchConfig(model=tiny_path, m_values=(2, 1, 4), contexts=(16,), repeats=1))
    rows = result.rows
    assert [(r["context_len"], r["m"]) for r in rows] == [(16, 2), (16, 1), (16, 4)]
    assert rows[0]["ratio_to_m1"] is None and rows[2]["ratio_to_m1"] == pytest.approx(rows[2]["verify_s"] / rows[1]["verify_s"])
    json.loads(result.to_json(), parse_constant=lambda c: pytest.fail(f"JSON constant {c}"))
    no_m1 = bench(BenchConfig(model=tiny_path, m_values=(2,), contexts=(16,), repeats=1))
    assert no_m1.undefined == {"ratio_to_m1": "M = 1 is not among --m"}


def test_config_errors_name_the_flag():
    with pytest.raises(SpecError, match=r"^--tokens 0: expected an integer >= 1$"):
        RunConfig(tokens=0)
    with pytest.raises(SpecError, match=r"^--drafter 'medusa-9': expected one of prompt-lookup, prompt-lookup-earliest, layer-skip"):
        RunConfig(drafter="medusa-9")
    with pytest.raises(SpecError, match=r"^-k True: expected an integer in 1..64$"):
        RunConfig(k=True)
    with pytest.raises(SpecError, match=r"^--m 1,0: expected a non-empty comma-separated list"):
        BenchConfig(m_values=(1, 0))
    with pytest.raises(SpecError, match=r"^--contexts '': expected a non-empty"):
        BenchConfig(contexts=())


def test_option_conflicts():
    assert option_conflicts("prompt-lookup", {"max_draft", "min_n", "layers", "tokens"}) == ["layers"]
    assert option_conflicts("prompt-lookup", {"k"}) == ["k"]  # its draft length adapts, up to --max-draft
    assert option_conflicts("prompt-lookup-earliest", {"k", "min_n", "max_draft"}) == ["max_draft"]
    assert option_conflicts("eagle", {"eagle_depth", "weights", "medusa_tree"}) == ["medusa_tree"]
    assert option_conflicts("tree", {"layers", "draft_model"}, tree_base="layer-skip") == ["draft_model"]
    assert option_conflicts("tree", {"layers", "draft_model"}, tree_base="draft-model") == ["layers"]
    assert option_conflicts("layer-skip", {"k", "layers"}) == []


def test_parse_tree():
    assert parse_tree("0;1;0,0") == ((0,), (1,), (0, 0))
    for bad in ("", " ", "0;;1", "0,x", "-1", "1,0"):
        with pytest.raises(SpecError, match=r"^--tree "):
            parse_tree(bad)


def test_read_prompt_file_errors(tmp_path):
    with pytest.raises(InputError, match=r"--prompt-file .*none.txt: no such file"):
        read_prompt_file(tmp_path / "none.txt")
    (tmp_path / "b.txt").write_bytes(b"\xff\xfeab")
    with pytest.raises(InputError, match=r"not UTF-8 text \(byte 0xff at offset 0\)"):
        read_prompt_file(tmp_path / "b.txt")


def test_pass_weight_bytes_by_hand(tiny):
    """The tiny file's types (testing.DEFAULT_TYPES), bytes per row = columns / 32 x block bytes (Q4_0 18,
    Q4_1 20, Q8_0 34) or columns x 2 (F16): q 64 x 2 x 18 = 2304, k 32 x 2 x 20 = 1280, v 32 x 2 x 34 = 2176,
    o 64 x 64 x 2 = 8192, gate 128 x 2 x 20 = 5120, up 128 x 2 x 18 = 4608, down 64 x 4 x 34 = 8704: 32384 a
    layer; the F32 head 280 x 64 x 4 = 71680."""
    assert pass_weight_bytes(tiny, 2) == 2 * 32384 + 71680
    assert pass_weight_bytes(tiny) == 3 * 32384 + 71680 == tiny.weight_bytes_per_pass


def test_drafter_reads_the_prompt_during_the_prefill(tiny):
    """A model drafter's reading of the prompt (its prefill) runs before the first cycle and is timed
    apart (draft_prefill_s); each cycle's draft work is one catch-up pass of at most 2 tokens (the bonus
    token, and the last draft token when all were accepted) and k - 1 single steps."""
    prompt = np.array(tiny.tokenizer.encode("the cat and the dog, and the cat and the dog; in the end the").ids)
    k, layers = 3, 2
    drafter = D.layer_skip(tiny, k=k, n_layers=layers)
    calls = []
    forward, propose = tiny.forward, drafter.propose
    try:
        tiny.forward = lambda cache, toks, pos, mask=None, **kw: (
            calls.append(("forward", len(toks), kw.get("n_layers"))), forward(cache, toks, pos, mask, **kw))[1]
        drafter.propose = lambda *a: (calls.append(("propose",)), propose(*a))[1]
        gen = G.generate_speculative(tiny, drafter, prompt, 20)
    finally:
        del tiny.forward
        drafter.propose = propose
    first = calls.index(("propose",))
    assert [c for c in calls[:first] if c[0] == "forward" and c[2] == layers] == [("forward", prompt.size, layers)]
    assert gen.draft_prefill_s > 0
    cycles, current = [], None
    for c in calls[first:]:
        if c == ("propose",):
            current = []
            cycles.append(current)
        elif c[2] == layers:
            current.append(c[1])
    assert len(cycles) == len(gen.cycles)
    for passes in cycles[:-1]:  # the last cycle may be cut short by the room left
        assert len(passes) == k and 1 <= passes[0] <= 2 and passes[1:] == [1] * (k - 1), passes


# -- fuzz: any mix of option values is either refused naming one of the flags given, or valid --------------
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from specsim.decoder.run import flag  # noqa: E402

_ANY = st.one_of(st.integers(-3, 70), st.just(2 ** 40), st.floats(allow_nan=True, allow_infinity=True),
                 st.booleans(), st.sampled_from(["", "0;1", "0;1;0,0", "x", "layer-skip", "greedy", "rejection",
                                                 "tree", "prompt-lookup", "code-edit", "onehot", "draft-model"]))
_FIELDS = ("drafter", "k", "min_n", "max_n", "layers", "tree", "tree_base", "verify", "temperature", "top_k",
           "top_p", "workload", "n_prompts", "tokens", "seed", "repeats", "threads")


def _valid(kw) -> bool:
    """The documented ranges, stated again independently of RunConfig's code."""
    c = {f.name: f.default for f in dataclasses.fields(RunConfig)} | kw
    is_int = lambda v: isinstance(v, int) and not isinstance(v, bool)  # noqa: E731
    is_num = lambda v: isinstance(v, (int, float)) and not isinstance(v, bool)  # noqa: E731
    ok = (c["drafter"] in ("prompt-lookup", "layer-skip", "draft-model", "tree", "prompt-lookup-earliest", "medusa",
                           "eagle")
          and is_int(c["k"]) and 1 <= c["k"] <= 64 and is_int(c["min_n"])
          and (c["max_n"] is None or is_int(c["max_n"]))
          # no --max-n: the drafter's own longest n-gram (NgramLookupDrafter 6, PromptLookupDrafter 3)
          and 1 <= c["min_n"] <= (c["max_n"] if c["max_n"] is not None
                                  else 3 if c["drafter"] == "prompt-lookup-earliest" else 6) and (c["layers"] is None or is_int(c["layers"]) and c["layers"] >= 1)
          and c["tree"] in ("0;1", "0;1;0,0;1,0;0,0,0", "0;1;0,0") and c["tree_base"] in ("layer-skip", "draft-model")
          and c["verify"] in ("greedy", "rejection", "onehot", "typical")
          and is_num(c["temperature"]) and 0 <= c["temperature"] < float("inf")
          and is_int(c["top_k"]) and c["top_k"] >= 0 and is_num(c["top_p"]) and 0 < c["top_p"] <= 1
          and c["workload"] in ("code-edit", "prose", "prose-heldout")
          and all(is_int(c[n]) and c[n] >= 1 for n in ("n_prompts", "tokens", "repeats"))
          and is_int(c["seed"]) and c["seed"] >= 0 and (c["threads"] is None or is_int(c["threads"]) and c["threads"] >= 1))
    ok = ok and not (c["verify"] == "greedy" and c["temperature"] > 0)
    ok = ok and not (c["verify"] == "rejection" and c["drafter"] not in ("layer-skip", "draft-model"))
    return ok  # (draft-model without --draft-model: the shipped distilled model)


@settings(max_examples=300)
@given(kw=st.dictionaries(st.sampled_from(_FIELDS), _ANY, max_size=4))
def test_fuzz_run_options(kw):
    try:
        RunConfig(**kw)
    except SpecError as exc:
        assert not _valid(kw), f"valid options refused: {exc}"
        msg = str(exc)
        assert "\n" not in msg and any(flag(n) in msg for n in [*kw, "drafter", "verify"]), msg
    else:
        assert _valid(kw), f"accepted: {kw}"


def test_without_max_n_each_lookup_drafter_keeps_its_own_default():
    # `decoder run --drafter prompt-lookup` gave the n-gram lookup the earliest-match lookup's --max-n 3
    # (its tuned default is 6): the run now leaves each drafter its own, read here off the classes
    import inspect

    from specsim.decoder import drafters as D
    from specsim.decoder.registry import DRAFTERS

    own = {"prompt-lookup": D.NgramLookupDrafter, "prompt-lookup-earliest": D.PromptLookupDrafter}
    for name, cls in own.items():
        assert DRAFTERS[name].default_max_n == inspect.signature(cls).parameters["max_n"].default
        built = DRAFTERS[name].build(None, RunConfig(drafter=name), 64)
        assert built.max_n == DRAFTERS[name].default_max_n
    assert DRAFTERS["prompt-lookup"].build(None, RunConfig(max_n=2), 64).max_n == 2
    with pytest.raises(SpecError, match=r"--min-n 4 --max-n 3 \(the prompt-lookup-earliest default\)"):
        RunConfig(drafter="prompt-lookup-earliest", min_n=4)
