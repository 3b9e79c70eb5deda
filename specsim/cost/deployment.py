"""A deployment: which part, how many of them, and how the serving stack runs a model on them.

The roofline (`roofline.step_cost`) prices one forward pass on one device of a tensor-parallel
group. A deployment adds what the serving stack decides: its achievable efficiency and fixed costs
(`specs.stacks.StackProfile.efficiency`, else the hardware's own), how it spreads a model over
devices (tensor parallel, or Hugging Face's layer split where consecutive layers sit on consecutive
devices and run one after the other, paying one hop per device boundary), the attention kernel, its
per-cycle host overhead for speculation, what its drafting code costs per pass beside the device
work (`specs.stacks.DraftingCost`), and whether it verifies trees.

A stack calibrated on its own load sweep (`specsim calibrate load`: a `calibration` load regime,
`specs.regimes`) carries three device terms the plain curve fixed: every iteration's device time
times `device_scale`, plus `device_per_seq_s` per sequence and `device_per_token_s` per token the
iteration emits. The deployment holds them (`calibrated_device_s`) so that the analytical cycle, the
switch-off and the serving simulator price the same iteration.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import field_error
from ..specs.hardware import Efficiency, HardwareProfile
from ..specs.stacks import DraftingCost, HostCost
from ..specs.operator_tables import OperatorTables, framework_for_stack, load_tables
from .shape import ATTENTION_KERNELS

from ..specs.scenario import COST_SOURCES

MULTI_GPU_MODES = ("tensor_parallel", "layer_split", "none")


@dataclass(frozen=True, slots=True, kw_only=True)
class Deployment:
    """Where and how the target runs: one hardware part × n_devices, the efficiency the serving stack
    achieves, its per-cycle host overhead, and how it spreads a model over devices.

    multi_gpu: 'tensor_parallel' (tp = n_devices) or 'layer_split' (consecutive layers on consecutive
    devices, run one after the other: the step costs what it costs on one device, plus one hop per
    device boundary, while memory is split n ways) or 'none' (one device only)."""

    hardware: HardwareProfile
    n_devices: int = 1
    efficiency: Efficiency | None = None
    cycle_overhead_s: float = 0.0
    multi_gpu: str = "tensor_parallel"
    layer_split_hop_s: float = 0.0
    attention: str = "fused"
    verify_scorer: str = "multi_query"  # multi_query: a verify's M queries read a sequence's cache once; batch_expansion (specs.stacks)
    supports_tree: bool = True
    stack_id: str = ""
    host: HostCost = HostCost()
    drafting: DraftingCost = DraftingCost()
    device_scale: float = 1.0
    device_per_seq_s: float = 0.0
    device_per_token_s: float = 0.0
    operator_tables: OperatorTables | None = None  # measured tables its passes are priced from (cost.pricing); None: roofline
    cost_source: str = "roofline"  # what was asked for: auto, measured or roofline (cost.pricing.source_for chooses per pass)

    def __post_init__(self) -> None:
        if isinstance(self.n_devices, bool) or not isinstance(self.n_devices, (int, np.integer)) or self.n_devices < 1:
            raise field_error("deployment", "n_devices", self.n_devices, "an integer >= 1")
        if self.multi_gpu not in MULTI_GPU_MODES:
            raise field_error("deployment", "multi_gpu", self.multi_gpu, f"one of {', '.join(MULTI_GPU_MODES)}")
        if self.multi_gpu == "none" and self.n_devices > 1:
            raise field_error(f"stack {self.stack_id!r}", "tp", self.n_devices, "1: this stack runs a model on one device")
        if self.cost_source not in COST_SOURCES:
            raise field_error("deployment", "cost_source", self.cost_source, f"one of {', '.join(COST_SOURCES)}")
        if self.attention not in ATTENTION_KERNELS:
            raise field_error("deployment", "attention", self.attention, f"one of {', '.join(ATTENTION_KERNELS)}")
        for name in ("device_scale", "device_per_seq_s", "device_per_token_s"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not np.isfinite(v) or v < 0 \
                    or (name == "device_scale" and v == 0):
                raise field_error("deployment", name, v, "a finite number > 0" if name == "device_scale"
                                  else "a finite number of seconds >= 0")

    @classmethod
    def from_stack(cls, hardware: HardwareProfile, stack=None, *, n_devices: int = 1, attention: str = "fused",
                   stack_version: str | None = None, cost_source: str = "auto"):
        """A deployment on `hardware` with a serving stack's efficiency (None: the hardware's own).

        cost_source 'auto': where the part's profile names measured operator tables and the stack maps
        to a collected framework, passes are priced from the tables at the version nearest
        `stack_version` (None: the newest collected), else on the roofline; 'measured': the same, but a
        part, stack or kernel without tables is refused; 'roofline': never the tables."""
        if cost_source not in COST_SOURCES:
            raise field_error("deployment", "cost_source", cost_source, f"one of {', '.join(COST_SOURCES)}")
        tables, why = None, _no_tables(hardware, stack, attention)
        if cost_source != "roofline" and not why:
            tables = load_tables(hardware.operator_tables, framework_for_stack(stack.id), stack_version)
            if tables is None:
                why = "the measured tables are not installed or hold no GEMM table for this part and stack"
        if cost_source == "measured" and tables is None:
            raise field_error("deployment", "cost_source", "measured", f"auto or roofline: {why}")
        if stack is None:
            return cls(hardware=hardware, n_devices=n_devices, attention=attention, cost_source=cost_source,
                       operator_tables=tables)
        return cls(hardware=hardware, n_devices=n_devices, efficiency=stack.efficiency, operator_tables=tables,
                   cycle_overhead_s=stack.cycle_overhead_s, multi_gpu=stack.multi_gpu,
                   layer_split_hop_s=stack.layer_split_hop_s, attention=attention,
                   supports_tree=stack.supports_tree, stack_id=stack.id, host=stack.host, drafting=stack.drafting,
                   verify_scorer=stack.verify_scorer, cost_source=cost_source, **calibration_terms(stack))

    @property
    def calibrated(self) -> bool:
        """Whether a load calibration's device terms apply (see the module docstring)."""
        return self.device_scale != 1.0 or bool(self.device_per_seq_s) or bool(self.device_per_token_s)

    def calibrated_device_s(self, device_s, *, n_seqs, n_emitted):
        """An iteration's device seconds with the load calibration's terms: device_s × device_scale +
        device_per_seq_s × n_seqs + device_per_token_s × n_emitted (n_emitted: the tokens the iteration
        emits, one a plain sequence, τ a speculating one). Unchanged without a calibration."""
        if not self.calibrated:
            return device_s
        return (np.asarray(device_s, dtype=float) * self.device_scale
                + self.device_per_seq_s * np.asarray(n_seqs, dtype=float)
                + self.device_per_token_s * np.asarray(n_emitted, dtype=float))

    @property
    def eff(self) -> Efficiency:
        return self.efficiency or self.hardware.efficiency

    @property
    def tp(self) -> int:
        """The tensor-parallel degree a layer is split over (1 under a layer split)."""
        return self.n_devices if self.multi_gpu == "tensor_parallel" else 1

    @property
    def memory_split(self) -> int:
        """How many devices share the weights and the cache."""
        return self.n_devices

    def host_time_s(self, *, n_seqs, n_tokens, n_spec_seqs=0, n_draft_tokens=0, n_draft_passes=0, speculating=None):
        """The engine's host work for one iteration of n_seqs sequences and n_tokens tokens, of which
        n_spec_seqs speculate with n_draft_tokens drafted in all over n_draft_passes sequential
        drafting passes (the stack's [host] model). speculating: whether the iteration is a speculative
        cycle, which pays the per-cycle overhead (None: where anybody speculates; True also where the
        proposer found nothing to draft for any sequence, a cycle all the same)."""
        h = self.host
        n = np.asarray(n_seqs, dtype=float)
        t = h.step_s + h.per_seq_s * n + h.per_token_s * np.asarray(n_tokens, dtype=float)
        if self.n_devices > 1:
            t = t + h.multi_gpu_step_s
        ns = np.asarray(n_spec_seqs, dtype=float)
        cycle = (ns > 0) if speculating is None else (np.asarray(speculating) | (ns > 0))
        spec = np.where(cycle, self.cycle_overhead_s + h.spec_per_seq_s * ns
                        + h.spec_per_draft_token_s * np.asarray(n_draft_tokens, dtype=float)
                        + h.spec_per_draft_pass_s * np.asarray(n_draft_passes, dtype=float), 0.0)
        return t + spec

    def iteration_time_s(self, device_s, host_s, *, speculative: bool):
        """An iteration: device and host work in turn, or overlapped when the stack hides the host's."""
        if self.host.overlaps(speculative):
            return np.maximum(device_s, host_s)
        return np.asarray(device_s) + host_s

    @property
    def hop_s(self) -> float:
        """Time a forward pass spends crossing device boundaries under a layer split."""
        if self.multi_gpu == "layer_split" and self.n_devices > 1:
            return (self.n_devices - 1) * self.layer_split_hop_s
        return 0.0


def _no_tables(hardware: HardwareProfile, stack, attention: str) -> str:
    """'' where measured tables can price passes of this part and stack, else why not."""
    if not hardware.operator_tables:
        return f"hardware {hardware.id!r} names no measured operator tables (operator_tables)"
    if stack is None:
        return "no serving stack: the tables are collected per framework (vLLM, SGLang, TensorRT-LLM)"
    if framework_for_stack(stack.id) is None:
        return f"stack {stack.id!r} maps to no framework the tables were collected on"
    if attention != "fused":
        return f"attention {attention!r}: the tables measure fused kernels"
    return ""


def calibration_terms(stack) -> dict:
    """The device terms of a stack's `calibration` load regime (`specs.regimes`; written with versions
    "*" by `calibrate load`, so it holds at every version), as Deployment fields; {} without one."""
    for e in getattr(stack, "regimes", ()):
        if e.property == "calibration":
            f = e.fields
            return {"device_scale": float(f.get("device_scale", 1.0)),
                    "device_per_seq_s": float(f.get("device_per_seq_us", 0.0)) * 1e-6,
                    "device_per_token_s": float(f.get("device_per_token_us", 0.0)) * 1e-6}
    return {}


def calibration_priced_by(stack) -> str | None:
    """What priced the passes a stack's `calibration` load regime was fitted through ("roofline" or
    "measured"; a calibration written before the regime recorded it was fitted on the roofline), or
    None without one. Its device terms absorbed that source's error, so they hold on that source only."""
    for e in getattr(stack, "regimes", ()):
        if e.property == "calibration":
            return str(e.fields.get("priced_by", "roofline"))
    return None


__all__ = ["Deployment", "calibration_terms", "calibration_priced_by", "MULTI_GPU_MODES", "COST_SOURCES"]
