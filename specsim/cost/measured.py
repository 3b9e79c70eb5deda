"""A forward pass priced from silicon-measured operator tables (`specs.operator_tables`).

specsim's own pass model over aiconfigurator-core's measured latencies, not its engine. Per layer of
a dense decoder: the QKV, O, gate/up and down GEMMs at m = T (the pass's tokens: B for a plain step,
B·M for a verify of M tokens), attention over the cache, and two all-reduces at tp > 1; then the LM
head at m = G (the positions that need logits). Element-wise work the tables do not hold (norms,
rotary, SwiGLU, residual adds, the KV write) stays where `roofline` puts it, and the pass says so.

Interpolation, and why it fits the data:
- GEMM in m: piecewise-linear between the measured m (74 values, 1..32768) at one (n, k): the
  latency is flat while the weights dominate and linear in m once compute does; the knees are where
  the table measures densely.
- GEMM in (n, k) off the grid (n, k in 32..65536 on 22 points): bilinear. A memory- or
  compute-bound GEMM costs a + b·n·k, which bilinear interpolation reproduces exactly; n wider than
  the grid (an LM head of 128 k vocabulary) is priced as column blocks of a width the grid holds,
  which is how a wide GEMM splits, and is noted.
- Generation attention (per layer, by batch and KV length 'step'): bilinear in (batch, step) between
  measured points (latency ≈ a + c·batch·step once memory-bound). Cells the table left out (batch ×
  step past the part's memory) are filled from the row's last measured step in proportion to the KV
  tokens read (the rows double with step there), and a pass that lands there is noted.
- A verify of M query tokens over L cached ones reads the generation table at batch B·M and KV
  length L + M: each verify position is one decode query over the sequence's cache. This is
  AIConfigurator's own convention for MTP verification ("batch widening by nextn + 1"); it overstates
  the KV read of a kernel that shares one cache read among the M queries, by at most M× at long
  context, and the M·(M+1)/2 causal pairs inside the block are noise beside L.
- All-reduce: piecewise-linear in message size (elements of bf16 = T · hidden) at the group size,
  the CUDA-graph backend (stacks capture decode and verify in graphs).
Outside the measured range nothing is extrapolated silently: a note naming the op and the shape
goes into the pass's `notes`.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..specs.models import ModelSpec
from ..specs.operator_tables import OperatorTables

_DTYPES = {"bf16": "bfloat16", "fp16": "bfloat16", "fp8": "fp8"}


def gemm_dtype(model: ModelSpec) -> str | None:
    """The table dtype a model's linear layers run in (16-bit weights: bfloat16; 8-bit: fp8)."""
    wb = model.weight_bytes_per_param
    if wb == 2.0:
        return "bfloat16"
    if wb == 1.0:
        return "fp8"
    return None


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
        blocks = 1
        if n > self.n[-1]:  # a GEMM wider than the grid runs as column blocks the grid holds
            blocks = int(np.ceil(n / self.n[-1]))
            notes.append(f"gemm {name}: n = {n:g} wider than the measured {self.n[-1]:g}: priced as {blocks} "
                         f"column blocks of n = {n / blocks:g}")
            n = n / blocks
        if not (self.n[0] <= n and self.k[0] <= k <= self.k[-1]):
            notes.append(f"gemm {name}: (n, k) = ({n:g}, {k:g}) outside the measured n {self.n[0]:g}..{self.n[-1]:g}, "
                         f"k {self.k[0]:g}..{self.k[-1]:g}: clamped to the nearest measured shape")
        n_c, k_c = np.clip(n, self.n[0], self.n[-1]), np.clip(k, self.k[0], self.k[-1])
        i = int(np.clip(np.searchsorted(self.n, n_c) - 1, 0, self.n.size - 2))
        j = int(np.clip(np.searchsorted(self.k, k_c) - 1, 0, self.k.size - 2))
        u = (n_c - self.n[i]) / (self.n[i + 1] - self.n[i])
        v = (k_c - self.k[j]) / (self.k[j + 1] - self.k[j])
        c = self.latency_s
        out = ((1 - u) * (1 - v) * c[:, i, j] + u * (1 - v) * c[:, i + 1, j]
               + (1 - u) * v * c[:, i, j + 1] + u * v * c[:, i + 1, j + 1])
        if np.isnan(out).any():  # an m the corners did not all measure: interpolate over the ones they did
            ok = ~np.isnan(out)
            out = np.interp(self.m, self.m[ok], out[ok])
        return blocks * out


def _interp_extrap(x, xp, fp):
    """np.interp, continued linearly past the last point from the last two (beyond is noted by callers)."""
    y = np.interp(x, xp, fp)
    slope = (fp[-1] - fp[-2]) / (xp[-1] - xp[-2])
    return np.where(x > xp[-1], fp[-1] + slope * (x - xp[-1]), y)


@dataclass(frozen=True, slots=True, kw_only=True)
class MeasuredPass:
    """A model's passes on one system and framework at tensor-parallel degree tp, tabulated.

    m: token counts (0 prepended); layers_s[i]: all layers' GEMMs at m[i] tokens; head_s[i]: the LM head
    at m[i] logit rows; attention grid (per model: all layers) over (batch, step); all-reduce curve."""

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

    def layers_time_s(self, n_tokens) -> np.ndarray:
        return _interp_extrap(np.asarray(n_tokens, dtype=np.float64), self.m, self.layers_s)

    def head_time_s(self, n_logits) -> np.ndarray:
        return _interp_extrap(np.asarray(n_logits, dtype=np.float64), self.m, self.head_s)

    def attention_time_s(self, n_queries, kv_len) -> np.ndarray:
        """All layers' attention for n_queries decode queries each over kv_len cached tokens."""
        b = np.asarray(n_queries, dtype=np.float64)
        s = np.asarray(kv_len, dtype=np.float64)
        gb, gs, c = self.attn_batch, self.attn_step, self.attn_s
        # fractional grid positions by np.interp (one pass each), then the four corners by flat index
        fi = np.interp(b, gb, np.arange(gb.size, dtype=np.float64))
        fj = np.interp(s, gs, np.arange(gs.size, dtype=np.float64))
        i = np.minimum(fi.astype(np.intp), gb.size - 2)
        j = np.minimum(fj.astype(np.intp), gs.size - 2)
        u, v = fi - i, fj - j
        flat, w = c.ravel(), gs.size
        k = i * w + j
        t = (1 - u) * ((1 - v) * flat[k] + v * flat[k + 1]) + u * ((1 - v) * flat[k + w] + v * flat[k + w + 1])
        # past the grid: in proportion to the queries and to the KV tokens (memory-bound there)
        if b.size and (b.max() > gb[-1] or s.max() > gs[-1]):
            t = t * np.maximum(b / gb[-1], 1.0) * np.maximum(s / gs[-1], 1.0)
        return t

    def allreduce_time_s(self, n_tokens) -> np.ndarray:
        if self.ar_elems.size == 0:
            return np.zeros(np.shape(n_tokens))
        e = np.asarray(n_tokens, dtype=np.float64) * self.hidden_size
        return np.where(e > 0, self.n_allreduce * _interp_extrap(e, self.ar_elems, self.ar_s), 0.0)

    def range_notes(self, *, n_tokens, n_queries, kv_len) -> tuple[str, ...]:
        """Notes for the shapes of one evaluation that fall outside what the tables measured."""
        out = []
        t, b, s = (float(np.max(np.asarray(x))) for x in (n_tokens, n_queries, kv_len))
        if t > self.m[-1]:
            out.append(f"gemm: m = {t:g} tokens past the measured {self.m[-1]:g}: continued linearly")
        if b > self.attn_batch[-1] or s > self.attn_step[-1]:
            out.append(f"generation_attention: batch {b:g} × kv {s:g} past the measured batch {self.attn_batch[-1]:g}, "
                       f"kv {self.attn_step[-1]:g}: scaled in proportion")
        elif self.attn_filled.any():
            bc, sc = min(b, self.attn_batch[-1]), min(s, self.attn_step[-1])
            i = min(int(np.searchsorted(self.attn_batch, bc)), self.attn_batch.size - 1)
            j = min(int(np.searchsorted(self.attn_step, sc)), self.attn_step.size - 1)
            if self.attn_filled[i, j]:
                out.append(f"generation_attention: batch {b:g} × kv {s:g} not measured (past the part's memory in "
                           "the collection): filled from the row's last measured kv in proportion")
        return tuple(out)


def covered(model: ModelSpec) -> str:
    """'' when the tables can price this model's passes, else why not (it then stays on the roofline)."""
    if model.moe is not None:
        return "MoE layers (moe_perf is not read yet)"
    if model.mla is not None:
        return "multi-head latent attention (mla tables not read yet)"
    if model.architecture == "encoder-decoder":
        return "an encoder-decoder"
    if model.sliding_window:
        return "sliding-window attention"
    if gemm_dtype(model) is None:
        return f"{model.weight_bytes_per_param:g}-byte weights (tables hold bfloat16 and fp8 GEMMs)"
    return ""


def build(tables: OperatorTables, model: ModelSpec, tp: int) -> MeasuredPass | None:
    """Tabulate `model` at tp on `tables`, or None where the tables do not cover it."""
    if covered(model):
        return None
    dtype = gemm_dtype(model)
    grid = GemmGrid.from_frame(tables.frames["gemm_perf"], dtype)
    attn = tables.frames.get("generation_attention_perf")
    if grid is None or attn is None:
        return None
    notes: list[str] = [tables.version_note] if tables.version_note else []
    d, h, hd = model.hidden_size, model.n_heads, model.head_dim
    kv = model.n_kv_heads
    heads, kv_heads = h // tp, max(1, kv // tp)
    gate_up = 2 if model.ffn_kind == "gated" else 1
    shapes = [("qkv", (heads + 2 * kv_heads) * hd, d), ("o", d, heads * hd),
              ("gate_up", gate_up * model.ffn_size / tp, d), ("down", d, model.ffn_size / tp)]
    per_layer = sum(grid.curve(n, k, notes, name) for name, n, k in shapes)
    head = grid.curve(model.vocab_size / tp, d, notes, "lm_head")
    m = np.concatenate([[0.0], grid.m])
    layers_s = np.concatenate([[0.0], model.n_layers * per_layer])
    head_s = np.concatenate([[0.0], head])

    a = attn[(attn["num_heads"] == heads) & (attn["num_key_value_heads"] == kv_heads) & (attn["head_dim"] == hd)
             & (attn["window_size"] == 0) & (attn["kv_cache_dtype"] == "bfloat16") & (attn["isl"] == 1)]
    if a.empty:
        return None
    src = sorted(a["kernel_source"].unique())
    pick = [s for s in src if s not in ("triton",)] or src  # the stack's default kernel over its fallback
    a = a[a["kernel_source"] == pick[0]]
    pv = a.pivot_table(index="batch_size", columns="step", values="latency_s", aggfunc="median")
    gb, gs = pv.index.to_numpy(np.float64), pv.columns.to_numpy(np.float64)
    cell = pv.to_numpy(np.float64).copy()
    filled = np.isnan(cell)
    for r in range(cell.shape[0]):  # cells past memory: the row's last measured value × KV tokens
        ok = np.flatnonzero(~filled[r])
        if ok.size == 0:
            return None
        last = ok[-1]
        cell[r, last + 1:] = cell[r, last] * gs[last + 1:] / gs[last]
        cell[r, :ok[0]] = cell[r, ok[0]]
    attn_s = model.n_layers * cell

    ar_e, ar_s = np.zeros(0), np.zeros(0)
    parts = [f"gemm {dtype} {grid.kernel_source}", f"generation_attention {pick[0]}"]
    if tp > 1:
        ar = tables.frames.get("custom_allreduce_perf")
        r = None if ar is None else ar[ar["num_gpus"] == tp]
        if r is not None and "backend" in r.columns:
            r = r[r["backend"].str.endswith("graph")]
        if r is None or r.empty:
            return None
        r = r.groupby("message_size")["latency_s"].median()
        ar_e, ar_s = r.index.to_numpy(np.float64), r.to_numpy(np.float64)
        parts.append(f"custom_allreduce graph tp {tp}")
    return MeasuredPass(label=tables.label(tuple(parts)), m=m, layers_s=layers_s, head_s=head_s,
                        attn_batch=gb, attn_step=gs, attn_s=attn_s, attn_filled=filled,
                        ar_elems=ar_e, ar_s=ar_s, n_allreduce=2 * model.n_layers, hidden_size=d,
                        notes=tuple(dict.fromkeys(notes)))


__all__ = ["GemmGrid", "MeasuredPass", "build", "covered", "gemm_dtype"]
