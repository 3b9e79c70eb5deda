"""A replica's running set: one row per running sequence, in scheduling order (row 0 is served first).

The rows are one int64 matrix and every column is a named view of it, so an iteration updates
contiguous columns in a few numpy operations. A row carries its request's counters while it runs
and writes them back to the request table when it leaves.
"""
from __future__ import annotations

import numpy as np

from .requests import RequestTable

# column index of each view (the order of the matrix)
(C_REQUEST, C_PREFILL, C_COMPUTED, C_CONTEXT, C_BLOCKS, C_DRAFTER, C_SHARED, C_PUBLISH_AT, C_OUTPUT, C_LEFT,
 C_DRAFTED, C_ACCEPTED, C_SPEC_STEPS, C_DRAW) = range(14)
N_COLUMNS = 14
NEVER = 1 << 62  # a publish_at_tokens that is never reached


class RunningSet:
    """The running sequences of one replica. Every column view has shape (n_running,), int64:

    request            request id
    prefill_tokens     tokens its (re)prefill computes: the prompt, plus what it emitted before a
                       recompute (a cache that arrived by transfer: the prompt, already computed)
    computed_tokens    tokens of that prefill computed so far (== prefill_tokens once decoding)
    context_tokens     tokens in its KV cache
    blocks             KV blocks in its block table (private and shared)
    drafter_tokens     tokens the drafter has in its own cache
    shared_blocks      blocks of its table that are shared prefix units
    publish_at_tokens  context at which the next unit of its prefix chain is complete (NEVER: none)
    output_tokens      tokens it must emit in all
    left_tokens        tokens it has still to emit
    n_drafted, n_accepted, n_spec_steps   its draft counters (see RequestTable)
    draw               where its acceptance stream stands (streams.AcceptanceDraws.start_of)
    """

    __slots__ = ("matrix", "request", "prefill_tokens", "computed_tokens", "context_tokens", "blocks",
                 "drafter_tokens", "shared_blocks", "publish_at_tokens", "output_tokens", "left_tokens", "n_drafted",
                 "n_accepted", "n_spec_steps", "draw", "all_decoding", "n")

    def __init__(self) -> None:
        self.matrix = np.zeros((0, N_COLUMNS), dtype=np.int64)
        self._views()
        # no row is part-way through a prefill (a hint the scheduler keeps for its common case)
        self.all_decoding = True

    def _views(self) -> None:
        m = self.matrix
        self.request, self.prefill_tokens, self.computed_tokens, self.context_tokens = m[:, 0], m[:, 1], m[:, 2], m[:, 3]
        self.blocks, self.drafter_tokens, self.shared_blocks, self.publish_at_tokens = m[:, 4], m[:, 5], m[:, 6], m[:, 7]
        self.output_tokens, self.left_tokens, self.n_drafted, self.n_accepted = m[:, 8], m[:, 9], m[:, 10], m[:, 11]
        self.n_spec_steps, self.draw = m[:, 12], m[:, 13]
        self.n = m.shape[0]  # rows

    def __len__(self) -> int:
        return self.n

    def append(self, rows: list, requests: RequestTable, draw_start) -> None:
        """Sequences joining the set: rows of (request, prefill_tokens, computed_tokens, context_tokens,
        blocks, drafter_tokens, shared_blocks, publish_at_tokens); their counters come from the table,
        their stream positions from draw_start(requests, counters)."""
        new = np.zeros((len(rows), N_COLUMNS), dtype=np.int64)
        new[:, :C_OUTPUT] = np.asarray(rows, dtype=np.int64)
        r = new[:, C_REQUEST]
        new[:, C_OUTPUT] = requests.output_tokens[r]
        new[:, C_LEFT] = new[:, C_OUTPUT] - requests.emitted_tokens[r]
        new[:, C_DRAFTED] = requests.n_draft_tokens[r]
        new[:, C_ACCEPTED] = requests.n_accepted_tokens[r]
        new[:, C_SPEC_STEPS] = requests.n_spec_steps[r]
        new[:, C_DRAW] = draw_start(r, requests.draw_counter[r])
        self.matrix = np.concatenate([self.matrix, new]) if self.matrix.size else new
        self._views()
        self.all_decoding = False

    def write_back(self, rows, requests: RequestTable, draw_counter, *, one_step_per_draw: bool) -> None:
        """The counters of `rows` back into the request table. draw_counter(requests, positions) gives
        each stream's counter; with one_step_per_draw (tabulated draws: one draw per drafting cycle) the
        cycles are counted from the draws rather than kept in n_spec_steps."""
        m = self.matrix[rows]
        r = m[:, C_REQUEST]
        requests.emitted_tokens[r] = m[:, C_OUTPUT] - m[:, C_LEFT]
        requests.n_draft_tokens[r] = m[:, C_DRAFTED]
        requests.n_accepted_tokens[r] = m[:, C_ACCEPTED]
        counter = draw_counter(r, m[:, C_DRAW])
        if one_step_per_draw:
            requests.n_spec_steps[r] = m[:, C_SPEC_STEPS] + counter - requests.draw_counter[r].astype(np.int64)
        else:
            requests.n_spec_steps[r] = m[:, C_SPEC_STEPS]
        requests.draw_counter[r] = counter.astype(np.uint64)

    def keep(self, mask: np.ndarray) -> None:
        self.matrix = self.matrix[mask]
        self._views()

    def drop(self, rows) -> None:
        mask = np.ones(self.n, dtype=bool)
        mask[rows] = False
        self.keep(mask)

    def reorder(self, order: np.ndarray) -> None:
        self.matrix = self.matrix[order]
        self._views()

    def decoding(self) -> np.ndarray:
        """(n_running,) bool: rows past their prefill."""
        return self.computed_tokens >= self.prefill_tokens


__all__ = ["NEVER", "RunningSet"]
