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

from dataclasses import dataclass, replace

import numpy as np

from ..errors import field_error
from ..specs.hardware import Efficiency, HardwareProfile
from ..specs.models import ModelSpec
from ..specs.stacks import DraftingCost, HostCost
from ..specs.operator_tables import OperatorTables, framework_for_stack, load_tables
from . import measured
from .roofline import ATTENTION_KERNELS, StepCost, step_cost

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
    supports_tree: bool = True
    stack_id: str = ""
    host: HostCost = HostCost()
    drafting: DraftingCost = DraftingCost()
    device_scale: float = 1.0
    device_per_seq_s: float = 0.0
    device_per_token_s: float = 0.0
    operator_tables: OperatorTables | None = None  # measured tables pricing the target (cost.measured); None: roofline

    def __post_init__(self) -> None:
        if isinstance(self.n_devices, bool) or not isinstance(self.n_devices, (int, np.integer)) or self.n_devices < 1:
            raise field_error("deployment", "n_devices", self.n_devices, "an integer >= 1")
        if self.multi_gpu not in MULTI_GPU_MODES:
            raise field_error("deployment", "multi_gpu", self.multi_gpu, f"one of {', '.join(MULTI_GPU_MODES)}")
        if self.multi_gpu == "none" and self.n_devices > 1:
            raise field_error(f"stack {self.stack_id!r}", "tp", self.n_devices, "1: this stack runs a model on one device")
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
                   stack_version: str | None = None, measured: bool = False):
        """A deployment on `hardware` with a serving stack's efficiency (None: the hardware's own). On a
        part whose profile names measured operator tables, with a stack that maps to a collected
        framework, the target's passes are priced from the tables at the version nearest
        `stack_version` (None: the newest collected). Off unless `measured`: the sweep, switch-off,
        replay and serving paths do not read the tables yet, and every entry point must price one
        point the same (tests/test_operating_point.py)."""
        if stack is None:
            return cls(hardware=hardware, n_devices=n_devices, attention=attention)
        tables = None
        framework = framework_for_stack(stack.id)
        if measured and hardware.operator_tables and framework and attention == "fused":
            tables = load_tables(hardware.operator_tables, framework, stack_version)
        return cls(hardware=hardware, n_devices=n_devices, efficiency=stack.efficiency, operator_tables=tables,
                   cycle_overhead_s=stack.cycle_overhead_s, multi_gpu=stack.multi_gpu,
                   layer_split_hop_s=stack.layer_split_hop_s, attention=attention,
                   supports_tree=stack.supports_tree, stack_id=stack.id, host=stack.host, drafting=stack.drafting,
                   **calibration_terms(stack))

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

    def host_time_s(self, *, n_seqs, n_tokens, n_spec_seqs=0, n_draft_tokens=0, n_draft_passes=0):
        """The engine's host work for one iteration of n_seqs sequences and n_tokens tokens, of which
        n_spec_seqs speculate with n_draft_tokens drafted in all over n_draft_passes sequential
        drafting passes (the stack's [host] model)."""
        h = self.host
        n = np.asarray(n_seqs, dtype=float)
        t = h.step_s + h.per_seq_s * n + h.per_token_s * np.asarray(n_tokens, dtype=float)
        if self.n_devices > 1:
            t = t + h.multi_gpu_step_s
        ns = np.asarray(n_spec_seqs, dtype=float)
        spec = np.where(ns > 0, self.cycle_overhead_s + h.spec_per_seq_s * ns
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


_MEASURED: dict = {}


def measured_pass(target: ModelSpec, dep: Deployment):
    """The target's tabulated measured pass on this deployment (cost.measured), or None: no tables, or
    a model they do not cover. Built once per (tables, model, tp)."""
    if dep.operator_tables is None or dep.multi_gpu == "layer_split":
        return None
    key = (id(dep.operator_tables), id(target), dep.tp)
    hit = _MEASURED.get(key)
    if hit is None or hit[0] is not target or hit[1] is not dep.operator_tables:
        hit = (target, dep.operator_tables, measured.build(dep.operator_tables, target, dep.tp))
        _MEASURED[key] = hit
    return hit[2]


def pricing_source(target: ModelSpec, dep: Deployment) -> str:
    """What prices the target's passes on this deployment, in words (for --describe and breakdowns)."""
    mp = measured_pass(target, dep)
    if mp is not None:
        return mp.label + "; element-wise ops, KV write and fixed overhead on the roofline"
    if dep.operator_tables is not None:
        why = measured.covered(target) or "its shapes (heads, head_dim) not in the tables"
        return f"roofline ({dep.operator_tables.label()} does not cover {target.id}: {why})"
    return "roofline" + (" with fitted kernel curves" if dep.hardware.kernels is not None else "")


def target_step_cost(target: ModelSpec, dep: Deployment, *, batch_size, q_len, context_len) -> StepCost:
    """One forward pass of the target (B sequences × M query tokens after L cached) on the deployment:
    the roofline step on one device of the group, with the layer-split hops (`Deployment.hop_s`)
    counted as communication, so `time_s` is what the pass takes on this deployment. Where measured
    operator tables cover the target (`measured_pass`), its GEMMs, LM head, attention and all-reduces
    are the tables' (cost.measured); the KV write, element-wise work and fixed overhead stay the roofline's."""
    mp = measured_pass(target, dep)
    if mp is not None:
        c = _measured_step(target, dep, mp, batch_size=batch_size, q_len=q_len, context_len=context_len)
    else:
        c = step_cost(target, dep.hardware, batch_size=batch_size, q_len=q_len, context_len=context_len, tp=dep.tp,
                      attention=dep.attention, efficiency=dep.eff)
    if not dep.hop_s:
        return c
    return replace(c, communication_s=c.communication_s + dep.hop_s, time_s=c.time_s + dep.hop_s)


def _measured_step(target: ModelSpec, dep: Deployment, mp, *, batch_size, q_len, context_len) -> StepCost:
    """The pass from the measured tables, with the roofline's KV write, element-wise work and overhead."""
    from . import roofline as rf
    rf._check_group(target, dep.hardware, dep.tp)
    b = rf._as_array("batch_size", batch_size, 1)
    m = rf._as_array("q_len", q_len, 1)
    l = rf._visible_context(target, rf._as_array("context_len", context_len, 0))
    b, m, l = np.broadcast_arrays(b, m, l)
    t = b * m
    hw, tp, eff = dep.hardware, dep.tp, dep.eff
    pairs = b * (m * l + m * (m + 1) / 2.0)
    w_bytes, w_flops = rf._layer_weight_cost(target, t, tp)
    weights = rf.OperatorCost(w_bytes, w_flops, mp.layers_time_s(t))
    head_bytes = (target.lm_head_params * target.lm_head_bytes_per_param + t * target.vocab_size * rf.LOGIT_BYTES) / tp
    lm_head = rf.OperatorCost(head_bytes, 2.0 * t * target.lm_head_params / tp, mp.head_time_s(t))
    blocks = rf._n_attention_blocks(target)
    a_bytes = blocks * target.n_layers * rf._kv_layer_bytes(target, tp) * b * (l + m)
    a_flops = blocks * target.n_layers * rf.attention_flops_per_pair(target) * pairs / tp
    # a verify of M tokens: M decode queries per sequence over its cache (AIC's batch widening; cost.measured)
    attention = rf.OperatorCost(a_bytes, a_flops, mp.attention_time_s(t, l + m))
    kv_write = rf._kv_write(target, hw, t, tp, eff)
    activations = rf._activations(target, hw, t, tp, eff)
    comm = mp.allreduce_time_s(t)
    overhead = np.full(np.shape(t), rf._overhead(target, hw, eff))
    total = weights.time_s + attention.time_s + kv_write.time_s + lm_head.time_s + activations.time_s + comm + overhead
    notes = mp.notes + (mp.range_notes(n_tokens=t, n_queries=t, kv_len=l + m) if t.size else ())
    _, _, compute_dtype, attention_dtype, _, _ = rf._rates(target, hw, eff)
    return StepCost(weights=weights, attention=attention, kv_write=kv_write, lm_head=lm_head, activations=activations,
                    communication_s=comm, overhead_s=overhead, time_s=total, compute_dtype=compute_dtype,
                    attention_dtype=attention_dtype, source=mp.label, notes=notes)


def target_step_time(target: ModelSpec, dep: Deployment, *, batch_size, q_len, context_len) -> np.ndarray:
    """`target_step_cost(...).time_s`: one pass of the target on the deployment, seconds."""
    return target_step_cost(target, dep, batch_size=batch_size, q_len=q_len, context_len=context_len).time_s


__all__ = ["Deployment", "target_step_cost", "measured_pass", "pricing_source", "target_step_time", "calibration_terms", "MULTI_GPU_MODES"]
