"""The Llama forward pass over M new tokens with explicit position ids and an attention mask, on the
numba kernels or on their numpy twins (same code path, `backend="numpy"`)."""
from __future__ import annotations

import numpy as np

from ..errors import SpecError
from . import reference
from .gguf_model import GGUFModel, QTensor, check_tensors
from .kv_cache import KVCache


class Transformer:
    """A loaded GGUF model, runnable. `forward` appends M rows to a KVCache and returns logits."""

    def __init__(self, gguf: GGUFModel, *, backend: str = "numba"):
        if backend not in ("numba", "numpy"):
            raise SpecError(f"decoder backend {backend!r}: expected 'numba' or 'numpy'")
        self.gguf = gguf
        self.config = c = gguf.config
        check_tensors(gguf.path, c, gguf.tensors)  # every shape a kernel will see, before any kernel runs
        self.backend = backend
        self.tokenizer = gguf.tokenizer
        t = gguf.tensor
        self.embedding = t("token_embd.weight")
        self.output = gguf.tensors.get("output.weight", self.embedding)  # tied when absent
        self.output_norm = reference.dequantize(t("output_norm.weight").type_name, t("output_norm.weight").raw, c.d_model)[0]
        self.layers = []
        for i in range(c.n_layer):
            p = f"blk.{i}."
            norm = lambda n: reference.dequantize(t(p + n).type_name, t(p + n).raw, c.d_model)[0]  # noqa: E731
            self.layers.append(dict(
                attn_norm=norm("attn_norm.weight"), ffn_norm=norm("ffn_norm.weight"),
                **{n: t(p + n + ".weight") for n in ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down")}))
        e = c.head_dim
        self.inv_freq = c.rope_base ** (-np.arange(0, e, 2, dtype=np.float64) / e)  # (E/2,)
        self._dense = {}
        self._work = {}
        self.last_hidden = None  # (M, D) f32: the final-norm hidden state of the last forward pass (a view)
        self.weight_bytes_per_pass = sum(
            qt.n_bytes for qt in {id(w): w for lw in self.layers for w in lw.values() if hasattr(w, "raw")}.values()
        ) + self.output.n_bytes  # the matrices every full forward pass streams (norms and embedding rows aside)
        # matrices that read the same input, stacked by rows into one matmul (one kernel call, one
        # quantization of the input) where they share a type: each output row is computed as before
        self.fused = [dict(qkv=_stack(f"blk.{i}.attn_qkv", [lw["attn_q"], lw["attn_k"], lw["attn_v"]]),
                           gate_up=_stack(f"blk.{i}.ffn_gate_up", [lw["ffn_gate"], lw["ffn_up"]]))
                      for i, lw in enumerate(self.layers)]
        if backend == "numba":
            from . import kernels
            import numba

            self._k = kernels
            self._n_threads = numba.get_num_threads()
            self._lut = kernels.F16_LUT
            self._scratch = {}  # M -> kernels.new_scratch(T, M, max K)
            self._packed = {}
            fused = [w for f in self.fused for w in f.values() if w is not None]
            for qt in [self.embedding, self.output] + [w for lw in self.layers for w in lw.values() if hasattr(w, "raw")] + fused:
                if qt.name not in self._packed:
                    self._packed[qt.name] = kernels.pack(qt.type_name, qt.raw, qt.n_cols)

    # -- ops: the one place where the backend differs -------------------------------------------
    def _matmul(self, out, qt, x):
        if self.backend == "numba":
            m = x.shape[0]
            scratch = self._scratch.get(m)
            if scratch is None:
                c = self.config
                if len(self._scratch) > 16:
                    self._scratch.clear()
                scratch = self._scratch[m] = self._k.new_scratch(self._n_threads, m, max(c.d_model, c.n_ff))
            self._k.matmul(out, scratch, qt.type_name, self._packed[qt.name], x, self._lut)
        else:
            w = self._dense.get(qt.name)
            if w is None:
                w = self._dense[qt.name] = reference.prepare(qt.type_name, qt.raw, qt.n_cols)
            reference.matmul(out, w, x)

    def _op(self, name):
        return getattr(self._k if self.backend == "numba" else reference, name)

    def new_cache(self, capacity: int | None = None, n_layer: int | None = None) -> KVCache:
        c = self.config
        return KVCache(n_layer or c.n_layer, c.n_kv_head, capacity or c.n_ctx, c.head_dim)

    def _workspace(self, m: int, capacity: int) -> dict:
        key = (m, capacity)
        ws = self._work.get(key)
        if ws is None:
            c = self.config
            f32 = lambda *s: np.zeros(s, np.float32)  # noqa: E731
            nq, nk = c.n_head * c.head_dim, c.n_kv_head * c.head_dim
            ws = dict(x=f32(m, c.d_model), xn=f32(m, c.d_model), qkv=f32(m, nq + 2 * nk), q=f32(m, nq),
                      k=f32(m, nk), v=f32(m, nk), att=f32(m, nq), o=f32(m, c.d_model), gate_up=f32(m, 2 * c.n_ff),
                      gate=f32(m, c.n_ff), up=f32(m, c.n_ff), act=f32(m, c.n_ff), down=f32(m, c.d_model),
                      bits=np.zeros((m, c.n_ff), np.int32),
                      logits=f32(m, self.output.n_rows),  # n_vocab, or fewer where a drafter narrows the head
                      scores=f32(c.n_kv_head, m * (c.n_head // c.n_kv_head), capacity + 2))  # attention scratch
            if len(self._work) > 16:
                self._work.clear()
            self._work[key] = ws
        return ws

    def embed(self, tokens: np.ndarray) -> np.ndarray:
        e = self.embedding
        return reference.dequantize(e.type_name, e.raw[tokens], e.n_cols)  # (M, D), M rows only

    def forward(self, cache: KVCache, tokens, positions, mask=None, *, n_shared=None,
                n_layers=None, inputs=None) -> np.ndarray:
        """Run M tokens. tokens, positions: int64 (M,); mask: bool (M, W) over cache rows
        [n_shared, length + M) (default: causal over the new rows, n_shared = cache.length).
        Writes K/V into slots [length, length + M) and advances the length. n_layers: run only the
        first n layers (layer-skip drafting); the cache must have that many layers. inputs: float32
        (M, D) rows to use instead of the token embeddings (EAGLE's fused feature-and-token input).
        Returns logits float32 (M, V) — a view into a reused buffer; copy to keep."""
        c = self.config
        tokens = np.ascontiguousarray(tokens, dtype=np.int64)
        positions = np.ascontiguousarray(positions, dtype=np.int64)
        m = tokens.size
        if np.any(tokens < 0) or np.any(tokens >= c.n_vocab):
            raise SpecError(f"token ids must be in [0, {c.n_vocab})")
        start = cache.reserve(m)
        if n_shared is None:
            n_shared = start
        if mask is None:
            mask = np.tril(np.ones((m, m), dtype=bool))
        mask = np.ascontiguousarray(mask, dtype=np.bool_)
        if mask.shape != (m, start + m - n_shared):
            raise SpecError(f"attention mask shape {mask.shape}: expected {(m, start + m - n_shared)}")
        n_layers = c.n_layer if n_layers is None else n_layers
        if not 1 <= n_layers <= min(c.n_layer, cache.k.shape[0]):
            raise SpecError(f"forward: n_layers = {n_layers}: expected 1..{min(c.n_layer, cache.k.shape[0])} "
                            f"(the model's and the cache's layers)")
        if cache.k.shape[1::2] != (c.n_kv_head, c.head_dim) or cache.v.shape != cache.k.shape:
            raise SpecError(f"forward: KV cache of shape {cache.k.shape}: expected (layers, {c.n_kv_head}, "
                            f"capacity, {c.head_dim}) for this model")
        if not 0 <= n_shared <= start:
            raise SpecError(f"forward: n_shared = {n_shared}: expected 0..{start} (the cache's length)")
        ws = self._workspace(m, cache.capacity)
        rms, rope, attn, swiglu = (self._op(n) for n in ("rmsnorm", "rope", "attention", "swiglu"))
        x = ws["x"]
        x[:] = self.embed(tokens) if inputs is None else inputs
        e, g = c.head_dim, c.n_kv_head
        for li in range(n_layers):
            lw, fw = self.layers[li], self.fused[li]
            rms(ws["xn"], x, lw["attn_norm"], c.rms_eps)
            if fw["qkv"] is not None:  # one matmul, then contiguous copies for the kernels that follow
                self._matmul(ws["qkv"], fw["qkv"], ws["xn"])
                nq, nk = ws["q"].shape[1], ws["k"].shape[1]
                ws["q"][:], ws["k"][:], ws["v"][:] = ws["qkv"][:, :nq], ws["qkv"][:, nq:nq + nk], ws["qkv"][:, nq + nk:]
            else:
                self._matmul(ws["q"], lw["attn_q"], ws["xn"])
                self._matmul(ws["k"], lw["attn_k"], ws["xn"])
                self._matmul(ws["v"], lw["attn_v"], ws["xn"])
            q = ws["q"].reshape(m, c.n_head, e)
            k = ws["k"].reshape(m, g, e)
            rope(q, positions, self.inv_freq)
            rope(k, positions, self.inv_freq)
            cache.k[li, :, start:start + m] = k.transpose(1, 0, 2)
            cache.v[li, :, start:start + m] = ws["v"].reshape(m, g, e).transpose(1, 0, 2)
            attn(ws["att"].reshape(m, c.n_head, e), ws["scores"], q, cache.k[li], cache.v[li], n_shared, mask)
            self._matmul(ws["o"], lw["attn_output"], ws["att"])
            x += ws["o"]
            rms(ws["xn"], x, lw["ffn_norm"], c.rms_eps)
            if fw["gate_up"] is not None:
                self._matmul(ws["gate_up"], fw["gate_up"], ws["xn"])
                ws["gate"][:], ws["up"][:] = ws["gate_up"][:, :c.n_ff], ws["gate_up"][:, c.n_ff:]
            else:
                self._matmul(ws["gate"], lw["ffn_gate"], ws["xn"])
                self._matmul(ws["up"], lw["ffn_up"], ws["xn"])
            swiglu(ws["act"], ws["bits"], ws["gate"], ws["up"])
            self._matmul(ws["down"], lw["ffn_down"], ws["act"])
            x += ws["down"]
        cache.length = start + m
        rms(ws["xn"], x, self.output_norm, c.rms_eps)
        self.last_hidden = ws["xn"]  # what the LM head reads; feature-level drafters (Medusa, EAGLE) read it too
        self._matmul(ws["logits"], self.output, ws["xn"])
        return ws["logits"]

    def prefill(self, cache: KVCache, tokens, *, n_layers=None) -> np.ndarray:
        """Causal pass over `tokens` at positions [length, length + M); returns the last logits (V,)."""
        tokens = np.asarray(tokens, dtype=np.int64)
        pos = cache.length + np.arange(tokens.size)
        return self.forward(cache, tokens, pos, n_layers=n_layers)[-1].copy()


def _stack(name: str, tensors: list) -> QTensor | None:
    """Matrices of one type and input width stacked by rows (N1 + N2 + ..., RB), or None."""
    if len({(t.type_name, t.n_cols) for t in tensors}) != 1:
        return None
    return QTensor(name=name, type_name=tensors[0].type_name, n_rows=sum(t.n_rows for t in tensors),
                   n_cols=tensors[0].n_cols, raw=np.concatenate([t.raw for t in tensors], axis=0))
