"""Drafter families: what drafting costs per cycle on the roofline, and what it holds in memory.

Every family answers the same three questions, vectorised over numpy arrays of batch size B, draft
depth K, tree size M (nodes including the root) and context L:

- how long the drafting takes *outside* the verify pass (`draft_time_s`: sequential steps);
- how many query tokens per sequence the verify pass scores (`verify_q_len`) and what extra work
  the family adds *inside* it (`verify_extra_s`, Medusa's heads);
- its memory per device: weights, its own KV cache, and the speculative slots every in-flight
  sequence reserves in the target's cache (`footprint`).

The families (seed article 000_27f178a79a0f5ee3, "Choosing a drafter" … "EAGLE, Lookahead"):

- `draft_model` — a separate small model (Leviathan et al. 2022; Chen et al. 2023): its own
  roofline step at batch B, its own tensor-parallel degree, K sequential steps. For a tree the
  drafter expands one level per step, scoring that level's nodes in one pass (q_len = the level's
  width, taken as ⌈(M − 1)/K⌉ for an M-node tree of depth K). Tokenizers must match
  (`predict.check_tokenizers`).
- `prompt_lookup` — n-gram matching against the prompt (Saxena 2023, prompt-lookup-decoding;
  vLLM's `ngram` method): no weights, no KV cache, a CPU string search per sequence per cycle.
- `medusa` — k extra heads on the target's last hidden state (Cai et al. 2024, §2.1.1): head i
  is `ResBlock(d) → Linear(d, V)`, i.e. (d² + d) + d·V parameters with one residual layer. The
  heads run inside the verify pass on every scored position; candidates are verified as a tree of
  depth k (k heads).
- `eagle` — one decoder layer of the target's shape fed [feature; next-token embedding] through a
  2d → d projection, reusing the target's frozen LM head (Li et al. 2024, EAGLE §4.1); K sequential
  steps, each a 1-layer forward + the LM head. EAGLE-2's dynamic tree is a tree of M nodes and depth
  K, expanded one level per step like `draft_model`.
- `lookahead` — Jacobi-style lookahead (Fu et al. 2024, §3): every step scores, next to the normal
  token, a lookahead branch of W·(N − 1) tokens and a verification branch of G·(N − 1) tokens
  (G candidate n-grams from the pool). No separate drafting; one step = one cycle.
- `layer_skip` — self-speculation with the first n layers + the LM head as the drafter (Elhoushi
  et al. 2024, LayerSkip §4). Shares the target's weights and the first n layers' KV cache. The
  verify pass is charged as a full target pass (LayerSkip reuses the draft's early-layer activations,
  which we do not credit: a conservative simplification).
- `mtp` — DeepSeek-V3's multi-token-prediction module (DeepSeek-AI 2024, §2.2): one transformer
  block like the last layer (MoE when the model is) + a 2d → d projection, sharing the embedding and
  LM head; drafts like EAGLE (K sequential steps; K > n_mtp_layers reuses the module).
- `sparse_kv` — MagicDec-style self-speculation (Chen et al. 2024, MagicDec §4): the target drafts
  attending only to an attention sink plus a recent window (StreamingLLM, Xiao et al. 2023), so a
  draft step reads the full weights but only `sink + window` cached tokens per sequence. At long
  context and large batch the KV read dominates the target step, so drafting is cheap relative to
  a target step and speculation *gains* with batch size instead of losing.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from ..errors import SpecError, field_error, reject_unknown_keys
from ..specs.hardware import Efficiency, HardwareProfile
from ..specs.models import ModelSpec
from ..cost.roofline import kv_bytes_per_device, step_cost, weight_bytes_per_device  # noqa: F401 (step_cost re-used by tests)

METHODS = ("draft_model", "prompt_lookup", "medusa", "eagle", "lookahead", "layer_skip", "mtp", "sparse_kv")
# Families whose candidates can be verified as a tree (tree_size M > K + 1 is meaningful).
TREE_METHODS = ("draft_model", "medusa", "eagle", "mtp")
# Families that need a separate drafter model id.
NEEDS_DRAFTER = ("draft_model",)

# CPU cost of one prompt-lookup search for one sequence. vLLM PR #13365 ("Optimize N-gram matching with
# Numba", 2025): on the ShareGPT benchmark with 5,000 requests the cumulative n-gram overhead fell to
# 1.9 s (about 2.5 % of the run). At roughly 10^2 drafting steps per request that is a few µs per
# sequence per step for contexts of ~10^3 tokens. We take 5 µs per sequence per 1,000 context tokens,
# linear in the context (KMP is linear in the searched length) — a DERIVED ESTIMATE, not a measurement.
PROMPT_LOOKUP_S_PER_SEQ_PER_KTOKEN = 5e-6


@dataclass(frozen=True, slots=True, kw_only=True)
class DrafterConfig:
    """Which family drafts and its knobs. Defaults are the published defaults of each method.

    drafter: the separate draft model (draft_model only); drafter_tp: its tensor-parallel degree.
    n_heads_medusa: Medusa heads (Cai et al. 2024 use 5 heads, 1 residual layer each).
    skip_layers: layer_skip's early-exit layer n (default: a quarter of the target's layers, ESTIMATE
      in the range LayerSkip explores, e.g. exit at layer 8 of Llama2-7B's 32).
    lookahead_window / lookahead_ngram / lookahead_guesses: W, N, G (Fu et al. 2024 use W = 15,
      N = 5, G = 15 for 7B models on an A100).
    sparse_sink / sparse_window: MagicDec's StreamingLLM draft KV budget: 4 sink tokens (StreamingLLM,
      Xiao et al. 2023, keeps 4 initial tokens) + a 252-token window = the 256-token budget of the
      MagicDec README's example commands (`--streamingllm_budget 256`).
    prompt_lookup_s_per_seq_per_ktoken: CPU search time per sequence per 1000 context tokens.
    """

    method: str
    drafter: ModelSpec | None = None
    drafter_tp: int = 1
    n_heads_medusa: int = 5
    medusa_layers_per_head: int = 1
    skip_layers: int | None = None
    lookahead_window: int = 15
    lookahead_ngram: int = 5
    lookahead_guesses: int = 15
    sparse_sink: int = 4
    sparse_window: int = 252
    prompt_lookup_s_per_seq_per_ktoken: float = PROMPT_LOOKUP_S_PER_SEQ_PER_KTOKEN

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise field_error("drafter", "method", self.method, f"one of {', '.join(METHODS)}")
        if self.method in NEEDS_DRAFTER and self.drafter is None:
            raise field_error("drafter", "drafter", None, f"a drafter model for method {self.method!r}")
        for name in ("drafter_tp", "n_heads_medusa", "medusa_layers_per_head", "lookahead_window",
                     "lookahead_guesses", "sparse_window"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise field_error("drafter", name, v, "an integer >= 1")
        if isinstance(self.lookahead_ngram, bool) or not isinstance(self.lookahead_ngram, int) or self.lookahead_ngram < 2:
            raise field_error("drafter", "lookahead_ngram", self.lookahead_ngram, "an integer >= 2")
        if self.sparse_sink < 0:
            raise field_error("drafter", "sparse_sink", self.sparse_sink, "an integer >= 0")
        if self.skip_layers is not None and (not isinstance(self.skip_layers, int) or self.skip_layers < 1):
            raise field_error("drafter", "skip_layers", self.skip_layers, "an integer >= 1")
        if not (self.prompt_lookup_s_per_seq_per_ktoken >= 0 and math.isfinite(self.prompt_lookup_s_per_seq_per_ktoken)):
            raise field_error("drafter", "prompt_lookup_s_per_seq_per_ktoken", self.prompt_lookup_s_per_seq_per_ktoken,
                              "a finite duration >= 0 s")

    @property
    def supports_tree(self) -> bool:
        return self.method in TREE_METHODS

    @property
    def sparse_budget(self) -> int:
        return self.sparse_sink + self.sparse_window


@dataclass(frozen=True, slots=True, kw_only=True)
class DraftCost:
    """Drafting cost of one cycle; arrays broadcast like (B, K, M, L).

    draft_step_time_s: one sequential drafting step; draft_time_s: all of them in a cycle (outside
    the verify pass); verify_q_len: query tokens per sequence the verify pass scores; verify_extra_s:
    extra time inside the verify pass (Medusa heads); n_draft_steps: sequential steps per cycle."""

    draft_step_time_s: np.ndarray
    draft_time_s: np.ndarray
    n_draft_steps: np.ndarray
    verify_q_len: np.ndarray
    verify_extra_s: np.ndarray


def check_tokenizers(target: ModelSpec, drafter: ModelSpec, *, allow_cross_tokenizer: bool = False) -> None:
    """The seed's tokenizer trap: verification compares p and q position by position over the same
    token ids, so a drafter must share the target's tokenizer unless the user says otherwise."""
    if target.tokenizer != drafter.tokenizer and not allow_cross_tokenizer:
        raise SpecError(
            f"drafter {drafter.id!r} uses tokenizer {drafter.tokenizer!r} but target {target.id!r} uses "
            f"{target.tokenizer!r}: their token ids do not line up, so draft tokens cannot be verified "
            f"position by position. Pick a drafter of the same family, or pass --allow-cross-tokenizer "
            f"(allow_cross_tokenizer = true) to model a cross-tokenizer scheme anyway."
        )


OPTION_KEYS = ("n_heads_medusa", "medusa_layers_per_head", "skip_layers", "lookahead_window", "lookahead_ngram",
               "lookahead_guesses", "sparse_sink", "sparse_window", "prompt_lookup_s_per_seq_per_ktoken")


def make_config(method: str, target: ModelSpec, *, drafter: str | ModelSpec | None = None, drafter_tp: int = 1,
                allow_cross_tokenizer: bool = False, options=None, where: str = "drafter") -> DrafterConfig:
    """A DrafterConfig from ids and a table of family knobs (`[sweep.drafter_options]` in a
    scenario; keys in OPTION_KEYS). Loads and tokenizer-checks the draft model for draft_model."""
    from ..specs.models import load_model

    options = dict(options or {})
    reject_unknown_keys(f"{where} drafter_options", options, OPTION_KEYS)
    d = None
    if method == "draft_model":
        if drafter is None:
            raise field_error(where, "drafter", None, "a drafter model id for method 'draft_model'")
        d = drafter if isinstance(drafter, ModelSpec) else load_model(drafter)
        check_tokenizers(target, d, allow_cross_tokenizer=allow_cross_tokenizer)
    if method == "mtp" and not target.n_mtp_layers:
        raise field_error(where, "method", method, f"a target with MTP layers ({target.id!r} has n_mtp_layers = 0)")
    try:
        return DrafterConfig(method=method, drafter=d, drafter_tp=drafter_tp, **options)
    except SpecError as exc:
        raise SpecError(f"{where}: {exc}") from None


# ---- building blocks ------------------------------------------------------------------------------

def _dense_time(n_params: float, n_tokens, *, weight_bytes_per_param: float, hw: HardwareProfile,
                eff: Efficiency, dtype: str, tp: int, extra_bytes=0.0) -> np.ndarray:
    """Roofline time of a dense linear block of n_params applied to T tokens on one of tp devices."""
    t = np.asarray(n_tokens, dtype=float)
    bytes_ = (n_params * weight_bytes_per_param + np.asarray(extra_bytes, dtype=float)) / tp
    flops = 2.0 * t * n_params / tp
    bw = hw.mem_bandwidth_bytes_per_s * eff.bandwidth_frac
    peak = hw.peak_flops_per_s[hw.compute_dtype_for(dtype)] * eff.compute_frac
    return np.maximum(bytes_ / bw, flops / peak)


def truncated_model(target: ModelSpec, n_layers: int, *, dense: bool = False, suffix: str = "") -> ModelSpec:
    """The target cut to its first n_layers (same widths, same LM head). dense=True drops the MoE
    (an EAGLE head on an MoE target is a dense layer of the target's dense FFN width)."""
    moe = target.moe
    if dense:
        moe = None
    elif moe is not None:
        moe = replace(moe, n_dense_layers=min(moe.n_dense_layers, n_layers))
    return replace(target, id=f"{target.id}{suffix or f'-first{n_layers}'}", n_layers=n_layers, moe=moe,
                   n_encoder_layers=0, architecture="decoder", n_mtp_layers=0)


def eagle_head(target: ModelSpec) -> ModelSpec:
    """EAGLE's draft head as a 1-layer model of the target's shape (dense FFN), sharing its LM head."""
    return truncated_model(target, 1, dense=True, suffix="-eagle-head")


def mtp_module(target: ModelSpec) -> ModelSpec:
    """DeepSeek-V3's MTP module as a 1-layer model like the target's last layer (MoE if it is)."""
    moe = replace(target.moe, n_dense_layers=0) if target.moe is not None else None
    return replace(target, id=f"{target.id}-mtp", n_layers=1, moe=moe, n_encoder_layers=0,
                   architecture="decoder", n_mtp_layers=0)


def default_skip_layers(target: ModelSpec, cfg: DrafterConfig) -> int:
    n = cfg.skip_layers if cfg.skip_layers is not None else max(1, target.n_layers // 4)
    if n >= target.n_layers:
        raise field_error("drafter", "skip_layers", n, f"< the target's {target.n_layers} layers")
    return n


def medusa_head_params(target: ModelSpec, cfg: DrafterConfig) -> int:
    """One Medusa head: `medusa_layers_per_head` ResBlocks (d×d weight + d bias) + a d×V projection
    (Cai et al. 2024, eq. 1; FasterDecoding/Medusa `medusa_model.py`)."""
    d = target.hidden_size
    return cfg.medusa_layers_per_head * (d * d + d) + d * target.vocab_size


def tree_level_width(k, tree_size) -> np.ndarray:
    """Nodes a drafter scores per level when it expands an M-node tree of depth K one level a step."""
    k = np.maximum(np.asarray(k, dtype=float), 1.0)
    m = np.asarray(tree_size, dtype=float)
    return np.maximum(np.ceil((m - 1.0) / k), 1.0)


# ---- cost per cycle ---------------------------------------------------------------------------------

def draft_cost(cfg: DrafterConfig, target: ModelSpec, hw: HardwareProfile, *, batch_size, k, tree_size=None,
               ctx_len, tp: int = 1, attention: str = "fused", efficiency: Efficiency | None = None) -> DraftCost:
    """Drafting cost per cycle and the verify pass's query length for one family.

    batch_size B, k K (draft depth: tokens for a chain, levels for a tree), tree_size M (nodes of the
    verified tree including the root; None or K + 1 for a chain), ctx_len L (cached tokens): arrays
    that broadcast together. tp: the target's tensor-parallel degree (self-speculative families draft
    on the same group). Returns a DraftCost whose arrays have the broadcast shape."""
    eff = efficiency or hw.efficiency
    b = np.asarray(batch_size, dtype=float)
    kk = np.asarray(k, dtype=float)
    l = np.asarray(ctx_len, dtype=float)
    chain = tree_size is None
    m = kk + 1.0 if chain else np.asarray(tree_size, dtype=float)
    b, kk, m, l = np.broadcast_arrays(b, kk, m, l)
    zero = np.zeros(b.shape)
    width = np.ones(b.shape) if chain else tree_level_width(kk, m)
    common = dict(attention=attention, efficiency=eff)
    method = cfg.method
    if method != "lookahead" and not cfg.supports_tree and not chain:
        if np.any(m != kk + 1):
            raise field_error("drafter", "tree_size", "M != K + 1", f"a chain (tree_size = K + 1) for method {method!r}")

    if method == "draft_model":
        d = cfg.drafter
        step = step_cost(d, hw, batch_size=b, q_len=width, ctx_len=l, tp=cfg.drafter_tp, **common).time_s
        return DraftCost(draft_step_time_s=step, draft_time_s=kk * step, n_draft_steps=kk, verify_q_len=m,
                         verify_extra_s=zero)
    if method == "prompt_lookup":
        step = b * cfg.prompt_lookup_s_per_seq_per_ktoken * np.maximum(l, 1.0) / 1000.0
        return DraftCost(draft_step_time_s=step, draft_time_s=step, n_draft_steps=np.ones(b.shape), verify_q_len=m,
                         verify_extra_s=zero)
    if method == "medusa":
        n_params = cfg.n_heads_medusa * medusa_head_params(target, cfg)
        logits = b * m * cfg.n_heads_medusa * target.vocab_size * 4.0
        extra = _dense_time(n_params, b * m, weight_bytes_per_param=target.weight_bytes_per_param, hw=hw, eff=eff,
                            dtype=target.compute_dtype, tp=tp, extra_bytes=logits)
        return DraftCost(draft_step_time_s=zero, draft_time_s=zero, n_draft_steps=zero, verify_q_len=m,
                         verify_extra_s=extra)
    if method in ("eagle", "mtp"):
        head = eagle_head(target) if method == "eagle" else mtp_module(target)
        step = step_cost(head, hw, batch_size=b, q_len=width, ctx_len=l, tp=tp, **common).time_s
        d = target.hidden_size
        fc = _dense_time(2.0 * d * d, b * width, weight_bytes_per_param=target.weight_bytes_per_param, hw=hw,
                         eff=eff, dtype=target.compute_dtype, tp=tp)
        step = step + fc
        return DraftCost(draft_step_time_s=step, draft_time_s=kk * step, n_draft_steps=kk, verify_q_len=m,
                         verify_extra_s=zero)
    if method == "layer_skip":
        early = truncated_model(target, default_skip_layers(target, cfg))
        step = step_cost(early, hw, batch_size=b, q_len=1, ctx_len=l, tp=tp, **common).time_s
        return DraftCost(draft_step_time_s=step, draft_time_s=kk * step, n_draft_steps=kk, verify_q_len=m,
                         verify_extra_s=zero)
    if method == "sparse_kv":
        budget = np.minimum(l, float(cfg.sparse_budget))
        step = step_cost(target, hw, batch_size=b, q_len=1, ctx_len=budget, tp=tp, **common).time_s
        return DraftCost(draft_step_time_s=step, draft_time_s=kk * step, n_draft_steps=kk, verify_q_len=m,
                         verify_extra_s=zero)
    if method == "lookahead":
        q = 1.0 + (cfg.lookahead_window + cfg.lookahead_guesses) * (cfg.lookahead_ngram - 1.0)
        return DraftCost(draft_step_time_s=zero, draft_time_s=zero, n_draft_steps=zero, verify_q_len=np.full(b.shape, q),
                         verify_extra_s=zero)
    raise field_error("drafter", "method", method, f"one of {', '.join(METHODS)}")  # pragma: no cover


# ---- memory -----------------------------------------------------------------------------------------

def footprint(cfg: DrafterConfig, target: ModelSpec, *, batch_size, ctx_len, k, tree_size=None, tp: int = 1) -> dict:
    """Per-device bytes the drafting adds on top of the target's weights and KV cache at context L:
    the drafter's weights, its own KV cache, and the speculative slots (M positions per sequence the
    verify pass writes into the target's cache before the rejected ones are discarded).
    Keys are readable labels; values broadcast like the inputs."""
    b = np.asarray(batch_size, dtype=float)
    l = np.asarray(ctx_len, dtype=float)
    kk = np.asarray(k, dtype=float)
    m = kk + 1.0 if tree_size is None else np.asarray(tree_size, dtype=float)
    if cfg.method == "lookahead":
        m = np.full(np.shape(m), 1.0 + (cfg.lookahead_window + cfg.lookahead_guesses) * (cfg.lookahead_ngram - 1.0))
    out = {"speculative slots": kv_bytes_per_device(target, batch_size=b, ctx_len=m, tp=tp)}
    if cfg.method == "draft_model":
        d = cfg.drafter
        out["drafter weights"] = weight_bytes_per_device(d, cfg.drafter_tp)
        out["drafter KV cache"] = kv_bytes_per_device(d, batch_size=b, ctx_len=l + m, tp=cfg.drafter_tp)
    elif cfg.method == "medusa":
        out["medusa heads"] = cfg.n_heads_medusa * medusa_head_params(target, cfg) * target.weight_bytes_per_param / tp
    elif cfg.method in ("eagle", "mtp"):
        head = eagle_head(target) if cfg.method == "eagle" else mtp_module(target)
        layer = head.decoder_layer_params + 2 * target.hidden_size * target.hidden_size
        if cfg.method == "mtp" and target.n_mtp_layers:
            out["mtp weights (already in the target's weight_bytes)"] = 0.0
        else:
            out[f"{cfg.method} head weights"] = layer * target.weight_bytes_per_param / tp
        out[f"{cfg.method} KV cache"] = kv_bytes_per_device(head, batch_size=b, ctx_len=l + m, tp=tp)
    # prompt_lookup: nothing; layer_skip and sparse_kv share the target's weights and cache.
    return out


__all__ = ["check_tokenizers", "make_config", "OPTION_KEYS", "METHODS", "TREE_METHODS", "DrafterConfig", "DraftCost", "draft_cost", "footprint",
           "truncated_model", "eagle_head", "mtp_module", "medusa_head_params", "tree_level_width"]
