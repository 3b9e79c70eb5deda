"""A plain twin of specsim.serving.scheduler: vLLM v0's batching policy as a loop over requests, written
to be read rather than to be fast (stumpy's tests/naive.py is the model).

State is plain Python: the running rows are dicts in scheduling order, the waiting queue a list of
request ids in serving order, the swapped sequences a list of dicts. `plan(state)` changes the state
as one iteration's scheduling does and returns what it decided. Prefix caching is left out (its
admissions are checked end to end against the Mooncake trace in test_serving_fleet.py).
"""
from __future__ import annotations

from dataclasses import dataclass, field


def blocks_for(tokens: int, block_size: int) -> int:
    return -(-tokens // block_size)


@dataclass
class Limits:
    n_blocks: int
    block_size: int
    watermark_blocks: int
    max_num_seqs: int
    max_num_batched_tokens: int
    chunked_prefill: bool
    preemption_mode: str      # "recompute" | "swap"
    swap_space_blocks: int
    by_priority: bool
    slots: int                # tokens a decode takes: 1 + K (or a tree's M)
    mixed_prefill: bool = True  # False: SGLang's prefill-only iterations (with chunked prefill)


@dataclass
class Request:
    prompt: int
    output: int
    emitted: int = 0
    priority: int = 0
    arrival: float = 0.0
    transferred: int = 0      # a cache that arrived by transfer: its prompt tokens, until admitted


@dataclass
class State:
    limits: Limits
    requests: dict            # id -> Request
    running: list             # rows: dict(request, prefill, computed, context, blocks, drafter)
    waiting: list             # request ids, first served first
    swapped: list             # dict(request, prefill, computed, context, drafter, blocks)
    used_blocks: int = 0
    swap_used_blocks: int = 0
    n_swap_fallbacks: int = 0
    n_preemptions: dict = field(default_factory=dict)
    n_swaps: dict = field(default_factory=dict)


def key(state: State, i: int) -> tuple:
    r = state.requests[i]
    return (r.priority, r.arrival, i)


def free_blocks(state: State) -> int:
    return state.limits.n_blocks - state.used_blocks


def preempt_last(state: State, decided: dict, later: list | None = None) -> None:
    """The last running row leaves: to host memory when swapping and the swap space has room, else
    back to the front of the waiting queue to recompute (or onto `later`, to go there after this
    iteration's admissions)."""
    lim = state.limits
    row = state.running.pop()
    i = row["request"]
    state.used_blocks -= row["blocks"]
    swap = lim.preemption_mode == "swap"
    if swap and state.swap_used_blocks + row["blocks"] > lim.swap_space_blocks:
        swap = False
        state.n_swap_fallbacks += 1
    if swap:
        state.swapped.append(dict(row))
        state.swap_used_blocks += row["blocks"]
        state.n_swaps[i] = state.n_swaps.get(i, 0) + 1
        decided["swap_blocks"] += row["blocks"]
    else:
        state.n_preemptions[i] = state.n_preemptions.get(i, 0) + 1
        if later is not None:
            later.append(i)
        elif lim.by_priority:
            state.waiting.append(i)
            state.waiting.sort(key=lambda j: key(state, j))
        else:
            state.waiting.insert(0, i)
    decided["preempted"].append((i, "swap" if swap else "recompute"))


def admission(state: State, i: int) -> dict:
    """What admitting waiting request i takes."""
    lim = state.limits
    r = state.requests[i]
    if r.transferred:  # its prompt's cache is here: it decodes at once, holding blocks for its first slots
        prefill = computed = r.transferred
        blocks = blocks_for(prefill + lim.slots, lim.block_size)
    else:  # it (re)computes its prompt and what it emitted before
        prefill, computed = r.prompt + r.emitted, 0
        blocks = blocks_for(prefill, lim.block_size)
    return dict(prefill=prefill, computed=computed, blocks=blocks)


def admit(state: State, budget_left: int, decided: dict) -> int:
    """Waiting requests join in order while the seats, the budget and the blocks allow; the first that
    does not fit stops the queue."""
    lim = state.limits
    used = 0
    n = 0
    while state.waiting and len(state.running) < lim.max_num_seqs and budget_left - used > 0:
        i = state.waiting[0]
        a = admission(state, i)
        to_compute = a["prefill"] - a["computed"]
        if not lim.chunked_prefill and to_compute > budget_left - used:
            break
        if free_blocks(state) - a["blocks"] < lim.watermark_blocks:
            break
        state.waiting.pop(0)
        state.used_blocks += a["blocks"]
        state.requests[i].transferred = 0
        used += min(to_compute, budget_left - used)
        state.running.append(dict(request=i, prefill=a["prefill"], computed=a["computed"], context=a["computed"],
                                  blocks=a["blocks"]))
        decided["admitted"].append(i)
        n += 1
    return n


def swap_in(state: State, budget_left: int, decided: dict) -> None:
    lim = state.limits
    while state.swapped and len(state.running) < lim.max_num_seqs and budget_left >= lim.slots:
        s = state.swapped[0]
        decoding = s["computed"] >= s["prefill"]
        need = max(s["blocks"], blocks_for(s["context"] + lim.slots, lim.block_size)) if decoding else s["blocks"]
        if free_blocks(state) - need < lim.watermark_blocks:
            break
        state.swapped.pop(0)
        state.swap_used_blocks -= s["blocks"]
        decided["swap_blocks"] += s["blocks"]
        state.used_blocks += need
        budget_left -= lim.slots if decoding else min(s["prefill"] - s["computed"], budget_left)
        state.running.append(dict(s, blocks=need))
        decided["swapped_in"].append(s["request"])


def wants(state: State, row: dict) -> int:
    """Tokens a running row asks for: its slots when decoding, the rest of its prompt when prefilling."""
    if row["computed"] >= row["prefill"]:
        return state.limits.slots
    return row["prefill"] - row["computed"]


def back_to_waiting(state: State, later: list) -> None:
    """Requests preempted by recompute rejoin the front of the waiting queue, the row that ran first
    in front (vLLM v0's waiting.extendleft of the preempted, last preempted first)."""
    for i in later:
        if state.limits.by_priority:
            state.waiting.append(i)
            state.waiting.sort(key=lambda j: key(state, j))
        else:
            state.waiting.insert(0, i)


def schedule_running(state: State, budget: int, decided: dict, later: list) -> list:
    """Each running row in order takes what it wants of what is left of the budget; each must then hold
    blocks for what it will hold (a decode: its context plus its tokens; a prefill: its whole prompt).
    While the blocks run short, the last row is preempted and the allotment made again."""
    lim = state.limits
    while state.running:
        left = budget
        allot, extra = [], 0
        for row in state.running:
            a = min(wants(state, row), max(left, 0))
            left -= a
            allot.append(a)
            decoding = row["computed"] >= row["prefill"]
            hold = row["context"] + a if decoding else row["prefill"]
            extra += max(blocks_for(hold, lim.block_size) - row["blocks"], 0)
        if extra <= free_blocks(state):
            for row, a in zip(state.running, allot):
                decoding = row["computed"] >= row["prefill"]
                hold = row["context"] + a if decoding else row["prefill"]
                grow = max(blocks_for(hold, lim.block_size) - row["blocks"], 0)
                row["blocks"] += grow
                state.used_blocks += grow
            return allot
        preempt_last(state, decided, later)
    return []


def plan(state: State) -> dict:
    """One iteration's scheduling: returns {"allot": tokens per running row after it, in the final
    order, "admitted", "preempted", "swapped_in", "swap_blocks"}."""
    lim = state.limits
    budget = lim.max_num_batched_tokens
    decided = {"admitted": [], "preempted": [], "swapped_in": [], "swap_blocks": 0}
    # 1. priority preemption: the best waiting request displaces lower-priority running ones
    if lim.by_priority and state.waiting and state.running:
        best = state.waiting[0]
        while state.running:
            last = state.running[-1]["request"]
            if key(state, last) <= key(state, best):
                break
            a = admission(state, best)
            if (a["prefill"] - a["computed"] > 0 and len(state.running) < lim.max_num_seqs
                    and free_blocks(state) - a["blocks"] >= lim.watermark_blocks):
                break
            preempt_last(state, decided)
    # 2. without chunked prefill, waiting prefills go first, alone
    if not lim.chunked_prefill and state.waiting and not state.swapped:
        if admit(state, budget, decided):
            if lim.by_priority:
                state.running.sort(key=lambda row: key(state, row["request"]))
            allot = [row["prefill"] - row["computed"] if row["computed"] < row["prefill"] else 0
                     for row in state.running]
            if any(allot):
                decided["allot"] = allot
                return decided
    # 2'. SGLang: with chunked prefill and no mixing, prefill goes first, alone: the prompts part-way
    # through their prefill, then the admissions, each taking what is left of the budget; decodes wait
    if lim.chunked_prefill and not lim.mixed_prefill and not state.swapped:
        left = budget
        allot = []
        for row in state.running:
            a = min(row["prefill"] - row["computed"], max(left, 0)) if row["computed"] < row["prefill"] else 0
            left -= a
            allot.append(a)
        n0 = len(state.running)
        if state.waiting and left > 0:
            admit(state, left, decided)
        for row in state.running[n0:]:
            a = min(row["prefill"] - row["computed"], max(left, 0)) if row["computed"] < row["prefill"] else 0
            left -= a
            allot.append(a)
        if any(allot):
            if lim.by_priority:
                order = sorted(range(len(state.running)), key=lambda j: key(state, state.running[j]["request"]))
                state.running = [state.running[j] for j in order]
                allot = [allot[j] for j in order]
            decided["allot"] = allot
            return decided
    # 3. the running set
    n_preempted = len(decided["preempted"])
    later: list = []  # preempted by recompute: back to the waiting queue after the admissions
    allot = schedule_running(state, budget, decided, later)
    preempted_now = len(decided["preempted"]) > n_preempted
    n0 = len(state.running)
    if state.swapped or state.waiting:
        used = sum(allot)
        # 4. swapped sequences come back when nothing was preempted
        if state.swapped and not preempted_now:
            swap_in(state, budget - used, decided)
        # 5. admissions
        if state.waiting and (lim.chunked_prefill or n0 == 0):
            admit(state, budget - used - (len(state.running) - n0) * lim.slots, decided)
        # the newcomers take what is left, in order
        room = budget - used
        for row in state.running[n0:]:
            a = min(wants(state, row), max(room, 0))
            room -= a
            allot.append(a)
        if lim.by_priority:
            order = sorted(range(len(state.running)), key=lambda j: key(state, state.running[j]["request"]))
            state.running = [state.running[j] for j in order]
            allot = [allot[j] for j in order]
    back_to_waiting(state, later)
    decided["allot"] = allot
    return decided
