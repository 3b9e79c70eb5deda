"""A forward pass priced from silicon-measured operator tables (`specs.operator_tables`).

specsim's own pass model over aiconfigurator-core's measured latencies, not its engine. Per layer of
a dense decoder: the QKV, O, gate/up and down GEMMs at m = T (the pass's tokens: B for a plain step,
B·M for a verify of M tokens), attention over the cache, and two all-reduces at tp > 1; then the LM
head at m = G (the positions that need logits). Element-wise work the tables do not hold (norms,
rotary, SwiGLU, residual adds, the KV write) stays where `roofline` puts it, and the pass says so.

What is read, per model and deployment (`build`):
- GEMMs in the model's weight format (`FORMAT_GEMM_DTYPES`): bf16/fp16 -> bfloat16, fp8 -> fp8
  (per-tensor scaled), fp8-block -> fp8_block, nvfp4 -> nvfp4, int4 / AWQ / GPTQ (W4A16) -> int4_wo,
  int8-wo (W8A16) -> int8_wo, int8 (W8A8) -> sq (SmoothQuant). Where the scenario's framework did not
  collect the dtype on the part, the nearest collection that did stands in (`operator_tables.
  gemm_stand_in`: its own other versions, then TensorRT-LLM, vLLM, SGLang) and the pass names it.
- Generation (decode) attention at the KV-cache dtype (bf16/fp16 -> bfloat16, fp8 -> fp8); a part
  whose table has no fp8 KV rows (A100) is not covered, and `covered` says so.
- Context (prefill) attention for prompt chunks (`context_attention_time_s`).
- MoE layers: the fused routed-expert op from moe_perf at the model's expert shape (hidden, expert
  ffn, top-k, experts) at moe_tp_size = tp, ep 1, its balanced-routing rows read as time against the
  experts read, at the count uniform routing touches (the roofline's; `_touched_reading`); the router
  and shared experts as GEMMs; leading dense layers as a dense FFN.
- The custom all-reduce at the group size.
- Sliding-window attention: the full-attention rows at the window-clipped KV length (a window kernel
  reads the last W tokens); the tables' own window rows (128, 1024, 8192) match few models' windows.
Not read yet (`covered` says so): MLA attention (the mla and mla_bmm tables).

Interpolation, and why it fits the data:
- GEMM in m: piecewise-linear between the measured m (74 values, 1..32768 on Hopper; 21 on A100's
  TensorRT-LLM collection) at one (n, k): the latency is flat while the weights dominate and linear
  in m once compute does; the knees are where the table measures densely. The latencies over m at one
  (n, k) (bilinear off the grid, below), and a MoE shape's over its token counts, are fitted
  non-decreasing (`nondecreasing`: more tokens are never less work; the tables' dips are noise a pass
  multiplies by its layers). Past the last m a corner measured, the curve goes on in proportion to m
  (compute-bound there), and the pass says so.
- GEMM in (n, k) off the grid (n, k in 32..65536 on 22 points): bilinear. A memory- or
  compute-bound GEMM costs a + b·n·k, which bilinear interpolation reproduces exactly. A corner the
  collector skipped (n = k = 65536) is filled from its measured neighbours in proportion to n·k, noted.
  n or k wider than the grid (an LM head of 128 k vocabulary) is priced as blocks of a size the grid
  holds (column blocks for n, split-K blocks for k), which is how a wide GEMM splits, and is noted.
- Generation attention (per layer, by batch and KV length 'step'): bilinear in (batch, step) between
  measured points (latency ≈ a + c·batch·step once memory-bound). Cells the table left out (batch ×
  step past the part's memory) are filled from the row's last measured step in proportion to the KV
  tokens read (the rows double with step there), and a pass that lands there is noted.
- A verify of M query tokens over L cached ones is read from the generation table by the pricing
  source (`cost.pricing.MeasuredSource._decode`): a scorer that runs the M positions in one call packs
  them, with the query heads sharing a KV head, into the rows of one tile that reads the cache once
  (FlashAttention-3's PackGQA), so it reads the table at B·ceil(M·g / 128) queries and KV length L + M;
  an expanding scorer reads it at B·M one-token queries. AIConfigurator's own convention for MTP
  verification, B·M queries at L + M ("batch widening by nextn + 1"), was read until December 2026;
  it charges M reads of the cache a sequence. The M·(M+1)/2 causal pairs inside the block are noise
  beside L.
- Attention at a (heads, KV heads) per GPU the tables did not collect (Qwen2.5-7B's 28/4; the tables
  hold num_heads 1..96 on a grid with gaps): linear between the two nearest collected shapes at the
  same head_dim, KV dtype and kernel, cell by cell; at the same KV heads in num_heads, else (MHA at
  KV heads not collected) along the same group size in KV heads, else bilinear in (heads, KV heads)
  (`_interpolated_rows` says why the form is linear). Never past the collected shapes: `covered`
  then names what was collected. Left out in turn on H100 (24 heads at 4 and 8 KV heads; MHA 24/24
  and 40/40; the whole 4-KV-head level), the collected rows come back within 0.8-2.1 % (generation)
  and 1.6-2.8 % (context) at the median, 57 % at worst (launch-bound cells of a few µs where a
  neighbour is the outlier): tests/test_measured_heads.py.
- Context attention (per layer, by batch and prompt length isl): bilinear in (batch, isl), 0 at
  isl = 0. The tables measure fresh prompts only (`step` is 0 in every 0.12.0 collection), so a
  chunk of c tokens after p cached ones is priced as the difference of two fresh prompts,
  T(p + c) - T(p): that difference holds exactly the chunk's causal pairs c·p + c(c+1)/2, which is
  what a prefill kernel computes; it is kept at least T(c) (the chunk alone, launch floor included).
  Cells past the part's memory (large batch × isl) are filled from the column's last measured batch
  in proportion to the sequences; past isl 16384 the time grows with the square of the prompt (the
  pairs), past the largest batch in proportion to it; both are noted.
- All-reduce: piecewise-linear in message size (elements of bf16 = T · hidden) at the group size,
  the CUDA-graph backend where the collection has one (stacks capture decode and verify in graphs).
  Past the largest measured message it goes on linearly (bandwidth-bound), noted.
Outside the measured range nothing is extrapolated silently: a note naming the op and the shape
goes into the pass's `notes` (shapes of the model) or `range_notes` (shapes of one evaluation).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..errors import field_error
from ..specs.models import ModelSpec
from ..specs.operator_tables import ATTENTION_DEFAULTS, OperatorTables, gemm_stand_in

# weight format (specs.models.WEIGHT_FORMATS) -> the gemm_dtype its linear layers run as in the tables.
# Formats not here (fp32, fp4, GGUF) run kernels no collected framework measured.
FORMAT_GEMM_DTYPES = {"bf16": "bfloat16", "fp16": "bfloat16", "fp8": "fp8", "fp8-block": "fp8_block",
                      "nvfp4": "nvfp4", "int4": "int4_wo", "int4-awq": "int4_wo", "int4-gptq": "int4_wo",
                      "int8-wo": "int8_wo", "int8": "sq"}
# KV-cache dtype (specs.models.KV_DTYPES) -> the tables' kv_cache_dtype
KV_TABLE_DTYPES = {"bf16": "bfloat16", "fp16": "bfloat16", "fp8": "fp8"}
# Every count a pass is asked about must stay where a float64 counts exactly; past it the shape is
# an overflow (B × M of two huge numbers), not a workload, and the time would come out inf.
MAX_COUNT_EXACT = 2.0 ** 53


def gemm_dtype(model: ModelSpec) -> str | None:
    """The table dtype a model's linear layers run in, or None where no table holds its kernels."""
    return FORMAT_GEMM_DTYPES.get(model.weight_format)


def _head_format(model: ModelSpec) -> str:
    return model.lm_head_weight_format or model.weight_format


@dataclass(frozen=True, slots=True, kw_only=True)
class GemmGrid:
    """One dtype's GEMM table as a dense cube latency_s[m, n, k] (NaN where not measured)."""

    kernel_source: str
    m: np.ndarray
    n: np.ndarray
    k: np.ndarray
    latency_s: np.ndarray

    @classmethod
    def from_frame(cls, df, dtype: str) -> "GemmGrid | None":
        d = df[df["gemm_dtype"] == dtype]
        if d.empty:
            return None
        src = d["kernel_source"].mode().iloc[0]  # one kernel per dtype in 0.12.0; the commonest if more
        d = d[d["kernel_source"] == src]
        m, n, k = (np.unique(d[c].to_numpy(np.float64)) for c in ("m", "n", "k"))
        cube = np.full((m.size, n.size, k.size), np.nan)
        cube[np.searchsorted(m, d["m"].to_numpy(np.float64)), np.searchsorted(n, d["n"].to_numpy(np.float64)),
             np.searchsorted(k, d["k"].to_numpy(np.float64))] = d["latency_s"].to_numpy(np.float64)
        return cls(kernel_source=str(src), m=m, n=n, k=k, latency_s=cube)

    def curve(self, n: float, k: float, notes: list[str], name: str) -> np.ndarray:
        """Latency over self.m of one GEMM of (n, k): bilinear in (n, k) at each measured m."""
        return self.curve_and_reach(n, k, notes, name)[0]

    def curve_and_reach(self, n: float, k: float, notes: list[str], name: str) -> tuple[np.ndarray, float]:
        """(latency over self.m, the largest m its corners measured). Blocks, fills and clamps noted."""
        blocks = 1
        if n > self.n[-1]:  # a GEMM wider than the grid runs as column blocks the grid holds
            nb = int(np.ceil(n / self.n[-1]))
            notes.append(f"gemm {name}: n = {n:g} wider than the measured {self.n[-1]:g}: priced as {nb} "
                         f"column blocks of n = {n / nb:g}")
            n, blocks = n / nb, blocks * nb
        if k > self.k[-1]:  # split-K: partial products of k blocks the grid holds, summed
            kb = int(np.ceil(k / self.k[-1]))
            notes.append(f"gemm {name}: k = {k:g} deeper than the measured {self.k[-1]:g}: priced as {kb} "
                         f"split-K blocks of k = {k / kb:g}")
            k, blocks = k / kb, blocks * kb
        if n < self.n[0] or k < self.k[0]:
            notes.append(f"gemm {name}: (n, k) = ({n:g}, {k:g}) below the measured n >= {self.n[0]:g}, "
                         f"k >= {self.k[0]:g}: priced at the smallest measured shape (launch-bound there)")
        n_c, k_c = max(n, self.n[0]), max(k, self.k[0])
        i = int(np.clip(np.searchsorted(self.n, n_c) - 1, 0, self.n.size - 2))
        j = int(np.clip(np.searchsorted(self.k, k_c) - 1, 0, self.k.size - 2))
        u = (n_c - self.n[i]) / (self.n[i + 1] - self.n[i])
        v = (k_c - self.k[j]) / (self.k[j + 1] - self.k[j])
        corners = self.latency_s[:, i:i + 2, j:j + 2].copy()  # [m, 2, 2]
        nk = np.outer(self.n[i:i + 2], self.k[j:j + 2])  # [2, 2]
        gap = np.isnan(corners)
        partly = gap.any(axis=(1, 2)) & ~gap.all(axis=(1, 2))
        if partly.any():  # a corner the collector skipped: from its measured neighbours, in proportion to n·k
            rows = corners[partly]
            seen = ~np.isnan(rows)
            per_nk = np.where(seen, rows / nk, 0.0).sum(axis=(1, 2)) / seen.sum(axis=(1, 2))
            corners[partly] = np.where(seen, rows, per_nk[:, None, None] * nk[None, :, :])
            miss = sorted({(float(self.n[i + a]), float(self.k[j + b])) for a in (0, 1) for b in (0, 1)
                           if gap[partly][:, a, b].any()})
            notes.append(f"gemm {name}: grid corner(s) {', '.join(f'({a:g}, {b:g})' for a, b in miss)} not measured "
                         "at some m: filled from the measured neighbours in proportion to n·k")
        out = ((1 - u) * (1 - v) * corners[:, 0, 0] + u * (1 - v) * corners[:, 1, 0]
               + (1 - u) * v * corners[:, 0, 1] + u * v * corners[:, 1, 1])
        ok = ~np.isnan(out)
        if not ok.any():
            return np.full(self.m.shape, np.nan), 0.0
        last = int(np.flatnonzero(ok)[-1])
        if not ok.all():
            # inside: piecewise-linear over the measured m; past the last: in proportion to m (compute-bound)
            inner = np.interp(self.m, self.m[ok], out[ok])
            out = np.where(self.m > self.m[last], out[last] * self.m / self.m[last], inner)
            if last < self.m.size - 1:
                notes.append(f"gemm {name}: measured up to m = {self.m[last]:g} at (n, k) = ({n:g}, {k:g}): "
                             "larger m continued in proportion to m")
        return blocks * nondecreasing(out), float(self.m[last])


def nondecreasing(latency_s: np.ndarray) -> np.ndarray:
    """The least-squares non-decreasing fit (isotonic regression) of latencies measured at increasing
    token counts. An operator's time never falls as its tokens grow: more rows are never less work, and a
    framework may always run a smaller batch padded into a larger one's kernel (vLLM and SGLang pad each
    iteration to a captured CUDA-graph size). The tables' dips are measurement noise of a few per cent
    (Qwen3-8B's GEMMs on H100, vLLM 0.24 collection, summed over 36 layers: 5.79 ms at 32 tokens, 5.26 ms
    at 48, 5.87 ms at 64), and a pass multiplies them by its layers; read raw, the verify of 4 tokens a
    sequence at batch 32 came out cheaper than the plain step at 32. Pooling adjacent violators keeps
    every measured rise and averages each dip with its neighbours."""
    from scipy.optimize import isotonic_regression  # scipy loads only where tables are read

    return isotonic_regression(np.asarray(latency_s, dtype=np.float64), increasing=True).x


def _interp_extrap(x, xp, fp):
    """np.interp, continued linearly past the last point from the last two (beyond is noted by callers)."""
    y = np.interp(x, xp, fp)
    slope = (fp[-1] - fp[-2]) / (xp[-1] - xp[-2])
    return np.where(x > xp[-1], fp[-1] + slope * (x - xp[-1]), y)


def _bilinear(x, y, gx, gy, cells):
    """cells[gx, gy] at (x, y) by np.interp positions (clamped to the grid), then the four corners."""
    fi = np.interp(x, gx, np.arange(gx.size, dtype=np.float64))
    fj = np.interp(y, gy, np.arange(gy.size, dtype=np.float64))
    i = np.minimum(fi.astype(np.intp), gx.size - 2)
    j = np.minimum(fj.astype(np.intp), gy.size - 2)
    u, v = fi - i, fj - j
    flat, w = cells.ravel(), gy.size
    k = i * w + j
    return (1 - u) * ((1 - v) * flat[k] + v * flat[k + 1]) + u * ((1 - v) * flat[k + w] + v * flat[k + w + 1])


@dataclass(frozen=True, slots=True, kw_only=True)
class MeasuredPass:
    """A model's passes on one system and framework at tensor-parallel degree tp, tabulated.

    All times are seconds for the whole model (every layer), vectorised over numpy arrays.
    m: token counts (0 prepended); layers_s[i]: all layers' GEMMs at m[i] tokens; head_s[i]: the LM head
    at m[i] logit rows; generation attention over (batch, step) with a zero row at batch 0; context
    attention over (batch, isl) with zeros at batch 0 and isl 0; the all-reduce curve."""

    label: str
    m: np.ndarray
    layers_s: np.ndarray
    head_s: np.ndarray
    attn_batch: np.ndarray
    attn_step: np.ndarray
    attn_s: np.ndarray
    attn_filled: np.ndarray
    ar_elems: np.ndarray
    ar_s: np.ndarray
    n_allreduce: int
    hidden_size: int
    notes: tuple[str, ...]
    ctx_batch: np.ndarray = field(default_factory=lambda: np.zeros(0))
    ctx_isl: np.ndarray = field(default_factory=lambda: np.zeros(0))
    ctx_s: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))
    ctx_filled: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), dtype=bool))
    layers_m_measured: float = np.inf  # the largest m every layer GEMM's corners (and the MoE op) measured
    head_m_measured: float = np.inf
    gemm_grid: GemmGrid | None = None  # the weight dtype's grid, for gemm_time_s
    n_layers: int = 1
    window: int = 0  # sliding-window attention: the last `window` cached tokens are read (0: all)
    _gemm_curves: dict = field(default_factory=dict, repr=False, compare=False)

    def layers_time_s(self, n_tokens) -> np.ndarray:
        """Every layer's GEMMs (QKV, O, gate/up, down) at m = n_tokens."""
        return _interp_extrap(np.asarray(n_tokens, dtype=np.float64), self.m, self.layers_s)

    def head_time_s(self, n_logits) -> np.ndarray:
        """The LM head at m = n_logits rows."""
        return _interp_extrap(np.asarray(n_logits, dtype=np.float64), self.m, self.head_s)

    def attention_time_s(self, n_queries, kv_len) -> np.ndarray:
        """All layers' generation attention for n_queries decode queries each over kv_len cached tokens
        (how a verify of M tokens over L maps to queries: the module docstring)."""
        b = np.asarray(n_queries, dtype=np.float64)
        s = np.asarray(kv_len, dtype=np.float64)
        if self.window:
            s = np.minimum(s, self.window)
        gb, gs = self.attn_batch, self.attn_step
        t = _bilinear(b, s, gb, gs, self.attn_s)
        # past the grid: in proportion to the queries and to the KV tokens (memory-bound there)
        if b.size and (b.max() > gb[-1] or s.max() > gs[-1]):
            t = t * np.maximum(b / gb[-1], 1.0) * np.maximum(s / gs[-1], 1.0)
        return t

    def _context_fresh_s(self, b, x):
        """All layers' context attention for b fresh prompts of x tokens each (0 at b = 0 or x = 0)."""
        gb, gx = self.ctx_batch, self.ctx_isl
        t = _bilinear(b, x, gb, gx, self.ctx_s)
        if b.size and (b.max() > gb[-1] or x.max() > gx[-1]):
            t = t * np.maximum(b / gb[-1], 1.0) * np.maximum(x / gx[-1], 1.0) ** 2
        return t

    def context_attention_time_s(self, n_seqs, chunk_len, prefix_len) -> np.ndarray:
        """All layers' context attention for n_seqs prompt chunks of chunk_len new tokens, each after
        prefix_len cached tokens of its sequence. The tables hold fresh prompts only, so a prefix is
        priced as T(prefix + chunk) - T(prefix), the chunk's own causal pairs, at least T(chunk)."""
        b = np.asarray(n_seqs, dtype=np.float64)
        c = np.asarray(chunk_len, dtype=np.float64)
        p = np.asarray(prefix_len, dtype=np.float64)
        b, c, p = np.broadcast_arrays(b, c, p)
        if self.window:
            p = np.minimum(p, self.window)
        whole = self._context_fresh_s(b, p + c) - self._context_fresh_s(b, p)
        return np.maximum(whole, self._context_fresh_s(b, c))

    def allreduce_time_s(self, n_tokens) -> np.ndarray:
        """The pass's all-reduces (two a layer) of n_tokens × hidden bf16 elements; 0 at tp 1."""
        if self.ar_elems.size == 0:
            return np.zeros(np.shape(n_tokens))
        e = np.asarray(n_tokens, dtype=np.float64) * self.hidden_size
        return np.where(e > 0, self.n_allreduce * _interp_extrap(e, self.ar_elems, self.ar_s), 0.0)

    def gemm_time_s(self, n, k, m) -> np.ndarray:
        """One GEMM of output width n and input depth k at m rows, in this pass's weight dtype (the
        dense blocks: an EAGLE projection, Medusa/Hydra heads). Its own shape notes: `gemm_notes`."""
        curve, _ = self._gemm_curve(float(n), float(k))
        mm = np.concatenate([[0.0], self.gemm_grid.m])
        return _interp_extrap(np.asarray(m, dtype=np.float64), mm, np.concatenate([[0.0], curve]))

    def gemm_notes(self, n, k) -> tuple[str, ...]:
        """What `gemm_time_s` at (n, k) had to block, fill or clamp."""
        return self._gemm_curve(float(n), float(k))[1]

    def _gemm_curve(self, n: float, k: float):
        if self.gemm_grid is None:
            raise ValueError("this MeasuredPass was built without its GEMM grid")
        hit = self._gemm_curves.get((n, k))
        if hit is None:
            notes: list[str] = []
            curve, _ = self.gemm_grid.curve_and_reach(n, k, notes, f"({n:g} x {k:g})")
            hit = self._gemm_curves[(n, k)] = (curve, tuple(notes))
        return hit

    def range_notes(self, *, n_tokens, n_queries, kv_len, prefill_seqs=0, prefill_len=0) -> tuple[str, ...]:
        """Notes for the shapes of one evaluation that fall outside what the tables measured.
        prefill_len: a prefill sequence's prefix + chunk tokens. A count past 2**53 (an overflowed
        product of finite shapes) is refused in one line: its time would come out inf."""
        top = {}
        for name, x in (("n_tokens", n_tokens), ("n_queries", n_queries), ("kv_len", kv_len),
                        ("prefill_seqs", prefill_seqs), ("prefill_len", prefill_len)):
            a = np.asarray(x, dtype=np.float64)
            top[name] = float(np.max(a)) if a.size else 0.0  # nan and inf propagate to the max
            if not top[name] <= MAX_COUNT_EXACT:
                bad = a[~(np.isfinite(a) & (a <= MAX_COUNT_EXACT))].flat[0]
                raise field_error("measured pass", name, float(bad),
                                  f"a finite count up to 2**53 = {MAX_COUNT_EXACT:.3g} (a larger one is an overflowed "
                                  "product of the shapes, whose time would be inf)")
        out = []
        t, b, s = top["n_tokens"], top["n_queries"], top["kv_len"]
        if self.window:
            s = min(s, float(self.window))
        if t > self.m[-1]:
            out.append(f"gemm: m = {t:g} tokens past the measured {self.m[-1]:g}: continued linearly")
        elif t > self.layers_m_measured:
            out.append(f"gemm: m = {t:g} tokens past the {self.layers_m_measured:g} every layer op (GEMM, MoE) "
                       "measured: continued in proportion to m")
        if b > self.attn_batch[-1] or s > self.attn_step[-1]:
            out.append(f"generation_attention: batch {b:g} × kv {s:g} past the measured batch {self.attn_batch[-1]:g}, "
                       f"kv {self.attn_step[-1]:g}: scaled in proportion")
        elif self.attn_filled.any() and b > 0:
            i = min(int(np.searchsorted(self.attn_batch, b)), self.attn_batch.size - 1)
            j = min(int(np.searchsorted(self.attn_step, s)), self.attn_step.size - 1)
            if self.attn_filled[i, j]:
                out.append(f"generation_attention: batch {b:g} × kv {s:g} not measured (past the part's memory in "
                           "the collection): filled from the row's last measured kv in proportion")
        if self.ar_elems.size and t * self.hidden_size > self.ar_elems[-1]:
            out.append(f"custom_allreduce: message of {t * self.hidden_size:g} elements past the measured "
                       f"{self.ar_elems[-1]:g}: continued linearly")
        ps, pl = top["prefill_seqs"], top["prefill_len"]
        if ps > 0 and pl > 0 and self.ctx_isl.size:
            if ps > self.ctx_batch[-1] or pl > self.ctx_isl[-1]:
                out.append(f"context_attention: {ps:g} prompts × {pl:g} tokens past the measured batch "
                           f"{self.ctx_batch[-1]:g}, isl {self.ctx_isl[-1]:g}: scaled with the sequences and the "
                           "square of the prompt")
            else:
                i = min(int(np.searchsorted(self.ctx_batch, ps)), self.ctx_batch.size - 1)
                j = min(int(np.searchsorted(self.ctx_isl, pl)), self.ctx_isl.size - 1)
                if self.ctx_filled[i, j]:
                    out.append(f"context_attention: {ps:g} prompts × {pl:g} tokens not measured (past the part's "
                               "memory in the collection): filled from the column's last measured batch in proportion")
        return tuple(out)


def covered(model: ModelSpec, tables: OperatorTables | None = None, *, tp: int = 1,
            kv_cache_dtype: str | None = None) -> str:
    """'' when the tables can price this model's passes, else why not (it then stays on the roofline).
    Without tables, the reasons the model alone gives; with them, the exact table, row or group missing."""
    why = _model_reason(model, kv_cache_dtype or model.kv_cache_dtype)
    if why or tables is None:
        return why
    got = build(tables, model, tp, kv_cache_dtype=kv_cache_dtype)
    return "" if got is not None else _BUILT[_key(tables, model, tp, kv_cache_dtype or model.kv_cache_dtype)][2]


def _model_reason(model: ModelSpec, kv: str) -> str:
    if model.mla is not None:
        return "multi-head latent attention (the mla tables are not read yet)"
    if model.architecture == "encoder-decoder":
        return "an encoder-decoder"
    for what, fmt in (("weight_format", model.weight_format), ("lm_head_weight_format", _head_format(model))):
        if fmt not in FORMAT_GEMM_DTYPES:
            return (f"{what} {fmt!r}: no collected framework measured its kernels (the tables' formats: "
                    f"{', '.join(FORMAT_GEMM_DTYPES)})")
    if kv not in KV_TABLE_DTYPES:
        return f"kv_cache_dtype {kv!r}: the attention tables hold bf16/fp16 and fp8 KV caches only"
    return ""


_BUILT: dict = {}


def _key(tables, model, tp, kv):
    # by the model's id and fields, not the object: every resolve loads its models afresh and derives a
    # drafter's head model anew, and tabulating one costs tens of ms (issue 37: replay's fits rebuilt the
    # same passes hundreds of times)
    return (id(tables), model.id, tp, kv)


def build(tables: OperatorTables, model: ModelSpec, tp: int, *, kv_cache_dtype: str | None = None) -> MeasuredPass | None:
    """Tabulate `model` at tp on `tables` with its KV cache in kv_cache_dtype (None: the model's), or
    None where the tables do not cover it (`covered` says why). Built once per (tables, model, tp, kv)."""
    kv = kv_cache_dtype or model.kv_cache_dtype
    key = _key(tables, model, tp, kv)
    hit = _BUILT.get(key)
    if hit is None or hit[0] is not tables or (hit[1] is not model and hit[1] != model):
        why = _model_reason(model, kv)
        got = _tabulate(tables, model, tp, kv) if not why else why
        hit = _BUILT[key] = (tables, model, got)
    return hit[2] if isinstance(hit[2], MeasuredPass) else None


def _gemm_grid(tables: OperatorTables, dtype: str, notes: list[str]):
    """(grid, label suffix) of dtype from the scenario's framework, else from its stand-in (named in the
    suffix and in notes); (None, why) where no collection on the part has it."""
    grid = GemmGrid.from_frame(tables.frames["gemm_perf"], dtype)
    if grid is not None:
        return grid, ""
    alt = gemm_stand_in(tables, dtype)
    if alt is None:
        have = sorted(map(str, tables.frames["gemm_perf"]["gemm_dtype"].unique()))
        return None, (f"gemm {dtype}: no collection on {tables.system} measured it ({tables.framework} "
                      f"{tables.versions['gemm_perf']} has {', '.join(have)}; no other framework or version has it)")
    fw, ver, frame = alt
    grid = GemmGrid.from_frame(frame, dtype)
    notes.append(f"gemm {dtype}: {tables.framework} {tables.versions['gemm_perf']} did not collect it on "
                 f"{tables.system}; {fw} {ver}'s {grid.kernel_source} kernel stands in")
    return grid, f" (from {fw} {ver})"


def _pick_kernel(src: list, table: str, tables: OperatorTables, shape: str, notes: list[str]) -> str:
    """The framework's default kernel on the part where AIC records it (ATTENTION_DEFAULTS), else the
    non-Triton kernel over the Triton fallback; vLLM 0.24 on Blackwell splits FlashInfer into a
    prefill and a decode lane: each table takes its own phase's lane. A default not collected at the
    shape is noted with its stand-in."""
    other = "decode" if table.startswith("context") else "prefill"
    default = ATTENTION_DEFAULTS.get((tables.framework, tables.system))
    pick = ([default] if default in src else [s for s in src if "triton" not in s and other not in s]
            or [s for s in src if "triton" not in s] or src)
    if default is not None and default not in src:
        notes.append(f"{table}: {tables.framework}'s default {default} kernel on {tables.system} was not collected "
                     f"at {shape} (heads/KV heads/head_dim); {pick[0]} stands in")
    return str(pick[0])


def _kernel_rows(a, kernel: str, kv: str):
    """One kernel's rows; fp8 KV runs fp8 math where the collection has both attn_dtype lanes."""
    a = a[a["kernel_source"] == kernel]
    if "attn_dtype" in a.columns and a["attn_dtype"].nunique() > 1:
        prefer = kv if (a["attn_dtype"] == kv).any() else "bfloat16"
        a = a[a["attn_dtype"] == prefer]
    return a


def _attention_rows(frame, table: str, tables: OperatorTables, heads: int, kv_heads: int, hd: int, kv: str,
                    notes: list[str]):
    """The rows of one attention table for this shard's shape and KV dtype, one kernel; or a reason.
    A shape the table did not collect is interpolated between two it did (`_interpolated_rows`)."""
    full = frame[(frame["head_dim"] == hd) & (frame["window_size"] == 0)]
    shape = full[(full["num_heads"] == heads) & (full["num_key_value_heads"] == kv_heads)]
    if shape.empty:
        return _interpolated_rows(full, table, tables, heads, kv_heads, hd, kv, notes)
    where = f"{table} ({tables.system} {tables.framework} {tables.versions[table]})"
    a = shape[shape["kv_cache_dtype"] == kv]
    if a.empty:
        have = ", ".join(sorted(map(str, shape["kv_cache_dtype"].unique())))
        return None, "", f"{kv} KV cache: {where} collected kv_cache_dtype {have} only at this shape"
    kernel = _pick_kernel(sorted(a["kernel_source"].unique()), table, tables, f"{heads}/{kv_heads}/{hd}", notes)
    return _kernel_rows(a, kernel, kv), kernel, ""


def _interpolated_rows(full, table: str, tables: OperatorTables, heads: int, kv_heads: int, hd: int, kv: str,
                       notes: list[str]):
    """Rows for a (heads, KV heads) the table did not collect, linear between the nearest collected
    shapes at the same head_dim, KV dtype and kernel, cell by cell ((batch, step) or (batch, isl) every
    end measured); nothing past the collected shapes (the reason then names what was collected).

    First at the same KV heads, linear in num_heads: decode attention reads each KV head's cache once
    for the query heads of its group (bytes fixed by KV heads and the KV length) and spends score and
    value FLOPs linear in the query heads; prefill is compute-bound with FLOPs linear in the query
    heads. Either way latency ≈ a + b·num_heads at fixed KV heads. Where the KV heads were not
    collected at all: along the same group size (query heads per KV head; MHA 20/20 on SGLang between
    16/16 and 24/24), where bytes and FLOPs both grow with the KV heads, so latency ≈ a + b·KV heads;
    else bilinear, in num_heads at the two nearest collected KV heads and then linear in KV heads
    (at fixed query heads the KV read, the memory-bound part, is linear in the KV heads: SmolLM2-135M's
    9/3 from 8 and 12 heads at 2 and 4 KV heads). Left out in turn, the collected 24 heads at 4 and 8
    KV heads on H100 come back within 0.83 % (generation) and 2.2 % (context) at the median; the
    figures: tests/test_measured_heads.py."""
    col = "isl" if table.startswith("context") else "step"
    where = f"{table} ({tables.system} {tables.framework} {tables.versions[table]})"
    at = full[full["kv_cache_dtype"] == kv]
    if at.empty and not full.empty:  # the dtype, not the shape (A100: no fp8 KV rows at all)
        have = ", ".join(sorted(map(str, full["kv_cache_dtype"].unique())))
        return None, "", f"{kv} KV cache: {where} collected kv_cache_dtype {have} only at head_dim {hd}"
    pairs = set(zip(at["num_heads"].astype(int), at["num_key_value_heads"].astype(int)))
    group = heads // kv_heads

    def around(values, x):  # the nearest collected value on each side, or None
        lo, hi = [v for v in values if v < x], [v for v in values if v > x]
        return (lo[-1], hi[0]) if lo and hi else None

    def in_heads(g):  # [((h, g), weight)] for `heads` at g KV heads, or None
        hs = sorted(h for h, gg in pairs if gg == g)
        if heads in hs:
            return [((heads, g), 1.0)]
        br = around(hs, heads)
        if br is None:
            return None
        w = (heads - br[0]) / (br[1] - br[0])
        return [((br[0], g), 1 - w), ((br[1], g), w)]

    hs = sorted(h for h, g in pairs if g == kv_heads)
    gs = sorted(g for h, g in pairs if h * kv_heads == heads * g)  # the same group size
    kvs = sorted({g for _, g in pairs})
    ends = in_heads(kv_heads)
    if ends is not None:
        how = f"linear in num_heads between the collected {ends[0][0][0]} and {ends[1][0][0]} heads at {kv_heads} KV heads"
    elif around(gs, kv_heads) is not None:
        g0, g1 = around(gs, kv_heads)
        w = (kv_heads - g0) / (g1 - g0)
        ends = [((g0 * group, g0), 1 - w), ((g1 * group, g1), w)]
        how = (f"linear in KV heads at group size {group} (query heads per KV head) between the collected "
               f"{g0 * group}/{g0} and {g1 * group}/{g1} (heads/KV heads)")
    elif around(kvs, kv_heads) is not None and all(in_heads(g) for g in around(kvs, kv_heads)):
        g0, g1 = around(kvs, kv_heads)
        v = (kv_heads - g0) / (g1 - g0)
        ends = [(hg, w * (1 - v)) for hg, w in in_heads(g0)] + [(hg, w * v) for hg, w in in_heads(g1)]
        how = (f"bilinear: in num_heads at the collected {g0} and {g1} KV heads, then linear in KV heads, from "
               f"{', '.join(f'{h}/{g}' for (h, g), _ in ends)} (heads/KV heads)")
    else:
        side = around(kvs, kv_heads) or ()
        return None, "", (f"{where} has no row for {heads} heads, {kv_heads} KV heads, head_dim {hd} per GPU (full "
                          f"attention, kv {kv}) and none on both sides to interpolate from (not extrapolated): at "
                          f"{kv_heads} KV heads it collected num_heads {_listed(hs)}; at group size {group} (query "
                          f"heads per KV head), KV heads {_listed(gs)}; KV heads collected: {_listed(kvs)}"
                          + "".join(f"; num_heads at {g} KV heads: {_listed(sorted(h for h, gg in pairs if gg == g))}"
                                    for g in side))
    rows = [at[(at["num_heads"] == h) & (at["num_key_value_heads"] == g)] for (h, g), _ in ends]
    shape = " and ".join(f"{h}/{g}/{hd}" for (h, g), _ in ends)
    common = sorted(set.intersection(*(set(r["kernel_source"]) for r in rows)))
    if not common:
        return None, "", f"{where}: {heads}/{kv_heads}/{hd} lies between the collected {shape}, with no kernel in common"
    kernel = _pick_kernel(common, table, tables, shape, notes)
    grids = [_kernel_rows(r, kernel, kv).pivot_table(index="batch_size", columns=col, values="latency_s",
                                                    aggfunc="median") for r in rows]
    idx, cols = grids[0].index, grids[0].columns
    for g in grids[1:]:
        idx, cols = idx.intersection(g.index), cols.intersection(g.columns)
    mix = sum(w * g.reindex(index=idx, columns=cols) for g, (_, w) in zip(grids, ends))
    cells = mix.stack().dropna().rename("latency_s").reset_index()
    if cells.empty:
        return None, "", f"{where}: the collected {shape} share no measured cell"
    notes.append(f"{table}: {heads}/{kv_heads}/{hd} (heads/KV heads/head_dim) not collected; {how} "
                 f"({kernel}, kv {kv}), cell by cell")
    return cells, kernel, ""


def _listed(values) -> str:
    return ", ".join(map(str, values)) if values else "none"


def _grid(a, rows: str, cols: str, fill_rows: bool):
    """pivot latency_s[rows, cols] with a zero row at rows = 0 (and a zero column at cols = 0 when
    fill_rows is False: a fresh prompt of 0 tokens). NaN cells filled: along a row in proportion to cols
    (fill_rows True: generation, memory-bound in the KV read) or down a column in proportion to rows
    (False: context, the sequences are independent). Returns (row grid, col grid, cells, filled) or None."""
    pv = a.pivot_table(index=rows, columns=cols, values="latency_s", aggfunc="median")
    gr, gc = pv.index.to_numpy(np.float64), pv.columns.to_numpy(np.float64)
    cell = pv.to_numpy(np.float64).copy()
    filled = np.isnan(cell)
    if fill_rows:
        for r in range(cell.shape[0]):
            ok = np.flatnonzero(~filled[r])
            if ok.size == 0:
                return None
            cell[r, ok[-1] + 1:] = cell[r, ok[-1]] * gc[ok[-1] + 1:] / gc[ok[-1]]
            cell[r, :ok[0]] = cell[r, ok[0]]
    else:
        for c in range(cell.shape[1]):
            ok = np.flatnonzero(~filled[:, c])
            if ok.size == 0:
                return None
            cell[ok[-1] + 1:, c] = cell[ok[-1], c] * gr[ok[-1] + 1:] / gr[ok[-1]]
            cell[:ok[0], c] = cell[ok[0], c]
        gc = np.concatenate([[0.0], gc])
        cell = np.concatenate([np.zeros((cell.shape[0], 1)), cell], axis=1)
        filled = np.concatenate([np.zeros((filled.shape[0], 1), dtype=bool), filled], axis=1)
    gr = np.concatenate([[0.0], gr])
    cell = np.concatenate([np.zeros((1, cell.shape[1])), cell], axis=0)
    filled = np.concatenate([np.zeros((1, filled.shape[1]), dtype=bool), filled], axis=0)
    return gr, gc, cell, filled


def _allreduce(tables: OperatorTables, tp: int, parts: list[str], notes: list[str]):
    ar = tables.frames.get("custom_allreduce_perf")
    if ar is None:
        return None, f"no custom_allreduce_perf for {tables.framework} on {tables.system} (tp {tp} needs one)"
    where = f"custom_allreduce_perf ({tables.system} {tables.framework} {tables.versions['custom_allreduce_perf']})"
    r = ar[ar["num_gpus"] == tp]
    if r.empty:
        groups = ", ".join(str(int(g)) for g in sorted(ar["num_gpus"].unique()))
        return None, f"{where} has no tp {tp} group: it measured groups of {groups}"
    backend = ""  # a collection without a backend column measured the one its framework runs
    if "backend" in r.columns:
        backend = "graph"
        g = r[r["backend"].astype(str).str.endswith("graph")]
        if g.empty:  # b60's vLLM collections measured eager only
            backend = str(r["backend"].iloc[0])
            notes.append(f"custom_allreduce: {where} has no CUDA-graph rows; its {backend} rows stand in")
        r = g if not g.empty else r
    r = r.groupby("message_size")["latency_s"].median()
    parts.append(f"custom_allreduce {backend} tp {tp}".replace("  ", " "))
    return (r.index.to_numpy(np.float64), r.to_numpy(np.float64)), ""


# How the tables' MoE rows are read. Routing is the workload's, not the price source's: the roofline and the
# kernel curves read a layer at the experts T tokens touch under independent uniform routing,
# `MoESpec.experts_touched` = E·(1 − (1 − k/E)^T), and the tables are read at that same count, so the two
# sources of one pass differ in kernel times only. AIConfigurator's balanced rows make that reading possible:
# its collectors route T tokens to exactly min(kT, E) experts (`balanced_logits`: T < ⌈E/k⌉ tokens spread over
# distinct experts, more tokens cycle over all of them; aiconfigurator collector/*/collect_moe.py), so below
# E/k tokens a balanced row is the kernel's time against the experts it reads, f(D) at D = kT. A pass of T
# tokens is read at f(E·(1 − (1 − k/E)^T)); past E/k tokens (every expert read under balanced routing) the
# balanced time t(T) is scaled by f(touched) / f(E), which tends to 1 as uniform routing reaches every expert.
# Until December 2026 the tables were read at AIConfigurator's own power_law_1.01 rows (and balanced rows read
# as token counts before that); on the Qwen3-30B-A3B load sweeps, out of source, the shared reading reads the
# SpecForge sweeps at 6.3 and 20.5 % against 15.5 and 24.0 % (data/published/README.md, 'MoE layers at the
# roofline's routing'). A shape without balanced rows falls back to these, in order, as token counts (noted).
MOE_FALLBACK_DISTRIBUTIONS = ("power_law_1.01", "power_law_1.2")


def _touched_reading(moe, x: np.ndarray, y: np.ndarray, m_grid: np.ndarray) -> np.ndarray | None:
    """One MoE layer's time over m_grid tokens at the uniform-routing expert count, from balanced rows
    (token counts x, times y), or None where no row reads fewer than every expert (nothing to map)."""
    e = float(moe.n_experts)
    read = np.minimum(moe.n_experts_per_token * x, e)  # experts a balanced row of x tokens reads
    part = read < e
    if not part.any() or part.all():
        return None
    d = np.concatenate([read[part], [e]])
    t_d = np.concatenate([y[part], [y[~part][0]]])  # the first row that reads every expert anchors f(E)
    n = np.asarray(m_grid, dtype=np.float64)
    f_touched = np.interp(moe.experts_touched(n), d, t_d)  # below the fewest experts a row reads: that row
    past = n * moe.n_experts_per_token > e
    return np.where(past, _interp_extrap(n, x, y) * f_touched / t_d[-1], f_touched)


def _moe(tables: OperatorTables, model: ModelSpec, tp: int, dtype: str, m_grid: np.ndarray, parts: list[str],
         notes: list[str]):
    """((latency over m_grid of one MoE layer's routed experts, the largest token count measured), "")
    from moe_perf, or (None, why). Rows: the model's expert shape at moe_tp_size = tp, moe_ep_size = 1
    (specsim's groups are tensor-parallel), the weight dtype, one kernel (the commonest at that shape);
    balanced rows read at the uniform-routing expert count (above), else the fallbacks as token counts, noted."""
    frame = tables.frames.get("moe_perf")
    if frame is None:
        return None, f"no moe_perf for {tables.framework} on {tables.system} (the MoE layers need it)"
    e, d = model.moe, model.hidden_size
    where = f"moe_perf ({tables.system} {tables.framework} {tables.versions['moe_perf']})"
    shape = frame[(frame["hidden_size"] == d) & (frame["inter_size"] == e.expert_ffn_size)
                  & (frame["topk"] == e.n_experts_per_token) & (frame["num_experts"] == e.n_experts)]
    if shape.empty:
        return None, (f"{where} has no row for hidden {d}, expert ffn {e.expert_ffn_size}, top-{e.n_experts_per_token} "
                      f"of {e.n_experts} experts")
    rows = shape[(shape["moe_tp_size"] == tp) & (shape["moe_ep_size"] == 1)]
    if rows.empty:
        have = ", ".join(f"{a}x{b}" for a, b in sorted(set(zip(shape["moe_tp_size"], shape["moe_ep_size"]))))
        return None, f"{where} has no tp {tp} (ep 1) rows for this expert shape: it measured tp x ep {have}"
    r = rows[rows["moe_dtype"] == dtype]
    if r.empty:
        have = ", ".join(sorted(map(str, rows["moe_dtype"].unique())))
        return None, f"{where}: this expert shape at tp {tp} was measured in {have}, not {dtype}"
    dists = sorted(map(str, r["distribution"].unique()))
    order = ("balanced",) + MOE_FALLBACK_DISTRIBUTIONS
    why_not = "has no balanced rows"
    for dist in [d_ for d_ in order if d_ in dists] + [d_ for d_ in dists if d_ not in order]:
        rd = r[r["distribution"] == dist]
        counts = rd["kernel_source"].value_counts()
        src = sorted(counts.index[counts == counts.max()])[0]
        c = rd[rd["kernel_source"] == src].groupby("num_tokens")["latency_s"].median()
        x, y = c.index.to_numpy(np.float64), nondecreasing(c.to_numpy(np.float64))
        if x.size < 2:
            if dist == "balanced":
                why_not = "measured balanced routing at one token count"
            continue
        if dist == "balanced":
            curve = _touched_reading(e, x, y, m_grid)
            if curve is not None:
                parts.append(f"moe {dtype} {src} balanced at uniform-routing experts")
                return (curve, float(x[-1])), ""
            why_not = ("has balanced rows only at token counts that read every expert"
                       if (e.n_experts_per_token * x >= e.n_experts).all() else
                       "has no balanced row that reads every expert (nothing anchors the time at all of them)")
            continue
        notes.append(f"moe: {where} {why_not} at this shape, so none to read at uniform routing; "
                     f"{dist} routing read by token count instead")
        parts.append(f"moe {dtype} {src} {dist}")
        return (_interp_extrap(m_grid, x, y), float(x[-1])), ""
    return None, f"{where}: fewer than two token counts measured at this shape for any routing; nothing to interpolate"


def _attention_grid(tables: OperatorTables, table: str, shape: tuple, notes: list[str], *, decode: bool):
    """((row values, column values, cells, filled), kernel) of one attention table at the shard's
    (heads, KV heads, head_dim, KV dtype): generation attention over (batch, step) at one query a sequence,
    context attention over (batch, isl); or why not, in words."""
    heads, kv_heads, hd, kvt = shape
    frame = tables.frames.get(table)
    if frame is None:
        return (f"no {table} for {tables.framework} on {tables.system}"
                + ("" if decode else " (prefill chunks need it)"))
    rows, src, why = _attention_rows(frame[frame["isl"] == 1] if decode else frame, table, tables, heads, kv_heads,
                                     hd, kvt, notes)
    if rows is None:
        return why
    g = _grid(rows, "batch_size", "step" if decode else "isl", fill_rows=decode)
    if g is None:
        return (f"{table}: a batch row with no measured step at {heads}/{kv_heads}/{hd}" if decode else
                f"{table}: an isl column with no measured batch at {heads}/{kv_heads}/{hd}")
    return g, src


def _tabulate(tables: OperatorTables, model: ModelSpec, tp: int, kv: str) -> MeasuredPass | str:
    """The pass, or the precise reason the tables do not cover it."""
    if isinstance(tp, bool) or not isinstance(tp, (int, np.integer)) or tp < 1 or model.n_heads % tp:
        return f"tp {tp} is not a divisor of the {model.n_heads} attention heads"
    notes: list[str] = [tables.version_note] if tables.version_note else []
    parts: list[str] = []
    dtype = FORMAT_GEMM_DTYPES[model.weight_format]
    grid, why = _gemm_grid(tables, dtype, notes)
    if grid is None:
        return why
    parts.append(f"gemm {dtype} {grid.kernel_source}{why}")
    if model.weight_format == "fp16":
        notes.append("gemm: fp16 weights priced on the bfloat16 kernels (the same tensor-core rate)")
    head_dtype = FORMAT_GEMM_DTYPES[_head_format(model)]
    head_grid = grid
    if head_dtype != dtype:
        head_grid, why = _gemm_grid(tables, head_dtype, notes)
        if head_grid is None:
            return f"lm head: {why}"
        parts.append(f"lm_head {head_dtype} {head_grid.kernel_source}{why}")

    d, hd = model.hidden_size, model.head_dim
    heads, kv_heads = model.n_heads // tp, max(1, model.n_kv_heads // tp)
    gate_up = 2 if model.ffn_kind == "gated" else 1
    attn = [("qkv", (heads + 2 * kv_heads) * hd, d), ("o", d, heads * hd)]
    ffn = [("gate_up", gate_up * model.ffn_size / tp, d), ("down", d, model.ffn_size / tp)]
    moe_extra = []
    if model.moe is not None:  # the router, and the always-on shared experts as one dense FFN
        e = model.moe
        moe_extra = [("router", e.n_experts, d)]
        if e.n_shared_experts:
            f = e.n_shared_experts * e.expert_ffn_size / tp
            moe_extra += [("shared_gate_up", gate_up * f, d), ("shared_down", d, f)]
    reach = np.inf

    def gemms(shapes):
        nonlocal reach
        total = np.zeros(grid.m.size)
        for name, n, k in shapes:
            c, r = grid.curve_and_reach(n, k, notes, name)
            if not r:
                return None, f"gemm {dtype} {name}: the table measured no m at (n, k) = ({n:g}, {k:g}) nor its neighbours"
            total, reach = total + c, min(reach, r)
        return total, ""

    attn_s, why = gemms(attn)
    if attn_s is None:
        return why
    layers = np.zeros(grid.m.size)
    if model.n_dense_layers:
        ffn_s, why = gemms(ffn)
        if ffn_s is None:
            return why
        layers = layers + model.n_dense_layers * (attn_s + ffn_s)
    if model.moe is not None:
        extra_s, why = gemms(moe_extra)
        if extra_s is None:
            return why
        got, why = _moe(tables, model, tp, dtype, grid.m, parts, notes)
        if got is None:
            return why
        experts_s, moe_reach = got
        reach = min(reach, moe_reach)
        layers = layers + model.n_moe_layers * (attn_s + extra_s + experts_s)
    head, head_reach = head_grid.curve_and_reach(model.vocab_size / tp, d, notes, "lm_head")
    if not head_reach:
        return f"gemm {head_dtype} lm_head: the table measured no m near (n, k) = ({model.vocab_size / tp:g}, {d:g})"
    if head_grid is not grid:  # another m grid: onto the layers' m
        head = _interp_extrap(grid.m, head_grid.m, head)
    m = np.concatenate([[0.0], grid.m])
    layers_s = np.concatenate([[0.0], layers])
    head_s = np.concatenate([[0.0], head])

    kvt = KV_TABLE_DTYPES[kv]
    if model.sliding_window:
        notes.append(f"sliding window {model.sliding_window}: attention from the full-attention rows over the last "
                     f"min(L, {model.sliding_window}) cached tokens; a prompt chunk longer than the window is priced "
                     "as causal attention over the whole chunk (overstates it)")
    shape = (heads, kv_heads, hd, kvt)
    g = _attention_grid(tables, "generation_attention_perf", shape, notes, decode=True)
    if isinstance(g, str):
        return g
    (gb, gs, cell, filled), gen_src = g
    parts.append(f"generation_attention {gen_src}" + (f" kv {kvt}" if kvt != "bfloat16" else ""))
    cg = _attention_grid(tables, "context_attention_perf", shape, notes, decode=False)
    if isinstance(cg, str):
        return cg
    (cb, cx, ccell, cfilled), ctx_src = cg
    parts.append(f"context_attention {ctx_src}")

    ar_e, ar_s = np.zeros(0), np.zeros(0)
    if tp > 1:
        got, why = _allreduce(tables, tp, parts, notes)
        if got is None:
            return why
        ar_e, ar_s = got
    return MeasuredPass(label=tables.label(tuple(parts)), m=m, layers_s=layers_s, head_s=head_s,
                        attn_batch=gb, attn_step=gs, attn_s=model.n_layers * cell, attn_filled=filled,
                        ar_elems=ar_e, ar_s=ar_s, n_allreduce=2 * model.n_layers, hidden_size=d,
                        notes=tuple(dict.fromkeys(notes)), ctx_batch=cb, ctx_isl=cx, ctx_s=model.n_layers * ccell,
                        ctx_filled=cfilled, layers_m_measured=reach, head_m_measured=head_reach,
                        gemm_grid=grid, n_layers=model.n_layers, window=model.sliding_window)


__all__ = ["GemmGrid", "MeasuredPass", "build", "covered", "gemm_dtype", "FORMAT_GEMM_DTYPES", "KV_TABLE_DTYPES"]
