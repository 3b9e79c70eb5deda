"""A forward pass reduced to what every cost source reads: its shape.

Any pass (a plain decode step, a verify of M tokens, a drafting pass, a continuous-batching iteration
mixing decode rows and prompt chunks) is priced from a handful of sums over its sequences i, each
bringing q_i new query tokens after L_i cached ones, g_i of which need logits:

    S = number of sequences          T = Σ q_i   (GEMM rows, KV write, all-reduce message)
    G = Σ g_i (LM-head rows)         R = Σ (L_i + q_i)   KV tokens a fused kernel reads (naive: R = P)
    P = Σ q_i·L_i + q_i(q_i + 1)/2   causal query-key pairs

and the same sums over the rows that are prompt chunks (prefill), which a measured source prices with
its context-attention table rather than the decode one. L_i is clipped to a sliding window where the
model has one. The roofline reads T, G, R and P; a measured source also needs S (a decode kernel's
cost follows the KV length per sequence, R/S) and the prefill rows apart.

Fields are numpy arrays that broadcast together (a grid of uniform passes) or 0-d arrays (one mix).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import field_error
from ..specs.models import ModelSpec

ATTENTION_KERNELS = ("fused", "naive")


def count_array(name: str, value, minimum: int, *, where: str = "step cost") -> np.ndarray:
    """`value` as float64, refused unless every entry is a finite whole number >= minimum."""
    arr = np.asarray(value)
    if arr.dtype.kind not in "iuf":
        raise field_error(where, name, value, "a number or numeric array")
    if arr.size and (not np.all(np.isfinite(arr)) or np.any(arr < minimum)):
        bad = arr[~(np.isfinite(arr) & (arr >= minimum))].flat[0]
        raise field_error(where, name, bad.item(), f"a finite number >= {minimum}")
    if arr.dtype.kind == "f" and arr.size and np.any(arr != np.round(arr)):
        bad = arr[arr != np.round(arr)].flat[0]
        raise field_error(where, name, bad.item(), "a whole number of tokens or sequences")
    return arr.astype(np.float64)


def visible_context(model: ModelSpec, context_len: np.ndarray) -> np.ndarray:
    """The cached tokens attention reads: all of them, or the sliding window's last ones."""
    return np.minimum(context_len, model.sliding_window) if model.sliding_window else context_len


def _check_kernel(attention: str) -> None:
    if attention not in ATTENTION_KERNELS:
        raise field_error("step cost", "attention", attention, f"one of {ATTENTION_KERNELS}")


@dataclass(frozen=True, slots=True)
class PassShape:
    """One forward pass (or a grid of them) as sums over its sequences; see the module docstring.
    The prefill_* fields are the part of each sum that prompt-chunk rows contribute."""

    seqs: np.ndarray
    tokens: np.ndarray
    logit_tokens: np.ndarray
    kv_read: np.ndarray
    pairs: np.ndarray
    prefill_seqs: np.ndarray | float = 0.0
    prefill_tokens: np.ndarray | float = 0.0
    prefill_kv_read: np.ndarray | float = 0.0
    prefill_pairs: np.ndarray | float = 0.0

    @property
    def has_prefill(self) -> bool:
        return bool(np.any(np.asarray(self.prefill_seqs) > 0))

    @classmethod
    def uniform(cls, model: ModelSpec, *, batch_size=1, q_len=1, context_len=0, attention: str = "fused",
                prefill: bool = False) -> "PassShape":
        """B sequences, each with M new query tokens (all needing logits) after L cached ones; B, M, L
        broadcast. prefill: the rows are prompt chunks (a measured source reads its context table)."""
        _check_kernel(attention)
        b = count_array("batch_size", batch_size, 1)
        m = count_array("q_len", q_len, 1)
        l = visible_context(model, count_array("context_len", context_len, 0))
        b, m, l = np.broadcast_arrays(b, m, l)
        t = b * m
        pairs = b * (m * l + m * (m + 1) / 2.0)
        kv = b * (l + m) if attention == "fused" else pairs
        if not prefill:
            return cls(seqs=b, tokens=t, logit_tokens=t, kv_read=kv, pairs=pairs)
        return cls(seqs=b, tokens=t, logit_tokens=t, kv_read=kv, pairs=pairs, prefill_seqs=b, prefill_tokens=t,
                   prefill_kv_read=kv, prefill_pairs=pairs)

    @classmethod
    def drafting_share(cls, model: ModelSpec, *, batch_size=1, q_len=1, context_len=0, draft_frac=1.0,
                       attention: str = "fused") -> "PassShape":
        """B verifying sequences after L cached, a share f of which verify M tokens and the rest one (a
        proposer that found nothing to draft for them): each sum is the expectation over the rows,
        f·(the M-token row's) + (1 − f)·(the one-token row's), so T, G and P may be fractional. f = 1
        is `uniform`."""
        _check_kernel(attention)
        f = float(draft_frac)
        if not 0.0 < f <= 1.0:
            raise field_error("step cost", "draft_frac", f, "a fraction in (0, 1]")
        b = count_array("batch_size", batch_size, 1)
        m = count_array("q_len", q_len, 1)
        l = visible_context(model, count_array("context_len", context_len, 0))
        b, m, l = np.broadcast_arrays(b, m, l)
        t = b * (f * m + (1.0 - f))
        pairs = b * (f * (m * l + m * (m + 1) / 2.0) + (1.0 - f) * (l + 1.0))
        kv = b * (l + f * m + (1.0 - f)) if attention == "fused" else pairs
        return cls(seqs=b, tokens=t, logit_tokens=t, kv_read=kv, pairs=pairs)

    @classmethod
    def of_mix(cls, model: ModelSpec, *, q_lens, context_lens, logit_lens=None, is_prefill=None,
               attention: str = "fused") -> "PassShape":
        """A heterogeneous iteration (continuous batching): row i brings q_lens[i] tokens after
        context_lens[i] cached ones, logit_lens[i] of them needing logits (default all); is_prefill[i]
        marks prompt-chunk rows. 1-D arrays of one length; the sums are 0-d."""
        _check_kernel(attention)
        q = count_array("q_lens", q_lens, 1)
        l = visible_context(model, count_array("context_lens", context_lens, 0))
        if q.shape != l.shape or q.ndim != 1:
            raise field_error("mixed step cost", "context_lens", l.shape, f"a 1-D array shaped like q_lens {q.shape}")
        g = q if logit_lens is None else count_array("logit_lens", logit_lens, 0)
        if g.shape != q.shape:
            raise field_error("mixed step cost", "logit_lens", g.shape, f"a 1-D array shaped like q_lens {q.shape}")
        pairs = q * l + q * (q + 1) / 2.0
        kv = (l + q) if attention == "fused" else pairs
        out = dict(seqs=np.asarray(float(q.size)), tokens=np.asarray(q.sum()), logit_tokens=np.asarray(g.sum()),
                   kv_read=np.asarray(kv.sum()), pairs=np.asarray(pairs.sum()))
        if is_prefill is not None:
            p = np.asarray(is_prefill, dtype=bool)
            if p.shape != q.shape:
                raise field_error("mixed step cost", "is_prefill", p.shape, f"a 1-D array shaped like q_lens {q.shape}")
            if p.any():
                out.update(prefill_seqs=float(p.sum()), prefill_tokens=float(q[p].sum()),
                           prefill_kv_read=float(kv[p].sum()), prefill_pairs=float(pairs[p].sum()))
        return cls(**out)


__all__ = ["PassShape", "ATTENTION_KERNELS", "count_array", "visible_context"]
