"""The trained drafters (distilled draft model, Medusa, EAGLE) at run time, without torch.

On the tiny random-weight target: drafter files with random weights written by the same exporters the
training uses; speculative output equals plain greedy output for every drafter and verify mode, the
target's cache after speculation equals plain decoding's, files for another vocabulary are refused.
On the real target (when fetched): the shipped weights load, stay exact, and draft better than chance."""
from __future__ import annotations

import sys

import numpy as np
import pytest

pytest.importorskip("numba")

from specsim.decoder import drafters as D  # noqa: E402
from specsim.decoder import generate as G  # noqa: E402
from specsim.decoder import trained as TR  # noqa: E402
from specsim.decoder.gguf_model import load_gguf  # noqa: E402
from specsim.decoder.model import Transformer  # noqa: E402
from specsim.decoder.sampling import SamplingParams  # noqa: E402
from specsim.decoder.testing import tiny_vocab, write_tiny_gguf  # noqa: E402
from specsim.decoder.train.export import write_random_drafters  # noqa: E402
from specsim.errors import InputError, SpecError  # noqa: E402


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    d = tmp_path_factory.mktemp("trained")
    target = Transformer(load_gguf(write_tiny_gguf(d / "target.gguf", seed=21, n_layer=3)))
    folder = write_random_drafters(target, d / "weights", seed=5, n_vocab_draft=200)
    text = "the cat and the dog, and the cat and the dog; in the end the cat and the"
    return target, folder, np.array(target.tokenizer.encode(text).ids)


def _drafters(target, folder):
    return {
        "draft-model": D.distilled(target, k=3, path=folder / TR.DRAFT_GGUF),
        "medusa": TR.MedusaDrafter(target, path=folder / TR.MEDUSA_NPZ),
        "eagle": TR.EagleDrafter(target, path=folder / TR.EAGLE_NPZ, depth=3, top_k=2, n_nodes=6),
    }


@pytest.mark.parametrize("name", ["draft-model", "medusa", "eagle"])
@pytest.mark.parametrize("mode", ["greedy", "onehot"])
def test_greedy_speculative_equals_plain(tiny, name, mode):
    target, folder, prompt = tiny
    drafter = _drafters(target, folder)[name]
    plain = G.generate_plain(target, prompt, 24)
    spec, cache = G.generate_speculative(target, drafter, prompt, 24, mode=mode, return_cache=True)
    np.testing.assert_array_equal(spec.tokens, plain.tokens)
    assert all(c.n_nodes > 1 for c in spec.cycles)  # it drafted every cycle
    ref = target.new_cache(cache.capacity)  # the target's cache equals the one plain decoding builds
    target.prefill(ref, prompt)
    for tok in spec.tokens[:cache.length - prompt.size]:
        target.forward(ref, np.array([tok]), np.array([ref.length]))
    np.testing.assert_allclose(cache.rows()[0], ref.rows()[0], rtol=0, atol=1e-6)


def test_distilled_rejection_at_temperature_zero_is_greedy(tiny):
    target, folder, prompt = tiny
    spec = G.generate_speculative(target, D.distilled(target, k=3, path=folder / TR.DRAFT_GGUF), prompt, 16,
                                  mode="rejection")
    np.testing.assert_array_equal(spec.tokens, G.generate_plain(target, prompt, 16).tokens)


def test_distilled_q_lives_on_the_drafting_vocabulary(tiny):
    """At temperature 1 the draft model's q is a distribution over the full vocabulary that is zero
    outside its drafting vocabulary, and the drafted tokens come from that vocabulary."""
    target, folder, prompt = tiny
    drafter = D.distilled(target, k=3, path=folder / TR.DRAFT_GGUF)
    draft = drafter.propose(prompt, SamplingParams(temperature=1.0), np.random.default_rng(0))
    outside = np.setdiff1d(np.arange(target.config.n_vocab), drafter.vocab)
    np.testing.assert_allclose(draft.q[:3].sum(axis=1), 1.0, atol=1e-9)
    assert np.all(draft.q[:3][:, outside] == 0)
    assert np.isin(draft.tokens[1:], drafter.vocab).all()


def test_medusa_tree_takes_each_heads_ranked_tokens(tiny):
    """Node (r1, ..., rd) of the static tree holds head d's (rd+1)-th best token, computed here from the
    weights directly with numpy (dense LM-head rows, float activations): the decoder's head uses Q8
    activations, so only rankings with clear margins are compared."""
    target, folder, prompt = tiny
    med = TR.MedusaDrafter(target, path=folder / TR.MEDUSA_NPZ)
    G.generate_speculative(target, med, prompt, 3)  # leaves the last feature in med.feature
    h = med.feature
    z = np.einsum("kij,j->ki", med.w, h) + med.b
    z = h + z / (1 + np.exp(-z))
    logits = z @ TR.dense(TR.head_rows(target, med.vocab)).T  # (K, N)
    draft = med.propose(np.array([1, 2, 3]), SamplingParams(), None)
    for i in range(1, med.tree.n_nodes):
        d, r = med.tree.depths[i], med.tree.ranks[i]
        order = np.argsort(-logits[d - 1])
        if logits[d - 1, order[r]] - logits[d - 1, order[r + 1]] > 1e-2 and (
                r == 0 or logits[d - 1, order[r - 1]] - logits[d - 1, order[r]] > 1e-2):
            assert draft.tokens[i] == med.vocab[order[r]]


def test_eagle_tree_is_well_formed(tiny):
    target, folder, prompt = tiny
    eag = TR.EagleDrafter(target, path=folder / TR.EAGLE_NPZ, depth=3, top_k=2, n_nodes=6)
    G.generate_speculative(target, eag, prompt, 4)
    ctx = np.concatenate([prompt, G.generate_plain(target, prompt, 4).tokens])
    eag.reset()
    cache = target.new_cache(ctx.size)
    target.prefill(cache, ctx[:-1])
    eag.observe(target.last_hidden)
    draft = eag.propose(ctx, SamplingParams(), None)
    assert draft.tree.n_nodes == 6 and draft.tree.max_depth <= 3
    assert np.isin(draft.tokens[1:], eag.vocab).all()
    assert eag.cache.length == ctx.size - 1  # the tree rows were dropped from the head's cache


def test_files_for_another_vocabulary_are_refused(tiny, tmp_path):
    target, folder, _ = tiny
    other = Transformer(load_gguf(write_tiny_gguf(tmp_path / "o.gguf", n_layer=1, vocab=tiny_vocab(extra=2))))
    with pytest.raises(SpecError, match=r"vocabulary hash"):
        TR.MedusaDrafter(other, path=folder / TR.MEDUSA_NPZ)
    with pytest.raises(SpecError, match=r"vocabulary hash"):
        D.distilled(other, path=folder / TR.DRAFT_GGUF)


def test_missing_or_broken_files_are_input_errors(tiny, tmp_path):
    target, _, _ = tiny
    with pytest.raises(InputError, match=r"no such file"):
        TR.EagleDrafter(target, path=tmp_path / "nope.npz")
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"not a gguf")
    with pytest.raises(InputError, match=r"not a readable GGUF"):
        D.distilled(target, path=bad)


def test_trained_inference_does_not_import_torch(tiny):
    """Loading and running the trained drafters needs no torch (CI runs without it)."""
    assert "torch" not in sys.modules or pytest.importorskip("torch") is not None
    import subprocess

    code = ("import sys; import specsim.decoder.trained, specsim.decoder.train.export; "
            "assert 'torch' not in sys.modules, 'torch imported'")
    subprocess.run([sys.executable, "-c", code], check=True)


# -- the shipped weights on the real target -----------------------------------------------------------
@pytest.fixture(scope="module")
def smollm2():
    from specsim.decoder import fetch

    path = fetch.default_model_path()
    if not path.is_file():
        pytest.skip(f"SmolLM2-135M GGUF not in the cache at {path}; run `specsim decoder fetch`")
    if not (TR.weights_dir() / TR.EAGLE_NPZ).is_file():
        pytest.skip(f"no trained weights in {TR.weights_dir()}")
    return Transformer(load_gguf(path))


@pytest.mark.realmodel
@pytest.mark.slow
@pytest.mark.parametrize("name", ["draft-model", "medusa", "eagle"])
def test_shipped_drafters_are_exact_and_trained(smollm2, name):
    """Greedy exactness on two held-out code-edit prompts, and first-position hits that chance cannot
    explain: a draft that knows nothing is right about 1 time in 8192 (the vocabulary), so k hits in n
    drafting cycles have binomial tail probability P(X >= k; n, 1/8192); below 1e-9 the weights have
    learned something. (The shipped drafters are weakly trained, held-out top-1 13-16 %: this checks
    that they are trained, not that they are good.)"""
    from scipy.stats import binom

    from specsim.decoder.measure import measure
    from specsim.decoder.workloads import chat_prompt, code_edit

    model = smollm2
    drafter = {"draft-model": lambda: D.distilled(model, k=3), "medusa": lambda: TR.MedusaDrafter(model),
               "eagle": lambda: TR.EagleDrafter(model)}[name]()
    # 2 prompts x 64 tokens: up to about 110 drafting cycles, where 5 hits have a tail below 1e-11
    w = code_edit(2, seed=0)
    prompts = [chat_prompt(model.tokenizer, p, w.response_prefix) for p in w.prompts[:2]]
    m = measure(model, drafter, prompts, 64, warmup=False)
    assert m.greedy_match
    n = m.n_drafting_cycles
    hits = int(round(m.acceptance_unconditional[0] * n))
    assert hits >= 1 and binom.sf(hits - 1, n, 1 / 8192) < 1e-9, (hits, n)
