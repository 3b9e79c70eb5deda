"""Writing the shipped drafter files from plain numpy arrays (no torch here): the distilled draft model
as a GGUF, Medusa and EAGLE as .npz, every matrix float16. `write_random_drafters` writes the same
files with random weights for any target (tests and examples on the tiny random GGUFs)."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ..trained import DRAFT_GGUF, EAGLE_NPZ, LAYER_TENSORS, MEDUSA_NPZ, vocabulary_hash


def write_draft_gguf(path: Path, *, blocks: list[dict], output_norm, token_embd_proj, output_proj, vocab,
                     vocab_hash: str, n_head: int, n_kv_head: int, rope_base: float, rms_eps: float,
                     n_ctx: int = 8192) -> None:
    """blocks: per layer {attn_q, ..., ffn_down: (out, in) matrices; attn_norm, ffn_norm: (d,)};
    token_embd_proj (d, D_target); output_proj (D_target, d); vocab (N,) ids of the LM-head rows.
    A llama GGUF without token embedding or LM head: the target's are used at load time."""
    import gguf

    d = int(output_norm.shape[0])
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("specsim distilled draft model")
    w.add_context_length(n_ctx)
    w.add_embedding_length(d)
    w.add_block_count(len(blocks))
    w.add_feed_forward_length(int(blocks[0]["ffn_gate"].shape[0]))
    w.add_head_count(n_head)
    w.add_head_count_kv(n_kv_head)
    w.add_rope_freq_base(float(rope_base))
    w.add_layer_norm_rms_eps(float(rms_eps))
    w.add_string("specsim.vocabulary_sha256", vocab_hash)
    w.add_string("specsim.embedding", "token_embd = the target's token_embd @ specsim.token_embd_proj^T; "
                 "LM head = the target's head rows specsim.vocab @ specsim.output_proj")
    for i, b in enumerate(blocks):
        for n in LAYER_TENSORS:
            w.add_tensor(f"blk.{i}.{n}.weight", np.asarray(b[n], np.float16))
        for n in ("attn_norm", "ffn_norm"):
            w.add_tensor(f"blk.{i}.{n}.weight", np.asarray(b[n], np.float32))
    w.add_tensor("output_norm.weight", np.asarray(output_norm, np.float32))
    w.add_tensor("specsim.token_embd_proj.weight", np.asarray(token_embd_proj, np.float16))
    w.add_tensor("specsim.output_proj.weight", np.asarray(output_proj, np.float16))
    w.add_tensor("specsim.vocab", np.asarray(vocab, np.int32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def write_medusa(path: Path, *, w, b, vocab, vocab_hash: str) -> None:
    """w (K, D, D), b (K, D): head k's residual block h + SiLU(w[k] h + b[k])."""
    with open(path, "wb") as f:
        np.savez(f, w=np.asarray(w, np.float16), b=np.asarray(b, np.float16), vocab=np.asarray(vocab, np.int32),
                 vocabulary_sha256=np.array(vocab_hash))


def write_eagle(path: Path, *, fc_weight, fc_bias, output_norm, block: dict, vocab, vocab_hash: str) -> None:
    """fc_weight (D, 2D), fc_bias (D,), output_norm (D,), block: one layer as in write_draft_gguf."""
    arrays = {"fc.weight": fc_weight, "fc.bias": fc_bias, "output_norm.weight": output_norm}
    arrays |= {f"block.{n}.weight": block[n] for n in LAYER_TENSORS + ("attn_norm", "ffn_norm")}
    with open(path, "wb") as f:
        np.savez(f, vocab=np.asarray(vocab, np.int32), vocabulary_sha256=np.array(vocab_hash),
                 **{k: np.asarray(v, np.float16) for k, v in arrays.items()})


def _random_block(rng, d, n_head, n_kv_head, n_ff, std):
    e = d // n_head
    shapes = dict(attn_q=(n_head * e, d), attn_k=(n_kv_head * e, d), attn_v=(n_kv_head * e, d),
                  attn_output=(d, n_head * e), ffn_gate=(n_ff, d), ffn_up=(n_ff, d), ffn_down=(d, n_ff))
    b = {n: rng.standard_normal(s) * std for n, s in shapes.items()}
    b["attn_norm"] = 1 + 0.1 * rng.standard_normal(d)
    b["ffn_norm"] = 1 + 0.1 * rng.standard_normal(d)
    return b


def write_random_drafters(target, folder: Path, *, seed: int = 0, n_vocab_draft: int | None = None,
                          draft_d_model: int = 32, std: float = 0.1) -> Path:
    """draft.gguf, medusa.npz and eagle.npz with random weights shaped for `target` (a Transformer)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    c = target.config
    rng = np.random.default_rng(seed)
    n = min(n_vocab_draft or c.n_vocab, c.n_vocab)
    vocab = np.sort(rng.choice(c.n_vocab, n, replace=False))
    h = vocabulary_hash(target.gguf.tokens)
    d = draft_d_model
    write_draft_gguf(folder / DRAFT_GGUF, blocks=[_random_block(rng, d, 2, 1, 2 * d, std) for _ in range(2)],
                     output_norm=1 + 0.1 * rng.standard_normal(d), token_embd_proj=rng.standard_normal((d, c.d_model)) * std,
                     output_proj=rng.standard_normal((c.d_model, d)) * std, vocab=vocab, vocab_hash=h, n_head=2,
                     n_kv_head=1, rope_base=c.rope_base, rms_eps=c.rms_eps, n_ctx=c.n_ctx)
    write_medusa(folder / MEDUSA_NPZ, w=rng.standard_normal((4, c.d_model, c.d_model)) * std,
                 b=rng.standard_normal((4, c.d_model)) * std, vocab=vocab, vocab_hash=h)
    write_eagle(folder / EAGLE_NPZ, fc_weight=rng.standard_normal((c.d_model, 2 * c.d_model)) * std,
                fc_bias=rng.standard_normal(c.d_model) * std, output_norm=1 + 0.1 * rng.standard_normal(c.d_model),
                block=_random_block(rng, c.d_model, c.n_head, c.n_kv_head, c.n_ff, std), vocab=vocab, vocab_hash=h)
    return folder
