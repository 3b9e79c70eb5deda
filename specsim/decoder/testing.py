"""Tiny random-weight Llama GGUF files for tests and examples (no download needed).

`write_tiny_gguf` writes a real GGUF with gguf's GGUFWriter: a byte-level BPE tokenizer in the
metadata, and tensors in every supported type (F32, F16, Q8_0, Q4_0, Q4_1) by default."""
from __future__ import annotations

from pathlib import Path

import numpy as np

DEFAULT_TYPES = {
    "token_embd": "Q8_0", "output": "F32", "attn_q": "Q4_0", "attn_k": "Q4_1", "attn_v": "Q8_0",
    "attn_output": "F16", "ffn_gate": "Q4_1", "ffn_up": "Q4_0", "ffn_down": "Q8_0",
}
MERGES = [("Ġ", "t"), ("h", "e"), ("Ġt", "he"), ("i", "n"), ("e", "r"), ("Ġ", "a"), ("o", "n"),
          ("r", "e"), ("Ġ", "s"), ("e", "d"), ("Ġ", "w"), ("o", "u"), ("Ġ", "c"), ("a", "n"),
          ("Ġ", "d"), ("Ġ", "f"), ("e", "s"), ("Ġa", "n"), ("Ġan", "d"), ("i", "s"), ("Ġ", "Ġ")]
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def byte_level_alphabet() -> list[str]:
    """GPT-2's bytes_to_unicode table, as strings in byte order."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    table = dict(zip(bs, cs))
    return [chr(table[b]) for b in range(256)]


def tiny_vocab(merges=MERGES, specials=SPECIALS, extra: int = 0) -> list[str]:
    return byte_level_alphabet() + [a + b for a, b in merges] + [f"<extra_{i}>" for i in range(extra)] + list(specials)


def write_tiny_gguf(path, *, seed: int = 0, n_layer: int = 3, d_model: int = 64, n_head: int = 4,
                    n_kv_head: int = 2, n_ff: int = 128, n_ctx: int = 256, types=None, tied: bool = False,
                    architecture: str = "llama", vocab=None, weight_std: float = 0.15,
                    tokenizer_model: str = "gpt2") -> Path:
    """Write a random-weight Llama GGUF to `path` and return the path."""
    import gguf

    path = Path(path)
    types = {**DEFAULT_TYPES, **(types or {})}
    vocab = list(vocab or tiny_vocab())
    rng = np.random.default_rng(seed)
    w = gguf.GGUFWriter(str(path), architecture)
    w.add_context_length(n_ctx)
    w.add_embedding_length(d_model)
    w.add_block_count(n_layer)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_kv_head)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_tokenizer_model(tokenizer_model)
    w.add_token_list(vocab)
    w.add_token_types([3 if t in SPECIALS else 1 for t in vocab])
    w.add_token_merges([f"{a} {b}" for a, b in MERGES])
    w.add_bos_token_id(vocab.index("<|im_start|>") if "<|im_start|>" in vocab else 0)
    w.add_eos_token_id(vocab.index("<|im_end|>") if "<|im_end|>" in vocab else 0)

    def add(name, kind, shape, std=weight_std):
        arr = (rng.standard_normal(shape) * std).astype(np.float32)
        t = types[kind]
        if t == "F32":
            w.add_tensor(name, arr)
        elif t == "F16":
            w.add_tensor(name, arr.astype(np.float16))
        else:
            qtype = getattr(gguf.GGMLQuantizationType, t)
            w.add_tensor(name, gguf.quants.quantize(arr, qtype), raw_dtype=qtype)

    def add_norm(name):
        w.add_tensor(name, (1.0 + 0.1 * rng.standard_normal(d_model)).astype(np.float32))

    e = d_model // n_head
    add("token_embd.weight", "token_embd", (len(vocab), d_model), 1.0)
    add_norm("output_norm.weight")
    if not tied:
        add("output.weight", "output", (len(vocab), d_model))
    for i in range(n_layer):
        p = f"blk.{i}."
        add_norm(p + "attn_norm.weight")
        add_norm(p + "ffn_norm.weight")
        add(p + "attn_q.weight", "attn_q", (n_head * e, d_model))
        add(p + "attn_k.weight", "attn_k", (n_kv_head * e, d_model))
        add(p + "attn_v.weight", "attn_v", (n_kv_head * e, d_model))
        add(p + "attn_output.weight", "attn_output", (d_model, n_head * e))
        add(p + "ffn_gate.weight", "ffn_gate", (n_ff, d_model))
        add(p + "ffn_up.weight", "ffn_up", (n_ff, d_model))
        add(p + "ffn_down.weight", "ffn_down", (d_model, n_ff))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
