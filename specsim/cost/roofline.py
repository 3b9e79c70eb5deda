"""Roofline cost of one forward pass, per operator class, vectorised over numpy arrays.

Decode (M = 1), verify (M = K + 1 or a tree of M nodes) and prefill (M = prompt chunk) all go
through the same accounting. For each operator class we count the bytes that must cross the memory
bus and the FLOPs that must be done, on ONE device of a tensor-parallel group of `tp`, and charge

    time_class = max(bytes / (peak_bandwidth · bandwidth_frac), flops / (peak_flops · compute_frac))

(Williams, Waterman & Patterson 2009, "Roofline", eq. 1: attainable FLOP/s = min(peak FLOP/s,
bandwidth × operational intensity)). A step is the sum of the classes plus the tensor-parallel
all-reduce time and a fixed overhead. Classes:

- weights: every linear layer except the LM head. Dense: all weights stream once per step,
  whatever B·M is, and cost 2 FLOP per weight per token. MoE: the step streams the experts that at
  least one of its T = B·M tokens routes to; with top-k routing over E experts and independent,
  uniform routing the expected number touched per layer is E·(1 − (1 − k/E)^T).
- attention: reading the KV cache and the score/value FLOPs. With a fused kernel (FlashAttention /
  FlashDecoding style, grouped-query aware) each sequence's cache is read once per step for all its
  M query tokens; with a naive kernel each query token re-reads every key it attends to, so the
  bytes grow with M·L. Query i of a block of M new tokens after L cached ones attends to L + i keys
  (causal), so a block has M·L + M(M+1)/2 query-key pairs. FLOPs per pair per layer: 4·n_heads·
  head_dim (QKᵀ and PV); multi-head latent attention in the absorbed form: 2·n_heads·(2·kv_lora_rank
  + qk_rope_head_dim).
- kv_write: the M new tokens' keys and values.
- lm_head: the vocabulary projection and the fp32 logits it writes.
- activations: each linear layer reads its input and writes its output in 16-bit; element-wise work
  (norms, rotary, SwiGLU) is fused into those reads and writes and is not charged separately.
- communication: tensor parallelism all-reduces the hidden state after attention and after the FFN
  (plus after cross-attention in an encoder-decoder): per all-reduce a latency plus a ring transfer
  of 2(tp − 1)/tp · T · hidden · 2 bytes over the bus bandwidth. Where the part's `[all_reduce]`
  table measures the group size, its latency and bus bandwidth are used; otherwise the profile's
  `interconnect_latency_us` and datasheet `interconnect_gb_s`.
- overhead: fixed per step (launches, scheduling, sampling) plus a per-layer term.

Measured curves. On a part with a fitted `[kernels]` table (`specsim calibrate operators`; today
the A100 and H100 SXM and the parts they transfer to), the weights, LM-head and activations classes
take their time from `kernels.py` instead: each GEMM's time with its launch floor, tile and wave
quantisation and partial memory/compute overlap, and the element-wise operators (norms, rotary,
activation, residual add, embedding) with their own floors and bandwidths; an `Efficiency`'s
fractions (a serving stack's) then apply to attention and the KV write only. Their bytes and FLOPs
are still counted as above (so `bytes / bandwidth` no longer equals their time there). Every other
part, the seed's idealised ones included, is the pure roofline.

For callers that evaluate many steps of one model (the serving simulator), the step splits as
`token_time_s(T) + logits_time_s(G) + attention_time_s(R, P) + overhead_time_s`: the first two
depend on one count each and can be tabulated once per model.
"""
from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

from ..errors import field_error
from ..specs.hardware import Efficiency, HardwareProfile
from ..specs.models import ACTIVATION_BYTES, ModelSpec
from . import kernels
from .shape import PassShape, count_array

LOGIT_BYTES = 4.0  # logits are written in fp32 by every stack we model


@dataclass(frozen=True, slots=True)
class OperatorCost:
    """Per-device bytes moved, FLOPs done and the roofline time of one operator class."""

    bytes: np.ndarray
    flops: np.ndarray
    time_s: np.ndarray


@dataclass(frozen=True, slots=True, kw_only=True)
class StepCost:
    """One forward pass on one device of the group; every field broadcasts like the inputs."""

    weights: OperatorCost
    attention: OperatorCost
    kv_write: OperatorCost
    lm_head: OperatorCost
    activations: OperatorCost
    communication_s: np.ndarray
    overhead_s: np.ndarray
    time_s: np.ndarray
    compute_dtype: str
    attention_dtype: str
    source: str = "roofline"  # what priced the pass: "roofline", or the measured tables (cost.measured)
    notes: tuple[str, ...] = ()  # what the source could not measure for this pass (op and shape)

    OPERATOR_CLASSES = ("weights", "attention", "kv_write", "lm_head", "activations")

    @property
    def bytes(self) -> np.ndarray:
        return sum(getattr(self, c).bytes for c in self.OPERATOR_CLASSES)

    @property
    def flops(self) -> np.ndarray:
        return sum(getattr(self, c).flops for c in self.OPERATOR_CLASSES)

    def breakdown(self) -> dict[str, object]:
        """Flat dict of every class's bytes, FLOPs and time (scalars when the inputs were scalars)."""
        out: dict[str, object] = {}
        for c in self.OPERATOR_CLASSES:
            op = getattr(self, c)
            for f in fields(op):
                out[f"{c}_{f.name}"] = _plain(getattr(op, f.name))
        out["communication_s"] = _plain(self.communication_s)
        out["overhead_s"] = _plain(self.overhead_s)
        out["time_s"] = _plain(self.time_s)
        out["compute_dtype"] = self.compute_dtype
        out["source"] = self.source
        if self.notes:
            out["notes"] = "; ".join(self.notes)
        return out


def _plain(x):
    x = np.asarray(x)
    return float(x) if x.ndim == 0 else x


def check_group(model: ModelSpec, hw: HardwareProfile, tp: int) -> None:
    if isinstance(tp, bool) or not isinstance(tp, (int, np.integer)) or tp < 1:
        raise field_error(f"{model.id} on {hw.id}", "tp", tp, "an integer >= 1 (tensor-parallel degree)")
    if tp > 1 and hw.all_reduce_cost(tp)[1] <= 0:
        raise field_error(f"hardware {hw.id!r}", "interconnect_gb_s", 0,
                          f"> 0 to run a tensor-parallel group of tp = {tp}")
    if model.n_heads % tp:
        raise field_error(f"model {model.id!r}", "tp", tp, f"a divisor of n_heads = {model.n_heads}")


def kv_shard_frac(model: ModelSpec, tp: int) -> float:
    """Fraction of a sequence's KV cache one device holds. KV heads split across ranks until each
    rank has one (then they are replicated); the MLA latent has no head axis and is replicated."""
    if model.mla is not None:
        return 1.0
    return max(1.0 / tp, 1.0 / model.n_kv_heads)


def attention_flops_per_pair(model: ModelSpec) -> float:
    """FLOPs per (query token, cached key) pair in one layer, all heads, before TP splitting."""
    if model.mla is not None:
        return 2.0 * model.n_heads * (2 * model.mla.kv_lora_rank + model.mla.qk_rope_head_dim)
    return 4.0 * model.n_heads * model.head_dim


def n_attention_blocks(model: ModelSpec) -> int:
    return 2 if model.architecture == "encoder-decoder" else 1


def _roof(bytes_, flops, bw, flops_per_s) -> np.ndarray:
    return np.maximum(bytes_ / bw, flops / flops_per_s)


def layer_weight_cost(model: ModelSpec, n_tokens: np.ndarray, tp: int):
    """(bytes, flops) of all linear layers except the LM head, per device, for T tokens in the step."""
    wb = model.weight_bytes_per_param
    attn = model.attn_params_per_layer + model.cross_attn_params_per_layer
    dense_layer = attn + model.dense_ffn_params
    bytes_ = model.n_dense_layers * dense_layer * wb
    flops = 2.0 * n_tokens * model.n_dense_layers * dense_layer
    if model.moe is not None:
        k = model.moe.n_experts_per_token
        touched = model.moe.experts_touched(n_tokens)
        always = attn + model.router_params + model.shared_expert_params
        bytes_ = bytes_ + model.n_moe_layers * (always + touched * model.expert_params) * wb
        flops = flops + 2.0 * n_tokens * model.n_moe_layers * (always + k * model.expert_params)
    return bytes_ / tp, flops / tp


def _activation_elems_per_token(model: ModelSpec, tp: int) -> float:
    """16-bit elements each token reads and writes across the linear layers of all layers."""
    d = model.hidden_size
    if model.mla is not None:
        h = model.n_heads
        qkv_out = (h * (model.mla.qk_nope_head_dim + model.mla.qk_rope_head_dim)
                   + model.mla.kv_lora_rank + model.mla.qk_rope_head_dim)
        attn_inner = h * model.mla.v_head_dim
    else:
        qkv_out = (model.n_heads + 2 * model.n_kv_heads) * model.head_dim
        attn_inner = model.n_heads * model.head_dim
    attn = d + qkv_out / tp + attn_inner / tp + d
    gate_up = 2 if model.ffn_kind == "gated" else 1
    dense_ffn = d + gate_up * model.ffn_size / tp + model.ffn_size / tp + d
    per_layer_dense = n_attention_blocks(model) * attn + dense_ffn
    total = model.n_dense_layers * per_layer_dense
    if model.moe is not None:
        k_active = model.moe.n_experts_per_token + model.moe.n_shared_experts
        fe = model.moe.expert_ffn_size
        moe_ffn = k_active * (d + gate_up * fe / tp + fe / tp + d)
        total += model.n_moe_layers * (n_attention_blocks(model) * attn + moe_ffn)
    return float(total)


def _rates(model: ModelSpec, hw: HardwareProfile, efficiency: Efficiency | None):
    eff = efficiency or hw.efficiency
    compute_dtype = hw.compute_dtype_for(model.compute_dtype)
    attention_dtype = hw.compute_dtype_for("bf16")
    return (eff, hw.mem_bandwidth_bytes_per_s * eff.bandwidth_frac, compute_dtype, attention_dtype,
            hw.peak_flops_per_s[compute_dtype] * eff.compute_frac, hw.peak_flops_per_s[attention_dtype] * eff.compute_frac)


def kv_layer_bytes(model: ModelSpec, tp: int) -> float:
    return model.kv_elems_per_token_per_layer * model.kv_bytes_per_elem * kv_shard_frac(model, tp)


def _per_unique(fn, counts):
    """fn(counts) evaluated once per distinct count: a grid of (B, M) points has few distinct B·M,
    and the measured curves cost a few array passes per GEMM."""
    counts = np.asarray(counts, dtype=np.float64)
    if counts.size <= 1024:
        return fn(counts)
    values, inverse = np.unique(counts, return_inverse=True)
    return fn(values)[inverse].reshape(counts.shape)


def _weights(model, hw, n_tokens, tp, efficiency) -> OperatorCost:
    eff, bw, _, _, gemm_flops_per_s, _ = _rates(model, hw, efficiency)
    w_bytes, w_flops = layer_weight_cost(model, n_tokens, tp)
    if hw.kernels is not None:
        return OperatorCost(w_bytes, w_flops, _per_unique(lambda t: kernels.weights_time_s(model, hw, eff, t, tp), n_tokens))
    return OperatorCost(w_bytes, w_flops, _roof(w_bytes, w_flops, bw, gemm_flops_per_s))


def lm_head_bytes_flops(model: ModelSpec, n_logit_tokens, tp: int):
    """(bytes, flops) of the LM head for G logit rows on one of tp devices: its weights once, the fp32
    logits it writes, 2 FLOP per weight per row."""
    head_bytes = (model.lm_head_params * model.lm_head_bytes_per_param + n_logit_tokens * model.vocab_size * LOGIT_BYTES) / tp
    return head_bytes, 2.0 * n_logit_tokens * model.lm_head_params / tp


def attention_bytes_flops(model: ModelSpec, kv_read_tokens, attn_pairs, tp: int):
    """(bytes, flops) of attention over the KV cache on one of tp devices: R tokens' keys and values
    read, P query-key pairs scored, every layer (and an encoder-decoder's cross-attention)."""
    blocks = n_attention_blocks(model)
    return (blocks * model.n_layers * kv_layer_bytes(model, tp) * kv_read_tokens,
            blocks * model.n_layers * attention_flops_per_pair(model) * attn_pairs / tp)


def pass_dtypes(model: ModelSpec, hw: HardwareProfile) -> tuple[str, str]:
    """(the GEMMs' compute dtype, attention's) on this part."""
    return hw.compute_dtype_for(model.compute_dtype), hw.compute_dtype_for("bf16")


def _lm_head(model, hw, n_logit_tokens, tp, efficiency) -> OperatorCost:
    eff, bw, _, _, gemm_flops_per_s, _ = _rates(model, hw, efficiency)
    head_bytes, head_flops = lm_head_bytes_flops(model, n_logit_tokens, tp)
    if hw.kernels is not None:
        return OperatorCost(head_bytes, head_flops,
                            _per_unique(lambda g: kernels.lm_head_time_s(model, hw, eff, g, tp), n_logit_tokens))
    return OperatorCost(head_bytes, head_flops, _roof(head_bytes, head_flops, bw, gemm_flops_per_s))


def activations_cost(model, hw, n_tokens, tp, efficiency) -> OperatorCost:
    _, bw, *_ = _rates(model, hw, efficiency)
    act_bytes = n_tokens * _activation_elems_per_token(model, tp) * ACTIVATION_BYTES
    time = (_per_unique(lambda t: kernels.activations_time_s(model, hw, t, tp), n_tokens) if hw.kernels is not None
            else act_bytes / bw)
    return OperatorCost(act_bytes, np.zeros_like(act_bytes), time)


def kv_write_cost(model, hw, n_tokens, tp, efficiency) -> OperatorCost:
    _, bw, *_ = _rates(model, hw, efficiency)
    kv_w_bytes = model.n_layers * kv_layer_bytes(model, tp) * n_tokens
    return OperatorCost(kv_w_bytes, np.zeros_like(kv_w_bytes), kv_w_bytes / bw)


def _attention(model, hw, kv_read_tokens, attn_pairs, tp, efficiency) -> OperatorCost:
    _, bw, _, _, _, attn_flops_per_s = _rates(model, hw, efficiency)
    a_bytes, a_flops = attention_bytes_flops(model, kv_read_tokens, attn_pairs, tp)
    return OperatorCost(a_bytes, a_flops, kernels.attention_time_s(hw.kernels, bytes_=a_bytes, flops=a_flops,
                                                                    bandwidth_bytes_per_s=bw, flops_per_s=attn_flops_per_s))


def _communication(model, hw, n_tokens, tp) -> np.ndarray:
    if tp == 1:
        return np.zeros_like(np.asarray(n_tokens, dtype=float))
    latency_s, bus_bytes_per_s = hw.all_reduce_cost(tp)
    n_allreduce = model.n_layers * (n_attention_blocks(model) + 1)
    ring_bytes = 2.0 * (tp - 1) / tp * n_tokens * model.hidden_size * ACTIVATION_BYTES
    return n_allreduce * (latency_s + ring_bytes / bus_bytes_per_s)


def fixed_overhead_s(model, hw, efficiency) -> float:
    eff = efficiency or hw.efficiency
    return eff.step_overhead_s + eff.per_layer_overhead_s * model.n_layers


def pass_cost(model: ModelSpec, hw: HardwareProfile, shape: PassShape, *, tp: int = 1,
              efficiency: Efficiency | None = None) -> StepCost:
    """The roofline (with the part's fitted kernel curves, where it has them) of one pass of `shape`
    (`cost.shape.PassShape`: its tokens, logit rows, KV reads and pairs; a prefill row is priced like
    any other here) on one device of a tensor-parallel group of tp."""
    check_group(model, hw, tp)
    compute_dtype, attention_dtype = pass_dtypes(model, hw)
    n_tokens = np.asarray(shape.tokens, dtype=np.float64)
    weights = _weights(model, hw, n_tokens, tp, efficiency)
    attention = _attention(model, hw, shape.kv_read, shape.pairs, tp, efficiency)
    kv_write = kv_write_cost(model, hw, n_tokens, tp, efficiency)
    lm_head = _lm_head(model, hw, shape.logit_tokens, tp, efficiency)
    activations = activations_cost(model, hw, n_tokens, tp, efficiency)
    comm = _communication(model, hw, n_tokens, tp)
    overhead = np.full(np.shape(n_tokens), fixed_overhead_s(model, hw, efficiency))
    total = (weights.time_s + attention.time_s + kv_write.time_s + lm_head.time_s + activations.time_s
             + comm + overhead)
    return StepCost(weights=weights, attention=attention, kv_write=kv_write, lm_head=lm_head,
                    activations=activations, communication_s=comm, overhead_s=overhead, time_s=total,
                    compute_dtype=compute_dtype, attention_dtype=attention_dtype,
                    source="roofline" + (" with fitted kernel curves" if hw.kernels is not None else ""))


# ---- the step split by what each part depends on (for callers that tabulate) -----------------------
# time_s of any step = token_time_s(T) + logits_time_s(G) + attention_time_s(R, P) + overhead_time_s,
# with T the step's tokens, G the positions that need logits, R the KV-read tokens and P the causal
# query-key pairs (see step_cost and mixed_step_cost for how a batch gives R and P). The first two
# depend on one count each, so a caller can tabulate them once per model over T = 0 .. T_max.

def token_time_s(model: ModelSpec, hw: HardwareProfile, n_tokens, *, tp: int = 1,
                 efficiency: Efficiency | None = None) -> np.ndarray:
    """Time of the classes that depend only on the step's token count T: the linear layers (weights),
    the element-wise operators (activations), the KV write and the tensor-parallel all-reduces.
    n_tokens: T ≥ 0, any shape. On a part with a fitted `[kernels]` table this is the measured curve."""
    check_group(model, hw, tp)
    t = count_array("n_tokens", n_tokens, 0)
    return (_weights(model, hw, t, tp, efficiency).time_s + activations_cost(model, hw, t, tp, efficiency).time_s
            + kv_write_cost(model, hw, t, tp, efficiency).time_s + _communication(model, hw, t, tp))


def logits_time_s(model: ModelSpec, hw: HardwareProfile, n_logit_tokens, *, tp: int = 1,
                  efficiency: Efficiency | None = None) -> np.ndarray:
    """Time of the LM head for G ≥ 0 positions that need logits, any shape."""
    check_group(model, hw, tp)
    return _lm_head(model, hw, count_array("n_logit_tokens", n_logit_tokens, 0), tp, efficiency).time_s


def attention_time_s(model: ModelSpec, hw: HardwareProfile, *, kv_read_tokens, attn_pairs, tp: int = 1,
                     efficiency: Efficiency | None = None) -> np.ndarray:
    """Time of attention over the KV cache: R tokens' keys and values read (all sequences together)
    and P query-key pairs scored; both ≥ 0 and broadcast."""
    check_group(model, hw, tp)
    r = np.asarray(kv_read_tokens, dtype=np.float64)
    p = np.asarray(attn_pairs, dtype=np.float64)
    if np.any(r < 0) or np.any(p < 0):
        raise field_error("attention time", "kv_read_tokens" if np.any(r < 0) else "attn_pairs",
                          float(np.min(r if np.any(r < 0) else p)), "counts >= 0")
    r, p = np.broadcast_arrays(r, p)
    return _attention(model, hw, r, p, tp, efficiency).time_s


def overhead_time_s(model: ModelSpec, hw: HardwareProfile, *, efficiency: Efficiency | None = None) -> float:
    """The fixed per-step and per-layer overhead of the efficiency in force."""
    return float(fixed_overhead_s(model, hw, efficiency))


def step_cost(model: ModelSpec, hw: HardwareProfile, *, batch_size=1, q_len=1, context_len=0, tp: int = 1,
              attention: str = "fused", efficiency: Efficiency | None = None) -> StepCost:
    """The roofline of one forward pass of B sequences, each with M new query tokens after L cached ones.

    batch_size: B, sequences (≥ 1); q_len: M, new tokens per sequence (≥ 1): 1 for decode, K + 1 or
    the tree size for verify, the chunk for prefill; context_len: L, tokens already in each sequence's
    cache (≥ 0). All three broadcast as numpy arrays. tp: tensor-parallel degree; the result is for
    one device of the group. attention: 'fused' or 'naive' (see the module docstring).
    The roofline's own parameters are fitted through this (calibration/); every prediction prices a
    pass through `cost.pricing`, which chooses its source once per model and deployment.
    """
    check_group(model, hw, tp)
    shape = PassShape.uniform(model, batch_size=batch_size, q_len=q_len, context_len=context_len, attention=attention)
    return pass_cost(model, hw, shape, tp=tp, efficiency=efficiency)


def mixed_step_cost(model: ModelSpec, hw: HardwareProfile, *, q_lens, context_lens, logit_lens=None, tp: int = 1,
                    attention: str = "fused", efficiency: Efficiency | None = None) -> StepCost:
    """The roofline of one iteration over a heterogeneous batch (continuous batching): sequence i brings
    q_lens[i] new tokens after context_lens[i] cached ones (decode: 1, verify: K + 1, prefill chunk: its
    length). logit_lens[i] is how many of its positions need logits (default all; a prefill chunk
    that does not end its prompt needs none). Arrays of shape (n_seqs,); returns scalars."""
    check_group(model, hw, tp)
    shape = PassShape.of_mix(model, q_lens=q_lens, context_lens=context_lens, logit_lens=logit_lens,
                             attention=attention)
    return pass_cost(model, hw, shape, tp=tp, efficiency=efficiency)


# ---- memory ---------------------------------------------------------------------------------------

def weight_bytes_per_device(model: ModelSpec, tp: int = 1) -> float:
    return model.weight_bytes / tp


def kv_bytes_per_device(model: ModelSpec, *, batch_size, context_len, tp: int = 1):
    """KV cache one device holds for B sequences of L tokens (encoder-decoders: self + cross)."""
    blocks = n_attention_blocks(model)
    per_token = blocks * model.kv_bytes_per_token * kv_shard_frac(model, tp)
    return np.asarray(batch_size, dtype=float) * np.minimum(
        np.asarray(context_len, dtype=float), model.sliding_window or np.inf) * per_token
