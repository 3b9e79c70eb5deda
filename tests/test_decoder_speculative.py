"""Speculative generation on tiny random-weight GGUF models: exactness for every drafter, the KV
cache after speculation equals the one plain decoding builds, and chi-square tests that rejection
sampling leaves the target's distribution unchanged (and that the test catches a broken sampler)."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("numba")
stats = pytest.importorskip("scipy.stats")

from specsim.decoder import drafters as D  # noqa: E402
from specsim.decoder import generate as G  # noqa: E402
from specsim.decoder import verify as V  # noqa: E402
from specsim.decoder.gguf_model import load_gguf  # noqa: E402
from specsim.decoder.model import Transformer  # noqa: E402
from specsim.decoder.sampling import SamplingParams, probs, sample  # noqa: E402
from specsim.decoder.testing import tiny_vocab, write_tiny_gguf  # noqa: E402
from specsim.errors import SpecError  # noqa: E402
from specsim.speculation.trees import chain, from_choices  # noqa: E402

TREE = from_choices([(0,), (1,), (0, 0), (0, 1), (1, 0), (0, 0, 0)])


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = tmp_path_factory.mktemp("gguf")
    target = Transformer(load_gguf(write_tiny_gguf(d / "target.gguf", seed=11, n_layer=4)))
    other = Transformer(load_gguf(write_tiny_gguf(d / "draft.gguf", seed=12, n_layer=2)))
    return target, other


@pytest.fixture(scope="module")
def prompt(models):
    text = "the cat and the dog, and the cat and the dog; in the end the cat and the"
    return np.array(models[0].tokenizer.encode(text).ids)


def _drafters(target, other):
    return {
        "prompt-lookup": D.PromptLookupDrafter(k=3, min_n=1, max_n=3),
        "layer-skip": D.layer_skip(target, k=3, n_layers=2),
        "draft-model": D.draft_model(target, other, k=4),
        "tree": D.TreeDrafter(D.layer_skip(target, k=1, n_layers=2), TREE),
    }


@pytest.mark.parametrize("name", ["prompt-lookup", "layer-skip", "draft-model", "tree"])
@pytest.mark.parametrize("mode", ["greedy", "onehot"])
def test_greedy_speculative_equals_plain(models, prompt, name, mode):
    target, other = models
    plain = G.generate_plain(target, prompt, 30)
    spec, cache = G.generate_speculative(target, _drafters(target, other)[name], prompt, 30, mode=mode,
                                         return_cache=True)
    np.testing.assert_array_equal(spec.tokens, plain.tokens)  # exact: verify rows do not depend on M
    assert sum(c.n_accepted + 1 for c in spec.cycles) + 1 >= 30
    # the cache after speculation equals the cache plain decoding of the same tokens builds
    ref = target.new_cache(cache.capacity)
    target.prefill(ref, prompt)
    for tok in spec.tokens[:cache.length - prompt.size]:
        target.forward(ref, np.array([tok]), np.array([ref.length]))
    assert ref.length == cache.length
    np.testing.assert_allclose(cache.rows()[0], ref.rows()[0], rtol=0, atol=1e-6)
    np.testing.assert_allclose(cache.rows()[1], ref.rows()[1], rtol=0, atol=1e-6)


def test_rejection_at_temperature_zero_is_greedy(models, prompt):
    target, other = models
    plain = G.generate_plain(target, prompt, 20)
    for drafter in (D.layer_skip(target, k=3, n_layers=1), D.draft_model(target, other, k=2)):
        spec = G.generate_speculative(target, drafter, prompt, 20, mode="rejection")
        np.testing.assert_array_equal(spec.tokens, plain.tokens)


def test_drafter_cache_rolls_back(models, prompt):
    """The layer-skip drafter's own cache, after a speculative run, holds exactly what a plain
    pass of its first n layers over the same tokens builds."""
    target, _ = models
    drafter = D.layer_skip(target, k=4, n_layers=2)
    G.generate_speculative(target, drafter, prompt, 25, mode="greedy")
    n = drafter.cache.length
    ref = target.new_cache(drafter.cache.capacity, n_layer=2)
    target.prefill(ref, drafter.cached[:n], n_layers=2)
    np.testing.assert_allclose(drafter.cache.rows()[0], ref.rows()[0], atol=1e-5)


def test_tree_compaction_moves_rows(models, prompt):
    """With a tree, accepted nodes are scattered in the verify slots; compaction gathers them."""
    target, _ = models
    drafter = D.TreeDrafter(D.layer_skip(target, k=1, n_layers=3), from_choices([(0,), (1,), (2,), (1, 0), (2, 0)]))
    spec, cache = G.generate_speculative(target, drafter, prompt, 30, mode="greedy", return_cache=True)
    assert any(c.n_accepted for c in spec.cycles)
    np.testing.assert_array_equal(spec.tokens, G.generate_plain(target, prompt, 30).tokens)


def test_sampled_generation_is_seeded(models, prompt):
    target, _ = models
    s = SamplingParams(temperature=0.8, top_p=0.9)
    a = G.generate_speculative(target, D.layer_skip(target, k=3, n_layers=2), prompt, 15, mode="rejection", sampling=s, seed=3)
    b = G.generate_speculative(target, D.layer_skip(target, k=3, n_layers=2), prompt, 15, mode="rejection", sampling=s, seed=3)
    np.testing.assert_array_equal(a.tokens, b.tokens)


def test_sampled_speculative_matches_plain_distribution(models, prompt):
    """End to end, temperature 1 and top-k 3 (a small vocabulary): the first two tokens' joint
    distribution from speculative rejection sampling and from plain sampling are the same
    (chi-square test of homogeneity over many seeds)."""
    target, _ = models
    s = SamplingParams(temperature=1.0, top_k=3)
    short = prompt[:8]
    n = 400
    plain = [tuple(G.generate_plain(target, short, 2, sampling=s, seed=i).tokens) for i in range(n)]
    drafter = D.layer_skip(target, k=2, n_layers=1)
    spec = [tuple(G.generate_speculative(target, drafter, short, 2, mode="rejection", sampling=s, seed=10_000 + i).tokens)
            for i in range(n)]
    keys = sorted(set(plain) | set(spec))
    table = np.array([[plain.count(k) for k in keys], [spec.count(k) for k in keys]])
    table = table[:, table.sum(axis=0) >= 5]  # chi-square needs populated cells
    assert stats.chi2_contingency(table).pvalue > 1e-3


# -- chi-square tests of the verification rules themselves ------------------------------------------
P = np.array([0.05, 0.30, 0.15, 0.25, 0.05, 0.20])
Q = np.array([0.30, 0.10, 0.30, 0.05, 0.20, 0.05])
N_TRIALS = 20_000


def _first_token_counts(verifier, *, one_hot: bool) -> np.ndarray:
    counts = np.zeros(P.size, np.int64)
    for seed in range(N_TRIALS):  # one seeded stream per trial ("many seeds")
        rng = np.random.default_rng(seed)
        if one_hot:  # the drafter's two best guesses as siblings (a tree of width 2)
            tree = from_choices([(0,), (1,)])
            tokens = np.array([0, 2, 0])
            p = np.stack([P, P, P])
        else:
            tree = chain(1)
            tokens = np.array([0, sample(Q, rng.random())])
            p = np.stack([P, P])
        verdict = verifier(tree, tokens, p, np.stack([Q, np.zeros_like(Q)]), rng.random(tree.n_nodes + 1))
        counts[tokens[verdict.path[0]] if verdict.path else verdict.next_token] += 1
    return counts


def _rejection(tree, tokens, p, q, u):
    return V.verify_rejection(tree, tokens, p, q, u)


def _onehot(tree, tokens, p, q, u):
    return V.verify_onehot(tree, tokens, p, u)


def _broken_rejection(tree, tokens, p, q, u):
    """A classic bug: on rejection, resample from p instead of norm(max(0, p - q))."""
    x = int(tokens[1])
    if u[1] * q[0, x] < p[0, x]:
        return V.Verdict((1,), 0, 1)
    return V.Verdict((), sample(p[0], u[2]), 0)


def _broken_onehot(tree, tokens, p, q, u):
    """A subtler bug: try the next sibling without removing the rejected token from p."""
    for c in tree.children(0):
        if u[c] < p[0, tokens[c]]:
            return V.Verdict((int(c),), 0, int(c))
    return V.Verdict((), sample(p[0], u[-1]), 0)


@pytest.mark.parametrize("verifier,one_hot", [(_rejection, False), (_onehot, True)])
def test_rejection_sampling_preserves_target_distribution(verifier, one_hot):
    counts = _first_token_counts(verifier, one_hot=one_hot)
    assert stats.chisquare(counts, N_TRIALS * P).pvalue > 1e-3  # fixed seeds: deterministic


@pytest.mark.parametrize("verifier,one_hot", [(_broken_rejection, False), (_broken_onehot, True)])
def test_chi_square_detects_a_broken_sampler(verifier, one_hot):
    counts = _first_token_counts(verifier, one_hot=one_hot)
    assert stats.chisquare(counts, N_TRIALS * P).pvalue < 1e-6


def test_typical_acceptance_is_labelled_lossy():
    assert V.MODES["typical"] == "lossy"
    assert {m for m, kind in V.MODES.items() if kind == "exact"} == {"greedy", "rejection", "onehot"}


def test_sampling_transforms():
    logits = np.log(np.array([0.1, 0.4, 0.2, 0.3]))
    np.testing.assert_allclose(probs(logits, SamplingParams(temperature=1.0)), [0.1, 0.4, 0.2, 0.3], atol=1e-12)
    np.testing.assert_allclose(probs(logits, SamplingParams(temperature=1.0, top_k=2)), [0, 4 / 7, 0, 3 / 7], atol=1e-12)
    np.testing.assert_allclose(probs(logits, SamplingParams(temperature=1.0, top_p=0.65)), [0, 4 / 7, 0, 3 / 7], atol=1e-12)
    np.testing.assert_array_equal(probs(logits, SamplingParams()), [0, 1, 0, 0])


# -- bad input -------------------------------------------------------------------------------------
def test_drafter_with_other_vocabulary_is_refused(models, tmp_path):
    target, _ = models
    other_vocab = tiny_vocab(extra=3)
    other = Transformer(load_gguf(write_tiny_gguf(tmp_path / "v.gguf", n_layer=1, vocab=other_vocab)))
    with pytest.raises(SpecError, match=r"vocabulary of 283 tokens differs from the target's 280 tokens"):
        D.draft_model(target, other)


def test_prompt_longer_than_context_is_refused(models):
    target, _ = models
    with pytest.raises(SpecError, match=r"prompt of 300 tokens .* exceeds the model's context of 256 tokens"):
        G.generate_speculative(target, D.PromptLookupDrafter(), np.zeros(300, np.int64), 10)
    with pytest.raises(SpecError, match=r"exceeds the model's context of 256"):
        G.generate_plain(target, np.zeros(250, np.int64), 10)


def test_rejection_needs_a_full_q(models, prompt):
    with pytest.raises(SpecError, match=r"needs the drafter's full distribution q"):
        G.generate_speculative(models[0], D.PromptLookupDrafter(), prompt, 5, mode="rejection")


def test_prompt_lookup_finds_longest_earliest_match():
    d = D.PromptLookupDrafter(k=3, min_n=1, max_n=3)
    ctx = np.array([5, 6, 7, 8, 9, 1, 6, 7, 2, 5, 6, 7])
    draft = d.propose(ctx, SamplingParams(), np.random.default_rng(0))
    np.testing.assert_array_equal(draft.tokens, [7, 8, 9, 1])  # the 3-gram 5 6 7 matched at 0
    assert d.propose(np.array([1, 2, 3]), SamplingParams(), None).tree.n_nodes == 1  # no match


def test_typical_acceptance_runs_on_a_tree(models, prompt):
    """Medusa's rule at temperature 0 accepts exactly the argmax (p = 1 > min(eps, delta)), so it
    reproduces greedy; above 0 it runs and is seeded (but is lossy, so no distribution claim)."""
    target, _ = models
    drafter = D.TreeDrafter(D.layer_skip(target, k=1, n_layers=2), TREE)
    spec = G.generate_speculative(target, drafter, prompt, 20, mode="typical")
    np.testing.assert_array_equal(spec.tokens, G.generate_plain(target, prompt, 20).tokens)
    s = SamplingParams(temperature=0.7)
    a = G.generate_speculative(target, drafter, prompt, 12, mode="typical", sampling=s, seed=1)
    b = G.generate_speculative(target, drafter, prompt, 12, mode="typical", sampling=s, seed=1)
    np.testing.assert_array_equal(a.tokens, b.tokens)


@pytest.mark.parametrize("case", ["random", "ties", "best_first", "best_last", "two"])
def test_top_two_equals_a_stable_sort(case):
    """The recorded top-2 (two argmax passes) against the plain reference: a stable sort of -logits,
    whose first two entries are the two best ids with a tie going to the lower id."""
    rng = np.random.default_rng(5)
    row = rng.standard_normal(1000).astype(np.float32)
    if case == "ties":
        row = rng.integers(0, 3, 1000).astype(np.float32)  # many ids share the best value
    elif case == "best_first":
        row[0] = 10.0
    elif case == "best_last":
        row[-1] = 10.0
    elif case == "two":
        row = np.array([0.5, 0.5], np.float32)
    before = row.copy()
    ids, vals = G._top(row)
    want = np.argsort(-row, kind="stable")[:G.TOP]
    assert ids.tolist() == want.tolist()
    assert vals.tolist() == row[want].tolist()
    assert np.array_equal(row, before)  # the row is left as it was
