"""Tests for specsim.trees: flattening (seed article), expected accepted length and optimal trees.

Expected values come from the seed article's worked example, hand algebra (geometric sums), a
second implementation written here over Medusa-style choice paths, brute force over every tree of
a few nodes, and Monte Carlo simulation of the verify walk.
"""
from __future__ import annotations

import functools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specsim.errors import SpecError
from specsim.speculation.trees import MEDUSA_MC_SIM_7B_63, Tree, ancestor_mask, best_tree_size, chain, expected_tokens_per_cycle, from_choices, from_parents, medusa_default_tree, optimal_tree, optimal_tree_values, position_ids, to_choices

# ---------------------------------------------------------------------------------------------
# the lead's structure: the seed article's example, "Tree drafting and the tree attention mask"
# ---------------------------------------------------------------------------------------------

SEED_MASK = """
1 . . .
1 1 . .
1 . 1 .
1 1 . 1
"""  # rows/columns r, A, B, C, transcribed from the seed article


def _seed_tree() -> Tree:
    # r → {A, B}, A → {C}; flattened [r, A, B, C]
    return from_parents([-1, 0, 0, 1])


def test_seed_example_mask_matches_the_article_exactly():
    expected = np.array([[c == "1" for c in row.split()] for row in SEED_MASK.strip().splitlines()])
    np.testing.assert_array_equal(ancestor_mask(_seed_tree()), expected)


def test_seed_example_position_ids():
    np.testing.assert_array_equal(position_ids(_seed_tree()), [0, 1, 1, 2])  # seed: pos_ids = depth
    np.testing.assert_array_equal(position_ids(_seed_tree(), start=100), [100, 101, 101, 102])


def test_seed_example_from_choices_is_the_same_tree():
    t = from_choices([(0,), (1,), (0, 0)])  # A = top-1, B = top-2, C = A's top-1
    np.testing.assert_array_equal(t.parents, [-1, 0, 0, 1])
    np.testing.assert_array_equal(t.ranks, [0, 0, 1, 0])
    assert to_choices(t) == [(0,), (1,), (0, 0)]


def test_chain_mask_is_lower_triangular():
    np.testing.assert_array_equal(ancestor_mask(chain(4)), np.tril(np.ones((5, 5), dtype=bool)))
    np.testing.assert_array_equal(position_ids(chain(4)), np.arange(5))


def test_tree_rejects_bad_parents_and_duplicate_ranks():
    with pytest.raises(SpecError, match="parents"):
        Tree(parents=np.array([-1, 2, 0]), ranks=np.zeros(3, dtype=np.int64))
    with pytest.raises(SpecError, match="distinct ranks"):
        Tree(parents=np.array([-1, 0, 0]), ranks=np.array([0, 1, 1]))


# ---------------------------------------------------------------------------------------------
# a second implementation over choice paths, and a brute-force enumerator
# ---------------------------------------------------------------------------------------------

def _value_of_choices(choices, p) -> float:
    """1 + Σ over paths of Π p[rank]: Sequoia's F(T), written directly over Medusa choice paths."""
    total = 1.0
    for path in choices:
        total += math.prod(p[r] if r < len(p) else 0.0 for r in path)
    return total


@functools.lru_cache(maxsize=None)
def _all_trees(n_nodes: int, n_ranks: int, max_depth=None):
    """Every prefix-closed set of rank paths with n_nodes − 1 paths, ranks in 0..n_ranks−1."""
    level = {frozenset()}
    for _ in range(n_nodes - 1):
        nxt = set()
        for t in level:
            for parent in [()] + list(t):
                if max_depth is not None and len(parent) >= max_depth:
                    continue
                for r in range(n_ranks):
                    c = parent + (r,)
                    if c not in t:
                        nxt.add(t | {c})
        level = nxt
    return level


def _brute_force_best(n_nodes, p, max_depth=None) -> float:
    # ranks beyond the vector (p = 0) so that "useless" nodes are representable: one is enough
    # without a depth limit (they can chain), a shallow tree may need up to n_nodes − 1 of them
    n_ranks = len(p) + 1 if max_depth is None else max(len(p) + 1, n_nodes - 1)
    return max(_value_of_choices(t, p) for t in _all_trees(n_nodes, n_ranks, max_depth))


def test_enumerator_counts_small_cases():
    # by hand: with 1 rank, the only tree of n nodes is the chain
    assert all(len(_all_trees(n, 1)) == 1 for n in range(1, 6))
    # 3 nodes, 2 ranks: {0},{1} under the root; chains 00, 01, 10, 11; root-pair {0,1}: 5 trees
    assert len(_all_trees(3, 2)) == 5


# ---------------------------------------------------------------------------------------------
# expected_tokens_per_cycle
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("alpha", [0.0, 0.3, 0.8, 1.0])
@pytest.mark.parametrize("k", [0, 1, 4, 7])
def test_chain_reduces_to_the_geometric_sum(alpha, k):
    expected = float(sum(alpha ** i for i in range(k + 1)))  # Σ_{i=0}^{K} α^i by hand
    assert expected_tokens_per_cycle(chain(k), [alpha]) == pytest.approx(expected, rel=1e-12)


def test_seed_tree_by_hand():
    # r → {A(rank 0), B(rank 1)}, A → {C(rank 0)}: 1 + p0 + p1 + p0·p0
    p = [0.5, 0.3]
    assert expected_tokens_per_cycle(_seed_tree(), p) == pytest.approx(1 + 0.5 + 0.3 + 0.25, rel=1e-12)


def test_ranks_beyond_the_vector_count_zero():
    t = from_choices([(0,), (3,), (3, 0)])
    assert expected_tokens_per_cycle(t, [0.4, 0.2]) == pytest.approx(1.4, rel=1e-12)


def test_rank_vector_validation():
    with pytest.raises(SpecError, match="sum <= 1"):
        expected_tokens_per_cycle(chain(2), [0.8, 0.8])  # conditional rates passed by mistake
    with pytest.raises(SpecError):
        expected_tokens_per_cycle(chain(2), [1.2])


def _simulate_tokens(tree: Tree, p, n_trials: int, rng) -> np.ndarray:
    """Monte Carlo of the verify walk: at each accepted node one uniform u picks which rank is
    accepted (rank r when u lands in [Σ_{j<r} p_j, Σ_{j≤r} p_j), none when u ≥ Σ p); the walk moves
    to that child if the tree has it, else stops. Returns tokens emitted = accepted depth + 1."""
    p = np.asarray(p, dtype=float)
    edges = np.cumsum(p)
    n_ranks = p.size + 1  # last slot: "no candidate accepted"
    child = np.full((tree.n_nodes, n_ranks), -1)
    for i in range(1, tree.n_nodes):
        if tree.ranks[i] < p.size:
            child[tree.parents[i], tree.ranks[i]] = i
    node = np.zeros(n_trials, dtype=np.int64)
    tokens = np.ones(n_trials)
    alive = np.ones(n_trials, dtype=bool)
    for _ in range(tree.max_depth):
        u = rng.random(n_trials)
        rank = np.searchsorted(edges, u, side="right")  # p.size when u ≥ Σ p
        nxt = child[node, rank]
        alive &= nxt >= 0
        node = np.where(alive, nxt, node)
        tokens += alive
    return tokens


@pytest.mark.parametrize(
    "tree,p",
    [
        (chain(5), [0.7]),
        (_seed_tree(), [0.5, 0.3]),
        (from_choices([(0,), (1,), (2,), (0, 0), (0, 1), (1, 0), (0, 0, 0)]), [0.55, 0.2, 0.1]),
        (medusa_default_tree(), [0.6, 0.15, 0.07, 0.04, 0.03, 0.02, 0.01, 0.01, 0.005, 0.005]),
    ],
    ids=["chain5", "seed", "small-tree", "medusa-63"],
)
def test_expected_tokens_matches_monte_carlo(tree, p):
    rng = np.random.default_rng(20240521)
    tokens = _simulate_tokens(tree, p, 200_000, rng)
    se = tokens.std(ddof=1) / np.sqrt(tokens.size)
    # 5 standard errors: a seeded draw, and a false failure would need a 5-sigma deviation
    assert abs(tokens.mean() - expected_tokens_per_cycle(tree, p)) < 5 * se


@settings(max_examples=60, deadline=None)
@given(
    choices=st.lists(st.lists(st.integers(0, 3), min_size=1, max_size=4), min_size=0, max_size=12),
    p_raw=st.lists(st.floats(0, 1), min_size=1, max_size=4),
)
def test_expected_tokens_property(choices, p_raw):
    # prefix-close a random choice list
    closed = {tuple(c[:i]) for c in choices for i in range(1, len(c) + 1)}
    tree = from_choices(closed)
    p = np.asarray(p_raw) / max(1.0, sum(p_raw))
    value = expected_tokens_per_cycle(tree, p)
    assert 1.0 <= value <= tree.max_depth + 1 + 1e-12  # at most one accepted node per depth
    assert value <= tree.n_nodes + 1e-12
    assert value == pytest.approx(_value_of_choices(closed, p), rel=1e-12)


# ---------------------------------------------------------------------------------------------
# optimal trees
# ---------------------------------------------------------------------------------------------

RANK_VECTORS = [[0.8], [0.6, 0.2, 0.1], [0.3, 0.3, 0.2], [0.1, 0.5, 0.0, 0.3], [0.0, 0.0]]


@pytest.mark.parametrize("p", RANK_VECTORS, ids=str)
def test_dp_equals_brute_force(p):
    top = 7 if len(p) <= 3 else 6  # 7 nodes over 5 ranks is ~10^5 trees: kept out for time
    values = optimal_tree_values(top, p)
    for m in range(1, top + 1):
        best = _brute_force_best(m, p)
        assert values[m] == pytest.approx(best, rel=1e-12), m
        tree = optimal_tree(m, p)
        assert tree.n_nodes == m
        assert expected_tokens_per_cycle(tree, p) == pytest.approx(best, rel=1e-12)


@pytest.mark.parametrize("p", [[0.6, 0.2, 0.1], [0.9, 0.05]], ids=str)
@pytest.mark.parametrize("max_depth", [1, 2, 3])
def test_dp_equals_brute_force_with_depth_limit(p, max_depth):
    values = optimal_tree_values(6, p, max_depth=max_depth)
    for m in range(1, 7):
        best = _brute_force_best(m, p, max_depth=max_depth)
        assert values[m] == pytest.approx(best, rel=1e-12)
        tree = optimal_tree(m, p, max_depth=max_depth)
        assert tree.n_nodes == m and tree.max_depth <= max_depth
        assert expected_tokens_per_cycle(tree, p) == pytest.approx(best, rel=1e-12)


def test_values_layout():
    v = optimal_tree_values(5, [0.5])
    assert v.shape == (6,) and np.isnan(v[0]) and v[1] == 1.0
    # one rank: the best tree is the chain, Σ_{i<M} 0.5^i by hand
    np.testing.assert_allclose(v[1:], [1, 1.5, 1.75, 1.875, 1.9375], rtol=1e-12)


def test_depth_one_is_a_star_of_the_best_ranks():
    # depth 1: every child hangs off the root; value = 1 + sum of the best M−1 p (by hand)
    p = [0.1, 0.4, 0.2, 0.05]
    v = optimal_tree_values(6, p, max_depth=1)
    np.testing.assert_allclose(v[1:], [1, 1.4, 1.6, 1.7, 1.75, 1.75], rtol=1e-12)
    t = optimal_tree(4, p, max_depth=1)
    assert sorted(c[0] for c in to_choices(t)) == [0, 1, 2]


@settings(max_examples=50, deadline=None)
@given(p_raw=st.lists(st.floats(0, 1), min_size=1, max_size=6), max_depth=st.one_of(st.none(), st.integers(1, 6)))
def test_values_properties(p_raw, max_depth):
    p = np.asarray(p_raw) / max(1.0, sum(p_raw))
    v = optimal_tree_values(40, p, max_depth=max_depth)[1:]
    m = np.arange(1, 41)
    assert np.all(np.diff(v) >= -1e-12)                      # never worse with more nodes
    assert np.all(v <= m + 1e-12)                            # each node adds at most 1
    assert np.all(v <= 1 + (m - 1) * p.max() + 1e-12)        # each draft node adds at most max p
    total = p.sum()
    if total < 1:
        assert np.all(v <= 1 / (1 - total) + 1e-9)           # the infinite complete tree: Σ (Σp)^d
    chain_value = np.array([sum(p[0] ** i for i in range(k)) for k in m]) if max_depth is None else None
    if chain_value is not None:
        assert np.all(v >= chain_value - 1e-12)              # at least the rank-0 chain


@settings(max_examples=25, deadline=None)
@given(p_raw=st.lists(st.floats(0, 1), min_size=1, max_size=5), n=st.integers(1, 30))
def test_optimal_tree_achieves_its_value(p_raw, n):
    p = np.asarray(p_raw) / max(1.0, sum(p_raw))
    t = optimal_tree(n, p)
    assert t.n_nodes == n
    assert expected_tokens_per_cycle(t, p) == pytest.approx(optimal_tree_values(n, p)[n], rel=1e-9, abs=1e-12)


def test_best_tree_size_trades_tokens_against_verify_cost():
    p = [0.6, 0.2, 0.1]
    v = optimal_tree_values(8, p)
    # flat verify cost: more nodes never hurt, so the biggest tree wins (values non-decreasing)
    m, rate = best_tree_size(p, np.full(8, 0.01))
    assert rate == pytest.approx(v[8] / 0.01) and v[m] == pytest.approx(v[8])
    # steep cost (time ∝ M): tokens/M is largest at M = 1 since each node adds < 1
    m, rate = best_tree_size(p, 0.01 * np.arange(1, 9))
    assert m == 1 and rate == pytest.approx(100.0)


def test_medusa_default_tree_shape():
    t = medusa_default_tree()
    assert t.n_nodes == 64 and t.max_depth == 4  # 63 choices + root; longest choice has 4 ranks
    assert len(MEDUSA_MC_SIM_7B_63) == 63 == len(set(MEDUSA_MC_SIM_7B_63))
    assert sorted(to_choices(t)) == sorted(MEDUSA_MC_SIM_7B_63)


@settings(max_examples=30, deadline=None)
@given(p_raw=st.lists(st.floats(0, 1), min_size=1, max_size=5), n=st.integers(2, 25))
def test_depth_limit_is_monotone_and_vanishes_at_n_minus_1(p_raw, n):
    p = np.asarray(p_raw) / max(1.0, sum(p_raw))
    free = optimal_tree_values(n, p)
    previous = optimal_tree_values(n, p, max_depth=1)
    for d in range(2, n + 1):
        v = optimal_tree_values(n, p, max_depth=d)
        assert np.all(v[1:] >= previous[1:] - 1e-12)   # a looser limit never hurts
        assert np.all(v[1:] <= free[1:] + 1e-12)       # and never beats no limit
        previous = v
    # a tree of n nodes is at most n − 1 deep, so that limit is no limit (exact equality)
    np.testing.assert_array_equal(optimal_tree_values(n, p, max_depth=n - 1)[n], free[n])
    t = optimal_tree(n, p, max_depth=2)
    assert t.max_depth <= 2 and t.n_nodes == n


def test_size_validation():
    with pytest.raises(SpecError, match="n_nodes"):
        optimal_tree_values(0, [0.5])
    with pytest.raises(SpecError, match="max_depth"):
        optimal_tree(3, [0.5], max_depth=0)
    assert optimal_tree(1, [0.5], max_depth=0).n_nodes == 1
    # depth 0 holds the root only: the other sizes have no tree (nan, not an error, for sweeps)
    v = optimal_tree_values(4, [0.5], max_depth=0)
    assert v[1] == 1.0 and np.all(np.isnan(v[[0, 2, 3, 4]]))
