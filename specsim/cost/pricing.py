"""One price list: every forward pass on every path is priced here.

A pass is first reduced to its shape (`cost.shape.PassShape`: sequences, tokens, logit rows, KV reads,
query-key pairs, and the prompt-chunk rows apart). A *source* prices shapes; it is chosen once per
(model, deployment, tensor-parallel degree, efficiency) by `source_for`, and every consumer — the
analytical cycle and its grids, the drafting families, the switch-off's workload view, the serving
simulator's hot path, replay, validate, the sweep's figures — asks that source, never a formula of its
own. Two sources today:

- `RooflineSource`: `cost.roofline` with the part's fitted `[kernels]` curves where it has them.
- `MeasuredSource`: silicon-measured operator tables (`cost.measured`, aiconfigurator-core's data) for
  the GEMMs, the LM head, decode and context attention and the all-reduces; the KV write, element-wise
  work and the efficiency's fixed overhead stay the roofline's, and the pass says so.

Which one a deployment uses is its `cost_source` (`auto`: measured where the part names tables, the
stack maps to a collected framework and the tables cover the model at this tp; `measured`: the same,
refused where the part or stack has none; `roofline`: never the tables). A model the tables do not
cover is priced on the roofline with the reason in the source's label, so every pass says what priced it.

A source also prices the dense blocks some drafters add (EAGLE's input projection, Medusa and Hydra
heads) as GEMMs of the model's hidden width, and splits its time for the serving simulator's hot path
into token_time_s(T) + logit_time_s(G) + attention_s(...) + fixed_s, the first two tabulated once.

The iteration-level terms every assembler shares live here too: a speculative cycle's device work
beyond its passes (`device_cycle_overhead_s`) and a masked eager verify's scores (`masked_score_time_s`).
"""
from __future__ import annotations

import bisect
import math
from dataclasses import replace

import numpy as np

from ..specs.hardware import Efficiency, HardwareProfile
from ..specs.models import ModelSpec
from . import measured, roofline
from .deployment import Deployment
from .roofline import LOGIT_BYTES, OperatorCost, StepCost, kv_shard_frac
from .shape import PassShape, count_array
from ..specs.scenario import COST_SOURCES


# Query rows of one attention tile on Hopper (FlashAttention-3 hopper/tile_size.h tile_size_fwd_sm90: kBlockM
# 128 at head_dim <= 128, the heads of every model the tables cover here): a verify's M positions times the
# query heads sharing a KV head fill rows of one tile, which reads the cache once (MeasuredSource._decode).
VERIFY_TILE_ROWS = 128


class RooflineSource:
    """`cost.roofline` (with the part's fitted kernel curves) as a source; hop_s: a layer split's
    device-boundary crossings, charged to the target's passes as communication."""

    kind = "roofline"

    def __init__(self, model: ModelSpec, hw: HardwareProfile, *, tp: int, attention: str,
                 efficiency: Efficiency | None, hop_s: float = 0.0, why: str = "", expanded: bool = False):
        roofline.check_group(model, hw, tp)
        self.model, self.hw, self.tp, self.attention, self.efficiency = model, hw, tp, attention, efficiency
        self.hop_s = float(hop_s)
        # a verify expanded into one-token sequences (specs.stacks verify_scorer = batch_expansion): every decode query
        # reads its sequence's cache up to its own position, so a decode row's KV read is its pairs
        self.expanded = bool(expanded)
        self.label = "roofline" + (" with fitted kernel curves" if hw.kernels is not None else "") + why
        eff = efficiency or hw.efficiency
        self._bw = hw.mem_bandwidth_bytes_per_s * eff.bandwidth_frac
        self._r_coef = float(roofline.attention_time_s(model, hw, kv_read_tokens=1.0, attn_pairs=0.0, tp=tp,
                                                       efficiency=efficiency))
        self._p_coef = float(roofline.attention_time_s(model, hw, kv_read_tokens=0.0, attn_pairs=1.0, tp=tp,
                                                       efficiency=efficiency))
        q = hw.kernels.attention_overlap_exponent if hw.kernels is not None else math.inf
        self._attn_q = q if math.isfinite(q) else None  # None: attention is the max of its two times
        self.fixed_s = roofline.overhead_time_s(model, hw, efficiency=efficiency) + self.hop_s

    def _expand(self, shape: PassShape) -> PassShape:
        """The shape as an expanding scorer runs it: decode rows read their pairs, prompt chunks as given."""
        if not self.expanded or self.attention != "fused":
            return shape
        return replace(shape, kv_read=np.asarray(shape.pairs, dtype=np.float64) - shape.prefill_pairs
                       + shape.prefill_kv_read)

    def price(self, shape: PassShape) -> StepCost:
        c = roofline.pass_cost(self.model, self.hw, self._expand(shape), tp=self.tp, efficiency=self.efficiency)
        c = replace(c, source=self.label)
        if not self.hop_s:
            return c
        return replace(c, communication_s=c.communication_s + self.hop_s, time_s=c.time_s + self.hop_s)

    def token_time_s(self, n_tokens) -> np.ndarray:
        return roofline.token_time_s(self.model, self.hw, n_tokens, tp=self.tp, efficiency=self.efficiency)

    def logit_time_s(self, n_logits) -> np.ndarray:
        return roofline.logits_time_s(self.model, self.hw, n_logits, tp=self.tp, efficiency=self.efficiency)

    def attention_s(self, s: float, t: float, r: float, p: float, ps: float = 0.0, pt: float = 0.0,
                    pr: float = 0.0, pp: float = 0.0) -> float:
        """Attention of one mix from its sums, in plain floats (the roofline reads R and P only): the
        larger of its memory and compute times, or their partial overlap on a part with curves."""
        if self.expanded and self.attention == "fused":
            r = p - pp + pr
        a, b = r * self._r_coef, p * self._p_coef
        m = a if a > b else b
        q = self._attn_q
        if q is None or m <= 0.0:
            return m
        return m * ((a / m) ** q + (b / m) ** q) ** (1.0 / q)

    def dense_time_s(self, n_params: float, n_tokens, *, extra_bytes=0.0) -> np.ndarray:
        """A dense linear block of n_params on one of tp devices, T tokens: the roofline's max of its
        weight (and extra) bytes over bandwidth and its FLOPs over the GEMM peak, the stack's fractions."""
        eff = self.efficiency or self.hw.efficiency
        t = np.asarray(n_tokens, dtype=float)
        bytes_ = (n_params * self.model.weight_bytes_per_param + np.asarray(extra_bytes, dtype=float)) / self.tp
        flops = 2.0 * t * n_params / self.tp
        peak = self.hw.peak_flops_per_s[self.hw.compute_dtype_for(self.model.compute_dtype)] * eff.compute_frac
        return np.maximum(bytes_ / self._bw, flops / peak)


class MeasuredSource:
    """Measured operator tables (`cost.measured.MeasuredPass`) for the GEMMs, LM head, attention and
    all-reduces; the roofline's KV write, element-wise work and the efficiency's fixed overhead.

    Decode rows read the generation-attention table at (decode queries, KV tokens per decode sequence),
    a verify of M tokens as the query tiles that read its cache (`_decode`); prompt-chunk
    rows read the context-attention table at (chunks, tokens per chunk, cached tokens before it). A mix
    of unequal rows is priced at its mean KV length per sequence (the reduction vidur uses): exact for
    the uniform batches the analytical paths price, an approximation for a serving iteration's mix."""

    kind = "measured"

    def __init__(self, model: ModelSpec, hw: HardwareProfile, mp, *, tp: int, efficiency: Efficiency | None,
                 hop_s: float = 0.0, expanded: bool = False):
        roofline.check_group(model, hw, tp)
        self.model, self.hw, self.mp, self.tp, self.efficiency = model, hw, mp, tp, efficiency
        self.hop_s = float(hop_s)
        self.expanded = bool(expanded)
        self.label = (mp.label + "; element-wise ops, KV write and fixed overhead on the roofline"
                      + ("; a verify expanded into one-token sequences (the stack's batch-expansion scorer)"
                         if expanded else ""))
        eff = efficiency or hw.efficiency
        self._bw = hw.mem_bandwidth_bytes_per_s * eff.bandwidth_frac
        self.fixed_s = roofline.overhead_time_s(model, hw, efficiency=efficiency) + self.hop_s
        self._group = model.n_heads / model.n_kv_heads  # query heads on one KV head (the same at any tp)
        # the attention grids as rows of plain floats, for the simulator's per-iteration scalar lookups
        self._decode_grid = _ScalarGrid(mp.attn_batch, mp.attn_step, mp.attn_s, past_power=1)
        self._context_grid = (_ScalarGrid(mp.ctx_batch, mp.ctx_isl, mp.ctx_s, past_power=2)
                              if mp.ctx_s.size else None)

    def _decode(self, sd, td, rd, pd):
        """(decode attention seconds, the table's queries, its KV length) of decode rows with sums S, T, R, P.

        The tables measure one query a sequence. A scorer that runs a sequence's M verify positions in one
        call (vLLM V1, SGLang, TensorRT-LLM) packs them, with the g query heads that share a KV head, into
        the rows of one query tile (FlashAttention-3's PackGQA, always on for varlen batches: hopper/
        heuristics.h should_pack_gqa; FlashInfer's prefill kernels pack qo_len × group rows the same way),
        and each tile reads its sequence's cache once: FlashAttention PR #1236 measured a 4-query decode
        (16 query heads on 1 KV head, 16,384 cached, batch 4) at 1,246 GB/s counted as one load of the
        cache, 62 % of the H100 PCIe's 2 TB/s (four loads from memory would need 5 TB/s). So a
        verify reads the table at S·ceil(M·g / 128) queries (128 rows a tile:
        hopper/tile_size.h, head_dim ≤ 128; one tile for every chain and tree here), at the KV length a
        sequence holds, R/S = L + M. An expanding scorer (vLLM V0's batch expansion) runs M one-token
        sequences that each read the cache up to their own position: T queries at P/T = L + (M + 1)/2.
        Until December 2026 a multi-query verify was read as T = B·M queries (AIConfigurator's 'batch
        widening by nextn + 1'), M cache reads a sequence (data/published/README.md, 'Verify attention
        read once')."""
        if self.expanded:
            kv = np.divide(pd, td, out=np.zeros(np.broadcast(pd, td).shape), where=td > 0)
            return np.where(sd > 0, self.mp.attention_time_s(td, kv), 0.0), td, kv
        q = np.divide(td, sd, out=np.ones(np.broadcast(td, sd).shape), where=sd > 0)
        queries = sd * np.maximum(np.ceil(q * self._group / VERIFY_TILE_ROWS - 1e-9), 1.0)
        kv = np.divide(rd, sd, out=np.zeros(np.broadcast(rd, sd).shape), where=sd > 0)
        return np.where(sd > 0, self.mp.attention_time_s(queries, kv), 0.0), queries, kv

    def _attention_parts(self, shape: PassShape):
        s, t, r, p = (np.asarray(x, dtype=np.float64) for x in (shape.seqs, shape.tokens, shape.kv_read, shape.pairs))
        ps, pt, pr, pp = (np.asarray(x, dtype=np.float64) for x in (shape.prefill_seqs, shape.prefill_tokens,
                                                                     shape.prefill_kv_read, shape.prefill_pairs))
        dec, td, kv = self._decode(s - ps, t - pt, r - pr, p - pp)
        if not shape.has_prefill:
            return dec, td, kv
        chunk = np.divide(pt, ps, out=np.zeros(np.broadcast(pt, ps).shape), where=ps > 0)
        prefix = np.divide(pr - pt, ps, out=np.zeros(np.broadcast(pr, ps).shape), where=ps > 0)
        ctx = np.where(ps > 0, self.mp.context_attention_time_s(ps, chunk, prefix), 0.0)
        return dec + ctx, td, kv

    def price(self, shape: PassShape) -> StepCost:
        model, hw, tp, eff = self.model, self.hw, self.tp, self.efficiency
        t = np.asarray(shape.tokens, dtype=np.float64)
        g = np.asarray(shape.logit_tokens, dtype=np.float64)
        w_bytes, w_flops = roofline.layer_weight_cost(model, t, tp)
        weights = OperatorCost(w_bytes, w_flops, self.mp.layers_time_s(t))
        h_bytes, h_flops = roofline.lm_head_bytes_flops(model, g, tp)
        lm_head = OperatorCost(h_bytes, h_flops, self.mp.head_time_s(g))
        a_bytes, a_flops = roofline.attention_bytes_flops(model, shape.kv_read, shape.pairs, tp)
        a_time, td, kv = self._attention_parts(shape)
        attention = OperatorCost(a_bytes, a_flops, a_time)
        kv_write = roofline.kv_write_cost(model, hw, t, tp, eff)
        activations = roofline.activations_cost(model, hw, t, tp, eff)
        comm = self.mp.allreduce_time_s(t) + self.hop_s
        overhead = np.full(np.shape(t), self.fixed_s - self.hop_s)
        total = weights.time_s + attention.time_s + kv_write.time_s + lm_head.time_s + activations.time_s + comm + overhead
        notes = self.mp.notes
        if t.size:
            notes = notes + self.mp.range_notes(n_tokens=t, n_queries=td, kv_len=kv)
        compute_dtype, attention_dtype = roofline.pass_dtypes(model, hw)
        return StepCost(weights=weights, attention=attention, kv_write=kv_write, lm_head=lm_head,
                        activations=activations, communication_s=comm, overhead_s=overhead, time_s=total,
                        compute_dtype=compute_dtype, attention_dtype=attention_dtype, source=self.label,
                        notes=tuple(dict.fromkeys(notes)))

    def token_time_s(self, n_tokens) -> np.ndarray:
        t = count_array("n_tokens", n_tokens, 0)
        model, hw, tp, eff = self.model, self.hw, self.tp, self.efficiency
        return (self.mp.layers_time_s(t) + self.mp.allreduce_time_s(t)
                + roofline.kv_write_cost(model, hw, t, tp, eff).time_s
                + roofline.activations_cost(model, hw, t, tp, eff).time_s)

    def logit_time_s(self, n_logits) -> np.ndarray:
        return self.mp.head_time_s(count_array("n_logit_tokens", n_logits, 0))

    def _context_attention_s(self, n_seqs: float, chunk: float, prefix: float) -> float:
        """`MeasuredPass.context_attention_time_s` for one (chunks, tokens a chunk, cached before) in plain
        floats: T(prefix + chunk) − T(prefix), at least T(chunk)."""
        g = self._context_grid
        if g is None:
            return float(self.mp.context_attention_time_s(n_seqs, chunk, prefix))
        whole = g(n_seqs, prefix + chunk) - g(n_seqs, prefix)
        alone = g(n_seqs, chunk)
        return whole if whole > alone else alone

    def attention_s(self, s: float, t: float, r: float, p: float, ps: float = 0.0, pt: float = 0.0,
                    pr: float = 0.0, pp: float = 0.0) -> float:
        """`_attention_parts` of one mix in plain floats (the simulator's hot path)."""
        sd, td, rd, pd = s - ps, t - pt, r - pr, p - pp
        out = 0.0
        if sd > 0:
            if self.expanded:
                out = self._decode_grid(td, pd / td)
            else:
                tiles = math.ceil(td / sd * self._group / VERIFY_TILE_ROWS - 1e-9)
                out = self._decode_grid(sd * (tiles if tiles > 1 else 1), rd / sd)
        if ps > 0:
            out += self._context_attention_s(ps, pt / ps, (pr - pt) / ps)
        return out

    def dense_time_s(self, n_params: float, n_tokens, *, extra_bytes=0.0) -> np.ndarray:
        """A dense block of n_params as one GEMM of the model's hidden width in (k) and n_params / k out
        (n), from the tables' GEMM of this pass's weight dtype, plus its extra bytes (logits written)
        over the achievable bandwidth. n_params: on the whole block, split over tp devices by n."""
        k = float(self.model.hidden_size)
        n = n_params / k / self.tp
        t = np.asarray(n_tokens, dtype=np.float64)
        return self.mp.gemm_time_s(n, k, t) + np.asarray(extra_bytes, dtype=float) / self.tp / self._bw


class _ScalarGrid:
    """A measured attention grid cells[rows, cols] read at one (row value, column value) in plain floats:
    `cost.measured`'s bilinear lookup (np.interp positions, clamped to the grid) and its continuation past
    the grid (in proportion to the rows, and to the columns to `past_power`), with the column profile at
    each row value interpolated once and kept (a serving run asks a few hundred distinct batch sizes)."""

    __slots__ = ("rows", "cols", "cells", "power", "_profiles")

    def __init__(self, rows: np.ndarray, cols: np.ndarray, cells: np.ndarray, *, past_power: int):
        self.rows, self.cols, self.cells = rows.tolist(), cols.tolist(), cells.tolist()
        self.power = past_power
        self._profiles: dict = {}

    def _profile(self, x: float) -> list:
        rows, c = self.rows, self.cells
        if x <= rows[0]:
            i, u = 0, 0.0
        elif x >= rows[-1]:
            i, u = len(rows) - 2, 1.0
        else:
            i = bisect.bisect_right(rows, x) - 1
            u = (x - rows[i]) / (rows[i + 1] - rows[i])
        lo, hi = c[i], c[i + 1]
        scale = x / rows[-1] if x > rows[-1] else 1.0
        out = [((1 - u) * a + u * b) * scale for a, b in zip(lo, hi)]
        if len(self._profiles) > 4096:
            self._profiles.clear()
        self._profiles[x] = out
        return out

    def __call__(self, x: float, y: float) -> float:
        prof = self._profiles.get(x)
        if prof is None:
            prof = self._profile(x)
        cols = self.cols
        if y <= cols[0]:
            return prof[0]
        if y >= cols[-1]:
            return prof[-1] * (y / cols[-1]) ** self.power if y > cols[-1] else prof[-1]
        j = bisect.bisect_right(cols, y) - 1
        v = (y - cols[j]) / (cols[j + 1] - cols[j])
        return (1 - v) * prof[j] + v * prof[j + 1]


_MEASURED: dict = {}


def measured_pass(model: ModelSpec, dep: Deployment, tp: int | None = None):
    """`model`'s tabulated measured pass on this deployment at tp (default the deployment's), or None:
    no tables, or a model or group they do not cover. Built once per (tables, model, tp, KV dtype)."""
    tables = dep.operator_tables
    if tables is None or dep.multi_gpu == "layer_split":
        return None
    tp = dep.tp if tp is None else tp
    key = (id(tables), id(model), tp)
    hit = _MEASURED.get(key)
    if hit is None or hit[0] is not model or hit[1] is not tables:
        hit = (model, tables, measured.build(tables, model, tp))
        _MEASURED[key] = hit
    return hit[2]


def _uncovered(model: ModelSpec, dep: Deployment, tp: int) -> str:
    # at the pass's tp: the reason may be the group (no all-reduce rows for tp 16), not the model
    why = measured.covered(model, dep.operator_tables, tp=tp, kv_cache_dtype=model.kv_cache_dtype)
    return why or "its shapes (heads, head_dim) or group not in the tables"


def source_for(model: ModelSpec, dep: Deployment, *, tp: int | None = None, efficiency: Efficiency | None = None,
               target: bool = False):
    """THE place a pass's source is chosen: the measured tables where the deployment carries them
    (`Deployment.cost_source`) and they cover `model` at this tp, else the roofline (with the reason
    in its label). tp: the pass's tensor-parallel degree (default the deployment's); efficiency: the
    pass's (default the deployment's); target: the target's own passes, which pay a layer split's hops."""
    tp = dep.tp if tp is None else tp
    eff = dep.eff if efficiency is None else efficiency
    hop = dep.hop_s if target else 0.0
    expanded = target and dep.verify_scorer == "batch_expansion"  # the scorer expands the target's verify only
    mp = measured_pass(model, dep, tp) if dep.attention == "fused" else None
    if mp is not None:
        return MeasuredSource(model, dep.hardware, mp, tp=tp, efficiency=eff, hop_s=hop, expanded=expanded)
    why = ""
    if dep.operator_tables is not None:
        why = f" ({dep.operator_tables.label()} does not cover {model.id} at tp {tp}: {_uncovered(model, dep, tp)})"
    return RooflineSource(model, dep.hardware, tp=tp, attention=dep.attention, efficiency=eff, hop_s=hop, why=why,
                          expanded=expanded)


def price_pass(model: ModelSpec, dep: Deployment, *, batch_size, q_len, context_len, tp: int | None = None,
               efficiency: Efficiency | None = None, target: bool = False, prefill: bool = False,
               draft_frac: float = 1.0) -> StepCost:
    """One pass of B sequences × M new tokens after L cached (arrays that broadcast) by the source
    `source_for` picks. target=True for the target's passes (a layer split's hops counted). draft_frac:
    the share of the sequences that verify M tokens, the rest one (`PassShape.drafting_share`)."""
    src = source_for(model, dep, tp=tp, efficiency=efficiency, target=target)
    if draft_frac != 1.0:
        shape = PassShape.drafting_share(model, batch_size=batch_size, q_len=q_len, context_len=context_len,
                                         draft_frac=draft_frac, attention=dep.attention)
    else:
        shape = PassShape.uniform(model, batch_size=batch_size, q_len=q_len, context_len=context_len,
                                  attention=dep.attention, prefill=prefill)
    return src.price(shape)


def price_mix(model: ModelSpec, dep: Deployment, *, q_lens, context_lens, logit_lens=None, is_prefill=None,
              tp: int | None = None, efficiency: Efficiency | None = None, target: bool = False) -> StepCost:
    """One continuous-batching iteration of `model` (rows of q_lens tokens after context_lens cached,
    logit_lens needing logits, is_prefill marking prompt chunks) by the source `source_for` picks."""
    src = source_for(model, dep, tp=tp, efficiency=efficiency, target=target)
    shape = PassShape.of_mix(model, q_lens=q_lens, context_lens=context_lens, logit_lens=logit_lens,
                             is_prefill=is_prefill, attention=dep.attention)
    return src.price(shape)


def target_step_cost(target: ModelSpec, dep: Deployment, *, batch_size, q_len, context_len,
                     draft_frac: float = 1.0) -> StepCost:
    """One forward pass of the target (B sequences × M query tokens after L cached; with draft_frac < 1
    a share of them verifying one token) on the deployment, layer-split hops included: what the pass
    takes on this deployment, by the target's source."""
    return price_pass(target, dep, batch_size=batch_size, q_len=q_len, context_len=context_len, target=True,
                      draft_frac=draft_frac)


def target_step_time(target: ModelSpec, dep: Deployment, *, batch_size, q_len, context_len,
                     draft_frac: float = 1.0) -> np.ndarray:
    """`target_step_cost(...).time_s`: one pass of the target on the deployment, seconds."""
    return target_step_cost(target, dep, batch_size=batch_size, q_len=q_len, context_len=context_len,
                            draft_frac=draft_frac).time_s


def pricing_source(model: ModelSpec, dep: Deployment, *, tp: int | None = None) -> str:
    """What prices `model`'s passes on this deployment, in words (for --describe, breakdowns, reports)."""
    return source_for(model, dep, tp=tp, target=True).label


def dense_time_s(model: ModelSpec, dep: Deployment, n_params: float, n_tokens, *, tp: int | None = None,
                 extra_bytes=0.0) -> np.ndarray:
    """A dense block a drafter adds (EAGLE/MTP input projection, Medusa/Hydra heads), of n_params in
    `model`'s weight format, over T tokens on one of tp devices, priced by `model`'s source there."""
    return source_for(model, dep, tp=tp).dense_time_s(n_params, n_tokens, extra_bytes=extra_bytes)


def masked_score_time_s(target: ModelSpec, dep: Deployment, *, batch_size, q_len, context_len) -> np.ndarray:
    """Device time of the scores a masked eager verify pass materialises beyond the first position's: the
    stack's `[drafting] masked_score_bytes` per (query, key, head, layer) score, for the q − 1 extra
    positions of each of B sequences against the L cached keys and their share of the block's own
    (L + (q + 1)/2 each, causal), over the part's bandwidth × the stack's bandwidth fraction; seconds.
    No table measures an eager kernel that writes its scores out: a stack behaviour, on the roofline."""
    b = np.asarray(batch_size, dtype=float)
    q = np.asarray(q_len, dtype=float)
    l = np.asarray(context_len, dtype=float)
    scores = b * (q - 1.0) * (l + (q + 1.0) / 2.0) * target.n_heads * target.n_layers / dep.tp
    bw = dep.hardware.mem_bandwidth_bytes_per_s * dep.eff.bandwidth_frac
    return scores * dep.drafting.masked_score_bytes / bw


def device_cycle_overhead_s(target: ModelSpec, dep: Deployment, *, batch_size, verify_q_len, tokens_per_cycle,
                            tree: bool) -> np.ndarray:
    """Device work per speculative cycle beyond drafting and the verify pass, seconds: reading the
    extra fp32 logits for rejection sampling (two passes over (M − 1) rows of the vocabulary), and for
    a tree the KV compaction of the accepted tokens (read and write). Bytes over the achievable
    bandwidth: no table measures these copies."""
    b = np.asarray(batch_size, dtype=float)
    m = np.asarray(verify_q_len, dtype=float)
    bw = dep.hardware.mem_bandwidth_bytes_per_s * dep.eff.bandwidth_frac
    over = 2.0 * b * (m - 1.0) * target.vocab_size * LOGIT_BYTES / dep.tp / bw
    if tree:
        kv = target.kv_bytes_per_token * kv_shard_frac(target, dep.tp)
        over = over + 2.0 * b * np.asarray(tokens_per_cycle, dtype=float) * kv / bw
    return over


def mla_prefill_verify_s(model: ModelSpec, hw: HardwareProfile, eff: Efficiency, *, tp: int, cached_tokens: float) -> float:
    """Extra time of verifying through the prefill path of multi-head latent attention (a stack's load
    regime, `serving.cost`): every cached token's latent up-projected to keys and values
    (2·kv_lora_rank·heads·(qk_nope + v_head) FLOP per layer), which are written and read back
    ((qk_nope + qk_rope + v_head)·heads 16-bit values, twice), on one device of a group of `tp`, at the
    deployment's fractions of the part's peaks. cached_tokens: Σ context over the verifying rows. No
    table measures this path: roofline arithmetic, whatever prices the passes."""
    a = model.mla
    if a is None or cached_tokens <= 0:
        return 0.0
    heads = model.n_heads / tp
    flops = 2.0 * a.kv_lora_rank * heads * (a.qk_nope_head_dim + a.v_head_dim) * cached_tokens
    nbytes = 2.0 * 2.0 * heads * (a.qk_nope_head_dim + a.qk_rope_head_dim + a.v_head_dim) * cached_tokens
    dtype = hw.compute_dtype_for("bf16")
    per_layer = max(nbytes / (hw.mem_bandwidth_bytes_per_s * eff.bandwidth_frac),
                    flops / (hw.peak_flops_per_s[dtype] * eff.compute_frac))
    return model.n_layers * per_layer


def cycle_overhead_rates(target: ModelSpec, dep: Deployment) -> tuple[float, float]:
    """(seconds per extra verified position, seconds per accepted token a tree compacts): the two
    rates of `device_cycle_overhead_s`, for the simulator's per-iteration arithmetic."""
    bw = dep.hardware.mem_bandwidth_bytes_per_s * dep.eff.bandwidth_frac
    return (2.0 * target.vocab_size * LOGIT_BYTES / dep.tp / bw,
            2.0 * target.kv_bytes_per_token * kv_shard_frac(target, dep.tp) / bw)


__all__ = ["COST_SOURCES", "RooflineSource", "MeasuredSource", "source_for", "price_pass", "price_mix",
           "target_step_cost", "target_step_time", "pricing_source", "measured_pass", "dense_time_s",
           "masked_score_time_s", "device_cycle_overhead_s", "cycle_overhead_rates", "mla_prefill_verify_s"]
