"""Load a Llama-architecture GGUF file: its hyper-parameters, its (still quantized) tensors and its
tokenizer, built from the GGUF metadata with the `tokenizers` package.

Weights stay in the GGUF block layout (bytes per row, as llama.cpp keeps them); the kernels
dequantize on the fly. Supported tensor types: F32, F16, Q8_0, Q4_0, Q4_1.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..errors import SpecError

SUPPORTED_ARCHITECTURES = ("llama",)
# GGML type id -> (name, elements per block, bytes per block)
TENSOR_TYPES = {0: ("F32", 1, 4), 1: ("F16", 1, 2), 2: ("Q4_0", 32, 18), 3: ("Q4_1", 32, 20), 8: ("Q8_0", 32, 34)}
SUPPORTED_TYPE_NAMES = ", ".join(name for name, _, _ in TENSOR_TYPES.values())


@dataclass(frozen=True, slots=True, kw_only=True)
class LlamaConfig:
    """Hyper-parameters read from `llama.*` GGUF keys."""

    n_vocab: int
    n_ctx: int
    d_model: int
    n_layer: int
    n_ff: int
    n_head: int
    n_kv_head: int
    rope_base: float
    rms_eps: float

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_head


@dataclass(frozen=True, slots=True, kw_only=True)
class QTensor:
    """One weight matrix as stored in the file. raw: uint8 (N, RB) for block types, float32 (N, K)
    for F32, uint16 (N, K) for F16 (the bit pattern; converted through a lookup table)."""

    name: str
    type_name: str
    n_rows: int
    n_cols: int
    raw: np.ndarray

    @property
    def n_bytes(self) -> int:
        return int(self.raw.nbytes)


@dataclass(frozen=True, slots=True, kw_only=True)
class GGUFModel:
    path: Path
    config: LlamaConfig
    tensors: dict = field(repr=False)  # name -> QTensor
    tokenizer: object = field(repr=False)  # tokenizers.Tokenizer
    tokens: tuple = field(repr=False)  # the vocabulary strings, index = token id
    bos_id: int
    eos_id: int
    chat_template: str | None = field(default=None, repr=False)

    @property
    def weight_bytes(self) -> int:
        return sum(t.n_bytes for t in self.tensors.values())

    def tensor(self, name: str) -> QTensor:
        try:
            return self.tensors[name]
        except KeyError:
            raise SpecError(f"{self.path}: tensor {name!r} is missing; a llama GGUF must have it") from None


def _field(reader, key: str, default=None, *, path):
    f = reader.fields.get(key)
    if f is None:
        if default is None:
            raise SpecError(f"{path}: GGUF metadata key {key!r} is missing")
        return default
    return f.contents()


def _build_tokenizer(reader, path):
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    kind = _field(reader, "tokenizer.ggml.model", path=path)
    if kind != "gpt2":
        raise SpecError(
            f"{path}: tokenizer.ggml.model = {kind!r}: only byte-level BPE ('gpt2', as in SmolLM2, "
            "Llama 3, Qwen) is supported")
    tokens = list(_field(reader, "tokenizer.ggml.tokens", path=path))
    merges = [tuple(m.split(" ", 1)) for m in _field(reader, "tokenizer.ggml.merges", path=path)]
    types = list(_field(reader, "tokenizer.ggml.token_type", [1] * len(tokens), path=path))
    vocab = {t: i for i, t in enumerate(tokens)}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=False))
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    pre = _field(reader, "tokenizer.ggml.pre", "default", path=path)
    if pre == "smollm":  # SmolLM splits digits one by one before the GPT-2 regex
        tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), byte_level])
    else:
        tok.pre_tokenizer = byte_level
    tok.decoder = decoders.ByteLevel()
    special = [t for t, ty in zip(tokens, types) if ty == 3]  # 3 = control token
    if special:
        tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in special])
    return tok, tuple(tokens)


def load_gguf(path) -> GGUFModel:
    """Read a GGUF file. Raises SpecError for a missing or truncated file, another architecture,
    an unsupported tensor type or an unsupported tokenizer."""
    from gguf import GGUFReader

    path = Path(path)
    if not path.is_file():
        raise SpecError(f"{path}: no such GGUF file (run `specsim decoder fetch` for SmolLM2-135M)")
    try:
        reader = GGUFReader(os.fspath(path), "r")
    except Exception as exc:  # the reader fails in various ways on a cut file
        raise SpecError(f"{path}: not a readable GGUF file ({type(exc).__name__}: {exc}); "
                        f"the file is {path.stat().st_size} bytes — truncated or corrupt?") from None
    arch = _field(reader, "general.architecture", path=path)
    if arch not in SUPPORTED_ARCHITECTURES:
        raise SpecError(f"{path}: general.architecture = {arch!r}; supported: {', '.join(SUPPORTED_ARCHITECTURES)}")
    size = path.stat().st_size
    tensors = {}
    for t in reader.tensors:
        type_id = int(t.tensor_type)
        if type_id not in TENSOR_TYPES:
            raise SpecError(f"{path}: tensor {t.name!r} has type {t.tensor_type.name} (id {type_id}); "
                            f"supported tensor types: {SUPPORTED_TYPE_NAMES}")
        end = int(t.data_offset) + int(t.n_bytes)
        if end > size:
            raise SpecError(f"{path}: truncated file: tensor {t.name!r} needs bytes up to {end}, "
                            f"the file has {size}")
        name, block, block_bytes = TENSOR_TYPES[type_id]
        n_cols = int(t.shape[0])
        n_rows = int(np.prod(t.shape[1:])) if len(t.shape) > 1 else 1
        data = np.asarray(t.data)
        if name == "F32":
            raw = data.reshape(n_rows, n_cols).astype(np.float32, copy=False)
        elif name == "F16":
            raw = data.reshape(n_rows, n_cols).view(np.uint16)
        else:
            raw = data.reshape(n_rows, n_cols // block * block_bytes)
        tensors[t.name] = QTensor(name=t.name, type_name=name, n_rows=n_rows, n_cols=n_cols,
                                  raw=np.ascontiguousarray(raw))
    g = lambda k, d=None: _field(reader, f"llama.{k}", d, path=path)  # noqa: E731
    n_head = int(g("attention.head_count"))
    emb = tensors.get("token_embd.weight")
    if emb is None:
        raise SpecError(f"{path}: tensor 'token_embd.weight' is missing; a llama GGUF must have it")
    config = LlamaConfig(
        n_vocab=int(g("vocab_size", emb.n_rows)), n_ctx=int(g("context_length")),
        d_model=int(g("embedding_length")), n_layer=int(g("block_count")),
        n_ff=int(g("feed_forward_length")), n_head=n_head,
        n_kv_head=int(g("attention.head_count_kv", n_head)),
        rope_base=float(g("rope.freq_base", 10000.0)),
        rms_eps=float(g("attention.layer_norm_rms_epsilon", 1e-5)),
    )
    tokenizer, tokens = _build_tokenizer(reader, path)
    bos = int(_field(reader, "tokenizer.ggml.bos_token_id", 0, path=path))
    eos = int(_field(reader, "tokenizer.ggml.eos_token_id", 0, path=path))
    tmpl = reader.fields.get("tokenizer.chat_template")
    return GGUFModel(path=path, config=config, tensors=tensors, tokenizer=tokenizer, tokens=tokens,
                     bos_id=bos, eos_id=eos, chat_template=tmpl.contents() if tmpl else None)
