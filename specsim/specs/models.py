"""Model shapes: what a forward pass streams and computes, and how many parameters that is.

Parameter counts are derived from the shape, never typed in; `published_params_b` in a file is the
count the model's authors publish, kept only so tests can check the derivation against it.

How the non-standard architectures are modelled:
- Multi-head latent attention (DeepSeek-V2/V3, `[mla]`): the cache holds one compressed latent of
  `kv_lora_rank` plus a shared rotary key of `qk_rope_head_dim` per token per layer (no head
  dimension), and attention runs in the absorbed form, so each query head scores against the
  latent directly: 2·(kv_lora_rank + qk_rope_head_dim) FLOP per head per key for the scores and
  2·kv_lora_rank for the values. The latent is not split across tensor-parallel ranks.
- Mixture of experts (`[moe]`): `n_dense_layers` leading layers use the dense FFN; the rest hold
  `n_experts` routed experts (each a gated FFN of `expert_ffn_size`), `n_shared_experts` always-on
  experts of the same size, and a router of hidden_size × n_experts.
- Multi-token prediction (`n_mtp_layers`, DeepSeek-V3): each MTP module is one more transformer
  block of the same kind as the last layer plus a 2·hidden → hidden projection and two norms; it
  shares the embedding and the LM head. Its parameters are counted apart (`mtp_params`, 11.6B for
  DeepSeek-V3), as the authors do; their '671B main model + 14B MTP' counts the checkpoint, whose
  MTP module also stores its own copy of the embedding and of the head (`mtp_checkpoint_params`).
- Position encodings that carry weights (`position_encoding`): "rope" has none. "t5-relative"
  (Raffel et al. 2020) adds one table of `relative_attention_num_buckets` × n_heads learned scalar
  biases in the first self-attention layer of the encoder and of the decoder, shared by the layers
  below it (`position_params`). "xl-relative" (Dai et al. 2019, used by Gopher and Chinchilla) adds
  per layer a projection W_R of the sinusoidal relative positions to keys, hidden × n_heads·head_dim,
  plus the two global biases u and v (n_heads·head_dim each); they are counted in
  `attn_params_per_layer` because every step streams them.
- Query/key norms (`qk_norm`, Qwen3): one RMSNorm of head_dim on queries and one on keys per layer.
- Encoder-decoder (T5, `n_encoder_layers` > 0): the encoder runs once over the prompt; each decode
  step runs the decoder stack, whose layers hold self-attention, cross-attention and the FFN. The
  step streams every decoder weight and reads two caches per layer: self-attention keys/values of
  the tokens so far and cross-attention keys/values of the encoded prompt (both taken to be
  `context_len` long, an upper bound for the self-attention part). Encoder layers hold self-attention,
  the FFN and two norms; each stack ends in its own final norm. T5's LayerNorm has a scale and no
  bias, and its attention and FFN matrices have no biases.

Norms are RMSNorm (a scale vector, no bias) in every family catalogued here; biases appear only as
`attention_bias` (Qwen2/2.5's q, k and v projections).
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Mapping

from .catalog import catalog_dir, catalog_ids, read_toml, resolve
from ..errors import InputError, SpecError, field_error, reject_unknown_keys, unknown_id_error

# Bits per weight and the dtype the matrix math runs in, per named weight format. Quantised
# formats' bits include their block scales: AWQ/GPTQ int4 with group size 128 and fp16 scale+zero
# is 4 + 32/128 = 4.25; GGUF Q4_0 is 18 bytes per 32 weights = 4.5; Q4_1 20/32 = 5.0; Q8_0 34/32 =
# 8.5; Q4_K_M averages about 4.85 bits over a Llama-7B file (4.08 GB for 6.74e9 weights).
WEIGHT_FORMATS: Mapping[str, tuple[float, str]] = MappingProxyType({
    "fp32": (32.0, "fp32"),
    "bf16": (16.0, "bf16"),
    "fp16": (16.0, "fp16"),
    "fp8": (8.0, "fp8"),
    "fp8-block": (8.0 + 32.0 / (128 * 128), "fp8"),  # DeepSeek-style: one fp32 scale per 128x128 block
    "int8": (8.0, "int8"),
    "int8-wo": (8.0, "bf16"),  # W8A16 weight-only, per-channel scales: dequantised to bf16 on the fly
    "fp4": (4.0, "fp4"),
    "nvfp4": (4.5, "fp4"),
    "int4": (4.0, "bf16"),
    "int4-awq": (4.25, "fp16"),
    "int4-gptq": (4.25, "fp16"),
    "gguf-q8_0": (8.5, "int8"),
    "gguf-q4_0": (4.5, "int8"),
    "gguf-q4_1": (5.0, "int8"),
    "gguf-q4_k_m": (4.85, "int8"),
    "gguf-q5_k_m": (5.69, "int8"),
})
KV_DTYPES: Mapping[str, float] = MappingProxyType({"fp32": 32.0, "bf16": 16.0, "fp16": 16.0, "fp8": 8.0, "int8": 8.0, "int4": 4.0})
FFN_KINDS = ("gated", "mlp")
POSITION_ENCODINGS = ("rope", "t5-relative", "xl-relative")
ARCHITECTURES = ("decoder", "encoder-decoder")
ACTIVATION_BYTES = 2.0  # activations travel in 16-bit on every stack we model
MAX_COUNT = 2**31 - 1  # the largest layer, width, head, vocabulary or context count a model file may give


@dataclass(frozen=True, slots=True, kw_only=True)
class MoESpec:
    n_experts: int
    n_experts_per_token: int
    n_shared_experts: int = 0
    expert_ffn_size: int
    n_dense_layers: int = 0

    def experts_touched(self, n_tokens):
        """Distinct routed experts a layer reads for n_tokens tokens (scalar or array), in expectation, each
        token picking its top-k independently and uniformly: E·(1 − (1 − k/E)^T). Every cost source reads a
        MoE layer at this count (roofline, kernel curves, measured tables), so two sources of one pass differ in
        kernel times, not in routing."""
        e = self.n_experts
        return e * (1.0 - (1.0 - self.n_experts_per_token / e) ** n_tokens)


@dataclass(frozen=True, slots=True, kw_only=True)
class MLASpec:
    q_lora_rank: int  # 0 means queries are projected directly from the hidden state
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelSpec:
    id: str
    name: str
    n_layers: int
    hidden_size: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    ffn_size: int
    vocab_size: int
    tokenizer: str
    ffn_kind: str = "gated"
    tied_embeddings: bool = False
    attention_bias: bool = False
    qk_norm: bool = False
    position_encoding: str = "rope"
    relative_attention_num_buckets: int = 32
    architecture: str = "decoder"
    n_encoder_layers: int = 0
    max_context: int = 0
    sliding_window: int = 0
    weight_format: str = "bf16"
    weight_bits: float = 16.0
    lm_head_weight_format: str = ""  # the LM head's (tied: the embedding's) own format; "" = weight_format
    compute_dtype: str = "bf16"
    kv_cache_dtype: str = "bf16"
    moe: MoESpec | None = None
    mla: MLASpec | None = None
    n_mtp_layers: int = 0
    aliases: tuple[str, ...] = ()
    published_params_b: float = 0.0
    sources: Mapping[str, str] = field(default_factory=dict)
    notes: str = ""

    def __post_init__(self) -> None:
        where = f"model {self.id!r}"
        # every framework stores these counts as 32-bit integers; past that a shape is a typo, and the
        # byte and FLOP counts built from it would leave what a double holds exactly
        for name in ("n_layers", "hidden_size", "n_heads", "n_kv_heads", "head_dim", "ffn_size", "vocab_size"):
            v = getattr(self, name)
            if not (isinstance(v, int) and not isinstance(v, bool) and 0 < v <= MAX_COUNT):
                raise field_error(where, name, v, f"a positive integer up to {MAX_COUNT}")
        for name in ("n_encoder_layers", "max_context", "sliding_window", "n_mtp_layers",
                     "relative_attention_num_buckets"):
            v = getattr(self, name)
            if not (isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= MAX_COUNT):
                raise field_error(where, name, v, f"an integer in 0..{MAX_COUNT}")
        for name in ("tied_embeddings", "attention_bias", "qk_norm"):
            if not isinstance(getattr(self, name), bool):
                raise field_error(where, name, getattr(self, name), "true or false")
        for name in ("id", "name", "tokenizer"):
            if not (isinstance(getattr(self, name), str) and getattr(self, name)):
                raise field_error(where, name, getattr(self, name), "a non-empty string")
        if self.n_heads % self.n_kv_heads:
            raise field_error(where, "n_kv_heads", self.n_kv_heads, f"a divisor of n_heads = {self.n_heads}")
        if self.ffn_kind not in FFN_KINDS:
            raise field_error(where, "ffn_kind", self.ffn_kind, f"one of {FFN_KINDS}")
        if self.position_encoding not in POSITION_ENCODINGS:
            raise field_error(where, "position_encoding", self.position_encoding, f"one of {POSITION_ENCODINGS}")
        if self.architecture not in ARCHITECTURES:
            raise field_error(where, "architecture", self.architecture, f"one of {ARCHITECTURES}")
        if (self.architecture == "encoder-decoder") != (self.n_encoder_layers > 0):
            raise field_error(where, "n_encoder_layers", self.n_encoder_layers,
                              "> 0 exactly when architecture = 'encoder-decoder'")
        if not (isinstance(self.weight_bits, (int, float)) and 1.0 <= self.weight_bits <= 32.0):
            raise field_error(where, "weight_bits", self.weight_bits, "bits per weight in [1, 32]")
        if self.lm_head_weight_format and self.lm_head_weight_format not in WEIGHT_FORMATS:
            raise field_error(where, "lm_head_weight_format", self.lm_head_weight_format,
                              f"one of {', '.join(WEIGHT_FORMATS)} (or absent: the weight format)")
        if self.kv_cache_dtype not in KV_DTYPES:
            raise field_error(where, "kv_cache_dtype", self.kv_cache_dtype, f"one of {sorted(KV_DTYPES)}")
        if self.moe is not None:
            m = self.moe
            for name in ("n_experts", "expert_ffn_size"):
                if getattr(m, name) <= 0:
                    raise field_error(where, f"moe.{name}", getattr(m, name), "a positive integer")
            if not (0 < m.n_experts_per_token <= m.n_experts):
                raise field_error(where, "moe.n_experts_per_token", m.n_experts_per_token,
                                  f"between 1 and n_experts = {m.n_experts}")
            if not (0 <= m.n_dense_layers <= self.n_layers):
                raise field_error(where, "moe.n_dense_layers", m.n_dense_layers, f"between 0 and n_layers = {self.n_layers}")
        if self.mla is not None:
            for name in ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"):
                if getattr(self.mla, name) <= 0:
                    raise field_error(where, f"mla.{name}", getattr(self.mla, name), "a positive integer")
        object.__setattr__(self, "sources", MappingProxyType(dict(self.sources)))

    # ---- parameter counts (derived) -------------------------------------------------------------
    @property
    def weight_bytes_per_param(self) -> float:
        return self.weight_bits / 8.0

    @property
    def lm_head_bytes_per_param(self) -> float:
        """Bytes per weight of the LM head (and of a tied embedding): GGUF files often keep it in a
        wider format than the layers (Q8_0 or Q6_K beside Q4 layers)."""
        if not self.lm_head_weight_format:
            return self.weight_bytes_per_param
        return WEIGHT_FORMATS[self.lm_head_weight_format][0] / 8.0

    @property
    def kv_bytes_per_elem(self) -> float:
        return KV_DTYPES[self.kv_cache_dtype] / 8.0

    @property
    def attn_params_per_layer(self) -> int:
        d, h = self.hidden_size, self.n_heads
        if self.mla is not None:
            a = self.mla
            qk = a.qk_nope_head_dim + a.qk_rope_head_dim
            if a.q_lora_rank:
                q = d * a.q_lora_rank + a.q_lora_rank + a.q_lora_rank * h * qk  # down, norm, up
            else:
                q = d * h * qk
            kv = d * (a.kv_lora_rank + a.qk_rope_head_dim) + a.kv_lora_rank \
                + a.kv_lora_rank * h * (a.qk_nope_head_dim + a.v_head_dim)
            return q + kv + h * a.v_head_dim * d
        q_dim, kv_dim = h * self.head_dim, self.n_kv_heads * self.head_dim
        bias = (q_dim + 2 * kv_dim) if self.attention_bias else 0
        # Transformer-XL relative positions: W_R (hidden -> keys) plus the u and v biases.
        rel = (d * kv_dim + 2 * q_dim) if self.position_encoding == "xl-relative" else 0
        return d * q_dim + 2 * d * kv_dim + q_dim * d + bias + rel

    @property
    def _matrices_per_ffn(self) -> int:
        return 3 if self.ffn_kind == "gated" else 2

    @property
    def dense_ffn_params(self) -> int:
        return self._matrices_per_ffn * self.hidden_size * self.ffn_size

    @property
    def expert_params(self) -> int:
        """One routed (or shared) expert."""
        if self.moe is None:
            return 0
        return self._matrices_per_ffn * self.hidden_size * self.moe.expert_ffn_size

    @property
    def n_moe_layers(self) -> int:
        return 0 if self.moe is None else self.n_layers - self.moe.n_dense_layers

    @property
    def n_dense_layers(self) -> int:
        return self.n_layers - self.n_moe_layers

    @property
    def router_params(self) -> int:
        return 0 if self.moe is None else self.hidden_size * self.moe.n_experts

    @property
    def shared_expert_params(self) -> int:
        return 0 if self.moe is None else self.moe.n_shared_experts * self.expert_params

    @property
    def norm_params_per_layer(self) -> int:
        """Decoder layer norms: before attention, (before cross-attention,) before the FFN; plus the
        query/key norms where the model has them. The MLA latent norms live in attn_params_per_layer."""
        n_norms = 3 if self.architecture == "encoder-decoder" else 2
        qk = 2 * self.head_dim if self.qk_norm else 0
        return n_norms * self.hidden_size + qk

    @property
    def position_params(self) -> int:
        """Position weights outside the layers: T5's relative-attention bias tables, one in the
        first encoder layer and one in the first decoder layer (cross-attention has none)."""
        if self.position_encoding != "t5-relative":
            return 0
        n_stacks = 2 if self.architecture == "encoder-decoder" else 1
        return n_stacks * self.relative_attention_num_buckets * self.n_heads

    @property
    def cross_attn_params_per_layer(self) -> int:
        return self.attn_params_per_layer if self.architecture == "encoder-decoder" else 0

    @property
    def embedding_params(self) -> int:
        return self.vocab_size * self.hidden_size

    @property
    def lm_head_params(self) -> int:
        """The output projection's size; it streams every step even when tied to the embedding."""
        return self.vocab_size * self.hidden_size

    @property
    def decoder_layer_params(self) -> int:
        """All decoder layers (attention, cross-attention, FFN or experts, router, norms)."""
        dense = self.n_dense_layers * self.dense_ffn_params
        moe = self.n_moe_layers * (self.router_params + self.shared_expert_params
                                   + (self.moe.n_experts * self.expert_params if self.moe else 0))
        per_layer = self.attn_params_per_layer + self.cross_attn_params_per_layer + self.norm_params_per_layer
        return self.n_layers * per_layer + dense + moe

    @property
    def encoder_params(self) -> int:
        """Encoder layers (self-attention, FFN, two norms each) and the encoder's final norm."""
        per = self.attn_params_per_layer + self.dense_ffn_params + 2 * self.hidden_size
        return self.n_encoder_layers * per + (self.hidden_size if self.n_encoder_layers else 0)

    @property
    def mtp_params(self) -> int:
        """Weights the MTP modules add to the running model. Each module (DeepSeek-V3 §2.2) is one
        transformer block like the last layer (MoE when the model is), the projection M of the
        concatenated [norm(h); norm(emb)] (2·hidden → hidden), those two norms and the final norm
        of its output head; the embedding and the output head are shared with the main model."""
        if not self.n_mtp_layers:
            return 0
        ffn = (self.router_params + self.shared_expert_params + self.moe.n_experts * self.expert_params
               if self.moe else self.dense_ffn_params)
        block = self.attn_params_per_layer + ffn + self.norm_params_per_layer
        return self.n_mtp_layers * (block + 2 * self.hidden_size * self.hidden_size + 3 * self.hidden_size)

    @property
    def mtp_checkpoint_params(self) -> int:
        """MTP weights as a checkpoint stores them: DeepSeek-V3's files keep a copy of the embedding
        and of the output head inside each MTP module, so the published '14B of MTP weights' (685B
        file total − 671B main model) is this figure, not `mtp_params`."""
        if not self.n_mtp_layers:
            return 0
        return self.mtp_params + self.n_mtp_layers * (self.embedding_params + self.lm_head_params)

    @property
    def n_params(self) -> int:
        """Total parameters of the main model (embedding, layers, final norm, untied head; no MTP)."""
        head = 0 if self.tied_embeddings else self.lm_head_params
        return (self.embedding_params + self.position_params + self.encoder_params + self.decoder_layer_params
                + self.hidden_size + head)

    @property
    def n_active_params(self) -> int:
        """Parameters one token touches (MoE: shared + top-k experts); embedding counted once."""
        if self.moe is None:
            return self.n_params
        unused = self.n_moe_layers * (self.moe.n_experts - self.moe.n_experts_per_token) * self.expert_params
        return self.n_params - unused

    @property
    def weight_bytes(self) -> float:
        head = self.lm_head_params * (self.lm_head_bytes_per_param - self.weight_bytes_per_param)
        return (self.n_params + self.mtp_params) * self.weight_bytes_per_param + head

    # ---- KV cache ---------------------------------------------------------------------------------
    @property
    def kv_elems_per_token_per_layer(self) -> int:
        if self.mla is not None:
            return self.mla.kv_lora_rank + self.mla.qk_rope_head_dim
        return 2 * self.n_kv_heads * self.head_dim

    @property
    def kv_bytes_per_token(self) -> float:
        """Cache bytes one token adds across all layers (self-attention only)."""
        return self.n_layers * self.kv_elems_per_token_per_layer * self.kv_bytes_per_elem

    def with_weight_format(self, fmt: str) -> "ModelSpec":
        if fmt not in WEIGHT_FORMATS:
            raise field_error(f"model {self.id!r}", "weight_format", fmt, f"one of {', '.join(WEIGHT_FORMATS)}")
        bits, compute = WEIGHT_FORMATS[fmt]
        from dataclasses import replace
        return replace(self, weight_format=fmt, weight_bits=bits, compute_dtype=compute, lm_head_weight_format="")


_INT_KEYS = ("n_layers", "hidden_size", "n_heads", "n_kv_heads", "head_dim", "ffn_size", "vocab_size",
             "n_encoder_layers", "max_context", "sliding_window", "n_mtp_layers", "relative_attention_num_buckets")
_TOP_KEYS = {"id", "name", "tokenizer", "ffn_kind", "tied_embeddings", "attention_bias", "qk_norm",
             "position_encoding", "relative_attention_num_buckets", "architecture",
             "weight_format", "weight_bits", "lm_head_weight_format", "kv_cache_dtype", "moe", "mla", "aliases", "published_params_b",
             "sources", "notes", *_INT_KEYS}
_MOE_KEYS = {"n_experts", "n_experts_per_token", "n_shared_experts", "expert_ffn_size", "n_dense_layers"}
_MLA_KEYS = {"q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"}


def _sub(where: str, raw: dict, key: str, allowed: set, cls):
    table = raw.get(key)
    if table is None:
        return None
    if not isinstance(table, dict):
        raise field_error(where, key, table, f"a [{key}] table")
    reject_unknown_keys(f"{where} [{key}]", table, allowed)
    for k in allowed:
        if k not in table and k not in ("n_shared_experts", "n_dense_layers"):
            raise field_error(where, f"{key}.{k}", None, "a value (required key)")
    for k, v in table.items():
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise field_error(where, f"{key}.{k}", v, "an integer >= 0")
    return cls(**table)


def model_from_dict(raw: dict, *, where: str = "model") -> ModelSpec:
    reject_unknown_keys(where, raw, _TOP_KEYS)
    for key in ("id", "name", "tokenizer", "n_layers", "hidden_size", "n_heads", "vocab_size", "ffn_size"):
        if key not in raw:
            raise field_error(where, key, None, "a value (required key)")
    kwargs = {k: v for k, v in raw.items() if k not in ("moe", "mla", "aliases", "weight_format", "weight_bits", "sources")}
    kwargs.setdefault("n_kv_heads", raw["n_heads"])
    if "head_dim" not in kwargs:
        if raw["hidden_size"] % raw["n_heads"]:
            raise field_error(where, "head_dim", None, "a value: hidden_size is not a multiple of n_heads")
        kwargs["head_dim"] = raw["hidden_size"] // raw["n_heads"]
    fmt = raw.get("weight_format", "bf16")
    if fmt not in WEIGHT_FORMATS:
        raise field_error(where, "weight_format", fmt, f"one of {', '.join(WEIGHT_FORMATS)}")
    bits, compute = WEIGHT_FORMATS[fmt]
    if "weight_bits" in raw:
        bits = raw["weight_bits"]
        if isinstance(bits, bool) or not isinstance(bits, (int, float)):
            raise field_error(where, "weight_bits", bits, "a number of bits per weight")
    kwargs.update(weight_format=fmt, weight_bits=float(bits), compute_dtype=compute)
    kwargs["moe"] = _sub(where, raw, "moe", _MOE_KEYS, MoESpec)
    kwargs["mla"] = _sub(where, raw, "mla", _MLA_KEYS, MLASpec)
    aliases = raw.get("aliases", [])
    if not (isinstance(aliases, list) and all(isinstance(a, str) for a in aliases)):
        raise field_error(where, "aliases", aliases, "a list of strings")
    kwargs["aliases"] = tuple(aliases)
    sources = raw.get("sources")
    if not isinstance(sources, dict) or "shape" not in sources:
        raise field_error(where, "sources.shape", None, "a citation for the shape (the model's config.json or paper)")
    if "published_params_b" in raw and "published_params_b" not in sources:
        raise field_error(where, "sources.published_params_b", None, "a citation for the published parameter count")
    kwargs["sources"] = sources
    try:
        return ModelSpec(**kwargs)
    except TypeError as exc:  # a wrongly typed value that the dataclass could not take
        raise SpecError(f"{where}: {exc}") from None
    except SpecError as exc:
        raise SpecError(f"{where}: {exc}") from None


# The alias index of the last catalog read, keyed by every file's name, size and modification time:
# building it parses every model file (about 60 ms), and replay and calibration look a model up by
# alias once per row and fitting step (issue 37: a leave-one-source-out replay ran for minutes).
_ALIAS_CACHE: dict = {}


def _alias_index() -> dict[str, str]:
    folder = catalog_dir("models")
    with os.scandir(folder) as entries:
        stamp = tuple(sorted((e.name, e.stat().st_size, e.stat().st_mtime_ns) for e in entries
                             if e.name.endswith(".toml")))
    cached = _ALIAS_CACHE.get(folder)
    if cached is not None and cached[0] == stamp:
        return dict(cached[1])
    index: dict[str, str] = {}
    for name, _, _ in stamp:
        raw = read_toml(folder / name)
        for alias in raw.get("aliases", []):
            index[alias] = Path(name).stem
    _ALIAS_CACHE[folder] = (stamp, dict(index))
    return index


def load_model(id_or_path: str | Path) -> ModelSpec:
    """Load a model by catalog id, by alias (`llama-2-7b-chat` → `llama-2-7b`), or from a TOML path."""
    text = str(id_or_path)
    is_path = text.endswith(".toml") or "/" in text
    if not is_path and text not in catalog_ids("models"):
        aliases = _alias_index()
        if text in aliases:
            return load_model(aliases[text])
        raise unknown_id_error("model", text, list(catalog_ids("models")) + list(aliases))
    path = resolve("models", text)
    return model_from_dict(read_toml(path), where=str(path))


def list_models() -> list[ModelSpec]:
    return [load_model(i) for i in catalog_ids("models")]


_HF_COUNTS = ("hidden_size", "num_attention_heads", "num_key_value_heads", "num_hidden_layers", "intermediate_size",
              "vocab_size", "head_dim", "max_position_embeddings", "num_layers", "num_decoder_layers", "d_model",
              "num_heads", "d_kv", "d_ff", "n_routed_experts", "num_local_experts", "num_experts",
              "num_experts_per_tok", "moe_intermediate_size", "sliding_window", "num_nextn_predict_layers")


def model_from_hf_config(config: dict, *, model_id: str, tokenizer: str, name: str | None = None) -> dict:
    """Translate a Hugging Face `config.json` (Llama, Mistral, Qwen2/3, Mixtral, DeepSeek-V3, T5) into
    a catalog table. Returns the dict a TOML file would hold, so the user can review and save it."""
    where = f"config.json for {model_id!r}"
    get = config.get
    # counts the translation divides by or copies: whole numbers >= 1 where given (a 0 must not fall
    # back to a default through `or`, and a string must not reach an arithmetic expression)
    for key in _HF_COUNTS:
        v = config.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= MAX_COUNT):
            raise field_error(where, key, v, f"an integer in 1..{MAX_COUNT}")
    archs = get("architectures")
    if archs is not None and not (isinstance(archs, list) and archs and all(isinstance(a, str) for a in archs)):
        raise field_error(where, "architectures", archs, "a list of architecture names")
    arch = (get("architectures") or ["?"])[0]
    if get("model_type") == "t5" or "T5" in arch:
        out = {
            "architecture": "encoder-decoder", "n_layers": get("num_decoder_layers", get("num_layers")),
            "n_encoder_layers": get("num_layers"), "hidden_size": get("d_model"), "n_heads": get("num_heads"),
            "n_kv_heads": get("num_heads"), "head_dim": get("d_kv"), "ffn_size": get("d_ff"),
            "ffn_kind": "gated" if str(get("feed_forward_proj", "relu")).startswith("gated") else "mlp",
            "vocab_size": get("vocab_size"), "tied_embeddings": bool(get("tie_word_embeddings", True)),
            "position_encoding": "t5-relative",
            "relative_attention_num_buckets": get("relative_attention_num_buckets", 32),
        }
    else:
        n_heads = get("num_attention_heads")
        hidden = get("hidden_size")
        if n_heads is None or hidden is None:
            raise field_error(where, "num_attention_heads/hidden_size", None, "a decoder-only transformer config")
        if get("head_dim") is None and hidden % n_heads:
            raise field_error(where, "hidden_size", hidden, f"a multiple of num_attention_heads = {n_heads} (no "
                              f"head_dim is given, so the head width is hidden_size / num_attention_heads)")
        out = {
            "n_layers": get("num_hidden_layers"), "hidden_size": hidden, "n_heads": n_heads,
            "n_kv_heads": get("num_key_value_heads") or n_heads,
            "head_dim": get("head_dim") or hidden // n_heads, "ffn_size": get("intermediate_size"),
            "ffn_kind": "gated", "vocab_size": get("vocab_size"),
            "tied_embeddings": bool(get("tie_word_embeddings", False)),
            "max_context": get("max_position_embeddings") or 0,
        }
        if get("model_type") in ("qwen2", "qwen2_moe") or get("attention_bias"):
            out["attention_bias"] = True
        if get("model_type") in ("qwen3", "qwen3_moe"):
            out["qk_norm"] = True
        if get("sliding_window") and get("use_sliding_window", get("model_type") == "mistral"):
            out["sliding_window"] = get("sliding_window")
        n_experts = get("n_routed_experts") or get("num_local_experts") or get("num_experts")
        if n_experts:
            out["moe"] = {
                "n_experts": n_experts,
                "n_experts_per_token": get("num_experts_per_tok"),
                "n_shared_experts": get("n_shared_experts") or 0,
                "expert_ffn_size": get("moe_intermediate_size") or get("intermediate_size"),
                "n_dense_layers": get("first_k_dense_replace") or 0,
            }
        if get("kv_lora_rank"):
            out["mla"] = {k: get(k) or 0 for k in sorted(_MLA_KEYS)}
            # the catalog's convention for MLA: head_dim is the query/key head width (nope + rope)
            out["head_dim"] = out["mla"]["qk_nope_head_dim"] + out["mla"]["qk_rope_head_dim"]
        if get("num_nextn_predict_layers"):
            out["n_mtp_layers"] = get("num_nextn_predict_layers")
    # Stored precision: fp8 when the checkpoint says so (DeepSeek-V3), else torch_dtype; absent -> bf16.
    dtype = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}.get(str(get("torch_dtype", get("dtype"))))
    if str((get("quantization_config") or {}).get("quant_method")) == "fp8":
        out["weight_format"], out["kv_cache_dtype"] = "fp8", dtype if dtype in ("bf16", "fp16") else "bf16"
    elif dtype:
        out["weight_format"], out["kv_cache_dtype"] = dtype, dtype
    missing = [k for k, v in out.items() if v is None]
    if missing:
        raise field_error(where, missing[0], None, f"a value for {arch} (config keys missing)")
    table = {"id": model_id, "name": name or model_id, "tokenizer": tokenizer, **out}
    table["sources"] = {"shape": f"imported from a Hugging Face config.json ({arch})"}
    model_from_dict(table, where=where)  # validate before handing it back
    return table


def load_hf_config(path: str | Path) -> dict:
    """A Hugging Face config.json as a dict; InputError naming the file when it cannot be one
    (missing, a folder, not UTF-8, not JSON, NaN or Infinity in it, not a JSON object)."""
    def no_constant(c):
        raise ValueError(f"{c} is not a JSON number")

    try:
        raw = Path(path).read_bytes()
        config = json.loads(raw.decode("utf-8-sig"), parse_constant=no_constant)
    except FileNotFoundError:
        raise InputError(f"{path}: file not found") from None
    except IsADirectoryError:
        raise InputError(f"{path}: a folder, not a config.json") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    except UnicodeDecodeError as exc:
        raise InputError(f"{path}: not UTF-8 text (byte {exc.start}); expected a config.json") from None
    except ValueError as exc:  # json.JSONDecodeError is one
        raise InputError(f"{path}: not valid JSON: {exc}") from None
    if not isinstance(config, dict):
        raise InputError(f"{path}: a JSON {type(config).__name__}, expected an object of config keys (a config.json)")
    return config


def params_summary(model: ModelSpec) -> dict[str, float]:
    out = {"n_params": model.n_params, "n_active_params": model.n_active_params, "mtp_params": model.mtp_params,
           "mtp_checkpoint_params": model.mtp_checkpoint_params,
           "weight_bytes": model.weight_bytes, "kv_bytes_per_token": model.kv_bytes_per_token}
    if model.published_params_b:
        out["published_params"] = model.published_params_b * 1e9
        out["params_vs_published_frac"] = model.n_params / (model.published_params_b * 1e9) - 1.0
    return {k: (float(v) if not isinstance(v, int) else v) for k, v in out.items()}


__all__ = ["ModelSpec", "MoESpec", "MLASpec", "WEIGHT_FORMATS", "load_model", "list_models",
           "model_from_dict", "model_from_hf_config", "load_hf_config", "params_summary"]
