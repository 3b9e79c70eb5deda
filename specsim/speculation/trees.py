"""Token trees for tree drafting: one structure shared by the analytical model and the decoder.

A tree of M nodes is a parent array in topological order: node 0 is the root (the last token the
target has accepted, which the verify pass re-reads), `parents[0] == -1`, and `parents[i] < i`.
Each non-root node also has a rank among its siblings (0 = the drafter's best guess), which is what
per-rank acceptance vectors (Sequoia, Chen et al. 2024) index.

Flattening for the verify pass (seed article, "Tree drafting and the tree attention mask"): the
nodes go into one sequence in index order, each node's position id is its depth, and node i may
attend to itself and its ancestors only.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import SpecError, field_error


@dataclass(frozen=True, slots=True)
class Tree:
    """parents: int64 (M,), -1 at the root; ranks: int64 (M,), 0 at the root."""

    parents: np.ndarray
    ranks: np.ndarray

    def __post_init__(self) -> None:
        parents = np.asarray(self.parents, dtype=np.int64)
        ranks = np.asarray(self.ranks, dtype=np.int64)
        if parents.ndim != 1 or parents.size == 0:
            raise field_error("Tree", "parents", self.parents, "a non-empty 1-D array")
        if parents[0] != -1:
            raise field_error("Tree", "parents[0]", int(parents[0]), "-1 (node 0 is the root)")
        idx = np.arange(parents.size)
        bad = np.flatnonzero((parents[1:] < 0) | (parents[1:] >= idx[1:])) + 1
        if bad.size:
            i = int(bad[0])
            raise field_error("Tree", f"parents[{i}]", int(parents[i]), f"a node index in [0, {i}) (topological order)")
        if ranks.shape != parents.shape:
            raise field_error("Tree", "ranks", ranks.shape, f"shape {parents.shape}")
        if ranks[0] != 0 or np.any(ranks < 0):
            raise field_error("Tree", "ranks", ranks.tolist(), "0 at the root and >= 0 elsewhere")
        # siblings must carry distinct ranks: rank r is the drafter's r-th best guess at that node
        keys = parents[1:] * (ranks.max() + 1) + ranks[1:]
        if np.unique(keys).size != keys.size:
            raise field_error("Tree", "ranks", ranks.tolist(), "distinct ranks among siblings")
        parents.setflags(write=False)
        ranks.setflags(write=False)
        object.__setattr__(self, "parents", parents)
        object.__setattr__(self, "ranks", ranks)

    @property
    def n_nodes(self) -> int:
        return int(self.parents.size)

    @property
    def depths(self) -> np.ndarray:
        """Depth of each node (root 0); also the position-id offset of each flattened node."""
        depth = np.zeros(self.n_nodes, dtype=np.int64)
        for i in range(1, self.n_nodes):  # parents[i] < i, so one forward pass suffices
            depth[i] = depth[self.parents[i]] + 1
        return depth

    @property
    def max_depth(self) -> int:
        return int(self.depths.max())

    def children(self, node: int) -> np.ndarray:
        """Children of `node`, best rank first."""
        kids = np.flatnonzero(self.parents == node)
        return kids[np.argsort(self.ranks[kids], kind="stable")]

    def path_to(self, node: int) -> list[int]:
        """Node indices from the root down to `node`, inclusive."""
        path = [node]
        while self.parents[path[-1]] >= 0:
            path.append(int(self.parents[path[-1]]))
        return path[::-1]


def position_ids(tree: Tree, start: int = 0) -> np.ndarray:
    """Position id of each flattened node: `start` (the root's position) plus its depth."""
    return start + tree.depths


def ancestor_mask(tree: Tree) -> np.ndarray:
    """bool (M, M): mask[i, j] is True when node j is node i itself or one of its ancestors."""
    m = tree.n_nodes
    mask = np.zeros((m, m), dtype=bool)
    for i in range(m):  # row i = row of parent, plus itself (parents come first)
        p = tree.parents[i]
        if p >= 0:
            mask[i] = mask[p]
        mask[i, i] = True
    return mask


def chain(k: int) -> Tree:
    """A linear draft of k tokens: root plus a path of k nodes, every node rank 0."""
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 0:
        raise field_error("chain", "k", k, "an integer >= 0")
    return Tree(parents=np.arange(-1, k, dtype=np.int64), ranks=np.zeros(k + 1, dtype=np.int64))


def from_parents(parents, ranks=None) -> Tree:
    """A tree from a parent list; ranks default to the order siblings appear in."""
    parents = np.asarray(parents, dtype=np.int64)
    if ranks is None:
        ranks = np.zeros_like(parents)
        seen: dict[int, int] = {}
        for i in range(1, parents.size):
            p = int(parents[i])
            ranks[i] = seen.get(p, 0)
            seen[p] = ranks[i] + 1
    return Tree(parents=parents, ranks=np.asarray(ranks, dtype=np.int64))


def from_choices(choices) -> Tree:
    """A tree from a Medusa-style choice list: each choice is a path of sibling ranks from the root,
    e.g. [(0,), (1,), (0, 0)] is root → {top-1, top-2}, top-1 → {top-1}. Every prefix of a choice must
    itself be a choice. Nodes are ordered by depth, then lexicographically, as Medusa orders them."""
    paths = sorted({tuple(int(r) for r in c) for c in choices}, key=lambda c: (len(c), c))
    index: dict[tuple, int] = {(): 0}
    parents, ranks = [-1], [0]
    for path in paths:
        if not path or min(path) < 0:
            raise SpecError(f"tree choice {path!r}: expected a non-empty tuple of ranks >= 0")
        if path[:-1] not in index:
            raise SpecError(f"tree choice {path!r}: its prefix {path[:-1]!r} is not in the choice list")
        index[path] = len(parents)
        parents.append(index[path[:-1]])
        ranks.append(path[-1])
    return Tree(parents=np.array(parents, dtype=np.int64), ranks=np.array(ranks, dtype=np.int64))


def to_choices(tree: Tree) -> list[tuple[int, ...]]:
    """The inverse of `from_choices` (root omitted)."""
    out: list[tuple[int, ...]] = []
    for i in range(1, tree.n_nodes):
        out.append(tuple(int(tree.ranks[j]) for j in tree.path_to(i)[1:]))
    return out


# --------------------------------------------------------------------------------------------------
# Expected accepted length and optimal trees under a per-rank acceptance vector (Sequoia)
# --------------------------------------------------------------------------------------------------
#
# Sequoia's positional acceptance model (Chen et al. 2024, "Sequoia: Scalable, Robust, and
# Hardware-aware Speculative Decoding", §3.1): once a node is accepted, its candidate children are
# examined best rank first, and the child of rank r is the one accepted with probability p_r, which
# depends on r only. p_r is the *joint* probability "candidates 0..r−1 were rejected and candidate r
# was accepted", so the events are mutually exclusive and Σ_r p_r ≤ 1 (Sequoia's measured vectors
# look like [0.7, 0.1, 0.04, ...]). Under greedy verification p_r = P(the target's token equals the
# drafter's r-th guess); `specsim.acceptance.rank_acceptance_from_conditional` converts from the
# conditional form c_r = P(accept r | 0..r−1 rejected). A rank with no entry in the vector (r ≥ R)
# has p_r = 0. The probability that node v is accepted is the product of p_rank along its path, so
#
#     E[tokens per cycle] = 1 + Σ_{v ≠ root} Π_{u ∈ path(root→v), u ≠ root} p_{rank(u)}
#                                                        (Chen et al. 2024, §3.1, F(T) = Σ_v f(v))
#
# where the 1 is the bonus token the target always contributes (the root itself, in F's terms).

def _check_rank_acceptance(rank_acceptance) -> np.ndarray:
    p = np.asarray(rank_acceptance, dtype=float)
    if p.ndim != 1:
        raise field_error("trees", "rank_acceptance", rank_acceptance, "a 1-D vector p[r], r = sibling rank")
    if np.any(~np.isfinite(p)) or np.any((p < 0) | (p > 1)):
        raise field_error("trees", "rank_acceptance", p.tolist(), "probabilities in [0, 1]")
    if p.sum() > 1.0 + 1e-9:
        raise field_error(
            "trees", "rank_acceptance", p.tolist(),
            "Sequoia's joint per-rank probabilities (mutually exclusive, sum <= 1); for conditional "
            "rates use specsim.acceptance.rank_acceptance_from_conditional",
        )
    return p


def node_acceptance_probs(tree: Tree, rank_acceptance) -> np.ndarray:
    """float (M,): probability that each node is on the accepted path (root: 1), under Sequoia's
    positional model: the product of p_rank along the node's path (Chen et al. 2024, §3.1)."""
    p = _check_rank_acceptance(rank_acceptance)
    padded = np.concatenate([p, [0.0]])
    edge = padded[np.minimum(tree.ranks, p.size)]  # p of each node's own rank; 0 beyond the vector
    prob = np.ones(tree.n_nodes)
    for i in range(1, tree.n_nodes):  # parents come first
        prob[i] = prob[tree.parents[i]] * edge[i]
    return prob


def expected_tokens_per_cycle(tree: Tree, rank_acceptance) -> float:
    """E[tokens emitted per cycle] of verifying `tree`, bonus token included; in [1, depth + 1].

    tree: root = the last accepted token, every other node a drafted token.
    rank_acceptance: float (R,), Sequoia's p_r (see the section comment above; Σ p_r ≤ 1).
    Returns 1 + Σ over non-root nodes of Π p_rank along the path (Chen et al. 2024, §3.1). A chain of
    K nodes with rank_acceptance = [α] gives (1 − α^(K+1)) / (1 − α) (Leviathan et al. 2022, eq. 1).
    """
    return float(node_acceptance_probs(tree, rank_acceptance).sum())


def _dp_tables(max_nodes: int, p_sorted: np.ndarray, max_depth: int | None):
    """Sequoia's dynamic program (Chen et al. 2024, §3.1), all sizes in one pass.

    With the positive p sorted best first (R of them), a node's children use ranks 0..j−1 of that
    order (any optimal tree does: swapping a child onto an unused better rank only helps).
      f[n, d]    best Σ f(v) of a subtree of exactly n nodes and depth ≤ d, its root counting 1;
      g[m, j, d] best Σ_c p_c f(c) over children of a node whose subtree has depth ≤ d, the children
                 using m nodes in all and ranks among the first j;
      f[n, d] = 1 + g[n−1, R, d];  g[m, j, d] = max(g[m, j−1, d], max_s g[m−s, j−1, d] + p_j f[s, d−1]).
    Without a depth limit the d axis has one entry and "d − 1" is that same entry.
    Returns f (N+1, D), g (N+1, R+1, D) with −inf where infeasible; D = 1 when max_depth is None.
    """
    n_max = max_nodes
    r = p_sorted.size
    d_n = 1 if max_depth is None else max_depth + 1
    f = np.full((n_max + 1, d_n), -np.inf)
    g = np.full((n_max + 1, r + 1, d_n), -np.inf)
    g[0, :, :] = 0.0
    if max_depth is not None:
        g[1:, :, 0] = -np.inf  # depth 0: no children at all
    for n in range(1, n_max + 1):
        f[n] = 1.0 + g[n - 1, r]
        if n == n_max:
            break
        # children's subtrees: f[s, d − 1] for the parent's depth limit d. With a depth limit only
        # d ≤ n needs computing: children of at most n nodes are no deeper than n − 1, so every
        # column d ≥ n equals column n (filled in below).
        cols = 1 if max_depth is None else min(d_n, n + 1)
        if max_depth is None:
            child = f[1:n + 1]                       # (n, 1), s = 1..n
        else:
            child = np.full((n, cols), -np.inf)
            child[:, 1:] = f[1:n + 1, :cols - 1]
        rest = g[n - 1::-1, :-1, :cols]              # rest[s − 1, j] = g[n − s, j], s = 1..n: (n, R, cols)
        cand = rest + p_sorted[None, :, None] * child[:, None, :]   # rank j used with s nodes
        # g[n, j] = max(g[n, j − 1], best over s of rank j − 1's candidate); g[n, 0] stays −inf
        g[n, 1:, :cols] = np.maximum.accumulate(cand.max(axis=0), axis=0)
        g[n, :, cols:] = g[n, :, cols - 1:cols]
    return f, g


def _positive_sorted(p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The ranks with p_r > 0, best first (stable), and their p."""
    order = np.argsort(-p, kind="stable")
    order = order[p[order] > 0]
    return order, p[order]


def _check_sizes(where: str, n: int, max_depth, *, allow_depth_zero: bool = False) -> None:
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise field_error(where, "n_nodes", n, "an integer >= 1 (the root counts)")
    if max_depth is not None and (isinstance(max_depth, bool) or not isinstance(max_depth, (int, np.integer))
                                  or max_depth < 0):
        raise field_error(where, "max_depth", max_depth, "None or an integer >= 0")
    if max_depth == 0 and n > 1 and not allow_depth_zero:
        raise field_error(where, "max_depth", max_depth, f">= 1 to hold {n} nodes")


def optimal_tree_values(max_nodes: int, rank_acceptance, *, max_depth: int | None = None) -> np.ndarray:
    """float (max_nodes + 1,): element M = the best E[tokens per cycle] of any tree of M nodes (root
    included) under Sequoia's positional model; element 0 is nan, element 1 is 1.0 (root only).

    One dynamic-programming pass for every size (Chen et al. 2024, §3.1), O(M² R) with R the number
    of ranks with p_r > 0 (capped at M − 1). Nodes that cannot add anything (no positive rank left
    within the depth limit) go under the root at a rank with p = 0, so the values never decrease in M.
    max_depth: the deepest a draft node may sit (root at depth 0); None for no limit. With
    max_depth = 0 only the root fits: elements 2.. are nan (no such tree) rather than an error, so a
    sweep over K that includes K = 0 does not stop.
    """
    _check_sizes("optimal_tree_values", max_nodes, max_depth, allow_depth_zero=True)
    if max_depth == 0:
        return np.concatenate([[np.nan, 1.0], np.full(max_nodes - 1, np.nan)])
    p = _check_rank_acceptance(rank_acceptance)
    _, p_sorted = _positive_sorted(p)
    p_sorted = p_sorted[: max(max_nodes - 1, 0)]
    if max_depth is not None and max_depth >= max_nodes - 1 and max_nodes > 1:
        max_depth = None  # no tree of max_nodes nodes is deeper than max_nodes − 1: no limit at all
    f, _ = _dp_tables(max_nodes, p_sorted, max_depth)
    best = f[:, -1]
    out = np.maximum.accumulate(np.where(np.isfinite(best), best, -np.inf)[1:])
    return np.concatenate([[np.nan], out])


def optimal_tree(n_nodes: int, rank_acceptance, *, max_depth: int | None = None) -> Tree:
    """The tree of `n_nodes` nodes (root included) with the largest E[tokens per cycle] under
    Sequoia's positional model, by Sequoia's dynamic program (Chen et al. 2024, §3.1).

    Ties break toward fewer useful nodes, then lower ranks; nodes left over once no positive-p rank
    fits (see `optimal_tree_values`) hang under the root with ranks whose p is 0. Node order: by
    depth, then by rank path (as `from_choices` orders them). max_depth: None for no limit.
    """
    _check_sizes("optimal_tree", n_nodes, max_depth)
    p = _check_rank_acceptance(rank_acceptance)
    order, p_sorted = _positive_sorted(p)
    p_sorted = p_sorted[: max(n_nodes - 1, 0)]
    order = order[: p_sorted.size]
    depth_cap = None if max_depth is None or (max_depth >= n_nodes - 1 and n_nodes > 1) else int(max_depth)
    f, g = _dp_tables(n_nodes, p_sorted, depth_cap)
    col = f[:, -1]
    useful = int(np.argmax(np.where(np.isfinite(col), col, -np.inf)[1:] >= np.nanmax(col[1:]) - 1e-12)) + 1
    r = p_sorted.size

    def children(m: int, j: int, d: int) -> list[tuple[int, int]]:
        """(sorted-rank index, subtree size) of the children in the argmax of g[m, j, d]."""
        out = []
        while m > 0:
            while j > 0 and g[m, j, d] == g[m, j - 1, d]:
                j -= 1  # rank j − 1 unused
            if j == 0:
                raise AssertionError("optimal_tree: DP traceback failed")  # pragma: no cover
            cd = d if depth_cap is None else d - 1
            target = g[m, j, d]
            for s in range(1, m + 1):
                if np.isclose(g[m - s, j - 1, d] + p_sorted[j - 1] * f[s, cd], target, rtol=0, atol=1e-12):
                    out.append((j - 1, s))
                    m, j = m - s, j - 1
                    break
            else:  # pragma: no cover
                raise AssertionError("optimal_tree: DP traceback failed")
        return out

    choices: list[tuple[int, ...]] = []

    def build(prefix: tuple[int, ...], n: int, d: int) -> None:
        for jj, s in children(n - 1, r, d):
            path = prefix + (int(order[jj]),)
            choices.append(path)
            build(path, s, d if depth_cap is None else d - 1)

    build((), useful, 0 if depth_cap is None else depth_cap)
    # leftover nodes: leaves under the root at ranks with p = 0 (they add nothing, cost a slot)
    taken = {c[0] for c in choices if len(c) == 1}
    spare = (rr for rr in range(p.size + n_nodes) if rr not in taken and (rr >= p.size or p[rr] == 0))
    for _ in range(n_nodes - useful):
        choices.append((next(spare),))
    return from_choices(choices)


def best_tree_size(rank_acceptance, cycle_time_s, *, max_depth: int | None = None) -> tuple[int, float]:
    """The hardware-aware best tree size: the M maximising tokens per second.

    cycle_time_s: float (N,), cycle_time_s[M − 1] = the time of a cycle verifying M tree nodes
    (drafting + verify over M query tokens at the batch size and context of interest + overhead),
    from the cost model. Returns (M, best E[tokens per cycle] / cycle time in tokens/s per sequence).
    """
    t = np.asarray(cycle_time_s, dtype=float)
    if t.ndim != 1 or t.size == 0 or np.any(~(t > 0)):
        raise field_error("best_tree_size", "cycle_time_s", cycle_time_s, "a 1-D array of positive seconds")
    values = optimal_tree_values(t.size, rank_acceptance, max_depth=max_depth)[1:]
    rate = values / t
    m = int(np.argmax(rate))
    return m + 1, float(rate[m])


# Medusa's default tree for Vicuna-7B: 63 choices (64 nodes with the root), found by Medusa's
# calibration on Alpaca (Cai et al. 2024, §3.3.1). Source: FasterDecoding/Medusa,
# medusa/model/medusa_choices.py, `mc_sim_7b_63`.
MEDUSA_MC_SIM_7B_63: tuple[tuple[int, ...], ...] = tuple(tuple(c) for c in [
    [0], [0, 0], [1], [0, 1], [2], [0, 0, 0], [1, 0], [0, 2], [3], [0, 3], [4], [0, 4], [2, 0], [0, 5],
    [0, 0, 1], [5], [0, 6], [6], [0, 7], [0, 1, 0], [1, 1], [7], [0, 8], [0, 0, 2], [3, 0], [0, 9],
    [8], [9], [1, 0, 0], [0, 2, 0], [1, 2], [0, 0, 3], [4, 0], [2, 1], [0, 0, 4], [0, 0, 5],
    [0, 0, 0, 0], [0, 1, 1], [0, 0, 6], [0, 3, 0], [5, 0], [1, 3], [0, 0, 7], [0, 0, 8], [0, 0, 9],
    [6, 0], [0, 4, 0], [1, 4], [7, 0], [0, 1, 2], [2, 0, 0], [3, 1], [2, 2], [8, 0], [0, 5, 0], [1, 5],
    [1, 0, 1], [0, 2, 1], [9, 0], [0, 6, 0], [0, 0, 0, 1], [1, 6], [0, 7, 0],
])


def medusa_default_tree() -> Tree:
    """Medusa's published `mc_sim_7b_63` topology (64 nodes, depth 4) as a Tree."""
    return from_choices(MEDUSA_MC_SIM_7B_63)
