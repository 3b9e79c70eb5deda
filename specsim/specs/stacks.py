"""Serving-stack profiles: how close to the roofline the software running the model gets.

The same model on the same part runs at very different fractions of its bandwidth limit depending
on the stack: PyTorch eager launches every kernel from Python and is overhead bound at batch 1, while
CUDA-graph stacks (gpt-fast, vLLM, SGLang, TensorRT-LLM) come close to the bandwidth roofline. A
stack therefore *produces an `Efficiency`* that replaces the hardware profile's own when a scenario
or row names it, plus what it does per speculative cycle and how it verifies:

- `bandwidth_frac`, `compute_frac`: achievable fractions of the part's peaks;
- `step_overhead_us`, `per_layer_overhead_us`: fixed cost per forward pass and per layer (kernel
  launch gaps, Python dispatch, scheduling), which speculation amortises over several tokens;
- `cycle_overhead_us`: extra host work per speculative cycle (proposer bookkeeping, rejection
  sampling launch, KV-pointer rollback);
- `[host]`: the serving engine's host (CPU) work per iteration — `step_us` fixed, `per_seq_us` per
  running sequence (scheduling, input preparation, sampling, output processing), `per_token_us`
  per token in the step, `multi_gpu_step_us` per iteration when the model spans several devices
  (broadcasting the step to the workers), `spec_per_seq_us` per speculating sequence and
  `spec_per_draft_token_us` per drafted token (rejection sampling, draft bookkeeping),
  `spec_per_draft_pass_us` per sequential drafting pass (launching the drafter, top-k and tree
  expansion between passes) — and
  `overlap`: whether that work hides behind the device's ("none"; "plain": only without
  speculation, as with an overlap scheduler that speculation disables; "speculative": only with it;
  "always"). A stack's `overlap` load regimes (specs.regimes) replace it where they hold;
- `[drafting]`: what a drafting pass costs in this stack's code, beside its device work —
  `head_pass_us`, the fixed cost of one pass of a one-layer drafting head run directly (an EAGLE or
  MTP head: embedding, masks, input projection, final norm, LM-head call, the top-k that picks the
  next level), charged instead of `step_overhead_us` (its decoder layer still pays
  `per_layer_overhead_us`); `eager_op_us`, the host cost of one tensor operation launched from
  Python, for stacks whose drafting code runs op by op (then a head pass costs the family's own
  op count times it, and a tree built node by node its ops per node times it); `tree_node_us`,
  host work per node of a tree the stack's code builds node by node, where it is measured
  directly; `masked_score_bytes`, where the family's reference code verifies through its own eager
  attention with a tree mask (the Medusa, EAGLE, Hydra and Lookahead repos on HF models), the
  device bytes moved per attention score (query × key × head × layer) of the verified positions
  beyond the first, over the part's bandwidth. A stack without the table charges a head pass its
  `step_overhead_us`, as a model pass;
- `tree_verification`: "none" (chains only), "static" (a fixed tree/choice list), "dynamic"
  (EAGLE-2-style trees rebuilt every cycle);
- `verify_scorer`: how the verify pass scores a sequence's M positions: "multi_query" (the default:
  M queries of one kernel call that reads the sequence's KV cache once, as FlashAttention's varlen and
  FlashInfer's kernels run them in vLLM V1 and SGLang, and vLLM V0's MQAScorer) or "batch_expansion"
  (each sequence expanded into M one-token sequences, each a decode query reading the cache up to its
  own position: vLLM V0's BatchExpansionTop1Scorer);
- `[measured]` (optional): the fitted figures refitted with the target's passes priced by measured
  operator tables (`cost.pricing`), `cycle_overhead_us`, `step_overhead_us` or `per_layer_overhead_us`,
  each cited in `[sources.measured]`: a fitted figure absorbed the error of the source it was fitted
  through, so where the tables price the target these stand in for the top-level ones;
- `multi_gpu`: "tensor_parallel" (each layer split across devices, all-reduce per layer) or
  "layer_split" (Hugging Face `device_map="auto"`: consecutive layers on consecutive devices, run one
  after the other, so n devices add memory but not bandwidth) or "none";
- `methods` (optional, for a user's own stack file): drafter families it ships beyond those the
  family registry (`speculation.families.FAMILIES`) already lists for it; the catalog stacks are
  listed there, with the stack's own name for each family and its source.

Files live in `stacks/*.toml` (shipped as `specsim/catalog/stacks`). Every figure cites a source;
judgements are labelled as estimates.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Mapping

from .catalog import catalog_ids, read_toml, resolve
from ..errors import SpecError, field_error, reject_unknown_keys
from .hardware import Efficiency
from .regimes import parse_entries as parse_regimes

TREE_MODES = ("none", "static", "dynamic")
OVERLAP_MODES = ("none", "plain", "speculative", "always")


@dataclass(frozen=True, slots=True, kw_only=True)
class HostCost:
    """A serving engine's host (CPU) work per iteration, and whether it hides behind the device.

    An iteration's host time is step + per_seq·n + per_token·T (+ multi_gpu_step when the model
    spans several devices), and when it speculates, + the stack's cycle overhead + spec_per_seq·n_spec
    + spec_per_draft_token·drafted tokens + spec_per_draft_pass·sequential drafting passes. The iteration lasts device + host, or max(device, host)
    when the work overlaps (`overlap` = "always", "plain" for iterations that do not speculate,
    "speculative" for those that do)."""

    step_s: float = 0.0
    per_seq_s: float = 0.0
    per_token_s: float = 0.0
    multi_gpu_step_s: float = 0.0
    spec_per_seq_s: float = 0.0
    spec_per_draft_token_s: float = 0.0
    spec_per_draft_pass_s: float = 0.0
    overlap: str = "none"

    def __post_init__(self) -> None:
        for name in ("step_s", "per_seq_s", "per_token_s", "multi_gpu_step_s", "spec_per_seq_s",
                     "spec_per_draft_token_s", "spec_per_draft_pass_s"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not (v >= 0 and math.isfinite(v)):
                raise field_error("host", name, v, "a finite duration >= 0 s")
        if self.overlap not in OVERLAP_MODES:
            raise field_error("host", "overlap", self.overlap, f"one of {', '.join(OVERLAP_MODES)}")

    def overlaps(self, speculative: bool) -> bool:
        return self.overlap == "always" or self.overlap == ("speculative" if speculative else "plain")

    @staticmethod
    def overlap_mode(plain: bool, speculative: bool) -> str:
        """The `overlap` mode whose plain and speculating iterations overlap as given."""
        return {(False, False): "none", (True, False): "plain", (False, True): "speculative",
                (True, True): "always"}[(bool(plain), bool(speculative))]


@dataclass(frozen=True, slots=True, kw_only=True)
class DraftingCost:
    """A stack's fixed costs of drafting beside the device work of the passes (see the module
    docstring, `[drafting]`). None: not given (a head pass then costs the stack's step overhead, as
    any model pass; no per-op or per-node host work is charged)."""

    head_pass_s: float | None = None
    eager_op_s: float | None = None
    tree_node_s: float | None = None
    masked_score_bytes: float = 0.0

    def __post_init__(self) -> None:
        for name in ("head_pass_s", "eager_op_s", "tree_node_s", "masked_score_bytes"):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not (v >= 0 and math.isfinite(v))):
                raise field_error("drafting", name, v, "a finite number of bytes >= 0" if name == "masked_score_bytes"
                                  else "a finite duration >= 0 s")

    def head_pass_time_s(self, n_ops: float, *, layered: bool = True) -> float | None:
        """The fixed cost of one head pass whose code runs n_ops tensor operations outside its layers:
        for a head with a decoder layer (EAGLE, MTP) head_pass_us where the stack gives it, else
        n_ops × eager_op_us, else None (a model pass's). A head without a layer (Hydra's MLPs) runs other
        code, priced by its own op count only."""
        if layered and self.head_pass_s is not None:
            return self.head_pass_s
        if self.eager_op_s is not None:
            return n_ops * self.eager_op_s
        return None

    def tree_node_time_s(self, n_ops: float) -> float:
        """Host work per drafted node of a tree built node by node with n_ops operations per node."""
        if self.tree_node_s is not None:
            return self.tree_node_s
        return n_ops * self.eager_op_s if self.eager_op_s is not None else 0.0


_DRAFTING_US = {"head_pass_us": "head_pass_s", "eager_op_us": "eager_op_s", "tree_node_us": "tree_node_s"}
_DRAFTING_PLAIN = {"masked_score_bytes": "masked_score_bytes"}
_HOST_US = {"step_us": "step_s", "per_seq_us": "per_seq_s", "per_token_us": "per_token_s",
            "multi_gpu_step_us": "multi_gpu_step_s", "spec_per_seq_us": "spec_per_seq_s",
            "spec_per_draft_token_us": "spec_per_draft_token_s", "spec_per_draft_pass_us": "spec_per_draft_pass_s"}
MULTI_GPU_MODES = ("tensor_parallel", "layer_split", "none")


VERIFY_SCORERS = ("multi_query", "batch_expansion")
# [measured] keys (microseconds in the file) -> the seconds they stand in for
MEASURED_TERMS = {"cycle_overhead_us": "cycle_overhead_s", "step_overhead_us": "step_overhead_s",
                  "per_layer_overhead_us": "per_layer_overhead_s"}


@dataclass(frozen=True, slots=True, kw_only=True)
class StackProfile:
    id: str
    name: str
    version: str
    efficiency: Efficiency
    cycle_overhead_s: float = 0.0
    tree_verification: str = "none"
    multi_gpu: str = "tensor_parallel"
    verify_scorer: str = "multi_query"
    layer_split_hop_s: float = 0.0
    host: HostCost = field(default_factory=HostCost)
    drafting: DraftingCost = field(default_factory=DraftingCost)
    methods: tuple[str, ...] = ()
    measured: Mapping[str, float] = field(default_factory=dict)  # [measured]: figures fitted through the tables, s
    regimes: tuple = ()  # the [[load_regime]] entries (specs.regimes): what changes with load, by version
    sources: Mapping[str, str] = field(default_factory=dict)
    notes: str = ""

    def __post_init__(self) -> None:
        where = f"stack {self.id!r}"
        if self.tree_verification not in TREE_MODES:
            raise field_error(where, "tree_verification", self.tree_verification, f"one of {TREE_MODES}")
        if self.multi_gpu not in MULTI_GPU_MODES:
            raise field_error(where, "multi_gpu", self.multi_gpu, f"one of {MULTI_GPU_MODES}")
        if self.verify_scorer not in VERIFY_SCORERS:
            raise field_error(where, "verify_scorer", self.verify_scorer, f"one of {', '.join(VERIFY_SCORERS)}")
        for name in ("cycle_overhead_s", "layer_split_hop_s"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and v >= 0 and math.isfinite(v)):
                raise field_error(where, name, v, "a finite duration >= 0 s")
        object.__setattr__(self, "sources", MappingProxyType(dict(self.sources)))
        unknown = set(self.measured) - set(MEASURED_TERMS.values())
        if unknown:
            raise field_error(where, "measured", sorted(unknown), f"figures among {', '.join(MEASURED_TERMS)}")
        object.__setattr__(self, "measured", MappingProxyType(dict(self.measured)))

    @property
    def supports_tree(self) -> bool:
        return self.tree_verification != "none"


_US = {"step_overhead_us": "step_overhead_s", "per_layer_overhead_us": "per_layer_overhead_s"}
_TOP = {"id", "name", "version", "notes", "bandwidth_frac", "compute_frac", "step_overhead_us",
        "per_layer_overhead_us", "cycle_overhead_us", "tree_verification", "multi_gpu", "layer_split_hop_us",
        "verify_scorer", "methods", "host", "drafting", "measured", "sources", "load_regime"}
_NEEDS_SOURCE = ("bandwidth_frac", "compute_frac", "step_overhead_us", "per_layer_overhead_us", "cycle_overhead_us",
                 "tree_verification", "multi_gpu", "layer_split_hop_us", "verify_scorer", "methods")


def stack_from_dict(raw: dict, *, where: str = "stack") -> StackProfile:
    reject_unknown_keys(where, raw, _TOP)
    for key in ("id", "name", "version", "bandwidth_frac", "compute_frac"):
        if key not in raw:
            raise field_error(where, key, None, "a value (required key)")
    sources = raw.get("sources")
    if not isinstance(sources, dict):
        raise field_error(where, "sources", sources, "a [sources] table citing each figure")
    for key in _NEEDS_SOURCE:
        if key in raw and not str(sources.get(key, "")).strip():
            raise field_error(where, f"sources.{key}", None, "a citation (paper, README, benchmark) or 'estimate: …'")
    for key in ("bandwidth_frac", "compute_frac", "step_overhead_us", "per_layer_overhead_us", "cycle_overhead_us",
                "layer_split_hop_us"):
        if key in raw and (isinstance(raw[key], bool) or not isinstance(raw[key], (int, float))):
            raise field_error(where, key, raw[key], "a number")
    host_raw = raw.get("host", {})
    if not isinstance(host_raw, dict):
        raise field_error(where, "host", host_raw, "a [host] table")
    reject_unknown_keys(f"{where} [host]", host_raw, set(_HOST_US) | {"overlap"})
    host_sources = sources.get("host", {})
    if host_raw and not isinstance(host_sources, dict):
        raise field_error(where, "sources.host", host_sources, "a [sources.host] table citing each [host] figure")
    for key in host_raw:
        if not str(host_sources.get(key, "")).strip():
            raise field_error(where, f"sources.host.{key}", None, "a citation or 'estimate: …' for each [host] figure")
        if key != "overlap" and (isinstance(host_raw[key], bool) or not isinstance(host_raw[key], (int, float))):
            raise field_error(f"{where} [host]", key, host_raw[key], "a number of microseconds")
    measured_raw = raw.get("measured", {})
    if not isinstance(measured_raw, dict):
        raise field_error(where, "measured", measured_raw, "a [measured] table")
    reject_unknown_keys(f"{where} [measured]", measured_raw, set(MEASURED_TERMS))
    measured_sources = sources.get("measured", {})
    if measured_raw and not isinstance(measured_sources, dict):
        raise field_error(where, "sources.measured", measured_sources, "a [sources.measured] table citing each figure")
    for key, value in measured_raw.items():
        if not str(measured_sources.get(key, "")).strip():
            raise field_error(where, f"sources.measured.{key}", None, "the fit that gave each [measured] figure")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
            raise field_error(f"{where} [measured]", key, value, "a finite number of microseconds >= 0")
    drafting_raw = raw.get("drafting", {})
    if not isinstance(drafting_raw, dict):
        raise field_error(where, "drafting", drafting_raw, "a [drafting] table")
    reject_unknown_keys(f"{where} [drafting]", drafting_raw, set(_DRAFTING_US) | set(_DRAFTING_PLAIN))
    drafting_sources = sources.get("drafting", {})
    if drafting_raw and not isinstance(drafting_sources, dict):
        raise field_error(where, "sources.drafting", drafting_sources, "a [sources.drafting] table citing each figure")
    for key, value in drafting_raw.items():
        if not str(drafting_sources.get(key, "")).strip():
            raise field_error(where, f"sources.drafting.{key}", None, "a citation or 'estimate: …' for each [drafting] figure")
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise field_error(f"{where} [drafting]", key, value,
                              "a number of bytes" if key in _DRAFTING_PLAIN else "a number of microseconds")
    try:
        drafting = DraftingCost(**{attr: float(drafting_raw[k]) * 1e-6 for k, attr in _DRAFTING_US.items()
                                   if k in drafting_raw},
                                **{attr: float(drafting_raw[k]) for k, attr in _DRAFTING_PLAIN.items() if k in drafting_raw})
        host = HostCost(**{attr: float(host_raw[k]) * 1e-6 for k, attr in _HOST_US.items() if k in host_raw},
                        overlap=host_raw.get("overlap", "none"))
        eff = Efficiency(bandwidth_frac=float(raw["bandwidth_frac"]), compute_frac=float(raw["compute_frac"]),
                         **{attr: float(raw.get(k, 0.0)) * 1e-6 for k, attr in _US.items()})
        methods = raw.get("methods", [])
        if not (isinstance(methods, list) and all(isinstance(m, str) for m in methods)):
            raise field_error(where, "methods", methods, "a list of drafter family names")
        return StackProfile(id=raw["id"], name=raw["name"], version=str(raw["version"]), efficiency=eff,
                            cycle_overhead_s=float(raw.get("cycle_overhead_us", 0.0)) * 1e-6,
                            tree_verification=raw.get("tree_verification", "none"),
                            multi_gpu=raw.get("multi_gpu", "tensor_parallel"),
                            verify_scorer=raw.get("verify_scorer", "multi_query"),
                            layer_split_hop_s=float(raw.get("layer_split_hop_us", 0.0)) * 1e-6, host=host,
                            drafting=drafting,
                            methods=tuple(methods), sources=sources, notes=raw.get("notes", ""),
                            measured={MEASURED_TERMS[k]: float(v) * 1e-6 for k, v in measured_raw.items()},
                            regimes=parse_regimes(raw.get("load_regime"), where=where))
    except SpecError as exc:
        raise SpecError(f"{where}: {exc}") from None


def load_stack(id_or_path: str | Path) -> StackProfile:
    """A stack by catalog id (`vllm`) or a path to a TOML file."""
    path = resolve("stacks", id_or_path)
    stack = stack_from_dict(read_toml(path), where=str(path))
    if str(id_or_path) == path.stem and stack.id != path.stem:
        raise field_error(str(path), "id", stack.id, f"the file name's stem {path.stem!r}")
    return stack


def list_stacks() -> list[StackProfile]:
    return [load_stack(i) for i in catalog_ids("stacks")]


__all__ = ["StackProfile", "HostCost", "DraftingCost", "load_stack", "list_stacks", "stack_from_dict", "TREE_MODES",
           "MULTI_GPU_MODES", "OVERLAP_MODES"]
