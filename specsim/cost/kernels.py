"""Measured-curve kernel times: how one GEMM's, and one element-wise operator's, time grows with the
number of tokens in the step, on a part whose `[kernels]` table was fitted to measured operator
profiles (`specsim calibrate operators`). The roofline (`roofline.py`) calls these for the weights,
LM-head and activation classes when the part has the table; every other part stays on the pure
roofline max(bytes / bandwidth, FLOPs / peak).

Dimension legend: T tokens in the step (the rows of every token-wise GEMM), K input features and N
output features of a weight matrix on ONE device of the tensor-parallel group, n_SM the part's
streaming multiprocessors, B its peak memory bandwidth and P its peak FLOP/s in the compute dtype.

GEMM (T × K) · (K × N), weights of w bytes per element, activations a = 2 bytes, output o bytes,
output tile m × n:

    memory     t_mem  = (K·N·w + T·K·a + T·N·o) / (B · f_bw)
    compute    t_comp = waves · 2·m·n·K / (P · f_c / n_SM)
               waves  = ⌈ ⌈T/m⌉ · ⌈N/n⌉ / n_SM ⌉     tokens padded to the tile; the tiles run on the
                                                      SMs in waves and a partial wave costs a full one
    time       t = t_floor + (t_mem^p + t_comp^p)^(1/p)

(tile and wave quantisation as in NVIDIA's "Matrix Multiplication Background User's Guide").
A CPU kernel that walks the query rows in tiles, largest first (`gemm_row_tiles`, the reference
decoder's 8, 4, then single rows, each unpacking the weight block once) is charged by its tile passes
instead: with u = gemm_tile_pass_rows and T split greedily into c_s tiles of s rows,

               t_comp = ⌈⌈N/n⌉ / n_SM⌉ · 2·n·K · Σ_s c_s·(s + u) / (P · f_c / n_SM)

so M = 4 (one pass) can cost less than M = 3 (three), as the decoder measures; this one form is not
monotone in T. Where each tile kernel's pass was measured apart (`gemm_tile_pass_cost`, a_s rows'
worth for one pass of the s-row tile), Σ c_s·a_s replaces Σ c_s·(s + u): the decoder's 8-row pass
costs about two 4-row passes, which no single u gives.

Attention on a part whose table has a finite `attention_overlap_exponent` q combines its KV-read
and arithmetic times the same way, (t_mem^q + t_comp^q)^(1/q), instead of the roofline's max. p = 1
says memory and compute do not overlap at all (they add); p → ∞ is the roofline's perfect overlap
(the max). The fitted p (about 1.7 on H100 and 3.3 on A100) sits between: mid-size GEMMs, where the
two are comparable, pay for both in part. f_bw and f_c are the part's fitted GEMM fractions. A serving
stack's `Efficiency` fractions do not rescale the curve: they are whole-step roofline judgements
(e.g. gpt-fast's 0.685 is its README's achieved bandwidth, overheads included) that the measured
kernel times replace; they still apply to attention and the KV write, which the curve does not
cover, and the stack's overheads apply as before. (Checked: the A100 curve alone gives Llama-2-7B
104.6 tok/s at batch 1, gpt-fast's README measures 104.9.)

Element-wise operator of kind k over T rows (tokens) of r elements moving `bytes`:

    t = t_floor,e + max(bytes / (B · f_k),  ⌈T / (n_SM · rows_per_SM)⌉ · r · c_k)

The second term is for kernels that give each row to one thread block (RMSNorm, rotary embedding,
SiLU-and-multiply as serving engines write them): a few rows leave most SMs idle, so the time is
set by one row's length; it is zero for flat kernels (residual add, embedding gather).

Every formula is non-decreasing in T, so step time never falls when tokens are added.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..specs.hardware import ROW_BLOCKED_KINDS, Efficiency, HardwareProfile, KernelProfile
from ..specs.models import ACTIVATION_BYTES, ModelSpec

LOGIT_BYTES = 4.0  # logits are written in fp32 by every stack we model


# ---- one operator ------------------------------------------------------------------------------

def gemm_time_s(kernels: KernelProfile | None, *, n_tokens, k, n, bandwidth_bytes_per_s: float,
                flops_per_s: float, weight_bytes_per_elem: float = ACTIVATION_BYTES,
                out_bytes_per_elem: float = ACTIVATION_BYTES, with_floor: bool = True) -> np.ndarray:
    """Time of a (T × K)·(K × N) GEMM on one device. n_tokens (T), k and n broadcast as numpy arrays.
    bandwidth_bytes_per_s and flops_per_s are the achievable rates (see `gemm_rates`).
    kernels=None gives the pure roofline max(bytes / bandwidth, FLOPs / peak)."""
    if kernels is not None and all(isinstance(x, (int, float)) or np.ndim(x) == 0 for x in (n_tokens, k, n)):
        return np.float64(_gemm_scalar(kernels, float(n_tokens), float(k), float(n), bandwidth_bytes_per_s, flops_per_s,
                                       weight_bytes_per_elem, out_bytes_per_elem, with_floor))
    t = np.asarray(n_tokens, dtype=np.float64)
    k = np.asarray(k, dtype=np.float64)
    n = np.asarray(n, dtype=np.float64)
    mem = (k * n * weight_bytes_per_elem + t * (k * ACTIVATION_BYTES + n * out_bytes_per_elem)) / bandwidth_bytes_per_s
    if kernels is None:
        return np.maximum(mem, 2.0 * t * k * n / flops_per_s)
    tm, tn = kernels.gemm_tile
    if kernels.gemm_row_tiles:
        comp = (np.ceil(np.ceil(n / tn) / kernels.n_sm) * 2.0 * tn * k * kernels.n_sm
                * row_tile_work(t, kernels.gemm_row_tiles, kernels.gemm_tile_pass_rows,
                                kernels.gemm_tile_pass_cost) / flops_per_s)
    else:
        waves = np.ceil(np.ceil(t / tm) * np.ceil(n / tn) / kernels.n_sm)
        comp = waves * 2.0 * tm * tn * k * kernels.n_sm / flops_per_s
    out = _overlap(mem, comp, kernels.gemm_overlap_exponent)
    return out + kernels.gemm_floor_s if with_floor else out


def _gemm_scalar(kernels: KernelProfile, t: float, k: float, n: float, bw: float, flops: float, w: float, o: float,
                 with_floor: bool) -> float:
    """gemm_time_s for one (T, K, N) in plain floats (the serving simulator's per-step calls)."""
    mem = (k * n * w + t * (k * ACTIVATION_BYTES + n * o)) / bw
    tm, tn = kernels.gemm_tile
    if kernels.gemm_row_tiles:
        comp = (math.ceil(math.ceil(n / tn) / kernels.n_sm) * 2.0 * tn * k * kernels.n_sm
                * _row_tile_work_scalar(t, kernels.gemm_row_tiles, kernels.gemm_tile_pass_rows,
                                         kernels.gemm_tile_pass_cost) / flops)
    else:
        waves = math.ceil(math.ceil(t / tm) * math.ceil(n / tn) / kernels.n_sm)
        comp = waves * 2.0 * tm * tn * k * kernels.n_sm / flops
    m = max(mem, comp)
    p = kernels.gemm_overlap_exponent
    out = m * ((mem / m) ** p + (comp / m) ** p) ** (1.0 / p) if m > 0 else 0.0
    return out + kernels.gemm_floor_s if with_floor else out


def grouped_gemm_time_s(kernels: KernelProfile, *, n_groups, n_rows, k, n, bandwidth_bytes_per_s: float,
                        flops_per_s: float, weight_bytes_per_elem: float = ACTIVATION_BYTES) -> np.ndarray:
    """One grouped GEMM (a fused MoE kernel): n_groups weight matrices of K × N (the experts a step
    touches), n_rows token rows in all spread over them, every group's tiles scheduled together on
    the SMs. Memory: the groups' weights and the rows' activations. Compute: each group fills at
    least one row tile, so the row tiles are max(n_groups, n_rows / m), times ⌈N / n⌉ column
    tiles, in waves over the SMs. No launch floor (the caller charges one per kernel)."""
    g = np.asarray(n_groups, dtype=np.float64)
    r = np.asarray(n_rows, dtype=np.float64)
    mem = (g * k * n * weight_bytes_per_elem + r * (k + n) * ACTIVATION_BYTES) / bandwidth_bytes_per_s
    tm, tn = kernels.gemm_tile
    tiles = np.maximum(g, r / tm) * math.ceil(n / tn)
    comp = np.ceil(tiles / kernels.n_sm) * 2.0 * tm * tn * k * kernels.n_sm / flops_per_s
    return _overlap(mem, comp, kernels.gemm_overlap_exponent)


def gemm_rates(hw: HardwareProfile, dtype: str, eff: Efficiency | None = None,
               weight_format: str = "") -> tuple[float, float]:
    """(bytes/s, FLOP/s) a GEMM reaches on `hw` in compute dtype `dtype`. With a fitted curve: peak ×
    the curve's measured GEMM fractions, whatever `eff` says (a stack's fractions are whole-step
    roofline judgements that the measured curve replaces); without: peak × eff's fractions."""
    bw, peak = hw.mem_bandwidth_bytes_per_s, hw.peak_flops_per_s[dtype]
    if hw.kernels is None:
        eff = eff or hw.efficiency
        return bw * eff.bandwidth_frac, peak * eff.compute_frac
    # a format whose kernel was measured apart multiplies at its own fraction (KernelProfile.compute_frac_for)
    return bw * hw.kernels.gemm_bandwidth_frac, peak * hw.kernels.compute_frac_for(weight_format)


def row_tile_work(n_tokens, row_tiles: tuple[int, ...], pass_rows: float, pass_cost: tuple[float, ...] = ()) -> np.ndarray:
    """Rows' worth of compute of T query rows taken in tiles of `row_tiles` rows, largest first, each
    tile pass costing `pass_rows` rows more (see the module docstring), or, when `pass_cost` is given,
    pass_cost[i] rows' worth for one pass of tile row_tiles[i] (each tile kernel's own measured cost);
    a fraction of a row left at the end is one more single-row pass."""
    rest = np.asarray(n_tokens, dtype=np.float64)
    work = np.zeros_like(rest)
    for i, size in enumerate(row_tiles):
        count = np.floor(rest / size) if size > 1 else np.ceil(rest)
        work = work + count * (pass_cost[i] if pass_cost else size + pass_rows)
        rest = np.maximum(rest - count * size, 0.0)
    return work


def _row_tile_work_scalar(t: float, row_tiles: tuple[int, ...], pass_rows: float,
                          pass_cost: tuple[float, ...] = ()) -> float:
    """row_tile_work for one T in plain floats (no numpy on the simulator's per-step path)."""
    rest, work = t, 0.0
    for i, size in enumerate(row_tiles):
        count = math.floor(rest / size) if size > 1 else math.ceil(rest)
        work += count * (pass_cost[i] if pass_cost else size + pass_rows)
        rest = max(rest - count * size, 0.0)
    return work


def attention_time_s(kernels: KernelProfile | None, *, bytes_, flops, bandwidth_bytes_per_s: float,
                     flops_per_s: float) -> np.ndarray:
    """Attention over the KV cache from its bytes and FLOPs at the achievable rates: the roofline's max,
    or, on a part with a finite attention_overlap_exponent, the partial overlap of the two."""
    mem = np.asarray(bytes_, dtype=np.float64) / bandwidth_bytes_per_s
    comp = np.asarray(flops, dtype=np.float64) / flops_per_s
    if kernels is None or not math.isfinite(kernels.attention_overlap_exponent):
        return np.maximum(mem, comp)
    return _overlap(mem, comp, kernels.attention_overlap_exponent)


def _overlap(a: np.ndarray, b: np.ndarray, p: float) -> np.ndarray:
    """(a^p + b^p)^(1/p), computed as m·((a/m)^p + (b/m)^p)^(1/p) with m = max(a, b) for range."""
    m = np.maximum(a, b)
    safe = np.where(m > 0, m, 1.0)
    return np.where(m > 0, safe * ((a / safe) ** p + (b / safe) ** p) ** (1.0 / p), 0.0)


def elementwise_time_s(kernels: KernelProfile, kind: str, *, n_tokens, bytes_, row_elems,
                       peak_bandwidth_bytes_per_s: float) -> np.ndarray:
    """Time of one element-wise operator of `kind` (see ELEMENTWISE_KINDS) over T rows of
    `row_elems` elements that moves `bytes_` in all; the kind's fitted bandwidth fraction applies
    to the part's peak bandwidth."""
    t = np.asarray(n_tokens, dtype=np.float64)
    time = np.asarray(bytes_, dtype=np.float64) / (peak_bandwidth_bytes_per_s * kernels.elementwise_bandwidth_frac[kind])
    if kind in ROW_BLOCKED_KINDS:
        waves = np.ceil(t / (kernels.n_sm * kernels.elementwise_rows_per_sm))
        time = np.maximum(time, waves * np.asarray(row_elems, dtype=np.float64) * kernels.elementwise_row_s_per_elem[kind])
    return time + kernels.elementwise_floor_s


# ---- a model's operators on a part with a fitted curve -------------------------------------------

@dataclass(frozen=True, slots=True)
class Operator:
    """One token-wise operator of a step, on one device. kind: "gemm" (k × n weight) or an
    element-wise kind (bytes_per_token moved, row_elems per row). count: how many a step runs.
    Names follow Vidur's layer profile where the operator is one of its columns."""

    name: str
    kind: str
    count: float
    k: float = 0.0
    n: float = 0.0
    bytes_per_token: float = 0.0
    row_elems: float = 0.0


def step_operators(model: ModelSpec, tp: int) -> list[Operator]:
    """The GEMMs and element-wise operators a step of `model` runs on one device of a group of
    `tp`, except attention, the LM head and the routed experts of an MoE layer. Per layer: an RMSNorm
    before each attention block and before the FFN, the fused QKV projection, the rotary embedding
    of queries and keys, the output projection, the (fused gate and) up projection, the activation,
    the down projection and one residual add (the other is fused into the next norm, as in vLLM-class
    engines); per step the embedding gather. Multi-head latent attention and cross-attention are
    charged as one GEMM of their parameters' size (K = hidden)."""
    d, a = model.hidden_size, ACTIVATION_BYTES
    layers, dense, blocks = model.n_layers, model.n_dense_layers, (2 if model.architecture == "encoder-decoder" else 1)
    gate_up = 2 if model.ffn_kind == "gated" else 1
    act_io = (gate_up + 1) * a  # read gate (and up), write the product
    ops = [Operator("emb", "embed", 1, bytes_per_token=2 * d * a, row_elems=d),
           Operator("input_layernorm", "norm", layers, bytes_per_token=2 * d * a, row_elems=d),
           Operator("post_attention_layernorm", "norm", layers, bytes_per_token=2 * d * a, row_elems=d),
           Operator("add", "add", layers, bytes_per_token=3 * d * a, row_elems=d)]
    if model.mla is not None:
        ops.append(Operator("attn_pre_proj", "gemm", layers, k=d, n=model.attn_params_per_layer / d / tp))
        rope = model.n_heads * model.mla.qk_rope_head_dim / tp + model.mla.qk_rope_head_dim
    else:
        q, kv = model.n_heads * model.head_dim, model.n_kv_heads * model.head_dim
        ops += [Operator("attn_pre_proj", "gemm", layers, k=d, n=(q + 2 * kv) / tp),
                Operator("attn_post_proj", "gemm", layers, k=q / tp, n=d)]
        if model.position_encoding == "xl-relative":
            ops.append(Operator("attn_rel_proj", "gemm", layers, k=d, n=kv / tp))
        rope = (model.n_heads + model.n_kv_heads) * model.head_dim / tp
    if model.position_encoding == "rope":
        ops.append(Operator("attn_rope", "rope", layers, bytes_per_token=2 * rope * a, row_elems=rope))
    if blocks == 2:
        ops += [Operator("cross_attn_proj", "gemm", layers, k=d, n=model.cross_attn_params_per_layer / d / tp),
                Operator("cross_attention_layernorm", "norm", layers, bytes_per_token=2 * d * a, row_elems=d)]
    if dense:
        f = model.ffn_size / tp
        ops += [Operator("mlp_up_proj", "gemm", dense, k=d, n=gate_up * f),
                Operator("mlp_act", "act", dense, bytes_per_token=act_io * f, row_elems=f),
                Operator("mlp_down_proj", "gemm", dense, k=f, n=d)]
    if model.moe is not None:
        moe, n_moe = model.moe, model.n_moe_layers
        active = (moe.n_experts_per_token + moe.n_shared_experts) * moe.expert_ffn_size / tp
        ops += [Operator("moe_router", "gemm", n_moe, k=d, n=moe.n_experts / tp),
                Operator("moe_act", "act", n_moe, bytes_per_token=act_io * active, row_elems=active)]
        if moe.n_shared_experts:
            fs = moe.n_shared_experts * moe.expert_ffn_size / tp
            ops += [Operator("moe_shared_up_proj", "gemm", n_moe, k=d, n=gate_up * fs),
                    Operator("moe_shared_down_proj", "gemm", n_moe, k=fs, n=d)]
    return ops


def operator_time_s(op: Operator, model: ModelSpec, hw: HardwareProfile, eff: Efficiency, n_tokens) -> np.ndarray:
    """Time of ONE instance of `op` for T tokens on the part's fitted curve."""
    if op.kind == "gemm":
        return gemm_time_s(hw.kernels.for_format(model.weight_format), n_tokens=n_tokens, k=op.k, n=op.n,
                           **_rates(model, hw, eff))
    t = np.asarray(n_tokens, dtype=np.float64)
    return elementwise_time_s(hw.kernels, op.kind, n_tokens=t, bytes_=t * op.bytes_per_token, row_elems=op.row_elems,
                              peak_bandwidth_bytes_per_s=hw.mem_bandwidth_bytes_per_s)


def _rates(model: ModelSpec, hw: HardwareProfile, eff: Efficiency, weight_format: str | None = None) -> dict:
    fmt = model.weight_format if weight_format is None else weight_format
    bw, flops = gemm_rates(hw, hw.compute_dtype_for(model.compute_dtype), eff, fmt)
    return {"bandwidth_bytes_per_s": bw, "flops_per_s": flops, "weight_bytes_per_elem": model.weight_bytes_per_param}


def weights_time_s(model: ModelSpec, hw: HardwareProfile, eff: Efficiency, n_tokens, tp: int) -> np.ndarray:
    """Every linear layer except the LM head for T tokens, on the part's fitted curve: the GEMMs of
    `step_operators`, plus for an MoE layer the E·(1 − (1 − k/E)^T) routed experts a step touches
    (the expectation roofline.py uses) as grouped kernels (one floor a layer) over the T·k routed
    rows, every expert's tiles scheduled together (`grouped_gemm_time_s`)."""
    t = np.asarray(n_tokens, dtype=np.float64)
    total = np.zeros_like(t)
    for op in step_operators(model, tp):
        if op.kind == "gemm":
            total = total + op.count * operator_time_s(op, model, hw, eff, t)
    if model.moe is not None:
        moe, d = model.moe, model.hidden_size
        gate_up = 2 if model.ffn_kind == "gated" else 1
        fe = moe.expert_ffn_size / tp
        top_k = moe.n_experts_per_token
        touched = moe.experts_touched(t)
        rows = t * top_k
        rates = _rates(model, hw, eff)
        grouped = (grouped_gemm_time_s(hw.kernels, n_groups=touched, n_rows=rows, k=d, n=gate_up * fe, **rates)
                   + grouped_gemm_time_s(hw.kernels, n_groups=touched, n_rows=rows, k=fe, n=d, **rates))
        total = total + model.n_moe_layers * (hw.kernels.gemm_floor_s + grouped)
    return total


def lm_head_time_s(model: ModelSpec, hw: HardwareProfile, eff: Efficiency, n_logit_tokens, tp: int) -> np.ndarray:
    """The vocabulary projection for the positions that need logits (fp32 output)."""
    fmt = model.lm_head_weight_format or model.weight_format
    rates = dict(_rates(model, hw, eff, fmt), weight_bytes_per_elem=model.lm_head_bytes_per_param)
    return gemm_time_s(hw.kernels.for_format(fmt), n_tokens=n_logit_tokens, k=model.hidden_size, n=model.vocab_size / tp,
                       out_bytes_per_elem=LOGIT_BYTES, **rates)


def activations_time_s(model: ModelSpec, hw: HardwareProfile, n_tokens, tp: int) -> np.ndarray:
    """The element-wise operators of one step (those of `step_operators`) for T tokens."""
    t = np.asarray(n_tokens, dtype=np.float64)
    total = np.zeros_like(t)
    for op in step_operators(model, tp):
        if op.kind != "gemm":
            total = total + op.count * operator_time_s(op, model, hw, hw.efficiency, t)
    return total
