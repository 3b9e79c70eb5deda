"""Temperature, top-k and top-p, applied alike to the target and the drafter; sampling by inverse CDF
from a uniform drawn by the caller (from the request's seeded numpy Generator)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import field_error


@dataclass(frozen=True, slots=True, kw_only=True)
class SamplingParams:
    """temperature 0 means greedy (argmax); top_k 0 means no top-k cut; top_p 1 means no nucleus cut."""

    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0

    def __post_init__(self) -> None:
        if not 0 <= self.temperature < float("inf"):
            raise field_error("SamplingParams", "temperature", self.temperature, "a finite number >= 0")
        if self.top_k < 0:
            raise field_error("SamplingParams", "top_k", self.top_k, "an integer >= 0")
        if not 0 < self.top_p <= 1:
            raise field_error("SamplingParams", "top_p", self.top_p, "a number in (0, 1]")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


def probs(logits: np.ndarray, params: SamplingParams) -> np.ndarray:
    """logits (..., V) -> float64 (..., V): the distribution tokens are actually drawn from.
    Greedy gives a one-hot at the argmax (lowest id on ties)."""
    z = np.asarray(logits, dtype=np.float64)
    if params.greedy:
        out = np.zeros_like(z)
        np.put_along_axis(out, np.argmax(z, axis=-1)[..., None], 1.0, axis=-1)
        return out
    z = z / params.temperature
    if params.top_k and params.top_k < z.shape[-1]:
        kth = np.partition(z, -params.top_k, axis=-1)[..., -params.top_k, None]
        z = np.where(z >= kth, z, -np.inf)
    p = np.exp(z - z.max(axis=-1, keepdims=True))
    p /= p.sum(axis=-1, keepdims=True)
    if params.top_p < 1:
        order = np.argsort(-p, axis=-1, kind="stable")
        sorted_p = np.take_along_axis(p, order, axis=-1)
        before = np.cumsum(sorted_p, axis=-1) - sorted_p  # mass strictly before each token
        keep_sorted = before < params.top_p  # the smallest prefix reaching top_p (always >= 1 token)
        keep = np.zeros_like(keep_sorted)
        np.put_along_axis(keep, order, keep_sorted, axis=-1)
        p = np.where(keep, p, 0.0)
        p /= p.sum(axis=-1, keepdims=True)
    return p


def sample(p: np.ndarray, u: float) -> int:
    """Draw from p (V,) (need not be normalised) with the uniform u in [0, 1): inverse CDF."""
    c = np.cumsum(p)
    i = int(np.searchsorted(c, u * c[-1], side="right"))
    i = min(i, p.size - 1)
    while p[i] == 0 and i > 0:  # u * total landed exactly on a boundary next to a zero entry
        i -= 1
    return i
