"""After an iteration: tokens out and every sequence's state forward, in one path.

A prefill that ends its prompt emits one token, a plain decode one, a drafting decode its accepted
drafts plus the target's own token, never past the request's output length. Then, in this order:
the draft counters and histograms, the drafter's cache, the contexts and prefill progress, prefix
publications, first-token times, the token log, the acceptance window (kept for a policy that reads it),
the step log, and the sequences that leave (finished, or handed to a decode replica).

The drafter's own cache (a draft model, an EAGLE or MTP head) records how many of a sequence's
tokens the drafter has cached: a draft model ("keep") keeps what it cached while drafting, all of the
new context but the last draft when all K were accepted; EAGLE/MTP ("refeed") must run the accepted
drafts again with the target's features, so it has cached the context up to the newest token; a
prefill chunk the drafter ran over is cached by it.

The common iteration (every running row decodes, all drafting the same K or none) takes the same
steps on whole columns: with `every` the row index is a slice and the arrays are the columns
themselves, and the prefill terms drop out.
"""
from __future__ import annotations

import numpy as np

from .mix import Batch, IterationMix
from .replica import Replica
from .scheduler import Plan

_ALL_TRUE = object()  # _leave's marker: every leaving row finished


def emit(rep: Replica, batch: Batch, mix: IterationMix, k: int, accepted: np.ndarray | None, plan: Plan,
         start_at_s: float, now: float, catchup_s: float, swap_s: float) -> None:
    """The iteration that started at start_at_s ended at now: emit its tokens and move every row on
    (see the module docstring). accepted: (n_drafting,) accepted drafts, None when nobody drafted."""
    run, req = rep.running, rep.requests
    add, count = np.add.reduce, np.count_nonzero
    a, is_pf, pf_end, idx, every, n_pf = batch.a, batch.is_pf, batch.pf_end, batch.idx, batch.every, batch.n_pf
    tree = rep.drafting.tree_size
    n = a.size
    uniform_k = batch.all_draft and mix.uniform_q  # every row drafted K = k

    # tokens out
    capless = accepted is not None and batch.all_draft and not n_pf
    if capless:
        emit_n = accepted + 1
    else:
        emit_n = np.where(is_pf, pf_end, 1).astype(np.int64) if n_pf else np.ones(n, dtype=np.int64)
        if accepted is not None:
            emit_n[batch.spec_rows] += accepted

    # draft counters
    n_drafted = acc_tok = rejections = n_spec = 0
    if accepted is not None:
        rows = batch.spec_ridx
        n_spec = accepted.size
        b = np.bincount(accepted, minlength=rep.acc_hist.size)
        rep.acc_hist += b
        acc_tok = int(b @ rep.hist_index)
        if uniform_k:  # (then every row ran: the columns themselves)
            rep.draft_hist[k] += n_spec
            per = tree - 1 if tree else k
            n_drafted = n_spec * per
            rejections = n_spec - int(b[k])
            run.n_drafted += per
        else:
            dks = mix.draft_k if batch.all_draft else mix.draft_k[batch.spec_rows]
            rep.draft_hist += np.bincount(dks, minlength=rep.draft_hist.size)
            n_drafted = int(add(dks)) if not tree else n_spec * (tree - 1)
            rejections = int(count(accepted < dks))
            run.n_drafted[rows] += dks if not tree else tree - 1
        if batch.all_draft and every:
            run.n_accepted += accepted
            if not rep.tabulated:  # (tabulated: one draw per cycle, counted from the draws when written back)
                run.n_spec_steps += 1
        else:
            run.n_accepted[rows] += accepted
            if not rep.tabulated:
                run.n_spec_steps[rows] += 1

    left_col = run.left_tokens
    left = left_col[idx]
    emitted_before = (run.output_tokens[idx] - left) if (n_pf or rep.record_tokens) else None
    np.minimum(emit_n, left, out=emit_n)
    ctx = batch.ctx  # (a view of the context column when every row ran: read before it moves)

    # the drafter's cache: what it ran over this iteration
    n_catchup = 0
    whole = False  # every row drafted, none prefilled: set from the new context below
    if mix.catchup is not None:
        n_catchup = mix.sum_catchup if mix.sum_catchup is not None else int(add(mix.catchup))
        whole = batch.all_draft and not n_pf and every and accepted is not None
        if whole:
            if rep.dcache == "refeed":  # the newest token is its first pass's; the accepted drafts it runs again
                run.drafter_tokens[:] = ctx
                run.drafter_tokens += 1
        else:
            d = run.drafter_tokens[idx]
            if every:
                d = d.copy()
            if n_pf:
                d = np.where(is_pf, batch.done_before + a, d)
            if accepted is not None:
                rows_s = batch.spec_rows
                if rep.dcache == "keep":
                    d[rows_s] = ctx[rows_s] + 1 + np.minimum(accepted, mix.draft_k[rows_s] - 1)
                else:
                    d[rows_s] = ctx[rows_s] + 1
            run.drafter_tokens[idx] = d

    # contexts and prefill progress
    if n_pf:
        run.computed_tokens[idx] = batch.done_before + np.where(is_pf, a, 0)
        run.context_tokens[idx] = ctx + np.where(is_pf, a, emit_n)
    elif every:
        run.context_tokens += emit_n
    else:
        run.context_tokens[idx] = ctx + emit_n
    if whole and rep.dcache == "keep":
        # it cached the newest token and drafts 1..K−1: all of the new context but the last draft
        # when all K were accepted (a row whose emission was capped finishes now)
        np.subtract(run.context_tokens, accepted >= (k if uniform_k else mix.draft_k), out=run.drafter_tokens)
    ledger = rep.ledger
    if ledger.prefix is not None:
        ready = np.flatnonzero(run.context_tokens >= run.publish_at_tokens)
        if ready.size:
            ledger.publish(run, ready, req)
    if n_pf:
        fresh = pf_end & (emitted_before == 0)
        if fresh.any():
            req.first_token_at_s[batch.req[fresh]] = now
    if rep.record_tokens:
        got = emit_n > 0
        rr = batch.req[got]
        rep.token_log.append((rr.copy(), emitted_before[got].copy(), emit_n[got].copy(), np.full(rr.size, now)))
    finished = emit_n >= left
    if every:
        left_col -= emit_n
    else:
        left_col[idx] = left - emit_n

    if not rep.constant_policy:  # the acceptance window is read only by a policy that decides per iteration
        rep.observe_drafts(n_drafted, acc_tok, rejections)
    if n_pf or not run.all_decoding:  # every row ran and every prefill among them ended: all decode now
        run.all_decoding = every and (not n_pf or int(count(pf_end)) == n_pf)
    any_finished = count(finished) > 0  # (count_nonzero: a third of ndarray.any's cost on a few rows)
    # every drafting row emitted its accepted drafts and one token, unless capped (then it finished)
    n_emitted = n + acc_tok if (capless and not any_finished) else int(add(emit_n))
    rep.log.append((start_at_s, now - start_at_s, run.n, n_pf, batch.n_dec, n_spec, k,
                    n * mix.uniform_q if mix.uniform_q else int(add(mix.q_lens)), n_drafted, acc_tok, n_emitted,
                    n_drafted - acc_tok, ledger.used_blocks, len(rep.waiting.q), batch.n_preempted,
                    int(count(pf_end)) if n_pf else 0, rep.rid, bool(mix.drafter_on), n_catchup, catchup_s,
                    plan.prefix_hit_tokens, ledger.prefix.evictable_blocks if ledger.prefix is not None else 0, len(plan.swapped_in), plan.swap_blocks, swap_s))

    # who leaves: the finished, and on a prefill replica every prompt just computed
    if rep.role == "prefill" and n_pf:
        leave = finished | pf_end
        if leave.any():
            _leave(rep, np.flatnonzero(leave) if every else idx[leave], finished[leave], now)
    elif any_finished:
        _leave(rep, np.flatnonzero(finished) if every else idx[finished], _ALL_TRUE, now)


def _leave(rep: Replica, rows: np.ndarray, finished: np.ndarray, now: float) -> None:
    """Rows leaving the running set: write back, hand off (disaggregated) or count as done, free."""
    run, req, disp = rep.running, rep.requests, rep.dispatcher
    run.write_back(rows, req, rep.scheduler.draw_counter, one_step_per_draw=rep.tabulated)
    fr = run.request[rows]
    if finished is _ALL_TRUE or finished.all():
        for row in rows.tolist():
            rep.ledger.release(run, row)
    else:
        passes_drafter = disp.fleet.prefill_runs_drafter
        for row, i, f in zip(rows.tolist(), fr.tolist(), finished.tolist()):
            if not f:  # disaggregated: the prompt is computed, on to a decode replica
                disp.handoff(i, now, rep, drafter_tokens=int(run.drafter_tokens[row]) if passes_drafter else 0)
            rep.ledger.release(run, row)
    done = fr if finished is _ALL_TRUE else fr[finished]
    req.finish(done, now)
    run.drop(rows)
    for _ in range(done.size):
        disp.done(now, rep)


__all__ = ["emit"]
