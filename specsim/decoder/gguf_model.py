"""Load a Llama-architecture GGUF file: its hyper-parameters, its (still quantized) tensors and its
tokenizer, built from the GGUF metadata with the `tokenizers` package.

Weights stay in the GGUF block layout (bytes per row, as llama.cpp keeps them); the kernels
dequantize on the fly. Supported tensor types: F32, F16, Q8_0, Q4_0, Q4_1.

Nothing the numba kernels index is trusted as read: `load_gguf` checks the metadata against itself
(head_count divides embedding_length, head_count_kv divides head_count, the head dimension is even,
block_count equals the blocks present, the vocabulary and token ids agree) and every tensor against
the shape the metadata implies, and refuses a file that disagrees with an InputError naming the file,
the key or tensor, the value and what was expected — before any kernel runs. `check_tensors` repeats
the tensor checks for a GGUFModel built by hand; the Transformer calls it too.
"""
from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..errors import InputError, SpecError

SUPPORTED_ARCHITECTURES = ("llama",)
# GGML type id -> (name, elements per block, bytes per block)
TENSOR_TYPES = {0: ("F32", 1, 4), 1: ("F16", 1, 2), 2: ("Q4_0", 32, 18), 3: ("Q4_1", 32, 20), 8: ("Q8_0", 32, 34)}
SUPPORTED_TYPE_NAMES = ", ".join(name for name, _, _ in TENSOR_TYPES.values())
_BLOCK = {name: (block, nbytes) for name, block, nbytes in TENSOR_TYPES.values()}
_RAW_DTYPE = {"F32": np.float32, "F16": np.uint16}  # block types: uint8

# The tensors this decoder reads; any other tensor (rope_freqs, biases, ...) belongs to a variant it
# does not implement and is refused rather than ignored.
BLOCK_TENSORS = ("attn_norm", "ffn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up",
                 "ffn_down")
TOP_TENSORS = ("token_embd.weight", "output_norm.weight", "output.weight")
_BLOCK_NAME = re.compile(r"blk\.(\d+)\.(\w+)\.weight")


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

    def __post_init__(self):
        for name in ("n_vocab", "n_ctx", "d_model", "n_layer", "n_ff", "n_head", "n_kv_head"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
                raise SpecError(f"LlamaConfig: {name} = {v!r}: expected an integer >= 1")
        if self.d_model % self.n_head:
            raise SpecError(f"LlamaConfig: n_head = {self.n_head} does not divide d_model = {self.d_model}")
        if self.n_head % self.n_kv_head:
            raise SpecError(f"LlamaConfig: n_kv_head = {self.n_kv_head} does not divide n_head = {self.n_head}")
        if self.head_dim % 2:
            raise SpecError(f"LlamaConfig: head dimension d_model / n_head = {self.head_dim}: expected an even "
                            "number (rope rotates pairs)")
        if not (math.isfinite(self.rope_base) and self.rope_base > 0):
            raise SpecError(f"LlamaConfig: rope_base = {self.rope_base!r}: expected a finite number > 0")
        if not (math.isfinite(self.rms_eps) and self.rms_eps >= 0):
            raise SpecError(f"LlamaConfig: rms_eps = {self.rms_eps!r}: expected a finite number >= 0")

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_head

    def expected_shapes(self) -> dict[str, tuple[tuple[int, int], str]]:
        """Tensor name -> ((rows, columns), how the metadata implies them). Norms are one row."""
        d, f, v, e = self.d_model, self.n_ff, self.n_vocab, self.head_dim
        nq, nk = self.n_head * e, self.n_kv_head * e
        D = f"embedding_length {d}"
        Q = f"head_count {self.n_head} x head dim {e} = {nq}"
        K = f"head_count_kv {self.n_kv_head} x head dim {e} = {nk}"
        F = f"feed_forward_length {f}"
        V = f"vocabulary {v}"
        out = {"token_embd.weight": ((v, d), f"({V}, {D})"), "output.weight": ((v, d), f"({V}, {D})"),
               "output_norm.weight": ((1, d), f"({D},)")}
        per_block = {"attn_norm": ((1, d), f"({D},)"), "ffn_norm": ((1, d), f"({D},)"),
                     "attn_q": ((nq, d), f"({Q}, {D})"), "attn_k": ((nk, d), f"({K}, {D})"),
                     "attn_v": ((nk, d), f"({K}, {D})"), "attn_output": ((d, nq), f"({D}, {Q})"),
                     "ffn_gate": ((f, d), f"({F}, {D})"), "ffn_up": ((f, d), f"({F}, {D})"),
                     "ffn_down": ((d, f), f"({D}, {F})")}
        for i in range(self.n_layer):
            for n, s in per_block.items():
                out[f"blk.{i}.{n}.weight"] = s
        return out


@dataclass(frozen=True, slots=True, kw_only=True)
class QTensor:
    """One weight matrix as stored in the file. raw: uint8 (N, RB) for block types, float32 (N, K)
    for F32, uint16 (N, K) for F16 (the bit pattern; converted through a lookup table)."""

    name: str
    type_name: str
    n_rows: int
    n_cols: int
    raw: np.ndarray

    def __post_init__(self):
        if self.type_name not in _BLOCK:
            raise SpecError(f"tensor {self.name!r}: type {self.type_name!r}: expected one of {SUPPORTED_TYPE_NAMES}")
        block, nbytes = _BLOCK[self.type_name]
        if self.n_rows < 1 or self.n_cols < 1 or self.n_cols % block:
            raise SpecError(f"tensor {self.name!r}: {self.n_rows} x {self.n_cols} {self.type_name}: expected at "
                            f"least one row and column" + (f", columns a multiple of {block}" if block > 1 else ""))
        shape = (self.n_rows, self.n_cols // block * nbytes if block > 1 else self.n_cols)
        dtype = _RAW_DTYPE.get(self.type_name, np.uint8)
        if self.raw.shape != shape or self.raw.dtype != dtype or not self.raw.flags.c_contiguous:
            raise SpecError(f"tensor {self.name!r}: raw data {self.raw.dtype} {self.raw.shape}: expected a "
                            f"C-contiguous {np.dtype(dtype)} array of shape {shape} for {self.type_name}")

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
            raise InputError(f"{self.path}: tensor {name!r} is missing; a llama GGUF must have it") from None


def check_tensors(path, config: LlamaConfig, tensors: dict) -> None:
    """Every tensor the decoder reads is present with the shape `config` implies, blocks 0 ..
    block_count - 1 are all there and no other block or unknown tensor is; raise InputError naming
    the tensor, its shape and the expected one otherwise. `output.weight` may be absent (tied)."""
    blocks = sorted({int(m.group(1)) for n in tensors if (m := _BLOCK_NAME.fullmatch(n))})
    extra = [b for b in blocks if b >= config.n_layer]
    if extra or len(blocks) != config.n_layer:
        # the gaps among the blocks present, then the run past the last one: a block_count of 2^31 must not
        # build a set of 2^31 numbers to say so
        top = min(config.n_layer, blocks[-1] + 1 if blocks else 0)
        gaps = sorted(set(range(top)) - set(blocks))
        missing = _ranges(gaps) if gaps else ""
        if config.n_layer > top:
            tail = f"block {top}" if config.n_layer == top + 1 else f"blocks {top}..{config.n_layer - 1}"
            missing = f"{missing} and {tail}" if missing else tail
        detail = "; ".join(([f"{missing} missing"] if missing else [])
                           + ([f"{_ranges(extra)} present beyond it"] if extra else []))
        raise InputError(f"{path}: llama.block_count = {config.n_layer} but the file has {len(blocks)} blocks "
                         f"({detail}): expected block_count to equal the blocks present, numbered 0 .. block_count - 1")
    expected = config.expected_shapes()  # after the block check: block_count is now the blocks present
    for name in tensors:
        if name not in expected:
            m = _BLOCK_NAME.fullmatch(name)
            known = ", ".join(BLOCK_TENSORS) if m else ", ".join(TOP_TENSORS) + " and blk.N.*"
            raise InputError(f"{path}: tensor {name!r} is not one this decoder reads (known: {known}); "
                             "a variant with it (rope scaling factors, biases, ...) is not supported")
    for name, ((rows, cols), how) in expected.items():
        t = tensors.get(name)
        if t is None:
            if name == "output.weight":
                continue  # tied to token_embd
            raise InputError(f"{path}: tensor {name!r} is missing; expected shape {_shape(rows, cols)} = {how}")
        if (t.n_rows, t.n_cols) != (rows, cols):
            raise InputError(f"{path}: tensor {name!r} has shape {_shape(t.n_rows, t.n_cols)}: expected "
                             f"{_shape(rows, cols)} = {how} from the llama.* metadata")


def _shape(rows: int, cols: int) -> str:
    return f"({cols},)" if rows == 1 else f"({rows}, {cols})"


def _ranges(xs: list[int]) -> str:
    """'block 3', 'blocks 25..29', 'blocks 1, 4, 9'."""
    xs = sorted(xs)
    if len(xs) == 1:
        return f"block {xs[0]}"
    if xs == list(range(xs[0], xs[-1] + 1)):
        return f"blocks {xs[0]}..{xs[-1]}"
    return "blocks " + ", ".join(map(str, xs[:8])) + (", ..." if len(xs) > 8 else "")


_REQUIRED = object()


def _field(reader, key: str, default=_REQUIRED, *, path):
    f = reader.fields.get(key)
    if f is None:
        if default is _REQUIRED:
            raise InputError(f"{path}: GGUF metadata key {key!r} is missing")
        return default
    try:
        return f.contents()
    except Exception as exc:  # a value the reader cannot decode
        raise InputError(f"{path}: GGUF metadata key {key!r} cannot be read ({type(exc).__name__}: {exc})") from None


def _int_field(reader, key: str, default=_REQUIRED, *, path, minimum: int = 1) -> int:
    v = _field(reader, key, default, path=path)
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
        raise InputError(f"{path}: {key} = {_short(v)}: expected one integer")
    if v < minimum:
        raise InputError(f"{path}: {key} = {v}: expected an integer >= {minimum}")
    return int(v)


def _float_field(reader, key: str, default, *, path, minimum: float, strict: bool) -> float:
    v = _field(reader, key, default, path=path)
    if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)):
        raise InputError(f"{path}: {key} = {_short(v)}: expected one number")
    v = float(v)
    if not math.isfinite(v) or v < minimum or (strict and v == minimum):
        raise InputError(f"{path}: {key} = {v!r}: expected a finite number {'>' if strict else '>='} {minimum:g}")
    return v


def _short(v) -> str:
    s = repr(v)
    return s if len(s) <= 60 else s[:57] + "..."


def _build_tokenizer(reader, path, n_vocab: int):
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    kind = _field(reader, "tokenizer.ggml.model", path=path)
    if kind != "gpt2":
        raise InputError(
            f"{path}: tokenizer.ggml.model = {_short(kind)}: only byte-level BPE ('gpt2', as in SmolLM2, "
            "Llama 3, Qwen) is supported")
    tokens = _field(reader, "tokenizer.ggml.tokens", path=path)
    if not isinstance(tokens, list) or not all(isinstance(t, str) for t in tokens):
        raise InputError(f"{path}: tokenizer.ggml.tokens: expected a list of strings")
    if len(tokens) != n_vocab:
        raise InputError(f"{path}: tokenizer.ggml.tokens has {len(tokens)} entries: expected {n_vocab}, the rows "
                         "of token_embd.weight (one string per token id)")
    merges = _field(reader, "tokenizer.ggml.merges", path=path)
    if not isinstance(merges, list):
        raise InputError(f"{path}: tokenizer.ggml.merges: expected a list of strings 'left right'")
    pairs = []
    for i, m in enumerate(merges):
        parts = m.split(" ") if isinstance(m, str) else []
        if len(parts) != 2 or not all(parts):
            raise InputError(f"{path}: tokenizer.ggml.merges[{i}] = {_short(m)}: expected 'left right' (two "
                             "tokens separated by one space)")
        pairs.append((parts[0], parts[1]))
    types = _field(reader, "tokenizer.ggml.token_type", [1] * len(tokens), path=path)
    if not isinstance(types, list) or len(types) != len(tokens):
        raise InputError(f"{path}: tokenizer.ggml.token_type: expected a list of {len(tokens)} integers, "
                         f"one per token")
    vocab = {t: i for i, t in enumerate(tokens)}
    try:
        tok = Tokenizer(models.BPE(vocab=vocab, merges=pairs, fuse_unk=False))
    except Exception as exc:
        raise InputError(f"{path}: tokenizer.ggml.tokens/merges do not make a BPE tokenizer "
                         f"({type(exc).__name__}: {exc})") from None
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


# GGUF metadata value types: id -> bytes of one scalar (8: a string, 9: an array; sized as they are read)
_KV_SCALAR_BYTES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
_KV_STRING, _KV_ARRAY = 8, 9
# a tensor's info is at least its name's length (8), its dimension count (4), one dimension (8), its type
# (4) and its data offset (8)
_MIN_TENSOR_INFO_BYTES = 32


def _check_header(path: Path) -> None:
    """Walk the header's metadata with every count checked against the bytes left in the file, before
    the gguf package reads it: that reader believes the counts, and a damaged one (an array of 2^40
    strings in a file of 200 kB) makes it build lists until memory runs out rather than fail."""
    import mmap
    import struct

    size = path.stat().st_size

    def refuse(what: str, value, at: int):
        raise InputError(f"{path}: not a readable GGUF file: {what} = {value} at byte {at} does not fit in the "
                         f"{size} bytes of the file — truncated or corrupt?")
    if size < 24:
        refuse("file size", size, 0)
    with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as m:
        if m[:4] != b"GGUF":
            raise InputError(f"{path}: not a GGUF file (its first bytes are {bytes(m[:4])!r}, expected b'GGUF')")
        (version,) = struct.unpack_from("<I", m, 4)
        if version not in (2, 3):
            raise InputError(f"{path}: GGUF version {version}: expected 2 or 3 (the versions the gguf reader reads)")
        n_tensors, n_kv = struct.unpack_from("<QQ", m, 8)
        at = 24
        if n_kv > (size - at) // 13:  # a key's length (8), a one-byte key, its type (4)
            refuse("metadata count", n_kv, 16)
        if n_tensors > (size - at) // _MIN_TENSOR_INFO_BYTES:
            refuse("tensor count", n_tensors, 8)

        def need(n: int, what: str) -> None:
            if n < 0 or at + n > size:
                refuse(what, n, at)

        def string(what: str) -> None:
            nonlocal at
            need(8, what)
            (n,) = struct.unpack_from("<Q", m, at)
            at += 8
            need(n, f"{what} length")
            at += n

        def value(type_id: int, what: str) -> None:
            nonlocal at
            if type_id in _KV_SCALAR_BYTES:
                need(_KV_SCALAR_BYTES[type_id], what)
                at += _KV_SCALAR_BYTES[type_id]
            elif type_id == _KV_STRING:
                string(what)
            elif type_id == _KV_ARRAY:
                need(12, what)
                item, count = struct.unpack_from("<IQ", m, at)
                at += 12
                least = _KV_SCALAR_BYTES.get(item, 8)  # a string or a nested array takes at least 8 bytes
                if item not in _KV_SCALAR_BYTES and item not in (_KV_STRING, _KV_ARRAY):
                    refuse(f"{what} item type", item, at - 12)
                if count > (size - at) // least:
                    refuse(f"{what} element count", count, at - 8)
                if item in _KV_SCALAR_BYTES:
                    at += count * least
                else:
                    for _ in range(count):
                        value(item, what)
            else:
                refuse(f"{what} type", type_id, at - 4)

        for i in range(n_kv):
            string(f"metadata entry {i} key")
            need(4, f"metadata entry {i} type")
            (type_id,) = struct.unpack_from("<I", m, at)
            at += 4
            value(type_id, f"metadata entry {i}")


def _open(path: Path):
    from gguf import GGUFReader

    if path.is_dir():
        raise InputError(f"{path}: is a folder; expected a GGUF file")
    if not path.is_file():
        raise InputError(f"{path}: no such GGUF file (run `specsim decoder fetch` for SmolLM2-135M)")
    if not os.access(path, os.R_OK):
        raise InputError(f"{path}: no permission to read it")
    _check_header(path)
    try:
        return GGUFReader(os.fspath(path), "r")
    except Exception as exc:  # the reader fails in various ways on a cut or foreign file
        raise InputError(f"{path}: not a readable GGUF file ({type(exc).__name__}: {exc}); "
                         f"the file is {path.stat().st_size} bytes — truncated or corrupt?") from None


def _read_tensors(reader, path: Path) -> dict:
    """name -> QTensor, each checked for a supported type, at most two dimensions, whole blocks per
    row and bytes inside the file's data section, no two overlapping."""
    size = path.stat().st_size
    tensors, spans = {}, []
    for t in reader.tensors:
        type_id = int(t.tensor_type)
        if type_id not in TENSOR_TYPES:
            raise InputError(f"{path}: tensor {t.name!r} has type {t.tensor_type.name} (id {type_id}); "
                             f"supported tensor types: {SUPPORTED_TYPE_NAMES}")
        name, block, block_bytes = TENSOR_TYPES[type_id]
        shape = [int(s) for s in t.shape]
        if not 1 <= len(shape) <= 2 or min(shape) < 1:
            raise InputError(f"{path}: tensor {t.name!r} has GGUF shape {shape}: expected 1 or 2 dimensions, "
                             "each at least 1")
        n_cols, n_rows = shape[0], shape[1] if len(shape) == 2 else 1
        if n_cols % block:
            raise InputError(f"{path}: tensor {t.name!r} is {name} with rows of {n_cols} elements: expected a "
                             f"multiple of the block size {block}")
        n_bytes = n_rows * n_cols // block * block_bytes
        start, end = int(t.data_offset), int(t.data_offset) + n_bytes
        if int(t.n_bytes) != n_bytes or start < int(reader.data_offset):
            raise InputError(f"{path}: tensor {t.name!r}: data at byte {start} of {int(t.n_bytes)} bytes: expected "
                             f"{n_bytes} bytes inside the data section (from byte {int(reader.data_offset)})")
        if end > size:
            raise InputError(f"{path}: truncated file: tensor {t.name!r} needs bytes up to {end}, "
                             f"the file has {size}")
        spans.append((start, end, t.name))
        data = np.asarray(t.data)
        try:
            if name == "F32":
                raw = data.reshape(n_rows, n_cols).astype(np.float32, copy=False)
            elif name == "F16":
                raw = data.reshape(n_rows, n_cols).view(np.uint16)
            else:
                raw = data.reshape(n_rows, n_cols // block * block_bytes)
        except ValueError as exc:
            raise InputError(f"{path}: tensor {t.name!r}: {data.size} values do not fill {n_rows} rows of "
                             f"{n_cols} {name} elements ({exc})") from None
        tensors[t.name] = QTensor(name=t.name, type_name=name, n_rows=n_rows, n_cols=n_cols,
                                  raw=np.ascontiguousarray(raw))
    spans.sort()
    for (s0, e0, a), (s1, _, b) in zip(spans, spans[1:]):
        if s1 < e0:
            raise InputError(f"{path}: tensors {a!r} (bytes {s0}..{e0}) and {b!r} (from byte {s1}) overlap: "
                             "expected each tensor's data in its own bytes")
    return tensors


def load_gguf(path) -> GGUFModel:
    """Read a GGUF file and check it (see the module docstring). Raises InputError for a missing,
    unreadable, truncated or malformed file, another architecture, an unsupported tensor type or
    tokenizer, or metadata that disagrees with itself or with the tensor shapes."""
    path = Path(path)
    reader = _open(path)
    arch = _field(reader, "general.architecture", path=path)
    if arch not in SUPPORTED_ARCHITECTURES:
        raise InputError(f"{path}: general.architecture = {_short(arch)}; supported: "
                         f"{', '.join(SUPPORTED_ARCHITECTURES)}")
    tensors = _read_tensors(reader, path)
    emb = tensors.get("token_embd.weight")
    if emb is None:
        raise InputError(f"{path}: tensor 'token_embd.weight' is missing; a llama GGUF must have it")
    key = lambda k: f"llama.{k}"  # noqa: E731
    i = lambda k, d=_REQUIRED: _int_field(reader, key(k), d, path=path)  # noqa: E731
    d_model, n_head = i("embedding_length"), i("attention.head_count")
    n_kv_head, n_layer = i("attention.head_count_kv", n_head), i("block_count")
    if d_model % n_head:
        raise InputError(f"{path}: llama.attention.head_count = {n_head}: expected a divisor of "
                         f"llama.embedding_length = {d_model} (the head dimension is embedding_length / head_count)")
    if n_head % n_kv_head:
        raise InputError(f"{path}: llama.attention.head_count_kv = {n_kv_head}: expected a divisor of "
                         f"llama.attention.head_count = {n_head} (query heads share each key/value head)")
    head_dim = d_model // n_head
    if head_dim % 2:
        raise InputError(f"{path}: head dimension llama.embedding_length / llama.attention.head_count = "
                         f"{d_model} / {n_head} = {head_dim}: expected an even number (rope rotates pairs)")
    rope_dims = i("rope.dimension_count", head_dim)
    if rope_dims != head_dim:
        raise InputError(f"{path}: llama.rope.dimension_count = {rope_dims}: expected the head dimension "
                         f"{head_dim} (embedding_length {d_model} / head_count {n_head}); partial rope is not "
                         "supported")
    scaling = _field(reader, key("rope.scaling.type"), "none", path=path)
    if scaling != "none":
        raise InputError(f"{path}: llama.rope.scaling.type = {_short(scaling)}: expected 'none' (rope scaling is "
                         "not supported)")
    n_vocab = i("vocab_size", emb.n_rows)
    if n_vocab != emb.n_rows:
        raise InputError(f"{path}: llama.vocab_size = {n_vocab}: expected {emb.n_rows}, the rows of "
                         "token_embd.weight")
    config = LlamaConfig(
        n_vocab=n_vocab, n_ctx=i("context_length"), d_model=d_model, n_layer=n_layer,
        n_ff=i("feed_forward_length"), n_head=n_head, n_kv_head=n_kv_head,
        rope_base=_float_field(reader, key("rope.freq_base"), 10000.0, path=path, minimum=0.0, strict=True),
        rms_eps=_float_field(reader, key("attention.layer_norm_rms_epsilon"), 1e-5, path=path, minimum=0.0,
                             strict=False),
    )
    check_tensors(path, config, tensors)
    tokenizer, tokens = _build_tokenizer(reader, path, n_vocab)
    ids = {}
    for which in ("bos", "eos"):
        k = f"tokenizer.ggml.{which}_token_id"
        v = _int_field(reader, k, 0, path=path, minimum=0)
        if v >= n_vocab:
            raise InputError(f"{path}: {k} = {v}: expected a token id below the vocabulary size {n_vocab}")
        ids[which] = v
    tmpl = _field(reader, "tokenizer.chat_template", None, path=path)
    if tmpl is not None and not isinstance(tmpl, str):
        raise InputError(f"{path}: tokenizer.chat_template: expected a string")
    return GGUFModel(path=path, config=config, tensors=tensors, tokenizer=tokenizer, tokens=tokens,
                     bos_id=ids["bos"], eos_id=ids["eos"], chat_template=tmpl)
