"""The teacher's records: the target run over the training and held-out text with specsim's own
numba decoder (the forward pass that speculation verifies against, so the drafters learn exactly the
model they will be checked by). At every position: the final-norm hidden state (what the LM head and
the feature-level drafters read) and the target's top-K next-token log-probabilities.

Layout (a folder of .npy files and meta.json): tokens int32 (T,), seq_start int64 (S + 1,), split
("train" / "heldout") and kind per sequence in meta.json, hidden float16 (T, D), top_ids int32 (T, K),
top_logp float32 (T, K): log softmax of the full-vocabulary logits at temperature 1, best first.
Position t's record predicts token t + 1."""
from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..generate import generate_speculative
from ..drafters import PromptLookupDrafter
from ..model import Transformer
from ..workloads import chat_prompt
from . import corpus as C

TOP_K = 16


@dataclass(frozen=True, slots=True, kw_only=True)
class DataPlan:
    """How much text the teacher reads (sequences of `length` tokens; chat sequences run longer)."""

    seed: int = 0
    length: int = 256
    n_code_train: int = 320
    n_prose_train: int = 240
    n_chat_code_train: int = 24
    n_chat_prose_train: int = 12
    n_code_heldout: int = 32
    n_prose_heldout: int = 32
    n_chat_heldout: int = 8
    chat_new_tokens: int = 128
    chat_code_chars: int = 800  # the code-edit workload's size of code block
    chat_prose_chars: int = 1200  # the prose workload's passage size


def _records(model: Transformer, tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One causal pass over `tokens` (L,): hidden f16 (L, D), top ids i32 (L, K), top log-probs f32 (L, K)."""
    cache = model.new_cache(tokens.size)
    logits = model.forward(cache, tokens, np.arange(tokens.size)).astype(np.float64)
    hidden = model.last_hidden.astype(np.float16)
    ids = np.argpartition(-logits, TOP_K, axis=1)[:, :TOP_K]
    vals = np.take_along_axis(logits, ids, axis=1)
    order = np.argsort(-vals, axis=1, kind="stable")
    ids, vals = np.take_along_axis(ids, order, axis=1), np.take_along_axis(vals, order, axis=1)
    mx = logits.max(axis=1, keepdims=True)
    lse = mx + np.log(np.exp(logits - mx).sum(axis=1, keepdims=True))
    return hidden, ids.astype(np.int32), (vals - lse).astype(np.float32)


def build(model: Transformer, out: Path, plan: DataPlan = DataPlan(), *, log=print) -> dict:
    """Run the teacher over the plan's text and write the records into `out` (a folder)."""
    tok = model.tokenizer
    s = plan.seed
    code_train, code_held = C.split_code(s)
    prose_train, prose_held = C.split_prose()
    code_train_t, code_held_t = C.code_texts(code_train), C.code_texts(code_held)
    seqs: list[tuple[str, str, np.ndarray, str]] = []  # (split, kind, tokens, source)

    def add_chunks(split, kind, texts, n, stream):
        if n:
            arr, src = C.token_chunks(tok, texts, n_chunks=n, length=plan.length, seed=s, stream=stream)
            seqs.extend((split, kind, a, so) for a, so in zip(arr, src))

    add_chunks("train", "code", code_train_t, plan.n_code_train, 1)
    add_chunks("train", "prose", prose_train, plan.n_prose_train, 2)
    add_chunks("heldout", "code", code_held_t, plan.n_code_heldout, 3)
    add_chunks("heldout", "prose", prose_held, plan.n_prose_heldout, 4)
    chats = [("train", "chat-code", p) for p in C.chat_prompts(code_train_t, n=plan.n_chat_code_train, seed=s,
                                                                 stream=5, max_chars=plan.chat_code_chars)]
    chats += [("train", "chat-prose", p) for p in C.chat_prompts(prose_train, n=plan.n_chat_prose_train, seed=s,
                                                                   stream=6, max_chars=plan.chat_prose_chars)]
    n_ho = plan.n_chat_heldout
    chats += [("heldout", "chat-code", p) for p in C.chat_prompts(code_held_t, n=n_ho // 2, seed=s, stream=7,
                                                                    max_chars=plan.chat_code_chars)]
    chats += [("heldout", "chat-prose", p) for p in C.chat_prompts(prose_held, n=n_ho - n_ho // 2, seed=s,
                                                                     stream=8, max_chars=plan.chat_prose_chars)]
    t0 = time.perf_counter()
    for i, (split, kind, (text, prefix, src)) in enumerate(chats):  # the target answers (greedy)
        prompt = np.array(chat_prompt(tok, text, prefix), np.int64)
        gen = generate_speculative(model, PromptLookupDrafter(k=4), prompt, plan.chat_new_tokens,
                                   stop_token=model.gguf.eos_id)
        seqs.append((split, kind, np.concatenate([prompt, gen.tokens]), src))
        if (i + 1) % 16 == 0:
            log(f"teacher: answered {i + 1}/{len(chats)} chat prompts ({time.perf_counter() - t0:.0f} s)")
    out.mkdir(parents=True, exist_ok=True)
    lengths = np.array([a.size for _, _, a, _ in seqs], np.int64)
    starts = np.concatenate([[0], np.cumsum(lengths)])
    n_tok, d = int(starts[-1]), model.config.d_model
    hidden = np.lib.format.open_memmap(out / "hidden.npy", mode="w+", dtype=np.float16, shape=(n_tok, d))
    top_ids = np.zeros((n_tok, TOP_K), np.int32)
    top_logp = np.zeros((n_tok, TOP_K), np.float32)
    t0 = time.perf_counter()
    for i, (_, _, a, _) in enumerate(seqs):
        h, ids, lp = _records(model, a)
        hidden[starts[i]:starts[i + 1]] = h
        top_ids[starts[i]:starts[i + 1]] = ids
        top_logp[starts[i]:starts[i + 1]] = lp
        if (i + 1) % 64 == 0:
            log(f"teacher: {i + 1}/{len(seqs)} sequences, {starts[i + 1]} tokens ({time.perf_counter() - t0:.0f} s)")
    hidden.flush()
    del hidden
    np.save(out / "tokens.npy", np.concatenate([a for _, _, a, _ in seqs]).astype(np.int32))
    np.save(out / "seq_start.npy", starts)
    np.save(out / "top_ids.npy", top_ids)
    np.save(out / "top_logp.npy", top_logp)
    meta = dict(plan=plan.__dict__ if hasattr(plan, "__dict__") else {f: getattr(plan, f) for f in plan.__slots__},
                model=str(model.gguf.path), top_k=TOP_K, n_tokens=n_tok, d_model=d,
                split=[x[0] for x in seqs], kind=[x[1] for x in seqs], source=[x[3] for x in seqs])
    (out / "meta.json").write_text(json.dumps(meta, indent=1))
    return meta


@dataclass(frozen=True, slots=True)
class Records:
    """The teacher's records, loaded (hidden memory-mapped)."""

    tokens: np.ndarray
    seq_start: np.ndarray
    hidden: np.ndarray
    top_ids: np.ndarray
    top_logp: np.ndarray
    meta: dict

    def sequences(self, split: str, kinds: tuple = ()) -> list[int]:
        return [i for i, (sp, k) in enumerate(zip(self.meta["split"], self.meta["kind"]))
                if sp == split and (not kinds or k in kinds)]


def load(folder: Path) -> Records:
    folder = Path(folder)
    return Records(tokens=np.load(folder / "tokens.npy"), seq_start=np.load(folder / "seq_start.npy"),
                   hidden=np.load(folder / "hidden.npy", mmap_mode="r"), top_ids=np.load(folder / "top_ids.npy"),
                   top_logp=np.load(folder / "top_logp.npy"), meta=json.loads((folder / "meta.json").read_text()))
