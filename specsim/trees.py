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

from .errors import SpecError, field_error


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
