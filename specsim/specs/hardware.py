"""Hardware profiles: memory, bandwidth, peak FLOP/s per dtype, achievable fractions, overheads.

Files quote the units people read on datasheets (GB, GB/s, TFLOP/s, µs); they are converted to
SI once, here, on load. Every number in a file carries a source in its `[sources]` table.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Mapping

from .catalog import catalog_ids, read_toml, resolve
from ..errors import SpecError, field_error, reject_unknown_keys

DTYPES = ("fp32", "tf32", "bf16", "fp16", "fp8", "int8", "fp4", "int4")
KINDS = ("gpu", "cpu", "tpu", "accelerator", "soc")
# When a part has no figure for the dtype a model computes in, the cost model falls back along this
# chain (weight-only int4 on a CPU computes in whatever the part does fastest of these). The dtype
# actually used is reported with every step cost, so the substitution is visible.
COMPUTE_FALLBACK = {
    "fp4": ("fp4", "fp8", "bf16", "fp16", "fp32"),
    "fp8": ("fp8", "bf16", "fp16", "fp32"),
    "int8": ("int8", "bf16", "fp16", "fp32"),
    "int4": ("int4", "int8", "bf16", "fp16", "fp32"),
    "bf16": ("bf16", "fp16", "fp32"),
    "fp16": ("fp16", "bf16", "fp32"),
    "tf32": ("tf32", "fp32"),
    "fp32": ("fp32",),
}


@dataclass(frozen=True, slots=True, kw_only=True)
class Efficiency:
    """How close to the roofline a step gets: set by the hardware, overridable by a serving stack."""

    bandwidth_frac: float = 1.0
    compute_frac: float = 1.0
    step_overhead_s: float = 0.0
    per_layer_overhead_s: float = 0.0

    def __post_init__(self) -> None:
        for name in ("bandwidth_frac", "compute_frac"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and 0.0 < v <= 1.0):
                raise field_error("Efficiency", name, v, "a fraction in (0, 1]")
        for name in ("step_overhead_s", "per_layer_overhead_s"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and v >= 0.0 and math.isfinite(v)):
                raise field_error("Efficiency", name, v, "a finite duration >= 0 s")


@dataclass(frozen=True, slots=True, kw_only=True)
class HardwareProfile:
    """One device. Group sizes (tensor parallelism) are chosen per prediction, not stored here."""

    id: str
    name: str
    kind: str
    memory_bytes: float
    mem_bandwidth_bytes_per_s: float
    peak_flops_per_s: Mapping[str, float]
    efficiency: Efficiency = field(default_factory=Efficiency)
    interconnect_bandwidth_bytes_per_s: float = 0.0
    interconnect_latency_s: float = 0.0
    llc_bytes: float = 0.0
    sources: Mapping[str, str] = field(default_factory=dict)
    notes: str = ""

    def __post_init__(self) -> None:
        where = f"hardware {self.id!r}"
        if self.kind not in KINDS:
            raise field_error(where, "kind", self.kind, f"one of {', '.join(KINDS)}")
        for name in ("memory_bytes", "mem_bandwidth_bytes_per_s"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and v > 0 and math.isfinite(v)):
                raise field_error(where, name, v, "a positive finite number")
        for name in ("interconnect_bandwidth_bytes_per_s", "interconnect_latency_s", "llc_bytes"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and v >= 0 and math.isfinite(v)):
                raise field_error(where, name, v, "a finite number >= 0")
        if not self.peak_flops_per_s:
            raise field_error(where, "peak_flops_per_s", {}, "at least one dtype's peak FLOP/s")
        for dtype, v in self.peak_flops_per_s.items():
            if dtype not in DTYPES:
                raise field_error(where, f"peak_flops_per_s.{dtype}", v, f"a dtype in {DTYPES}")
            if not (isinstance(v, (int, float)) and v > 0 and math.isfinite(v)):
                raise field_error(where, f"peak_flops_per_s.{dtype}", v, "a positive number")
        object.__setattr__(self, "peak_flops_per_s", MappingProxyType(dict(self.peak_flops_per_s)))
        object.__setattr__(self, "sources", MappingProxyType(dict(self.sources)))

    def compute_dtype_for(self, dtype: str) -> str:
        """The dtype whose peak this part uses for `dtype` math (see COMPUTE_FALLBACK)."""
        for candidate in COMPUTE_FALLBACK.get(dtype, (dtype,)):
            if candidate in self.peak_flops_per_s:
                return candidate
        raise SpecError(
            f"hardware {self.id!r} has no peak FLOP/s for {dtype!r} or its fallbacks "
            f"{COMPUTE_FALLBACK.get(dtype, ())}; it lists {sorted(self.peak_flops_per_s)}"
        )

    def ridge_flops_per_byte(self, dtype: str = "bf16") -> float:
        """Ops:byte ratio: peak FLOP/s over peak bytes/s. Below it a kernel is bandwidth bound."""
        return self.peak_flops_per_s[self.compute_dtype_for(dtype)] / self.mem_bandwidth_bytes_per_s

    @property
    def ridge_points(self) -> dict[str, float]:
        return {d: v / self.mem_bandwidth_bytes_per_s for d, v in self.peak_flops_per_s.items()}


# File keys and the SI conversion applied on load.
_SCALARS = {
    "memory_gb": ("memory_bytes", 1e9),
    "memory_gib": ("memory_bytes", 2.0**30),
    "mem_bandwidth_gb_s": ("mem_bandwidth_bytes_per_s", 1e9),
    "interconnect_gb_s": ("interconnect_bandwidth_bytes_per_s", 1e9),
    "interconnect_latency_us": ("interconnect_latency_s", 1e-6),
    "llc_mb": ("llc_bytes", 1e6),
    "llc_mib": ("llc_bytes", 2.0**20),
}
_EFFICIENCY = {
    "bandwidth_frac": ("bandwidth_frac", 1.0),
    "compute_frac": ("compute_frac", 1.0),
    "step_overhead_us": ("step_overhead_s", 1e-6),
    "per_layer_overhead_us": ("per_layer_overhead_s", 1e-6),
}
_TOP_KEYS = {"id", "name", "kind", "notes", "peak_tflops", "efficiency", "sources", *_SCALARS}


def _number(where: str, key: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise field_error(where, key, value, "a number")
    return float(value)


def _check_sources(where: str, raw: dict) -> dict[str, str]:
    sources = raw.get("sources")
    if not isinstance(sources, dict):
        raise field_error(where, "sources", sources, "a [sources] table naming where each figure comes from")
    needed = [k for k in raw if k in _SCALARS]
    needed += [f"efficiency.{k}" for k in raw.get("efficiency", {})]
    needed += [f"peak_tflops.{k}" for k in raw.get("peak_tflops", {})]
    for key in needed:
        group = key.split(".")[0]
        if key not in sources and group not in sources:
            raise field_error(where, f"sources.{key}", None, "a source (datasheet, paper or measurement) for this figure")
    for key, text in sources.items():
        if not isinstance(text, str) or not text.strip():
            raise field_error(where, f"sources.{key}", text, "a non-empty citation string")
    return dict(sources)


def hardware_from_dict(raw: dict, *, where: str = "hardware") -> HardwareProfile:
    reject_unknown_keys(where, raw, _TOP_KEYS)
    for key in ("id", "name", "kind", "mem_bandwidth_gb_s", "peak_tflops"):
        if key not in raw:
            raise field_error(where, key, None, "a value (required key)")
    if ("memory_gb" in raw) == ("memory_gib" in raw):
        raise field_error(where, "memory_gb", raw.get("memory_gb"), "exactly one of memory_gb or memory_gib")
    if "llc_mb" in raw and "llc_mib" in raw:
        raise field_error(where, "llc_mb", raw["llc_mb"], "only one of llc_mb or llc_mib")
    kwargs: dict = {"id": raw["id"], "name": raw["name"], "kind": raw["kind"], "notes": raw.get("notes", "")}
    for key, (attr, scale) in _SCALARS.items():
        if key in raw:
            value = _number(where, key, raw[key])
            positive = attr in ("memory_bytes", "mem_bandwidth_bytes_per_s")
            if not math.isfinite(value) or value < 0 or (positive and value == 0):
                raise field_error(where, key, raw[key], "a positive number" if positive else "a number >= 0")
            kwargs[attr] = value * scale
    peaks = raw["peak_tflops"]
    if not isinstance(peaks, dict):
        raise field_error(where, "peak_tflops", peaks, "a table of dtype = TFLOP/s")
    reject_unknown_keys(f"{where} [peak_tflops]", peaks, DTYPES)
    kwargs["peak_flops_per_s"] = {d: _number(where, f"peak_tflops.{d}", v) * 1e12 for d, v in peaks.items()}
    eff_raw = raw.get("efficiency", {})
    reject_unknown_keys(f"{where} [efficiency]", eff_raw, _EFFICIENCY)
    try:
        kwargs["efficiency"] = Efficiency(
            **{attr: _number(where, f"efficiency.{k}", eff_raw[k]) * s for k, (attr, s) in _EFFICIENCY.items() if k in eff_raw}
        )
    except SpecError as exc:
        raise SpecError(f"{where}: {exc}") from None
    kwargs["sources"] = _check_sources(where, raw)
    try:
        return HardwareProfile(**kwargs)
    except SpecError as exc:  # name the file too, not only the id
        raise SpecError(f"{where}: {exc}") from None


def load_hardware(id_or_path: str | Path) -> HardwareProfile:
    """Load a profile by catalog id (`h100-sxm`) or from a path to a TOML file."""
    path = resolve("hardware", id_or_path)
    raw = read_toml(path)
    hw = hardware_from_dict(raw, where=str(path))
    if path.stem != hw.id and str(id_or_path) == path.stem:
        raise field_error(str(path), "id", hw.id, f"the file name's stem {path.stem!r}")
    return hw


def list_hardware() -> list[HardwareProfile]:
    return [load_hardware(i) for i in catalog_ids("hardware")]
