"""Plain and speculative generation (one speculative step reads like gpt-fast's speculative_decode:
draft, verify in one pass, accept/reject, roll the cache back).

Randomness: one numpy Generator per request, seeded from (seed, request index); every uniform is
drawn here or in the drafter, never inside a kernel."""
from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np

from ..errors import SpecError
from ..speculation.trees import ancestor_mask
from . import verify as V
from .model import Transformer
from .sampling import SamplingParams, probs, sample

TOP = 2  # logits recorded per emitted token (for the near-tie report)
CLOCKS = {"wall": time.perf_counter, "thread": time.thread_time}
_clock = time.perf_counter  # what every timing below reads; see `clock`


@contextmanager
def clock(name: str):
    """Inside the block, time generation with `name`'s clock: "wall" (time.perf_counter, the default) or
    "thread" (time.thread_time, this thread's CPU time: what decoding costs when numba runs one thread on
    a machine shared with other work, whose waits for the CPU wall time would count)."""
    global _clock
    if name not in CLOCKS:
        raise SpecError(f"clock {name!r}: expected one of {', '.join(CLOCKS)}")
    saved, _clock = _clock, CLOCKS[name]
    try:
        yield
    finally:
        _clock = saved


@dataclass(frozen=True, slots=True, kw_only=True)
class Cycle:
    """One speculative cycle: n_drafted chain positions/tree depth drafted, n_accepted of them kept."""

    n_drafted: int
    n_accepted: int
    n_nodes: int
    draft_s: float
    verify_s: float


@dataclass(frozen=True, slots=True, kw_only=True)
class Generation:
    """tokens: the new tokens; top_ids, top_logits (n, TOP): the target's best tokens and logits at
    each emitted position; prefill_s; decode_s: everything after the prefill; cycles (speculative)."""

    tokens: np.ndarray
    top_ids: np.ndarray
    top_logits: np.ndarray
    prefill_s: float
    decode_s: float
    cycles: tuple = field(default=())
    draft_prefill_s: float = 0.0  # a model drafter reading the prompt into its own cache (not in decode_s)


def request_rng(seed: int, index: int = 0) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence([seed, index]))


def _top(logits: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The TOP = 2 best token ids of one row of logits, best first (a tie goes to the lower id, as
    np.argmax breaks it), and their logits. Two argmax passes and no copy of the row: the
    np.argpartition this replaced cost about 0.5 ms a call on SmolLM2's 49,152 logits, the decoder's
    largest host cost per emitted token (as much as a tenth of a plain step)."""
    best = int(np.argmax(logits))
    runner = -1
    if best > 0:
        runner = int(np.argmax(logits[:best]))
    if best + 1 < logits.size:
        j = best + 1 + int(np.argmax(logits[best + 1:]))
        if runner < 0 or logits[j] > logits[runner]:
            runner = j
    ids = np.array([best, runner], dtype=np.int64)
    return ids, logits[ids]


def _check_room(model: Transformer, n_prompt: int, n_new: int, extra: int) -> int:
    need = n_prompt + n_new + extra
    if n_prompt < 1:
        raise SpecError("the prompt is empty: at least one token is needed")
    if n_prompt + 1 > model.config.n_ctx or need > model.config.n_ctx:
        raise SpecError(f"prompt of {n_prompt} tokens + {n_new} new tokens (+{extra} speculative slots) "
                        f"exceeds the model's context of {model.config.n_ctx} tokens")
    return need


def _pick(logits: np.ndarray, sampling: SamplingParams, u: float) -> int:
    return int(np.argmax(logits)) if sampling.greedy else sample(probs(logits, sampling), u)


def generate_plain(model: Transformer, prompt, n_new: int, *, sampling: SamplingParams = SamplingParams(),
                   seed: int = 0, index: int = 0, stop_token: int | None = None) -> Generation:
    """Autoregressive decoding, one token per forward pass."""
    prompt = np.asarray(prompt, dtype=np.int64)
    cache = model.new_cache(_check_room(model, prompt.size, n_new, 1))
    rng = request_rng(seed, index)
    t0 = _clock()
    logits = model.prefill(cache, prompt)
    t1 = _clock()
    out, ids, vals = [], [], []
    while len(out) < n_new:
        tok = _pick(logits, sampling, rng.random())
        i, v = _top(logits)
        out.append(tok), ids.append(i), vals.append(v)
        if tok == stop_token or len(out) == n_new:
            break
        logits = model.forward(cache, np.array([tok]), np.array([cache.length]))[-1]
    t2 = _clock()
    return Generation(tokens=np.array(out, np.int64), top_ids=np.array(ids), top_logits=np.array(vals),
                      prefill_s=t1 - t0, decode_s=t2 - t1)


def generate_speculative(model: Transformer, drafter, prompt, n_new: int, *, mode: str = "greedy",
                         sampling: SamplingParams = SamplingParams(), seed: int = 0, index: int = 0,
                         stop_token: int | None = None, return_cache: bool = False):
    """Speculative decoding. mode: one of verify.MODES. Returns a Generation (and the target's
    KVCache when return_cache)."""
    if mode not in V.MODES:
        raise SpecError(f"verify mode {mode!r}: expected one of {', '.join(V.MODES)}")
    if mode == "rejection" and not getattr(drafter, "gives_q", False):
        raise SpecError(f"verify mode 'rejection' needs the drafter's full distribution q; {drafter.name} "
                        "drafts one-hot tokens: use 'onehot' (exact) or 'typical' (lossy)")
    prompt = np.asarray(prompt, dtype=np.int64)
    max_nodes = getattr(drafter, "tree", None)
    max_nodes = max_nodes.n_nodes if max_nodes is not None else drafter.k + 1
    cache = model.new_cache(_check_room(model, prompt.size, n_new, max_nodes))
    if hasattr(drafter, "capacity"):
        drafter.capacity = cache.capacity
    drafter.reset()
    feed = getattr(drafter, "uses_features", False)  # Medusa, EAGLE: they read the target's hidden states
    rng = request_rng(seed, index)
    t0 = _clock()
    logits = model.prefill(cache, prompt)
    if feed:
        drafter.observe(model.last_hidden)
    t1 = _clock()
    if hasattr(drafter, "start"):  # the drafter's own prefill of the prompt, timed apart from decoding
        drafter.start(prompt)
    t1d = _clock()
    first = _pick(logits, sampling, rng.random())
    i, v = _top(logits)
    out, ids, vals = [first], [i], [v]
    context = np.concatenate([prompt, [first]])
    cycles = []
    while len(out) < n_new and out[-1] != stop_token:
        ta = _clock()
        draft = drafter.propose(context, sampling, rng)
        tb = _clock()
        tree, toks = draft.tree, draft.tokens
        start = cache.length  # the root goes to slot `start`, node i to start + i
        lg = model.forward(cache, toks, start + tree.depths, ancestor_mask(tree))  # (M, V)
        u = rng.random(tree.n_nodes + 1)
        if mode == "greedy":
            verdict = V.verify_greedy(tree, toks, lg)
        else:
            p = probs(lg, sampling)
            if mode == "rejection":
                verdict = V.verify_rejection(tree, toks, p, draft.q, u)
            elif mode == "onehot":
                verdict = V.verify_onehot(tree, toks, p, u)
            else:
                verdict = V.verify_typical(tree, toks, p, u)
        path = (0,) + verdict.path
        if feed:  # the features of the root and the accepted nodes: the tokens the target now holds
            drafter.observe(model.last_hidden[list(path)])
        cache.compact(start, start + np.array(path, np.int64))  # keep root + accepted path, in order
        new = [int(toks[n]) for n in verdict.path] + [verdict.next_token]
        for node, tok in zip(path, new):  # the logits each emitted token was decided from
            i, v = _top(lg[node])
            ids.append(i), vals.append(v)
        out.extend(new)
        context = np.concatenate([context, new])
        tc = _clock()
        cycles.append(Cycle(n_drafted=tree.max_depth if tree.n_nodes > 1 else 0, n_accepted=verdict.n_accepted,
                            n_nodes=tree.n_nodes, draft_s=tb - ta, verify_s=tc - tb))
        if stop_token is not None and stop_token in new:
            cut = new.index(stop_token) + 1 - len(new)
            if cut < 0:
                del out[cut:], ids[cut:], vals[cut:]
            break
    t2 = _clock()
    n = min(len(out), n_new)
    gen = Generation(tokens=np.array(out[:n], np.int64), top_ids=np.array(ids[:n]), top_logits=np.array(vals[:n]),
                     prefill_s=t1 - t0, decode_s=t2 - t1d, cycles=tuple(cycles), draft_prefill_s=t1d - t1)
    return (gen, cache) if return_cache else gen
