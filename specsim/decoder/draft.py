"""What a drafter hands the verifier: the proposed tokens, their tree and, for drafters that sample,
the distribution each node's children were drawn from. Every drafter (the lookups and model drafters
in `drafters`, the trained heads in `trained`) returns one, so it sits below them all."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..speculation.trees import Tree


@dataclass(frozen=True, slots=True)
class Draft:
    """tokens (M,) int64, tokens[0] the root; tree: the topology (M nodes); q (M, V) float64 or None:
    the drafter's distribution at each node (q[i] drew the children of i), None for one-hot drafts."""

    tokens: np.ndarray
    tree: Tree
    q: np.ndarray | None = None
