"""One iteration's work as the cost model sees it: the scheduled rows' query and context lengths,
their logits, their draft depths and which of them prefill (`IterationMix`)."""
from __future__ import annotations

import numpy as np


class IterationMix:
    """One iteration's work, what a cost callable is given. Arrays have shape (n_scheduled,).

    q_lens: target tokens per sequence (prefill chunk, or 1 + K for a decode: last token + drafts);
    context_lens: tokens already in the sequence's cache; logit_lens: positions needing logits (a
    prefill chunk that does not end its prompt needs none); draft_k: draft depth K per sequence
    (0 = not speculating; a chain drafts K tokens); is_prefill: bool. tree_size: M when the drafts
    form a tree of M nodes (root included) and depth K, verified as q_len = M; 0 for chains.
    drafter_on: whether the drafter runs this iteration (None: when anybody drafts). catchup: tokens
    per row the drafter must run over before its first pass — what it has not cached of a drafting
    row (ctx − its cached tokens), of a prefill row (chunk start − its cached tokens); None: none.
    """

    __slots__ = ("q_lens", "context_lens", "logit_lens", "draft_k", "is_prefill", "tree_size", "drafter_on", "catchup",
                 "n_prefill", "n_spec", "uniform_q", "sum_ctx", "sum_catchup")

    def __init__(self, q_lens, context_lens, logit_lens, draft_k, is_prefill, tree_size: int = 0, *,
                 drafter_on: bool | None = None, catchup=None, n_prefill: int | None = None,
                 n_spec: int | None = None, uniform_q: int = 0):
        self.q_lens = q_lens
        self.context_lens = context_lens
        self.logit_lens = logit_lens
        self.draft_k = draft_k
        self.is_prefill = is_prefill
        self.tree_size = tree_size
        self.drafter_on = drafter_on
        self.catchup = catchup
        self.n_prefill = int(np.count_nonzero(is_prefill)) if n_prefill is None else n_prefill
        # hints the engine knows for free (a cost may ignore them): rows drafting, and the query length
        # every row shares when there is one (0: not uniform)
        self.n_spec = n_spec
        self.uniform_q = uniform_q
        self.sum_ctx = None
        self.sum_catchup = None

    @property
    def n_seqs(self) -> int:
        return int(self.q_lens.size)

    def __repr__(self) -> str:
        return (f"IterationMix(n_seqs={self.n_seqs}, tokens={int(self.q_lens.sum())}, "
                f"prefills={int(self.is_prefill.sum())}, draft_tokens={int(self.draft_k.sum())})")
