"""NgramLookupDrafter: candidate selection (longest match, then follower frequency, then recency),
the draft length that follows the acceptance it has seen, and greedy exactness on a tiny model."""
from __future__ import annotations

import numpy as np
import pytest

from specsim.decoder.drafters import NgramLookupDrafter
from specsim.decoder.sampling import SamplingParams
from specsim.errors import SpecError

S = SamplingParams()


def _first(d, ctx):
    d.reset()
    t = d.propose(np.array(ctx), S, None).tokens
    return int(t[1]) if t.size > 1 else None


def test_longest_match_beats_a_frequent_short_one():
    # after "7" the follower is 1 three times, but the suffix "3 4 7" occurred once, followed by 9
    ctx = [7, 1, 5, 7, 1, 6, 7, 1, 3, 4, 7, 9, 8, 3, 4, 7]
    assert _first(NgramLookupDrafter(k=1), ctx) == 9
    assert _first(NgramLookupDrafter(k=1, max_n=1), ctx) == 1  # 1-grams only: the frequent follower


def test_most_frequent_follower_wins():
    ctx = [1, 2, 10, 0, 1, 2, 11, 0, 1, 2, 10, 0, 5, 1, 2]  # "1 2" -> 10 twice, 11 once
    assert _first(NgramLookupDrafter(k=1, max_n=2), ctx) == 10


def test_ties_go_to_the_most_recent():
    ctx = [1, 2, 10, 0, 1, 2, 11, 0, 5, 1, 2]  # "1 2" -> 10 once, then 11 once: 11 is the more recent
    assert _first(NgramLookupDrafter(k=1, max_n=2), ctx) == 11


def test_drafting_rematches_the_grown_suffix():
    """Token by token: after drafting 3 (from "8 9 -> 3"), the suffix "9 3" leads on to 4, then 5."""
    ctx = [8, 9, 3, 4, 5, 0, 6, 8, 9]
    d = NgramLookupDrafter(k=3, prior_accept=0.99, prior_weight=100)
    np.testing.assert_array_equal(d.propose(np.array(ctx), S, None).tokens, [9, 3, 4, 5])


def test_no_match_is_an_empty_draft():
    d = NgramLookupDrafter()
    assert d.propose(np.array([1, 2, 3, 4]), S, None).tree.n_nodes == 1


def test_first_draft_length_from_the_prior():
    """With a prior acceptance of 0.6 and slope 0.2 (expected tokens of the cycle g, P(all accepted) p):
    token 1: p = 0.6 > 0.2 * 1 / 1, g = 1.6; token 2: p = 0.36 > 0.2 * 1.6 / 1.2 = 0.267, g = 1.96;
    token 3: p = 0.216, not > 0.2 * 1.96 / 1.4 = 0.28: two tokens."""
    ctx = list(range(20)) + [100] + list(range(20))  # a long copy: every draft token has a match
    d = NgramLookupDrafter(k=10, verify_cost_slope=0.2, prior_accept=0.6)
    assert d.propose(np.array(ctx[:25]), S, None).tree.n_nodes - 1 == 2


def _replay(d, source, start, n_cycles, wrong=False):
    """Feed the drafter a copy of `source`: the 'target' emits source[i] each position (or, with
    wrong, a token it never drafted). Returns the draft lengths."""
    ctx = list(source[:start])
    lengths = []
    for _ in range(n_cycles):
        draft = d.propose(np.array(ctx), S, None).tokens[1:].tolist()
        lengths.append(len(draft))
        i = len(ctx)
        acc = 0
        if not wrong:
            while acc < len(draft) and i + acc < len(source) and draft[acc] == source[i + acc]:
                acc += 1
        ctx += list(source[i:i + acc]) + [999 + len(ctx) if wrong else source[i + acc]]
    return lengths


def test_draft_grows_while_everything_is_accepted_and_shrinks_after_rejections():
    text = list(range(200))
    source = text + [7777] + text + [8888] + text
    d = NgramLookupDrafter(k=12, prior_accept=0.6, verify_cost_slope=0.2)
    grow = _replay(d, source, 210, 10)
    assert grow[0] == 2 and grow[-1] == 12  # from the prior's 2 (see above) up to the cap
    assert all(b >= a for a, b in zip(grow, grow[1:]))
    shrink = _replay(d, source, 420, 6, wrong=True)  # now the target never follows the copy
    assert shrink[-1] < shrink[0]


def test_index_restarts_on_a_new_context():
    d = NgramLookupDrafter(k=1, max_n=2)
    assert _first(d, [1, 2, 10, 0, 1, 2]) == 10
    # a different request without reset: not a continuation, so the index starts over
    assert d.propose(np.array([1, 2, 11, 0, 1, 2]), S, None).tokens[1] == 11


def test_a_new_request_starts_from_the_prior():
    # a drafter that learned to draft long on one request drafts on the next as a fresh one does
    text = list(range(200))
    source = text + [7777] + text
    used = NgramLookupDrafter(k=12, prior_accept=0.6, verify_cost_slope=0.2)
    _replay(used, source, 210, 10)
    other = list(range(1000, 1100)) * 2
    used.reset()
    fresh = NgramLookupDrafter(k=12, prior_accept=0.6, verify_cost_slope=0.2)
    assert _replay(used, other, 110, 5) == _replay(fresh, other, 110, 5)


@pytest.mark.parametrize("kw,msg", [(dict(k=0), r"k >= 1"), (dict(min_n=3, max_n=2), r"min_n <= max_n"),
                                     (dict(verify_cost_slope=-1), r"verify_cost_slope = -1"),
                                     (dict(memory=0), r"memory = 0")])
def test_bad_settings_are_refused(kw, msg):
    with pytest.raises(SpecError, match=msg):
        NgramLookupDrafter(**kw)


def test_greedy_exact_on_a_tiny_model(tmp_path):
    pytest.importorskip("numba")
    from specsim.decoder import generate as G
    from specsim.decoder.gguf_model import load_gguf
    from specsim.decoder.model import Transformer
    from specsim.decoder.testing import write_tiny_gguf

    target = Transformer(load_gguf(write_tiny_gguf(tmp_path / "t.gguf", seed=11, n_layer=2)))
    prompt = np.array(target.tokenizer.encode("the cat and the dog, and the cat and the dog; the cat and").ids)
    plain = G.generate_plain(target, prompt, 40)
    for mode in ("greedy", "onehot"):
        spec = G.generate_speculative(target, NgramLookupDrafter(), prompt, 40, mode=mode)
        np.testing.assert_array_equal(spec.tokens, plain.tokens)
        assert any(c.n_drafted for c in spec.cycles)
