"""Drafters: each proposes a tree of tokens below the root (the last token the target emitted,
not yet in its cache). A chain of K tokens is the tree `trees.chain(K)`.

- NgramLookupDrafter: prompt lookup by n-gram frequency and recency, longest match first, with a
  draft length set by the acceptance it has seen (zero parameters).
- PromptLookupDrafter: the simple prompt lookup (earliest longest match, fixed k), kept for comparison.
- ModelDrafter: a model drafting autoregressively with its own KV cache: the target itself with only
  its first n layers (layer-skip self-speculation, `layer_skip`), or a separate draft model
  (`draft_model`, refused when its vocabulary differs from the target's).
- TreeDrafter: top-k per depth from a model drafter into a given `trees.Tree` topology.
"""
from __future__ import annotations

import numpy as np

from ..errors import SpecError
from ..speculation.trees import Tree, ancestor_mask, chain
from .draft import Draft
from .model import Transformer
from .sampling import SamplingParams, probs, sample
from .trained import load_draft_model


class PromptLookupDrafter:
    """Longest suffix match (max_n down to min_n tokens) of the context against earlier context; the
    k tokens that followed the earliest match are the draft (as HF's prompt_lookup_num_tokens and
    vLLM's n-gram proposer do). No match: an empty draft (the cycle is a plain step)."""

    name = "prompt-lookup"
    gives_q = False

    def __init__(self, *, k: int = 4, min_n: int = 1, max_n: int = 3):
        if not (1 <= min_n <= max_n) or k < 1:
            raise SpecError(f"prompt lookup: need 1 <= min_n <= max_n and k >= 1, got min_n={min_n}, max_n={max_n}, k={k}")
        self.k, self.min_n, self.max_n = k, min_n, max_n

    def reset(self) -> None:
        pass

    def propose(self, context: np.ndarray, sampling: SamplingParams, rng: np.random.Generator) -> Draft:
        ctx = np.asarray(context, dtype=np.int64)
        n_ctx = ctx.size
        for n in range(min(self.max_n, n_ctx - 1), self.min_n - 1, -1):
            suffix = ctx[n_ctx - n:]
            windows = np.lib.stride_tricks.sliding_window_view(ctx[:n_ctx - 1], n)  # starts 0..n_ctx-1-n
            hits = np.flatnonzero(np.all(windows == suffix, axis=1))
            for start in hits:
                follow = ctx[start + n:start + n + self.k]
                if follow.size:
                    draft = np.concatenate([ctx[-1:], follow])
                    return Draft(draft, chain(follow.size))
        return Draft(ctx[-1:].copy(), chain(0))


class NgramLookupDrafter:
    """Prompt lookup with n-gram statistics of the context (zero parameters).

    Candidate selection: the longest suffix of (context + draft so far), up to max_n tokens, that
    occurred earlier in the context; among the tokens that followed its occurrences, the most frequent,
    ties to the most recent (llama.cpp's lookup counts followers per n-gram; vLLM's proposer takes the
    longest match). Drafting goes on token by token, re-matching the grown suffix each time, so a copied
    span that forks follows the majority (or the latest) branch.
    Draft length: each drafted token's acceptance probability is estimated online per kind of evidence
    (match length, whether its followers agreed), from this drafter's recent cycles (exponentially
    forgotten counts). A token is added while the chance that the whole draft up to it is accepted
    exceeds what one more verify row costs (`verify_cost_slope`, in units of a one-token step, times the
    draft's current tokens per unit cost), up to k tokens. No match, or too little confidence: an empty
    draft (the cycle is a plain step).

    Defaults: verify_cost_slope 0.15 is about what one more verify row costs on a 2-core CPU with this
    decoder (`specsim decoder bench`: verify(M) / step(1) = 1.44 at M = 3, 1.85 at M = 5, 2.37 at M = 8,
    context 512); k, max_n, memory and the prior were chosen by replaying the target's greedy answers
    to the code-edit prompts of seed 1 (the measured tables use seed 0)."""

    name = "prompt-lookup"
    gives_q = False
    N_BUCKETS = 8  # match lengths 1..8 (longer ones share bucket 8)

    def __init__(self, *, k: int = 12, min_n: int = 1, max_n: int = 6, verify_cost_slope: float = 0.15,
                 memory: float = 0.95, prior_accept: float = 0.6, prior_weight: float = 2.0):
        if not (1 <= min_n <= max_n) or k < 1:
            raise SpecError(f"prompt lookup: need 1 <= min_n <= max_n and k >= 1, got min_n={min_n}, max_n={max_n}, k={k}")
        if not verify_cost_slope >= 0:
            raise SpecError(f"prompt lookup: verify_cost_slope = {verify_cost_slope}: expected a number >= 0")
        if not 0 < memory <= 1:
            raise SpecError(f"prompt lookup: memory = {memory}: expected a number in (0, 1]")
        self.k, self.min_n, self.max_n = k, min_n, max_n
        self.verify_cost_slope, self.memory = verify_cost_slope, memory
        # (match-length bucket, followers unanimous) -> [accepted, tried], exponentially forgotten
        self._prior = np.array([prior_accept * prior_weight, prior_weight])
        self.reset()

    def reset(self) -> None:
        """A new request: no index and the acceptance estimates back at their prior, so a request's
        drafts do not depend on the requests (or repeats) decoded before it."""
        self.stats = np.tile(self._prior, (self.N_BUCKETS + 1, 2, 1))
        self._index = [dict() for _ in range(self.max_n + 1)]  # n -> {n-gram: [positions of the follower]}
        self._ctx = np.zeros(0, np.int64)
        self._last: tuple | None = None  # (context length, drafted tokens, their buckets) of the last draft

    def _extend_index(self, ctx: np.ndarray) -> None:
        old = self._ctx.size
        if old > ctx.size or not np.array_equal(self._ctx, ctx[:old]):  # not a continuation: start over
            self.reset()
            old = 0
        seq = ctx.tolist()
        for p in range(max(old, 1), len(seq)):  # the follower at p of the n-grams ending at p - 1
            for n in range(1, min(self.max_n, p) + 1):
                self._index[n].setdefault(tuple(seq[p - n:p]), []).append(p)
        self._ctx = ctx.copy()

    def _learn(self, ctx: np.ndarray) -> None:
        """Score the previous draft against what the target kept (the context grew by the accepted
        draft tokens and one token of the target's)."""
        if self._last is None:
            return
        n0, drafted, buckets = self._last
        self._last = None
        if ctx.size <= n0 or not drafted:
            return
        got = ctx[n0:n0 + len(drafted)]
        n_acc = 0
        while n_acc < min(got.size, len(drafted)) and got[n_acc] == drafted[n_acc]:
            n_acc += 1
        if n_acc == got.size and got.size < len(drafted):  # context too short to tell: skip
            return
        self.stats *= self.memory
        self.stats += (1 - self.memory) * self._prior  # forget towards the prior
        for i, b in enumerate(buckets[:n_acc + 1]):
            self.stats[b][0] += i < n_acc
            self.stats[b][1] += 1

    def _next(self, seq: list, n_ctx: int) -> tuple[int, tuple] | None:
        """The follower of the longest matching suffix of seq (seq[:n_ctx] is real context)."""
        for n in range(min(self.max_n, len(seq) - 1), self.min_n - 1, -1):
            where = self._index[n].get(tuple(seq[-n:]))
            if not where:
                continue
            counts: dict[int, int] = {}
            latest: dict[int, int] = {}
            for p in where:  # ascending: the last seen is the most recent
                tok = seq[p] if p < n_ctx else None
                if tok is None:
                    continue
                counts[tok] = counts.get(tok, 0) + 1
                latest[tok] = p
            if not counts:
                continue
            best = max(counts, key=lambda t: (counts[t], latest[t]))
            return best, (min(n, self.N_BUCKETS), int(len(counts) == 1))
        return None

    def propose(self, context: np.ndarray, sampling: SamplingParams, rng: np.random.Generator) -> Draft:
        ctx = np.asarray(context, dtype=np.int64)
        self._learn(ctx)
        self._extend_index(ctx)
        seq = ctx.tolist()
        n_ctx = len(seq)
        drafted, buckets = [], []
        p_all, gain = 1.0, 1.0  # P(every draft token so far accepted); expected tokens of the cycle
        slope = self.verify_cost_slope
        while len(drafted) < self.k:
            nxt = self._next(seq, n_ctx)
            if nxt is None:
                break
            tok, b = nxt
            acc, tried = self.stats[b]
            p_next = p_all * acc / tried
            # worth one more verify row when its expected tokens beat the cycle's tokens per unit cost
            if p_next <= slope * gain / (1 + slope * len(drafted)):
                break
            p_all, gain = p_next, gain + p_next
            drafted.append(tok)
            buckets.append(b)
            seq.append(tok)
        self._last = (n_ctx, drafted, buckets)
        return Draft(np.array([int(ctx[-1])] + drafted, np.int64), chain(len(drafted)))


class ModelDrafter:
    """Autoregressive drafting with a model and its own KV cache. n_layers: run only the first n
    layers (+ final norm + LM head): self-speculation by layer skipping, no training."""

    gives_q = True

    def __init__(self, model: Transformer, *, k: int = 4, n_layers: int | None = None, name: str = "draft-model",
                 capacity: int | None = None, vocab: np.ndarray | None = None):
        nl = model.config.n_layer if n_layers is None else n_layers
        if not 1 <= nl <= model.config.n_layer:
            raise SpecError(f"layer-skip drafter: n_layers = {n_layers}: expected 1..{model.config.n_layer}")
        if k < 1:
            raise SpecError(f"{name}: k = {k}: expected >= 1")
        self.model, self.k, self.n_layers, self.name = model, k, nl, name
        self.capacity = capacity or model.config.n_ctx
        # vocab (N,): the token id of each logit when the model's head covers only part of the vocabulary
        self.vocab = None if vocab is None else np.asarray(vocab, dtype=np.int64)
        self.reset()

    def reset(self) -> None:
        self.cache = self.model.new_cache(self.capacity, n_layer=self.n_layers)
        self.cached = np.zeros(0, np.int64)  # the tokens whose rows are in the cache

    def start(self, prompt) -> None:
        """Read the prompt into the drafter's cache (its prefill), so a cycle holds only that cycle's work."""
        self._sync(np.asarray(prompt, dtype=np.int64))

    def _sync(self, context: np.ndarray) -> np.ndarray:
        """Roll the cache back to the longest prefix it shares with the context, run the rest;
        return the logits after the last context token."""
        n = min(self.cached.size, context.size - 1)
        same = np.flatnonzero(self.cached[:n] != context[:n])
        n = int(same[0]) if same.size else n
        self.cache.truncate(n)
        logits = self.model.prefill(self.cache, context[n:], n_layers=self.n_layers)
        self.cached = context.copy()
        return logits

    def propose(self, context: np.ndarray, sampling: SamplingParams, rng: np.random.Generator) -> Draft:
        ctx = np.asarray(context, dtype=np.int64)
        room = self.cache.capacity - ctx.size
        k = max(0, min(self.k, room))
        logits = self._sync(ctx)
        tokens = [int(ctx[-1])]
        qs = []
        u = rng.random(k)
        for i in range(k):
            q = probs(logits, sampling)
            pick = int(np.argmax(q)) if sampling.greedy else sample(q, u[i])
            if self.vocab is not None:  # back to full-vocabulary ids; q is 0 outside the drafting vocabulary
                full = np.zeros(self.model.config.n_vocab)
                full[self.vocab] = q
                q, pick = full, int(self.vocab[pick])
            qs.append(q)
            tokens.append(pick)
            if i + 1 < k:
                logits = self.model.forward(self.cache, np.array(tokens[-1:]), np.array([self.cache.length]),
                                            n_layers=self.n_layers)[-1].copy()
        self.cached = np.concatenate([ctx, np.array(tokens[1:-1], np.int64)]) if k else ctx.copy()
        q = np.stack(qs + [np.zeros_like(qs[0])]) if qs else None  # row k (a leaf) drafts nothing
        return Draft(np.array(tokens, np.int64), chain(k), q)


def layer_skip(model: Transformer, *, k: int = 4, n_layers: int, capacity: int | None = None) -> ModelDrafter:
    return ModelDrafter(model, k=k, n_layers=n_layers, name=f"layer-skip-{n_layers}", capacity=capacity)


def distilled(target: Transformer, *, k: int = 4, path=None, capacity: int | None = None) -> ModelDrafter:
    """The distilled draft model shipped in specsim/decoder/weights (or `path`), as a chain drafter."""
    model, vocab = load_draft_model(target, path)
    return ModelDrafter(model, k=k, name=f"draft-model:{model.gguf.path.name}", capacity=capacity, vocab=vocab)


def check_same_vocabulary(target: Transformer, draft: Transformer) -> None:
    """Speculation compares p and q over the same token ids: the vocabularies must be identical."""
    a, b = target.gguf.tokens, draft.gguf.tokens
    if a == b and target.config.n_vocab == draft.config.n_vocab:
        return
    diff = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    first = (f"first difference at id {diff}: target {a[diff]!r} vs drafter {b[diff]!r}"
             if diff < min(len(a), len(b)) else f"one is a prefix of the other up to id {diff}")
    raise SpecError(
        f"draft model {draft.gguf.path}: vocabulary of {len(b)} tokens differs from the target's "
        f"{len(a)} tokens ({first}); a draft model must share the target's tokenizer")


def draft_model(target: Transformer, draft: Transformer, *, k: int = 4, capacity: int | None = None) -> ModelDrafter:
    check_same_vocabulary(target, draft)
    return ModelDrafter(draft, k=k, name=f"draft-model:{draft.gguf.path.name}", capacity=capacity)


class TreeDrafter:
    """Top-k per depth: child of rank r gets the drafter's (r+1)-th most likely token at its parent.
    The drafter runs the tree one depth at a time in its own cache with the tree's ancestor mask."""

    gives_q = False

    def __init__(self, base: ModelDrafter, tree: Tree):
        self.base, self.tree = base, tree
        self.name = f"tree({base.name}, {tree.n_nodes} nodes)"
        self._mask = ancestor_mask(tree)
        self._depth = tree.depths
        self._kids = [tree.children(i) for i in range(tree.n_nodes)]

    def reset(self) -> None:
        self.base.reset()

    def start(self, prompt) -> None:
        self.base.start(prompt)

    def propose(self, context: np.ndarray, sampling: SamplingParams, rng: np.random.Generator) -> Draft:
        b, tree = self.base, self.tree
        ctx = np.asarray(context, dtype=np.int64)
        if ctx.size + tree.n_nodes > b.cache.capacity:
            return Draft(ctx[-1:].copy(), chain(0))
        logits = {0: b._sync(ctx)}  # node -> drafter logits at that node
        tokens = np.zeros(tree.n_nodes, np.int64)
        tokens[0] = ctx[-1]
        base_len = b.cache.length  # = ctx.size; tree rows (nodes >= 1) go after it
        fed: list[int] = []
        for depth in range(1, tree.max_depth + 1):
            level = [i for i in range(1, tree.n_nodes) if self._depth[i] == depth]
            for i in level:
                parent = int(tree.parents[i])
                order = np.argsort(-logits[parent], kind="stable")
                tokens[i] = order[int(tree.ranks[i])] if b.vocab is None else b.vocab[order[int(tree.ranks[i])]]
            need = [i for i in level if self._kids[i].size]
            if not need:
                break
            fed_now = fed + level  # all level nodes are fed so the slots stay in node order
            mask = self._mask[np.ix_(level, fed_now)]  # (len(level), rows since base_len)
            out = b.model.forward(b.cache, tokens[level], (ctx.size - 1) + self._depth[level], mask,
                                  n_shared=base_len, n_layers=b.n_layers)
            for j, i in enumerate(level):
                logits[i] = out[j].copy()
            fed = fed_now
        b.cache.truncate(base_len)
        return Draft(tokens, tree)
