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
    speculating: the iteration is a speculative cycle even where no row drafts (a proposer that found
    nothing to draft for anybody: the engine runs it as a cycle all the same); None: when anybody drafts.
    drafter_on: whether the drafter runs this iteration (None: when anybody drafts). catchup: tokens
    per row the drafter must run over before its first pass — what it has not cached of a drafting
    row (ctx − its cached tokens), of a prefill row (chunk start − its cached tokens); None: none.
    """

    __slots__ = ("q_lens", "context_lens", "logit_lens", "draft_k", "is_prefill", "tree_size", "drafter_on", "catchup",
                 "n_prefill", "n_spec", "uniform_q", "sum_ctx", "sum_catchup", "speculating")

    def __init__(self, q_lens, context_lens, logit_lens, draft_k, is_prefill, tree_size: int = 0, *,
                 drafter_on: bool | None = None, catchup=None, n_prefill: int | None = None,
                 n_spec: int | None = None, uniform_q: int = 0, speculating: bool | None = None):
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
        self.speculating = speculating

    @property
    def n_seqs(self) -> int:
        return int(self.q_lens.size)

    def __repr__(self) -> str:
        return (f"IterationMix(n_seqs={self.n_seqs}, tokens={int(self.q_lens.sum())}, "
                f"prefills={int(self.is_prefill.sum())}, draft_tokens={int(self.draft_k.sum())})")


class Drafting:
    """How one replica's sequences speculate, fixed for a run: k_reserved (0: not at all), tree_size M
    (0: chains; a tree of M nodes is verified whole, M query tokens), slots (tokens a decode takes:
    M, or 1 + K), sticky (a gate may switch requests off for good), catchup (the drafter's catch-up
    is charged), draft_frac (the share of a sequence's cycles in which the proposer drafts; in the rest
    it drafts nothing, drawn per row and iteration from rng). The constant arrays of the common iteration
    are made once, for up to max_seqs rows."""

    __slots__ = ("k_reserved", "tree_size", "slots", "sticky", "catchup", "ones", "true", "false", "draft_k_of",
                 "q_of", "draft_frac", "rng")

    def __init__(self, *, k_reserved: int, tree_size: int, sticky: bool, catchup: bool, max_seqs: int,
                 draft_frac: float = 1.0, rng: np.random.Generator | None = None):
        self.draft_frac = float(draft_frac)
        self.rng = rng if (rng is not None or self.draft_frac == 1.0) else np.random.default_rng(0)
        self.k_reserved = k_reserved
        self.tree_size = tree_size
        self.slots = tree_size if tree_size else 1 + k_reserved
        self.sticky = sticky
        self.catchup = catchup
        m = max_seqs + 1
        self.ones = np.ones(m, dtype=np.int64)
        self.true = np.ones(m, dtype=bool)
        self.false = np.zeros(m, dtype=bool)
        # every row drafting K = k: its draft depth and its query tokens
        self.draft_k_of = [np.full(m, k, dtype=np.int64) for k in range(k_reserved + 1)]
        self.q_of = [np.full(m, tree_size if (tree_size and k) else 1 + k, dtype=np.int64)
                     for k in range(k_reserved + 1)]
        for arr in (self.ones, self.true, self.false, *self.draft_k_of, *self.q_of):
            arr.flags.writeable = False


class Batch:
    """One iteration's scheduled rows, a view of the running set, and the mix they make for a K.

    every: all running rows are scheduled (then idx is a slice and the arrays are views of the running
    set's columns); idx: their rows; req, a (tokens allotted), ctx, dctx (the drafter's cached
    tokens), done_before (prefill tokens computed before this iteration): (n_scheduled,); is_pf /
    pf_end: rows prefilling / ending their prompt this iteration; can_spec: rows allowed to draft
    (None: nobody may); k_cap: each row's budgeted draft depth (None: all have their full slots).
    `mix(k)` also records which rows draft (spec_rows, spec_ridx, k_drafted, all_draft) for the
    emission that follows; the last call is the iteration's."""

    __slots__ = ("drafting", "every", "idx", "req", "a", "done_before", "ctx", "is_pf", "n_pf", "n_dec", "pf_end",
                 "n_preempted", "can_spec", "k_cap", "spec_rows", "spec_ridx", "k_drafted", "dctx", "all_draft", "full",
                 "matched")

    def __init__(self, drafting: Drafting, running, plan, may_speculate: np.ndarray):
        self.drafting = drafting
        allot = plan.allot
        n = allot.size
        self.full = full = plan.full
        self.every = every = plan.n_scheduled == n
        self.idx = idx = slice(None) if every else np.flatnonzero(allot)
        self.req = running.request[idx]
        self.a = allot if every else allot[idx]
        self.ctx = running.context_tokens[idx]
        self.dctx = running.drafter_tokens[idx]
        self.n_preempted = len(plan.preempted)
        self.spec_rows = self.spec_ridx = None
        self.k_drafted = 0
        self.all_draft = False
        m = self.a.size
        if full:  # every running row decodes with all its slots
            self.done_before = running.computed_tokens
            self.is_pf = self.pf_end = drafting.false[:m]
            self.n_pf = 0
        else:
            self.done_before = running.computed_tokens[idx]
            prefill = running.prefill_tokens[idx]
            self.is_pf = self.done_before < prefill
            self.n_pf = int(np.count_nonzero(self.is_pf))
            self.pf_end = self.is_pf & (self.done_before + self.a >= prefill)
        self.n_dec = m - self.n_pf
        if drafting.k_reserved and self.n_dec:
            # may_speculate only changes when a sticky gate trips
            sticky = drafting.sticky
            if self.n_pf:
                self.can_spec = ~self.is_pf & may_speculate[self.req] if sticky else ~self.is_pf
            else:
                self.can_spec = may_speculate[self.req] if sticky else drafting.true[:m]
            # a decode's budgeted draft depth (a prefill's is masked by can_spec); a tree is verified
            # whole or not at all
            tree = drafting.tree_size
            if full:
                self.k_cap = None
            else:
                self.k_cap = self.a - 1 if not tree else np.where(self.a >= tree, drafting.k_reserved, 0)
            # rows whose proposer finds something to draft this iteration (one draw a row, whatever K the
            # policy then asks for); None: every row does
            self.matched = drafting.rng.random(m) < drafting.draft_frac if drafting.draft_frac < 1.0 else None
        else:
            self.can_spec = None
            self.matched = None

    def mix(self, k: int, drafter_on: bool | None = None) -> IterationMix:
        a, is_pf = self.a, self.is_pf
        d = self.drafting
        tree = d.tree_size
        m = a.size
        n_pf = self.n_pf
        if self.can_spec is None or k == 0:
            dk = np.zeros(m, dtype=np.int64)
            q = np.where(is_pf, a, 1) if n_pf else d.ones[:m]
            spec_rows, kd, all_draft = None, 0, False
        elif self.k_cap is None and not n_pf and not d.sticky and self.matched is None:  # every row drafts K
            dk = d.draft_k_of[k][:m]
            q = d.q_of[k][:m]
            spec_rows, kd, all_draft = None, m, True
        else:
            cap = self.k_cap if self.k_cap is not None else d.k_reserved
            allowed = self.can_spec if self.matched is None else (self.can_spec & self.matched)
            dk = np.where(allowed, np.minimum(k, cap), 0)
            width = np.where(dk > 0, tree, 1) if tree else 1 + dk
            q = np.where(is_pf, a, width) if n_pf else width
            spec_rows = np.flatnonzero(dk)
            kd = spec_rows.size
            all_draft = kd == m
        logits = np.where(is_pf, self.pf_end, q) if n_pf else q
        catchup = None
        if d.catchup and drafter_on:
            if n_pf:
                catchup = np.where(is_pf, self.done_before - self.dctx, np.where(dk > 0, self.ctx - self.dctx, 0))
            elif kd:
                catchup = self.ctx - self.dctx if all_draft else np.where(dk > 0, self.ctx - self.dctx, 0)
        self.spec_rows, self.k_drafted, self.all_draft = spec_rows, kd, all_draft
        if kd:
            self.spec_ridx = (slice(None) if self.every else self.idx) if all_draft else \
                (spec_rows if self.every else self.idx[spec_rows])
        uq = 0
        if not n_pf:
            uq = 1 if kd == 0 else ((tree if tree else 1 + k) if (all_draft and self.k_cap is None) else 0)
        # a cycle where the proposer found nothing for any row is a cycle all the same
        # (matched is set only where can_spec is)
        speculating = None if self.matched is None else bool(k > 0 and (kd > 0 or np.any(self.can_spec)))
        return IterationMix(q, self.ctx, logits, dk, is_pf, tree, n_prefill=n_pf,
                            drafter_on=bool(drafter_on) if d.catchup else (kd > 0), catchup=catchup,
                            n_spec=kd, uniform_q=uq, speculating=speculating)


__all__ = ["Batch", "Drafting", "IterationMix"]
