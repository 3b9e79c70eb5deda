"""Drafter families, declared once: what each drafts with, what it costs, what it holds, who ships it.

A family is one entry of `FAMILIES`: its options with their defaults (`DrafterConfig`), the serving
stacks that ship it (and what each stack calls it, with the source), whether it verifies trees, what
it reserves per sequence in a serving engine, which reference-decoder drafter implements it, and
one function, `work(cfg, target, tp)`, that says what drafting does as a `DrafterWork`:

- the sequential forward passes outside the verify pass: which model (a draft model, an EAGLE head,
  the target's first layers, the target over a sparse cache), at which tensor-parallel degree, how
  many tokens per sequence per pass, how much of the cache each pass attends to, any projection on
  every drafted token, and whether the drafter also runs over every prompt token (its own cache);
- host work per sequence (prompt lookup's n-gram search);
- work inside the verify pass (Medusa's heads) and the verify pass's width when it is not K + 1
  (Lookahead);
- memory: the drafter's weights and the model whose KV cache it keeps.

The analytical cycle (`draft_cost`, vectorised over B, K, M, L) and the serving simulator's
per-iteration cost (`specsim.serving.cost`) both evaluate the same `DrafterWork`, so the two agree
exactly on a homogeneous batch. Adding a family touches this module and its tests.

The families (seed article 000_27f178a79a0f5ee3, "Choosing a drafter" … "EAGLE, Lookahead"):

- `draft_model` — a separate small model (Leviathan et al. 2022; Chen et al. 2023): K sequential
  passes at batch B at its own tensor-parallel degree; pass j sees the L + j·w tokens cached so far.
  A tree is drafted one level per pass, w = ⌈(M − 1)/K⌉ nodes per level. Tokenizers must match.
- `prompt_lookup` — n-gram matching against the prompt (Saxena 2023; vLLM's `ngram`): no weights,
  no KV cache, a host string search per sequence per cycle.
- `medusa` — k extra heads on the target's last hidden state (Cai et al. 2024, §2.1.1): head i is
  `ResBlock(d) → Linear(d, V)`, (d² + d) + d·V parameters with one residual layer; the heads run
  inside the verify pass on every scored position; candidates are verified as a tree of depth k.
- `eagle` — one decoder layer of the target's shape fed [feature; next-token embedding] through a
  2d → d projection, reusing the target's frozen LM head (Li et al. 2024, EAGLE §4.1); K sequential
  passes; EAGLE-2's dynamic tree of M nodes and depth K, one level per pass. The head keeps a
  one-layer KV cache and runs over every prompt token.
- `lookahead` — Jacobi-style lookahead (Fu et al. 2024, §3): each step scores, next to the normal
  token, a lookahead branch of W·(N − 1) and a verification branch of G·(N − 1) tokens. No drafting
  passes; one step = one cycle.
- `layer_skip` — self-speculation with the first n layers + the LM head (Elhoushi et al. 2024,
  LayerSkip §4): shares the target's weights and the first n layers' cache. The verify pass is
  charged as a full target pass (the reuse of early-layer activations is not credited).
- `mtp` — DeepSeek-V3's multi-token-prediction module (DeepSeek-AI 2024, §2.2): one block like the
  last layer (MoE when the model is) + a 2d → d projection; drafts like EAGLE.
- `sparse_kv` — MagicDec-style self-speculation (Chen et al. 2024, MagicDec §4): the target drafts
  attending only to an attention sink plus a recent window (StreamingLLM, Xiao et al. 2023).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, fields, replace
from types import MappingProxyType
from typing import Callable, Mapping

import numpy as np

from ..cost.pricing import dense_time_s, masked_score_time_s, source_for
from ..cost.roofline import LOGIT_BYTES, StepCost, kv_bytes_per_device, weight_bytes_per_device
from ..cost.shape import PassShape
from ..errors import SpecError, field_error, reject_unknown_keys
from ..specs.hardware import Efficiency
from ..specs.models import ModelSpec

# Host cost of one prompt-lookup search for one sequence. vLLM PR #13365 ("Optimize N-gram matching with
# Numba", 2025): on the ShareGPT benchmark with 5,000 requests the cumulative n-gram overhead fell to
# 1.9 s (about 2.5 % of the run). At roughly 10^2 drafting steps per request that is a few µs per
# sequence per step for contexts of ~10^3 tokens. We take 5 µs per sequence per 1,000 context tokens,
# linear in the context (KMP is linear in the searched length) — a DERIVED ESTIMATE, not a measurement.
PROMPT_LOOKUP_S_PER_SEQ_PER_KTOKEN = 5e-6


# ---- options ----------------------------------------------------------------------------------------

HYDRA_HEAD_ARCHS = ("mlp", "prefix-mlp")  # Spec-Bench model/hydra/hydra_model.py HydraConfig.hydra_head_arch

@dataclass(frozen=True, slots=True, kw_only=True)
class DrafterConfig:
    """Which family drafts, with which model, and its knobs. Defaults are each method's published ones.

    drafter: the separate draft model (draft_model only); drafter_tp: its tensor-parallel degree.
    n_heads_medusa: Medusa heads (Cai et al. 2024 use 5 heads, 1 residual layer each).
    skip_layers: layer_skip's early-exit layer n (default: a quarter of the target's layers, ESTIMATE
      in the range LayerSkip explores, e.g. exit at layer 8 of Llama2-7B's 32).
    lookahead_window / lookahead_ngram / lookahead_guesses: W, N, G (Fu et al. 2024 use W = 15,
      N = 5, G = 15 for 7B models on an A100).
    sparse_sink / sparse_window: MagicDec's StreamingLLM draft KV budget: 4 sink tokens (StreamingLLM,
      Xiao et al. 2023, keeps 4 initial tokens) + a 252-token window = the 256-token budget of the
      MagicDec README's example commands (`--streamingllm_budget 256`).
    prompt_lookup_s_per_seq_per_ktoken: host search time per sequence per 1000 context tokens.
    draft_frac: of a sequence's cycles, the share in which the n-gram lookup finds a match and drafts
      (prompt_lookup; default 1). In the rest the sequence drafts nothing and verifies its one token, as
      vLLM's n-gram proposer leaves a request without a match (no spec tokens that step); acceptance
      (α, τ) describes the cycles that drafted, as vLLM's counters (accepted over drafted tokens, mean
      acceptance length over drafts) do. A stack whose matcher pads every cycle to its full draft
      (SGLang's NGRAM) drafts every cycle: leave it at 1 there. The analytical cycle prices the expected
      pass (`cost.shape.PassShape.drafting_share`); the serving simulator draws which rows drafted and
      prices each pass it realises, so near a GEMM tile's edge the two differ (3 % at 32 rows of
      Qwen3-8B on an H100, whose expected 66 tokens sit just past the 64-row tile).
    eagle_version: 1, 2 (the same head; EAGLE-2 drafts a dynamic tree) or 3 (EAGLE-3's head: the
      three-feature 3d → d projection, attention over a 2d-wide input, its own LM head over
      draft_vocab_size tokens; vLLM PR #16937 describes the layer, SafeAILab/EAGLE
      eagle/traineagle3/config.json gives the draft vocabulary).
    draft_vocab_size: EAGLE-3's draft vocabulary (default: EAGLE-3's published 32,000, or the
      target's own when that is smaller; EAGLE-1/2 use the target's LM head and ignore it).
    eagle_top_k: the tokens an EAGLE-2/3 dynamic tree keeps per drafting level (SafeAILab/EAGLE
      `topK_genrate`'s top_k, SGLang's --speculative-eagle-topk): every pass after the first scores
      that many tokens. None: the level's share of the tree, ⌈(M − 1)/K⌉ (a static tree's average).
    n_heads_hydra / hydra_mlp_layers: Hydra's heads and ResBlocks per head (Spec-Bench
      model/hydra/hydra_model.py defaults: hydra_num_heads = 4, hydra_num_layers = 1).
    hydra_head_arch: "mlp" (the heads read the target's last hidden state) or "prefix-mlp"
      (Hydra++: a one-layer decoder over the target's hidden states, with its own KV cache, runs once a
      cycle before the heads; Spec-Bench model/hydra/hydra_heads/prefix_mlp_head.py,
      `_grounded_proposal`'s prefix_embeding_layer).
    k_schedule: "fixed" (K every cycle) or "hf-heuristic" (Hugging Face assisted generation's
      num_assistant_tokens schedule: +2 after a fully accepted cycle, −1 otherwise; see
      speculation.schedule), K then being the starting draft length.
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
    draft_frac: float = 1.0
    eagle_version: int = 2
    draft_vocab_size: int | None = None
    eagle_top_k: int | None = None
    n_heads_hydra: int = 4
    hydra_mlp_layers: int = 1
    hydra_head_arch: str = "mlp"
    k_schedule: str = "fixed"

    def __post_init__(self) -> None:
        if self.method not in FAMILIES:
            raise field_error("drafter", "method", self.method, f"one of {', '.join(METHODS)}")
        if self.family.needs_drafter_model and self.drafter is None:
            raise field_error("drafter", "drafter", None, f"a drafter model for method {self.method!r}")
        for name in ("drafter_tp", "n_heads_medusa", "medusa_layers_per_head", "lookahead_window",
                     "lookahead_guesses", "sparse_window", "n_heads_hydra", "hydra_mlp_layers"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise field_error("drafter", name, v, "an integer >= 1")
        if isinstance(self.lookahead_ngram, bool) or not isinstance(self.lookahead_ngram, int) or self.lookahead_ngram < 2:
            raise field_error("drafter", "lookahead_ngram", self.lookahead_ngram, "an integer >= 2")
        if isinstance(self.sparse_sink, bool) or not isinstance(self.sparse_sink, int) or self.sparse_sink < 0:
            raise field_error("drafter", "sparse_sink", self.sparse_sink, "an integer >= 0")
        if self.skip_layers is not None and (isinstance(self.skip_layers, bool) or not isinstance(self.skip_layers, int)
                                             or self.skip_layers < 1):
            raise field_error("drafter", "skip_layers", self.skip_layers, "an integer >= 1")
        v = self.prompt_lookup_s_per_seq_per_ktoken
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not (v >= 0 and math.isfinite(v)):
            raise field_error("drafter", "prompt_lookup_s_per_seq_per_ktoken", v, "a finite duration >= 0 s")
        v = self.draft_frac
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not (0.0 < v <= 1.0):
            raise field_error("drafter", "draft_frac", v, "a fraction in (0, 1]: the share of a sequence's cycles in "
                              "which the proposer drafts (0 would never speculate)")
        if v != 1.0 and "draft_frac" not in self.family.options:
            raise field_error("drafter", "draft_frac", v, f"1 for method {self.method!r} (it drafts every cycle; only "
                              f"{', '.join(n for n, f in FAMILIES.items() if 'draft_frac' in f.options)} may find nothing "
                              f"to draft)")
        if isinstance(self.eagle_version, bool) or self.eagle_version not in (1, 2, 3):
            raise field_error("drafter", "eagle_version", self.eagle_version, "1, 2 or 3")
        if self.draft_vocab_size is not None:
            v = self.draft_vocab_size
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise field_error("drafter", "draft_vocab_size", v, "an integer >= 1")
            if self.eagle_version != 3:
                raise field_error("drafter", "draft_vocab_size", v, "unset unless eagle_version = 3 (EAGLE-1/2 "
                                  "draft through the target's own LM head)")
        if self.eagle_top_k is not None:
            v = self.eagle_top_k
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise field_error("drafter", "eagle_top_k", v, "an integer >= 1 (tokens kept per drafting level)")
            if self.method == "eagle" and self.eagle_version == 1:
                raise field_error("drafter", "eagle_top_k", v, "unset for eagle_version = 1 (EAGLE-1 drafts a static "
                                  "tree; its levels are the tree's)")
        if self.hydra_head_arch not in HYDRA_HEAD_ARCHS:
            raise field_error("drafter", "hydra_head_arch", self.hydra_head_arch,
                              f"one of {', '.join(repr(a) for a in HYDRA_HEAD_ARCHS)}")
        if self.k_schedule not in ("fixed", "hf-heuristic"):
            raise field_error("drafter", "k_schedule", self.k_schedule, "'fixed' or 'hf-heuristic'")
        if self.k_schedule != "fixed" and "k_schedule" not in self.family.options:
            raise field_error("drafter", "k_schedule", self.k_schedule, f"'fixed' for method {self.method!r}")

    @property
    def family(self) -> "Family":
        return FAMILIES[self.method]

    @property
    def supports_tree(self) -> bool:
        return self.family.tree

    @property
    def sparse_budget(self) -> int:
        return self.sparse_sink + self.sparse_window

    def options(self) -> dict:
        """The knobs this family reads, with their values (for printing the configuration); an
        unset draft vocabulary is left out (EAGLE-3's default applies, or EAGLE-1/2 do not use one)."""
        return {name: getattr(self, name) for name in self.family.options
                if not (name in ("draft_vocab_size", "eagle_top_k") and getattr(self, name) is None)}


OPTION_KEYS = tuple(f.name for f in fields(DrafterConfig) if f.name not in ("method", "drafter", "drafter_tp"))


# ---- what drafting does -----------------------------------------------------------------------------

@dataclass(frozen=True, slots=True, kw_only=True)
class DrafterWork:
    """What a family does per cycle and holds in memory, for one target and one set of options.

    pass_model: the model each sequential drafting pass runs (None: no passes); pass_tp: its
      tensor-parallel degree; n_passes: "k" (K passes, one per drafted token or tree level) or 0.
    by_level: a tree is drafted one level per pass, ⌈(M − 1)/K⌉ tokens per sequence per pass (else
      one token per pass); context_cap: the passes attend to at most this many cached tokens.
    projection_params: a dense layer applied to every drafted token besides pass_model (EAGLE/MTP's
      2d → d input projection).
    drafts_prompt: the drafter keeps its own cache and so also runs over every prompt token.
    host_s_per_seq_per_ktoken: host work per drafting sequence per 1000 cached tokens (prompt lookup).
    verify_head_params / verify_head_logit_rows: parameters applied to every position the verify pass
      scores, and the extra fp32 logit rows they write per position (Medusa's heads).
    verify_q_len: the verify pass's query tokens per sequence when it is not the chain's K + 1 or the
      tree's M (Lookahead's fixed width).
    weight_bytes: the drafter's own weights per device (label: weight_label).
    cache_model / cache_tp: the model whose KV cache the drafter keeps for every sequence (label:
      cache_label); None when it shares the target's.
    refeeds_accepted: a drafter with its own cache runs its first pass of a cycle again over the
      drafts the target accepted, not only over the new token: EAGLE's and MTP's cache entries for
      drafted tokens were computed from the head's own predicted features, which the target's now
      replace (Li et al. 2024, EAGLE §3.1; vLLM's EAGLE proposer feeds the accepted tokens with the
      target's hidden states). A draft model keeps the entries it wrote while drafting (False).
      The serving engine charges this catch-up per cycle (specsim.serving.engine); the analytical
      cycle does not (it prices a drafter whose cache is in step, pass 0 = the bonus token).
    pass_kind: "model" (each pass is a forward of a model, paying the stack's step overhead) or
      "head" (a small module the drafting code calls directly: the stack's `[drafting]` head-pass
      cost instead, `pass_efficiency`).
    head_ops: tensor operations one head pass runs outside its decoder layers in the family's
      reference code (charged at the stack's `eager_op_us` where it gives one).
    level_width: tokens per sequence of every pass after the first (a dynamic tree's top-k per
      level); None: every pass is `pass_width` wide.
    tree_ops_per_node: host tensor operations per drafted node when the family's code builds the
      verified tree node by node (EAGLE-2's mask loop); 0: the tree is static or built in bulk.
    dense_pass_params / dense_pass_logit_vocab: a pass with no pass_model (Hydra's MLP heads): the
      dense parameters it applies to each of its tokens (its LM head included) and the logits it
      writes per token.
    masked_verify: the family's reference code verifies through its own attention with a tree (or
      Lookahead's) mask, where a stack's `[drafting] masked_score_bytes` applies.
    cycle_pass_model / cycle_pass_ops: a model the family runs once a cycle before its drafting passes
      (Hydra++'s prefix layer) and the tensor operations its code runs outside that model's layer; the
      pass is priced as a head pass with a decoder layer (`[drafting]` head_pass_us, else the ops at
      eager_op_us) at one token per sequence (the verified tokens it reads are a few, and at small batch
      the pass streams its weights whatever their number), without an LM head (it returns hidden states).
    """

    pass_model: ModelSpec | None = None
    pass_tp: int = 1
    n_passes: str | int = 0
    by_level: bool = True
    context_cap: int | None = None
    projection_params: float = 0.0
    drafts_prompt: bool = False
    host_s_per_seq_per_ktoken: float = 0.0
    verify_head_params: float = 0.0
    verify_head_logit_rows: int = 0
    verify_q_len: int | None = None
    weight_bytes: float = 0.0
    weight_label: str = ""
    cache_model: ModelSpec | None = None
    cache_tp: int = 1
    cache_label: str = ""
    refeeds_accepted: bool = False
    pass_kind: str = "model"
    head_ops: float = 0.0
    level_width: int | None = None
    tree_ops_per_node: float = 0.0
    dense_pass_params: float = 0.0
    dense_pass_logit_vocab: int = 0
    masked_verify: bool = False
    cycle_pass_model: ModelSpec | None = None
    cycle_pass_ops: float = 0.0

    @property
    def has_passes(self) -> bool:
        """Sequential drafting passes outside the verify pass (a model's, or dense heads')."""
        return self.n_passes == "k" and (self.pass_model is not None or self.dense_pass_params > 0)


@dataclass(frozen=True, slots=True, kw_only=True)
class StackSupport:
    """How a serving stack ships a family: its own name for it, where that is documented, and any
    further keys its configuration needs (printed as they are)."""

    name: str
    source: str
    extra: Mapping[str, object] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class Family:
    """One drafter family (see the module docstring). `work(cfg, target, tp) -> DrafterWork`.

    uses_k: the draft length K means something (False for Lookahead, whose step has a fixed width);
    weights: it needs trained weights a serving config must point to (a draft model, heads)."""

    name: str
    title: str
    paper: str
    work: Callable[[DrafterConfig, ModelSpec, int], DrafterWork]
    needs_drafter_model: bool = False
    tree: bool = False
    options: tuple[str, ...] = ()
    stacks: Mapping[str, StackSupport] = field(default_factory=dict)
    decoder: str | None = None
    serving: bool = True
    self_label: str = ""
    uses_k: bool = True
    weights: bool = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "stacks", MappingProxyType(dict(self.stacks)))
        bad = [o for o in self.options if o not in OPTION_KEYS]
        if bad:
            raise ValueError(f"family {self.name}: unknown options {bad}")

    def reserved_slots(self, cfg: DrafterConfig, target: ModelSpec, k: int, tree_size: int | None = None) -> int:
        """Speculative positions a sequence holds in the target's cache and token budget per cycle
        beyond its one real token: K for a chain, M − 1 for a tree of M nodes, the extra width for
        Lookahead (what a serving engine reserves per decoding sequence)."""
        w = self.work(cfg, target, 1).verify_q_len
        if w is not None:
            return int(w) - 1
        return int(tree_size) - 1 if (tree_size and self.tree) else int(k)

    def stack_name(self, stack_id: str) -> str | None:
        s = self.stacks.get(stack_id)
        return s.name if s else None


# ---- building blocks --------------------------------------------------------------------------------

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


def lookahead_width(cfg: DrafterConfig) -> int:
    """Query tokens per Lookahead step: 1 + (W + G)·(N − 1) (Fu et al. 2024, §3)."""
    return 1 + (cfg.lookahead_window + cfg.lookahead_guesses) * (cfg.lookahead_ngram - 1)


def tree_level_width(k, tree_size) -> np.ndarray:
    """Nodes a drafter scores per level when it expands an M-node tree of depth K one level a pass."""
    k = np.maximum(np.asarray(k, dtype=float), 1.0)
    m = np.asarray(tree_size, dtype=float)
    return np.maximum(np.ceil((m - 1.0) / k), 1.0)


# ---- the families -----------------------------------------------------------------------------------

def _draft_model(cfg: DrafterConfig, target: ModelSpec, tp: int) -> DrafterWork:
    d = cfg.drafter
    return DrafterWork(pass_model=d, pass_tp=cfg.drafter_tp, n_passes="k", drafts_prompt=True,
                       weight_bytes=weight_bytes_per_device(d, cfg.drafter_tp), weight_label="drafter weights",
                       cache_model=d, cache_tp=cfg.drafter_tp, cache_label="drafter KV cache")


def _prompt_lookup(cfg: DrafterConfig, target: ModelSpec, tp: int) -> DrafterWork:
    return DrafterWork(host_s_per_seq_per_ktoken=cfg.prompt_lookup_s_per_seq_per_ktoken)


def _medusa(cfg: DrafterConfig, target: ModelSpec, tp: int) -> DrafterWork:
    heads = cfg.n_heads_medusa * medusa_head_params(target, cfg)
    return DrafterWork(verify_head_params=heads, verify_head_logit_rows=cfg.n_heads_medusa,
                       weight_bytes=heads * target.weight_bytes_per_param / tp, weight_label="medusa heads",
                       masked_verify=True)


# Tensor operations the reference drafting code runs per pass outside the head's decoder layer, and
# per node when it builds the tree node by node, counted in the code (each a Python-launched op; a
# stack whose drafting runs op by op charges them at its `[drafting] eager_op_us`):
# - EAGLE-2 (SafeAILab/EAGLE eagle/model/cnets.py, the same in Spec-Bench model/eagle2/cnets.py):
#   Model.forward outside its layer — the embedding, position ids, the causal and tree masks
#   (_prepare_decoder_attention_mask: about 16 ops), the cast, the concatenation and the fc, 23 ops —
#   and topK_genrate's work per depth — position ids, parents, the head's LM head, log-softmax, the
#   top-k, the cumulative scores and their top-k, the gathers of hidden states and token ids, the
#   tree-mask gather and concatenation, 17 ops: 40 a pass. After drafting it builds the verified tree
#   in a Python loop over the nodes, `tree_mask[i + 1].add_(tree_mask[mask_index_list[i]])`: 3 ops a
#   node (two selects and an add on a CPU tensor; the retrieve-index loop is plain Python lists).
# - EAGLE-3 (SafeAILab/EAGLE cnets.py, use_eagle3): EAGLE-2's, plus the final norm before its own LM
#   head (8 ops of RMSNorm) and the draft-to-target token mapping (4): 52 a pass.
# - EAGLE-1 (Spec-Bench model/eagle/cnets.py, static tree): the forward's 23 and per level the
#   top-k, view, the tree-index select, the repeat of hidden states and the position ids, 7: 30.
#   Its tree's buffers are built once (generate_tree_buffers), not per cycle.
EAGLE2_HEAD_OPS = 40
EAGLE3_HEAD_OPS = 52
EAGLE1_HEAD_OPS = 30
DYNAMIC_TREE_OPS_PER_NODE = 3
# Hydra (Spec-Bench model/hydra/hydra_heads, grounded proposal): a head pass is the head's MLP
# (dropout, then per ResBlock two linears, SiLU and an add: 5) and its LM head (dropout, linear): 8
# with one ResBlock, and the concatenation of its inputs: 9. The proposal then walks the expanded
# paths in Python, a top-k and a concatenation per path and an embedding, two gathers and a
# concatenation more where a path expands: about 6 ops a path; the default tree mc_sim_7b_63 walks
# 1 + 10 + 10 + 1 = 22 paths for its 63 drafted nodes, 2.1 ops a node.
HYDRA_HEAD_OPS_BASE = 4
HYDRA_OPS_PER_RESBLOCK = 5
HYDRA_TREE_OPS_PER_NODE = 22 * 6 / 63
# Hydra++'s prefix layer (Spec-Bench model/hydra/hydra_heads/prefix_mlp_head.py, _grounded_proposal): the
# position ids (arange, unsqueeze: 2), then a one-layer LlamaModel of the target's shape
# (model/hydra/modeling_llama_kv.py) over the verified tokens' hidden states, which outside its layer
# builds the causal mask (_prepare_decoder_attention_mask: about 16 ops, as EAGLE's forward) and applies
# the final RMSNorm (8): 26 ops, once a cycle.
HYDRA_PREFIX_OPS = 2 + 16 + 8


def _eagle_like(head: ModelSpec, target: ModelSpec, tp: int, label: str, in_target: bool, *,
                projection_params: float | None = None, own_lm_head: bool = False, head_ops: float = EAGLE2_HEAD_OPS,
                level_width: int | None = None, tree_ops_per_node: float = 0.0) -> DrafterWork:
    """A one-layer head drafting K passes with an input projection on every drafted token (default
    EAGLE's [feature; embedding] 2d -> d); own_lm_head: the head holds its LM head (EAGLE-3) instead of
    borrowing the target's. The passes are head passes (`pass_efficiency`)."""
    d = target.hidden_size
    proj = 2.0 * d * d if projection_params is None else projection_params
    held = head.decoder_layer_params + proj + (head.lm_head_params if own_lm_head else 0)
    return DrafterWork(pass_model=head, pass_tp=tp, n_passes="k", projection_params=proj, drafts_prompt=True,
                       weight_bytes=0.0 if in_target else held * target.weight_bytes_per_param / tp,
                       weight_label=f"{label} weights" + (" (already in the target's weights)" if in_target else ""),
                       cache_model=head, cache_tp=tp, cache_label=f"{label} KV cache", refeeds_accepted=True,
                       pass_kind="head", head_ops=head_ops, level_width=level_width,
                       tree_ops_per_node=tree_ops_per_node, masked_verify=True)


def _eagle(cfg: DrafterConfig, target: ModelSpec, tp: int) -> DrafterWork:
    if cfg.eagle_version == 1:
        return _eagle_like(eagle_head(target), target, tp, "eagle head", in_target=False, head_ops=EAGLE1_HEAD_OPS)
    if cfg.eagle_version == 2:
        return _eagle_like(eagle_head(target), target, tp, "eagle head", in_target=False, head_ops=EAGLE2_HEAD_OPS,
                           level_width=cfg.eagle_top_k, tree_ops_per_node=DYNAMIC_TREE_OPS_PER_NODE)
    head = replace(eagle_head(target), vocab_size=eagle3_draft_vocab(cfg, target), tied_embeddings=False,
                   id=f"{target.id}-eagle3-head")
    d = target.hidden_size
    # the fc over three features, and the attention projections' second d of input ([embedding; feature])
    proj = 3.0 * d * d + d * (head.n_heads * head.head_dim + 2 * head.n_kv_heads * head.head_dim)
    return _eagle_like(head, target, tp, "eagle-3 head", in_target=False, projection_params=proj, own_lm_head=True,
                       head_ops=EAGLE3_HEAD_OPS, level_width=cfg.eagle_top_k,
                       tree_ops_per_node=DYNAMIC_TREE_OPS_PER_NODE)


def hydra_head_params(target: ModelSpec, cfg: DrafterConfig, head_index: int) -> int:
    """Hydra head i (0-based, grounded): a ResBlock over [hidden; the embeddings of the i + 1 tokens
    before it], (i + 2)·d → d through two linears (one the residual connection) with biases, then
    hydra_mlp_layers − 1 ResBlocks d → d (d² + d), then its LM head d × V (Spec-Bench
    model/hydra/hydra_heads/mlp_head.py, ResBlock(hidden_size, num_condition))."""
    d = target.hidden_size
    first = 2 * ((head_index + 2) * d * d + d)
    return first + (cfg.hydra_mlp_layers - 1) * (d * d + d) + d * target.vocab_size


def hydra_prefix_layer(target: ModelSpec) -> ModelSpec:
    """Hydra++'s prefix layer: one decoder layer of the target's shape (Spec-Bench prefix_mlp_head.py copies
    the base config with num_hidden_layers = 1), its embedding unused (it reads hidden states)."""
    return truncated_model(target, 1, dense=True, suffix="-hydra-prefix")


def _hydra(cfg: DrafterConfig, target: ModelSpec, tp: int) -> DrafterWork:
    n = cfg.n_heads_hydra
    per_head = [hydra_head_params(target, cfg, i) for i in range(n)]
    held = float(sum(per_head))
    extra = {}
    if cfg.hydra_head_arch == "prefix-mlp":
        prefix = hydra_prefix_layer(target)
        held += prefix.decoder_layer_params
        extra = dict(cycle_pass_model=prefix, cycle_pass_ops=HYDRA_PREFIX_OPS, cache_model=prefix, cache_tp=tp,
                     cache_label="hydra prefix layer KV cache", drafts_prompt=True)
    return DrafterWork(n_passes="k", dense_pass_params=sum(per_head) / n, dense_pass_logit_vocab=target.vocab_size,
                       weight_bytes=held * target.weight_bytes_per_param / tp,
                       weight_label="hydra heads" + (" and prefix layer" if extra else ""),
                       pass_kind="head", head_ops=HYDRA_HEAD_OPS_BASE + HYDRA_OPS_PER_RESBLOCK * cfg.hydra_mlp_layers,
                       tree_ops_per_node=HYDRA_TREE_OPS_PER_NODE, pass_tp=tp, masked_verify=True, **extra)


# EAGLE-3's draft vocabulary: the 32,000 most frequent target tokens (SafeAILab/EAGLE
# eagle/traineagle3/config.json, "draft_vocab_size": 32000, for Llama-3.1-8B-Instruct; SpecForge's
# configs, e.g. configs/qwen3-30B-eagle3.json, use the same figure).
EAGLE3_DRAFT_VOCAB = 32000


def eagle3_draft_vocab(cfg: DrafterConfig, target: ModelSpec) -> int:
    if cfg.draft_vocab_size is not None:
        if cfg.draft_vocab_size > target.vocab_size:
            raise field_error("drafter", "draft_vocab_size", cfg.draft_vocab_size,
                              f"at most the target's vocabulary of {target.vocab_size}")
        return cfg.draft_vocab_size
    return min(EAGLE3_DRAFT_VOCAB, target.vocab_size)


def _mtp(cfg: DrafterConfig, target: ModelSpec, tp: int) -> DrafterWork:
    return _eagle_like(mtp_module(target), target, tp, "mtp module", in_target=bool(target.n_mtp_layers),
                       level_width=cfg.eagle_top_k)


def _lookahead(cfg: DrafterConfig, target: ModelSpec, tp: int) -> DrafterWork:
    return DrafterWork(verify_q_len=lookahead_width(cfg), masked_verify=True)


def _layer_skip(cfg: DrafterConfig, target: ModelSpec, tp: int) -> DrafterWork:
    early = truncated_model(target, default_skip_layers(target, cfg))
    return DrafterWork(pass_model=early, pass_tp=tp, n_passes="k", by_level=False)


def _sparse_kv(cfg: DrafterConfig, target: ModelSpec, tp: int) -> DrafterWork:
    return DrafterWork(pass_model=target, pass_tp=tp, n_passes="k", by_level=False, context_cap=cfg.sparse_budget)


_HF = "Hugging Face transformers / reference repos (stack hf-eager)"
FAMILIES: dict[str, Family] = {f.name: f for f in (
    Family(name="draft_model", title="separate draft model", paper="Leviathan et al. 2022; Chen et al. 2023",
           work=_draft_model, needs_drafter_model=True, tree=True, decoder="draft-model", options=("k_schedule",),
           stacks={
               "vllm": StackSupport(name="draft_model", source="vLLM docs, features/speculative_decoding: "
                                    "'Speculating with a draft model' (--speculative-config {\"model\": ...})"),
               "vllm-v0": StackSupport(name="draft_model", source="vLLM 0.5.1 docs, models/spec_decode: "
                                       "'Speculating with a draft model' (speculative_model=...)"),
               "sglang": StackSupport(name="STANDALONE", source="SGLang docs, speculative decoding: "
                                      "--speculative-algorithm STANDALONE with a draft model"),
               "trtllm": StackSupport(name="DraftTarget", source="TensorRT-LLM docs, speculative decoding: "
                                      "draft/target (DraftTargetDecodingConfig)"),
               "hf-eager": StackSupport(name="assistant_model", source="transformers assisted generation "
                                        "(generate(..., assistant_model=...))"),
               "gpt-fast": StackSupport(name="draft_checkpoint_path", source="gpt-fast README: speculative "
                                        "sampling with a draft model (--draft_checkpoint_path)"),
               "llama.cpp": StackSupport(name="llama-speculative", source="llama.cpp examples/speculative "
                                         "(--model-draft)"),
           }),
    Family(name="prompt_lookup", title="prompt lookup (n-gram)", paper="Saxena 2023, prompt-lookup-decoding",
           work=_prompt_lookup, options=("prompt_lookup_s_per_seq_per_ktoken", "draft_frac"), decoder="prompt-lookup",
           self_label="(prompt n-grams)", weights=False,
           stacks={
               "vllm": StackSupport(name="ngram", source="vLLM docs, features/speculative_decoding: "
                                    "'Speculating by matching n-grams in the prompt' (method ngram)",
                                    extra={"prompt_lookup_max": 4, "prompt_lookup_min": 2}),
               "vllm-v0": StackSupport(name="[ngram]", source="vLLM 0.5.1 docs, models/spec_decode: 'Speculating "
                                       "by matching n-grams in the prompt' (speculative_model='[ngram]')",
                                       extra={"ngram_prompt_lookup_max": 4}),
               "sglang": StackSupport(name="NGRAM", source="SGLang docs, speculative decoding: "
                                      "--speculative-algorithm NGRAM"),
               "trtllm": StackSupport(name="NGram", source="TensorRT-LLM docs, speculative decoding: N-gram "
                                      "(NGramDecodingConfig)"),
               "hf-eager": StackSupport(name="prompt_lookup_num_tokens", source="transformers generate("
                                        "prompt_lookup_num_tokens=...)"),
               "llama.cpp": StackSupport(name="llama-lookup", source="llama.cpp examples/lookup"),
           }),
    Family(name="medusa", title="Medusa heads", paper="Cai et al. 2024", work=_medusa, tree=True,
           options=("n_heads_medusa", "medusa_layers_per_head"), self_label="(medusa heads)",
           stacks={
               "vllm": StackSupport(name="medusa", source="vLLM docs, features/speculative_decoding: Medusa"),
               "trtllm": StackSupport(name="Medusa", source="TensorRT-LLM docs, speculative decoding: Medusa"),
               "hf-eager": StackSupport(name="medusa", source="FasterDecoding/Medusa reference repo on HF models"),
           }),
    Family(name="eagle", title="EAGLE head", paper="Li et al. 2024 (EAGLE, EAGLE-2); Li et al. 2025 (EAGLE-3)",
           work=_eagle, tree=True, options=("eagle_version", "draft_vocab_size", "eagle_top_k"),
           self_label="(eagle head)",
           stacks={
               "vllm": StackSupport(name="eagle", source="vLLM docs, features/speculative_decoding: EAGLE"),
               "sglang": StackSupport(name="EAGLE", source="SGLang docs, speculative decoding: EAGLE-2/EAGLE-3"),
               "trtllm": StackSupport(name="Eagle", source="TensorRT-LLM docs, speculative decoding: EAGLE"),
               "hf-eager": StackSupport(name="eagle", source="SafeAILab/EAGLE reference repo on HF models"),
           }),
    Family(name="hydra", title="Hydra heads", paper="Ankner et al. 2024 (Hydra: sequentially-dependent draft heads)",
           work=_hydra, tree=True, options=("n_heads_hydra", "hydra_mlp_layers", "hydra_head_arch"),
           self_label="(hydra heads)",
           serving=False,
           stacks={
               "hf-eager": StackSupport(name="hydra", source="zankner/hydra reference repo on HF models, as run by "
                                        "Spec-Bench (evaluation/inference_hydra.py, model/hydra)"),
           }),
    Family(name="lookahead", title="Lookahead decoding", paper="Fu et al. 2024", work=_lookahead,
           options=("lookahead_window", "lookahead_ngram", "lookahead_guesses"), serving=False,
           self_label="(lookahead pool)", uses_k=False, weights=False,
           stacks={
               "trtllm": StackSupport(name="Lookahead", source="TensorRT-LLM docs, speculative decoding: Lookahead"),
               "hf-eager": StackSupport(name="lookahead", source="hao-ai-lab/LookaheadDecoding patches HF models"),
               "llama.cpp": StackSupport(name="llama-lookahead", source="llama.cpp examples/lookahead"),
           }),
    Family(name="layer_skip", title="layer-skip self-speculation", paper="Elhoushi et al. 2024 (LayerSkip)",
           work=_layer_skip, options=("skip_layers",), decoder="layer-skip", self_label="(early layers)", weights=False,
           stacks={"hf-eager": StackSupport(name="assistant_early_exit", source="transformers LayerSkip "
                                            "self-speculation (generate(..., assistant_early_exit=n))")}),
    Family(name="mtp", title="multi-token prediction module", paper="DeepSeek-AI 2024 (DeepSeek-V3 §2.2)",
           work=_mtp, tree=True, options=("eagle_top_k",), self_label="(mtp module)", weights=False,
           stacks={
               "vllm": StackSupport(name="deepseek_mtp", source="vLLM docs, features/speculative_decoding: MTP"),
               "sglang": StackSupport(name="EAGLE", source="SGLang docs: DeepSeek MTP runs through the EAGLE "
                                      "speculative algorithm"),
               "trtllm": StackSupport(name="MTP", source="TensorRT-LLM docs, speculative decoding: MTP"),
           }),
    Family(name="sparse_kv", title="sparse-KV self-speculation", paper="Chen et al. 2024 (MagicDec)",
           work=_sparse_kv, options=("sparse_sink", "sparse_window"), self_label="(sparse-KV self)", weights=False),
)}
METHODS = tuple(FAMILIES)
TREE_METHODS = tuple(n for n, f in FAMILIES.items() if f.tree)


def family(method: str) -> Family:
    if method not in FAMILIES:
        raise field_error("drafter", "method", method, f"one of {', '.join(METHODS)}")
    return FAMILIES[method]


def stacks_shipping(method: str) -> tuple[str, ...]:
    return tuple(family(method).stacks)


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


def make_config(method: str, target: ModelSpec, *, drafter: str | ModelSpec | None = None, drafter_tp: int = 1,
                allow_cross_tokenizer: bool = False, options=None, where: str = "drafter") -> DrafterConfig:
    """A DrafterConfig from ids and a table of family knobs (a scenario's `[drafter_options]`; keys in
    OPTION_KEYS). Loads and tokenizer-checks the draft model for draft_model."""
    from ..specs.models import load_model

    fam = family(method)
    options = dict(options or {})
    reject_unknown_keys(f"{where} [drafter_options]", options, OPTION_KEYS)
    d = None
    if fam.needs_drafter_model:
        if drafter is None:
            raise field_error(where, "drafter", None, f"a drafter model id for method {method!r}")
        d = drafter if isinstance(drafter, ModelSpec) else load_model(drafter)
        check_tokenizers(target, d, allow_cross_tokenizer=allow_cross_tokenizer)
    if method == "mtp" and not target.n_mtp_layers:
        raise field_error(where, "method", method, f"a target with MTP layers ({target.id!r} has n_mtp_layers = 0)")
    try:
        cfg = DrafterConfig(method=method, drafter=d, drafter_tp=drafter_tp, **options)
        if method == "layer_skip":
            default_skip_layers(target, cfg)
        if method == "eagle" and cfg.eagle_version == 3:
            eagle3_draft_vocab(cfg, target)
        return cfg
    except SpecError as exc:
        raise SpecError(f"{where}: {exc}") from None


# ---- published defaults of the draft shape ----------------------------------------------------------

@dataclass(frozen=True, slots=True, kw_only=True)
class PublishedDefault:
    """A method's published default draft shape, for a measurement that does not state its own: the
    depth K, the tree's nodes M (None: a chain) and options, with where they are published."""

    k: int
    tree_size: int | None
    options: Mapping[str, object]
    source: str


_EAGLE_DEFAULTS = {
    1: PublishedDefault(k=5, tree_size=26, options={}, source=(
        "EAGLE-1's static tree mc_sim_7b_63 (SafeAILab/EAGLE eagle/model/choices.py: 25 choices + the root = 26 "
        "nodes, depth 5)")),
    2: PublishedDefault(k=6, tree_size=60, options={"eagle_top_k": 10}, source=(
        "EAGLE-2's defaults as Spec-Bench runs it (hemingkx/Spec-Bench evaluation/inference_eagle2.py: --total-token "
        "60 --depth 5 --top-k 10; model/eagle2/cnets.py topK_genrate drafts depth + 1 = 6 levels of 10 tokens and "
        "verifies 59 nodes + the root = 60)")),
    3: PublishedDefault(k=8, tree_size=60, options={"eagle_top_k": 10}, source=(
        "EAGLE-3's defaults (SafeAILab/EAGLE eagle/model/ea_model.py from_pretrained: total_token=60, depth=7, "
        "top_k=10; cnets.py topK_genrate drafts depth + 1 = 8 levels and verifies 59 nodes + the root = 60)")),
}
_TREE_63 = PublishedDefault(k=4, tree_size=64, options={}, source=(
    "the tree mc_sim_7b_63 (FasterDecoding/Medusa medusa/model/medusa_choices.py; Spec-Bench model/hydra/"
    "hydra_choices.py has the same: 63 choices + the root = 64 nodes, depth 4)"))


def published_default(cfg: DrafterConfig, target: ModelSpec, stack_id: str | None) -> PublishedDefault | None:
    """The published default draft shape of the family `cfg` drafts with (its version and stack), or
    None when none is published (vLLM, SGLang and TensorRT-LLM need the draft length set)."""
    m = cfg.method
    if m == "eagle":
        return _EAGLE_DEFAULTS[cfg.eagle_version]
    if m in ("medusa", "hydra"):
        return _TREE_63
    if m == "mtp" and target.n_mtp_layers:
        return PublishedDefault(k=int(target.n_mtp_layers), tree_size=None, options={}, source=(
            f"one draft token per MTP module of the target ({target.id}: n_mtp_layers = {target.n_mtp_layers}, "
            f"its config.json num_nextn_predict_layers)"))
    if m == "draft_model" and stack_id == "hf-eager":
        return PublishedDefault(k=5, tree_size=None, options={"k_schedule": "hf-heuristic"}, source=(
            "transformers' assisted generation defaults (GenerationConfig num_assistant_tokens = 5, "
            "num_assistant_tokens_schedule = 'heuristic', transformers 4.37)"))
    return None


# ---- cost per cycle ---------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True, kw_only=True)
class DraftCost:
    """Drafting cost of one cycle; arrays broadcast like (B, K, M, L).

    draft_time_s: all drafting passes and host work of a cycle (outside the verify pass);
    draft_step_time_s: their mean per pass (the one host search for prompt lookup); n_draft_steps:
    sequential passes per cycle; verify_q_len: query tokens per sequence the verify pass scores;
    verify_extra_s: extra time inside the verify pass (Medusa heads); first_pass: the roofline cost
    of the cycle's first drafting pass (None when the family runs no drafting model)."""

    draft_step_time_s: np.ndarray
    draft_time_s: np.ndarray
    n_draft_steps: np.ndarray
    verify_q_len: np.ndarray
    verify_extra_s: np.ndarray
    first_pass: StepCost | None = None


def verify_q_len(cfg: DrafterConfig, work: DrafterWork, k, tree_size=None) -> np.ndarray:
    """Query tokens per sequence of the verify pass: K + 1 for a chain, M for a tree, or the
    family's fixed width."""
    kk = np.asarray(k, dtype=float)
    if work.verify_q_len is not None:
        return np.full(np.shape(kk), float(work.verify_q_len))
    return kk + 1.0 if tree_size is None else np.asarray(tree_size, dtype=float) + 0.0 * kk


def pass_width(work: DrafterWork, k, tree_size=None) -> np.ndarray:
    """Tokens per sequence in one drafting pass: 1 for chains and one-token passes, a tree level's
    width ⌈(M − 1)/K⌉ when the family drafts a tree one level a pass (the passes after the first
    of a family with a `level_width`, a dynamic tree's top-k, are `pass_widths`' business)."""
    if tree_size is None or not work.by_level:
        return np.ones(np.shape(np.asarray(k)))
    return tree_level_width(k, tree_size)


def pass_widths(work: DrafterWork, k, tree_size=None) -> tuple[np.ndarray, np.ndarray]:
    """(first, later): tokens per sequence of a cycle's first drafting pass and of each pass after it.
    A dynamic tree with a top-k (`level_width`) drafts its root's children from the one new token and
    then top-k tokens a level (SafeAILab/EAGLE topK_genrate; SGLang's EAGLE worker); otherwise every
    pass is `pass_width` wide."""
    w = pass_width(work, k, tree_size)
    if tree_size is None or work.level_width is None:
        return w, w
    return np.ones(np.shape(w)), np.full(np.shape(w), float(work.level_width))


def pass_efficiency(work: DrafterWork, dep) -> Efficiency:
    """The efficiency a drafting pass runs at on deployment `dep`: the stack's own for a model pass;
    for a head pass, the same with the stack's `[drafting]` head-pass cost (the family's op count times
    the stack's eager_op_us, or its flat head_pass_us) in place of the per-pass step overhead. A stack
    without a `[drafting]` table charges a head pass like a model pass."""
    eff = dep.eff
    if work.pass_kind != "head":
        return eff
    t = dep.drafting.head_pass_time_s(work.head_ops, layered=work.pass_model is not None)
    return eff if t is None else replace(eff, step_overhead_s=t)


def drafting_deployment(dep, work: DrafterWork):
    """The deployment as this family's drafting code uses it: where the family builds its verified tree
    node by node (`tree_ops_per_node`) and the stack prices that work (`[drafting]` tree_node_us or
    eager_op_us), the host's work per drafted token includes it, so every consumer of the host model
    (the analytical cycle, the serving engine) charges it the same way."""
    if not work.tree_ops_per_node:
        return dep
    t = dep.drafting.tree_node_time_s(work.tree_ops_per_node)
    if not t:
        return dep
    return replace(dep, host=replace(dep.host, spec_per_draft_token_s=dep.host.spec_per_draft_token_s + t))


def draft_cost(cfg: DrafterConfig, target: ModelSpec, dep, *, batch_size, k, tree_size=None, context_len,
               work: DrafterWork | None = None) -> DraftCost:
    """Drafting cost per cycle and the verify pass's query length for one family on a deployment.

    batch_size B, k K (draft depth: tokens for a chain, levels for a tree), tree_size M (nodes of the
    verified tree including the root; None for a chain), context_len L (cached tokens): arrays that
    broadcast together. dep: a `speculation.cycle.Deployment` (hardware, efficiency, tp, attention).
    Drafting pass j (0-based) sees min(L + w₀ + (j − 1)·w, cap) cached tokens (L for the first), w₀ and
    w the widths of the first and later passes (`pass_widths`). A head pass runs at
    `pass_efficiency` (the stack's head-pass cost instead of a model step's overhead).
    work: the family's DrafterWork when already resolved (`OperatingPoint.work`); else derived here."""
    work = cfg.family.work(cfg, target, dep.tp) if work is None else work
    b = np.asarray(batch_size, dtype=float)
    kk = np.asarray(k, dtype=float)
    l = np.asarray(context_len, dtype=float)
    m = kk + 1.0 if tree_size is None else np.asarray(tree_size, dtype=float)
    b, kk, m, l = np.broadcast_arrays(b, kk, m, l)
    if tree_size is not None and not cfg.supports_tree and work.verify_q_len is None and np.any(m != kk + 1):
        raise field_error("drafter", "tree_size", "M != K + 1", f"a chain (tree_size = K + 1) for method {cfg.method!r}")
    zero = np.zeros(b.shape)
    q = verify_q_len(cfg, work, kk, None if tree_size is None else m)
    eff = dep.eff
    draft = zero.copy()
    n_steps = zero.copy()
    first = None
    if work.has_passes:
        w0, w = pass_widths(work, kk, None if tree_size is None else m)
        kmax = int(kk.max()) if kk.size else 0
        peff = pass_efficiency(work, dep)
        passes = (source_for(work.pass_model, dep, tp=work.pass_tp, efficiency=peff)
                  if work.pass_model is not None else None)

        blocks = source_for(target, dep, tp=work.pass_tp)  # dense blocks in the target's weight format

        def dense(params, width, vocab=0):  # one evaluation per distinct width
            return blocks.dense_time_s(params, b * width, extra_bytes=b * width * vocab * LOGIT_BYTES)

        same = np.array_equal(w0, w)
        proj0 = proj = 0.0
        if work.projection_params:
            proj0 = dense(work.projection_params, w0)
            proj = proj0 if same else dense(work.projection_params, w)
        heads0 = heads = 0.0
        if work.pass_model is None:  # dense heads (Hydra): their MLP and LM head, and the pass's fixed cost
            heads0 = dense(work.dense_pass_params, w0, work.dense_pass_logit_vocab) + peff.step_overhead_s
            heads = heads0 if same else (dense(work.dense_pass_params, w, work.dense_pass_logit_vocab)
                                         + peff.step_overhead_s)
        for j in range(kmax):
            width = w0 if j == 0 else w
            ctx = l if j == 0 else l + w0 + (j - 1) * w
            if work.context_cap is not None:
                ctx = np.minimum(ctx, float(work.context_cap))
            t = (proj0 + heads0) if j == 0 else (proj + heads)
            if work.pass_model is not None:
                c = passes.price(PassShape.uniform(work.pass_model, batch_size=b, q_len=width, context_len=ctx,
                                                   attention=dep.attention))
                if j == 0:
                    first = c
                t = t + c.time_s
            draft = draft + np.where(j < kk, t, 0.0)
        if work.cycle_pass_model is not None:  # once a cycle, before the passes (Hydra++'s prefix layer)
            fixed = dep.drafting.head_pass_time_s(work.cycle_pass_ops, layered=True)
            ceff = eff if fixed is None else replace(eff, step_overhead_s=fixed)
            c = source_for(work.cycle_pass_model, dep, tp=work.pass_tp, efficiency=ceff).price(
                PassShape.uniform(work.cycle_pass_model, batch_size=b, q_len=1.0, context_len=l, attention=dep.attention))
            draft = draft + (c.time_s - c.lm_head.time_s)  # it returns hidden states: no LM head
        n_steps = kk.copy()
    if work.host_s_per_seq_per_ktoken:
        draft = draft + b * work.host_s_per_seq_per_ktoken * np.maximum(l, 1.0) / 1000.0
        n_steps = np.ones(b.shape)
    step = np.divide(draft, n_steps, out=zero.copy(), where=n_steps > 0)
    extra = zero
    if work.verify_head_params:
        logits = b * q * work.verify_head_logit_rows * target.vocab_size * LOGIT_BYTES
        extra = dense_time_s(target, dep, work.verify_head_params, b * q, extra_bytes=logits)
    if work.masked_verify and dep.drafting.masked_score_bytes:
        extra = extra + masked_score_time_s(target, dep, batch_size=b, q_len=q, context_len=l)
    return DraftCost(draft_step_time_s=step, draft_time_s=draft, n_draft_steps=n_steps, verify_q_len=q,
                     verify_extra_s=extra, first_pass=first)


# ---- memory -----------------------------------------------------------------------------------------

def footprint(cfg: DrafterConfig, target: ModelSpec, *, batch_size, context_len, k, tree_size=None, tp: int = 1,
              work: DrafterWork | None = None) -> dict:
    """Per-device bytes the drafting adds on top of the target's weights and its KV cache of L + 1
    tokens: the drafter's weights, its own KV cache, and the speculative slots (the positions per
    sequence beyond its real token that the verify pass writes into the target's cache before the
    rejected ones are discarded: K for a chain, M − 1 for a tree). Keys are readable labels; values
    broadcast like the inputs. work: the resolved DrafterWork at tp (`OperatingPoint.work`), if known."""
    work = cfg.family.work(cfg, target, tp) if work is None else work
    b = np.asarray(batch_size, dtype=float)
    l = np.asarray(context_len, dtype=float)
    kk = np.asarray(k, dtype=float)
    q = verify_q_len(cfg, work, kk, tree_size)
    out = {"speculative slots": kv_bytes_per_device(target, batch_size=b, context_len=q - 1.0, tp=tp)}
    if work.weight_label:
        out[work.weight_label] = work.weight_bytes
    if work.cache_model is not None:
        out[work.cache_label] = kv_bytes_per_device(work.cache_model, batch_size=b, context_len=l + q, tp=work.cache_tp)
    return out


__all__ = ["FAMILIES", "Family", "StackSupport", "DrafterConfig", "DrafterWork", "DraftCost", "METHODS",
           "TREE_METHODS", "OPTION_KEYS", "family", "make_config", "check_tokenizers", "draft_cost", "footprint",
           "verify_q_len", "pass_width", "pass_widths", "pass_efficiency", "drafting_deployment", "masked_score_time_s",
           "dense_time_s", "truncated_model", "eagle_head", "mtp_module",
           "medusa_head_params", "hydra_head_params", "hydra_prefix_layer", "HYDRA_HEAD_ARCHS", "tree_level_width",
           "lookahead_width", "stacks_shipping",
           "PublishedDefault", "published_default"]
