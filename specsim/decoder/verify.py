"""Verification of a drafted tree (a chain is a tree) against the target's distributions from one
verify pass. Every function takes its uniforms as an argument: the same uniforms, the same decisions.

Modes
- greedy: exact match against the target's argmax (exact at temperature 0).
- rejection: Leviathan et al. 2022 / Chen et al. 2023 with the drafter's full distribution q: accept x
  with min(1, p(x)/q(x)), else draw from norm(max(0, p - q)). Exact at any temperature. Chains only.
- onehot: rejection with a one-hot draft (vLLM's treatment of n-gram drafts and of trees): accept x
  with p(x); on rejection set p(x) = 0, renormalise and try the next sibling. Exact.
- typical: Medusa's typical acceptance (Cai et al. 2024, section 2.3.1): accept x when
  p(x) > min(epsilon, delta * exp(-H(p))). Fast but LOSSY: not the target's distribution above T = 0.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import SpecError
from ..speculation.trees import Tree
from .sampling import sample

MODES = {"greedy": "exact", "rejection": "exact", "onehot": "exact", "typical": "lossy"}


@dataclass(frozen=True, slots=True)
class Verdict:
    """path: accepted node indices below the root, in order; next_token: the token the target adds
    (correction on a rejection, bonus when the whole path is accepted); last_node: where it was drawn."""

    path: tuple
    next_token: int
    last_node: int

    @property
    def n_accepted(self) -> int:
        return len(self.path)


def _children(tree: Tree) -> list[np.ndarray]:
    return [tree.children(i) for i in range(tree.n_nodes)]


def verify_greedy(tree: Tree, tokens: np.ndarray, logits: np.ndarray) -> Verdict:
    """tokens (M,) int64 (tokens[0] the root); logits (M, V) the target's at each node."""
    kids = _children(tree)
    node, path = 0, []
    while True:
        best = int(np.argmax(logits[node]))
        hit = [c for c in kids[node] if tokens[c] == best]
        if not hit:
            return Verdict(tuple(path), best, node)
        node = int(hit[0])
        path.append(node)


def verify_rejection(tree: Tree, tokens: np.ndarray, p: np.ndarray, q: np.ndarray, u: np.ndarray) -> Verdict:
    """Chain only. p, q (M, V): target and drafter distributions at each node (q[i] drew the child of
    i); u (M + 1,) uniforms: u[i] decides node i, u[M] draws the final token."""
    m = tree.n_nodes
    if np.any(tree.parents != np.arange(-1, m - 1)):
        raise SpecError("verify mode 'rejection' needs a chain draft with the drafter's full q; "
                        "use 'onehot' or 'typical' for trees")
    path = []
    for i in range(1, m):
        x = int(tokens[i])
        if u[i] * q[i - 1, x] < p[i - 1, x]:  # accept with probability min(1, p/q)
            path.append(i)
            continue
        residual = np.maximum(p[i - 1] - q[i - 1], 0.0)
        if residual.sum() <= 0:  # p == q up to rounding: rejection had probability ~0
            residual = p[i - 1]
        return Verdict(tuple(path), sample(residual, u[m]), i - 1)
    return Verdict(tuple(path), sample(p[m - 1], u[m]), m - 1)


def verify_onehot(tree: Tree, tokens: np.ndarray, p: np.ndarray, u: np.ndarray) -> Verdict:
    """Deterministic (one-hot) drafts, any tree. p (M, V); u (M + 1,): u[c] decides child c."""
    kids = _children(tree)
    m = tree.n_nodes
    node, path = 0, []
    while True:
        cur = p[node]
        for c in kids[node]:
            x = int(tokens[c])
            total = cur.sum()
            if u[c] * total < cur[x]:
                node = int(c)
                path.append(node)
                break
            if cur is p[node]:
                cur = cur.copy()
            cur[x] = 0.0
        else:
            return Verdict(tuple(path), sample(cur, u[m]), node)


def verify_typical(tree: Tree, tokens: np.ndarray, p: np.ndarray, u: np.ndarray, *,
                   epsilon: float = 0.09, delta: float = 0.3) -> Verdict:
    """Medusa's typical acceptance (defaults: Medusa's posterior_threshold and posterior_alpha).
    LOSSY. The best-ranked child passing the threshold is followed; the final token is drawn from p."""
    kids = _children(tree)
    m = tree.n_nodes
    node, path = 0, []
    while True:
        pn = p[node]
        nz = pn[pn > 0]
        entropy = float(-(nz * np.log(nz)).sum())
        threshold = min(epsilon, delta * np.exp(-entropy))
        hit = [c for c in kids[node] if pn[int(tokens[c])] > threshold]
        if not hit:
            return Verdict(tuple(path), sample(pn, u[m]), node)
        node = int(hit[0])
        path.append(node)
