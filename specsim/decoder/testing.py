"""Tiny random-weight Llama GGUF files for tests and examples (no download needed), and malformed
ones for the loader's checks.

`write_tiny_gguf` writes a real GGUF with gguf's GGUFWriter: a byte-level BPE tokenizer in the
metadata, and tensors in every supported type (F32, F16, Q8_0, Q4_0, Q4_1) by default. Its
`metadata`, `shapes`, `omit` and `extra` arguments write a file whose header disagrees with its
tensors. `rewrite_gguf` copies any GGUF (the real SmolLM2 file too) with metadata values replaced
and tensors dropped."""
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
                    tokenizer_model: str = "gpt2", metadata: dict | None = None, shapes: dict | None = None,
                    omit=(), extra: dict | None = None) -> Path:
    """Write a random-weight Llama GGUF to `path` and return the path.

    Malformed files: `metadata` maps a key below `llama.` ("attention.head_count", "block_count",
    "vocab_size", "rope.dimension_count", ...) to the value written instead of the one the tensors
    imply (an int is written as UINT32, a float as FLOAT32, anything else as given; None leaves the
    key out); `shapes` maps a tensor name to the (rows, columns) written instead; `omit` names
    tensors left out; `extra` maps further tensor names to (rows, columns) (F32)."""
    import gguf

    path = Path(path)
    types = {**DEFAULT_TYPES, **(types or {})}
    vocab = list(vocab or tiny_vocab())
    rng = np.random.default_rng(seed)
    shapes, omit, extra = dict(shapes or {}), set(omit), dict(extra or {})
    w = gguf.GGUFWriter(str(path), architecture)
    keys = {"context_length": n_ctx, "embedding_length": d_model, "block_count": n_layer,
            "feed_forward_length": n_ff, "attention.head_count": n_head, "attention.head_count_kv": n_kv_head,
            "rope.freq_base": 10000.0, "attention.layer_norm_rms_epsilon": 1e-5, **(metadata or {})}
    for key, value in keys.items():
        if value is None:
            continue
        if isinstance(value, bool):
            w.add_bool(f"{architecture}.{key}", value)
        elif isinstance(value, int):
            w.add_uint32(f"{architecture}.{key}", value) if value >= 0 else w.add_int32(f"{architecture}.{key}", value)
        elif isinstance(value, float):
            w.add_float32(f"{architecture}.{key}", value)
        elif isinstance(value, str):
            w.add_string(f"{architecture}.{key}", value)
        else:
            w.add_array(f"{architecture}.{key}", list(value))
    w.add_tokenizer_model(tokenizer_model)
    w.add_token_list(vocab)
    w.add_token_types([3 if t in SPECIALS else 1 for t in vocab])
    w.add_token_merges([f"{a} {b}" for a, b in MERGES])
    w.add_bos_token_id(vocab.index("<|im_start|>") if "<|im_start|>" in vocab else 0)
    w.add_eos_token_id(vocab.index("<|im_end|>") if "<|im_end|>" in vocab else 0)

    def add(name, kind, shape, std=weight_std):
        if name in omit:
            return
        shape = shapes.get(name, shape)
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
        if name not in omit:
            shape = shapes.get(name, (d_model,))
            w.add_tensor(name, (1.0 + 0.1 * rng.standard_normal(shape)).astype(np.float32))

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
    for name, shape in extra.items():
        w.add_tensor(name, (rng.standard_normal(shape) * weight_std).astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def rewrite_gguf(src, dst, *, fields: dict | None = None, drop=None, reader=None) -> Path:
    """Copy the GGUF `src` to `dst` with metadata values replaced (`fields`: full key -> value, written
    with the key's original type) and the tensors for which `drop(name)` is true left out. Tensor
    bytes are copied as they are (quantized blocks stay quantized). reader: a gguf.GGUFReader of
    `src` already open (parsing a large vocabulary takes seconds). Where only numbers change, the
    file is copied and those bytes patched in place."""
    import shutil

    import gguf

    fields = dict(fields or {})
    r = reader if reader is not None else gguf.GGUFReader(str(src))
    unknown = set(fields) - set(r.fields)
    if unknown:
        raise KeyError(f"{src}: no metadata keys {sorted(unknown)}")
    if drop is None and all(isinstance(v, (int, float)) and len(r.fields[k].data) == 1 for k, v in fields.items()):
        shutil.copyfile(src, dst)
        base = r.data.__array_interface__["data"][0]
        with open(dst, "r+b") as out:
            for key, value in fields.items():
                part = r.fields[key].parts[r.fields[key].data[0]]  # the value's bytes in the memory map
                out.seek(part.__array_interface__["data"][0] - base)
                out.write(np.array([value], dtype=part.dtype).tobytes())
        return Path(dst)
    drop = drop or (lambda name: False)
    w = gguf.GGUFWriter(str(dst), arch=r.fields["general.architecture"].contents(), endianess=r.endianess)
    for key, f in r.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture":
            continue  # written by the writer itself
        vtype = f.types[0]
        sub = f.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
        w.add_key_value(key, fields.get(key, f.contents()), vtype, sub_type=sub)
    kept = [t for t in r.tensors if not drop(t.name)]
    for t in kept:
        w.add_tensor_info(t.name, t.data.shape, t.data.dtype, t.data.nbytes, t.tensor_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    for t in kept:
        w.write_tensor_data(t.data)
    w.close()
    return Path(dst)
