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
- `tree_verification`: "none" (chains only), "static" (a fixed tree/choice list), "dynamic"
  (EAGLE-2-style trees rebuilt every cycle);
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

TREE_MODES = ("none", "static", "dynamic")
MULTI_GPU_MODES = ("tensor_parallel", "layer_split", "none")


@dataclass(frozen=True, slots=True, kw_only=True)
class StackProfile:
    id: str
    name: str
    version: str
    efficiency: Efficiency
    cycle_overhead_s: float = 0.0
    tree_verification: str = "none"
    multi_gpu: str = "tensor_parallel"
    layer_split_hop_s: float = 0.0
    methods: tuple[str, ...] = ()
    sources: Mapping[str, str] = field(default_factory=dict)
    notes: str = ""

    def __post_init__(self) -> None:
        where = f"stack {self.id!r}"
        if self.tree_verification not in TREE_MODES:
            raise field_error(where, "tree_verification", self.tree_verification, f"one of {TREE_MODES}")
        if self.multi_gpu not in MULTI_GPU_MODES:
            raise field_error(where, "multi_gpu", self.multi_gpu, f"one of {MULTI_GPU_MODES}")
        for name in ("cycle_overhead_s", "layer_split_hop_s"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and v >= 0 and math.isfinite(v)):
                raise field_error(where, name, v, "a finite duration >= 0 s")
        object.__setattr__(self, "sources", MappingProxyType(dict(self.sources)))

    @property
    def supports_tree(self) -> bool:
        return self.tree_verification != "none"


_US = {"step_overhead_us": "step_overhead_s", "per_layer_overhead_us": "per_layer_overhead_s"}
_TOP = {"id", "name", "version", "notes", "bandwidth_frac", "compute_frac", "step_overhead_us",
        "per_layer_overhead_us", "cycle_overhead_us", "tree_verification", "multi_gpu", "layer_split_hop_us",
        "methods", "sources"}
_NEEDS_SOURCE = ("bandwidth_frac", "compute_frac", "step_overhead_us", "per_layer_overhead_us", "cycle_overhead_us",
                 "tree_verification", "multi_gpu", "layer_split_hop_us", "methods")


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
    try:
        eff = Efficiency(bandwidth_frac=float(raw["bandwidth_frac"]), compute_frac=float(raw["compute_frac"]),
                         **{attr: float(raw.get(k, 0.0)) * 1e-6 for k, attr in _US.items()})
        methods = raw.get("methods", [])
        if not (isinstance(methods, list) and all(isinstance(m, str) for m in methods)):
            raise field_error(where, "methods", methods, "a list of drafter family names")
        return StackProfile(id=raw["id"], name=raw["name"], version=str(raw["version"]), efficiency=eff,
                            cycle_overhead_s=float(raw.get("cycle_overhead_us", 0.0)) * 1e-6,
                            tree_verification=raw.get("tree_verification", "none"),
                            multi_gpu=raw.get("multi_gpu", "tensor_parallel"),
                            layer_split_hop_s=float(raw.get("layer_split_hop_us", 0.0)) * 1e-6,
                            methods=tuple(methods), sources=sources, notes=raw.get("notes", ""))
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


__all__ = ["StackProfile", "load_stack", "list_stacks", "stack_from_dict", "TREE_MODES", "MULTI_GPU_MODES"]
