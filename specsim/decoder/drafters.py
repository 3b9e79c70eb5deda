"""Drafters: each proposes a tree of tokens below the root (the last token the target emitted,
not yet in its cache). A chain of K tokens is the tree `trees.chain(K)`.

- PromptLookupDrafter: n-gram / prompt lookup (zero parameters).
- ModelDrafter: a model drafting autoregressively with its own KV cache: the target itself with only
  its first n layers (layer-skip self-speculation, `layer_skip`), or a separate draft model
  (`draft_model`, refused when its vocabulary differs from the target's).
- TreeDrafter: top-k per depth from a model drafter into a given `trees.Tree` topology.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from ..errors import SpecError
from ..speculation.trees import Tree, ancestor_mask, chain
from .model import Transformer
from .sampling import SamplingParams, probs, sample


@dataclass(frozen=True, slots=True)
class Draft:
    """tokens (M,) int64, tokens[0] the root; tree: the topology (M nodes); q (M, V) float64 or None:
    the drafter's distribution at each node (q[i] drew the children of i), None for one-hot drafts."""

    tokens: np.ndarray
    tree: Tree
    q: np.ndarray | None = None


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


class ModelDrafter:
    """Autoregressive drafting with a model and its own KV cache. n_layers: run only the first n
    layers (+ final norm + LM head): self-speculation by layer skipping, no training."""

    gives_q = True

    def __init__(self, model: Transformer, *, k: int = 4, n_layers: int | None = None, name: str = "draft-model",
                 capacity: int | None = None):
        nl = model.config.n_layer if n_layers is None else n_layers
        if not 1 <= nl <= model.config.n_layer:
            raise SpecError(f"layer-skip drafter: n_layers = {n_layers}: expected 1..{model.config.n_layer}")
        if k < 1:
            raise SpecError(f"{name}: k = {k}: expected >= 1")
        self.model, self.k, self.n_layers, self.name = model, k, nl, name
        self.capacity = capacity or model.config.n_ctx
        self.reset()

    def reset(self) -> None:
        self.cache = self.model.new_cache(self.capacity, n_layer=self.n_layers)
        self.cached = np.zeros(0, np.int64)  # the tokens whose rows are in the cache

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
            qs.append(q)
            tokens.append(int(np.argmax(q)) if sampling.greedy else sample(q, u[i]))
            if i + 1 < k:
                logits = self.model.forward(self.cache, np.array(tokens[-1:]), np.array([self.cache.length]),
                                            n_layers=self.n_layers)[-1].copy()
        self.cached = np.concatenate([ctx, np.array(tokens[1:-1], np.int64)]) if k else ctx.copy()
        q = np.stack(qs + [np.zeros_like(qs[0])]) if qs else None  # row k (a leaf) drafts nothing
        return Draft(np.array(tokens, np.int64), chain(k), q)


def layer_skip(model: Transformer, *, k: int = 4, n_layers: int, capacity: int | None = None) -> ModelDrafter:
    return ModelDrafter(model, k=k, n_layers=n_layers, name=f"layer-skip-{n_layers}", capacity=capacity)


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
                tokens[i] = order[int(tree.ranks[i])]
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


def timed_propose(drafter, context, sampling, rng) -> tuple[Draft, float]:
    t0 = time.perf_counter()
    d = drafter.propose(context, sampling, rng)
    return d, time.perf_counter() - t0
