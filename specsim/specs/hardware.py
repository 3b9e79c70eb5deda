"""Hardware profiles: memory, bandwidth, peak FLOP/s per dtype, achievable fractions, overheads.

Files quote the units people read on datasheets (GB, GB/s, TFLOP/s, µs); they are converted to
SI once, here, on load. Every number in a file carries a source in its `[sources]` table.

Two optional tables hold measured behaviour of the hardware class rather than datasheet figures:

- `[kernels]` (`KernelProfile`): how a GEMM's and an element-wise operator's time grows with the
  tokens in a step (launch floor, tile and wave quantisation, memory/compute overlap), fitted from
  published operator profiles by `specsim calibrate operators`; `specsim.cost.kernels` holds the
  formulas. A part without the table stays on the pure roofline.
- `[all_reduce]` (`AllReduceProfile`): measured all-reduce latency and bus bandwidth per group
  size, replacing `interconnect_latency_us` / `interconnect_gb_s` for those group sizes.

A related part may borrow either table with `transfer_from = "<id>"` (plus its own `n_sm` for
kernels): the fitted fractions and floors carry over and the part's own datasheet bandwidth, peak
and SM count scale the times. Its source must say so.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import Mapping

from .catalog import catalog_ids, read_toml, resolve
from ..errors import SpecError, field_error, reject_unknown_keys
from .machine import MachineIdentity, machine_from_dict
from .models import WEIGHT_FORMATS
from .operator_tables import check_system

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
    "tf32": ("tf32", "fp32", "bf16"),
    # a part with no fp32 matrix unit (a TPU) runs fp32 checkpoints' matmuls as bf16 passes (JAX/XLA's
    # default matmul precision on TPU is bf16 inputs with fp32 accumulation); the dtype used is
    # reported with every step cost, so the substitution is visible
    "fp32": ("fp32", "tf32", "bf16"),
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


ELEMENTWISE_KINDS = ("norm", "rope", "act", "add", "embed")
# Kinds whose kernels give each token (row) to one thread block, so a few rows leave most SMs idle.
ROW_BLOCKED_KINDS = ("norm", "rope", "act")


def _positive(where: str, name: str, v, *, integer: bool = False, allow_zero: bool = False) -> None:
    ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and (v >= 0 if allow_zero else v > 0)
    if integer:
        ok = ok and float(v).is_integer()
    if not ok:
        kind = "an integer" if integer else "a finite number"
        raise field_error(where, name, v, f"{kind} {'>= 0' if allow_zero else '> 0'}")


@dataclass(frozen=True, slots=True, kw_only=True)
class KernelProfile:
    """How this part's kernels' time grows with the tokens in a step; see `specsim.cost.kernels`.

    n_sm: streaming multiprocessors (datasheet). GEMMs: gemm_bandwidth_frac and gemm_compute_frac
    of the part's peaks, reached by a GEMM kernel of the stack the curve was measured on;
    gemm_overlap_exponent p ≥ 1: memory and compute time combine as (t_mem^p + t_comp^p)^(1/p) (p = 1:
    a sum, no overlap; large p: the max); gemm_tile: the (rows, columns) output tile whose padding
    and waves over the SMs quantise the compute time; gemm_floor_s: a GEMM kernel's shortest
    duration. gemm_row_tiles (CPU kernels that walk the query rows in tiles, largest first, e.g. the
    reference decoder's (8, 4, 1)): each tile pass unpacks the weights once and costs
    gemm_tile_pass_rows rows' worth of compute beside its rows' own, in place of gemm_tile's row
    padding; empty for GPU kernels. gemm_tile_pass_cost, where given, is each tile's own measured cost
    of one pass in rows' worth of compute (one figure per entry of gemm_row_tiles, in place of size +
    gemm_tile_pass_rows): the decoder's 8-row tile is not twice as cheap per row as its 4-row one.
    attention_overlap_exponent: the same (t_mem^p + t_comp^p)^(1/p) for attention over the KV cache
    (a CPU kernel that streams the cache and does its arithmetic in turn); inf, the default, keeps the
    roofline's max. Element-wise kinds (ELEMENTWISE_KINDS): a floor, the fraction of peak bandwidth each
    kind reaches and, for ROW_BLOCKED_KINDS, the time per element of one row (token) on one SM, with
    `elementwise_rows_per_sm` rows resident per SM."""

    n_sm: int
    gemm_bandwidth_frac: float
    gemm_compute_frac: float
    gemm_overlap_exponent: float
    gemm_tile: tuple[int, int]
    gemm_floor_s: float
    elementwise_floor_s: float
    elementwise_rows_per_sm: int
    elementwise_bandwidth_frac: Mapping[str, float]
    elementwise_row_s_per_elem: Mapping[str, float]
    gemm_row_tiles: tuple[int, ...] = ()
    gemm_tile_pass_rows: float = 0.0
    gemm_tile_pass_cost: tuple[float, ...] = ()
    attention_overlap_exponent: float = math.inf
    transferred_from: str = ""
    # weight format (models.WEIGHT_FORMATS) -> the GEMM compute fraction of that format's kernel, where it is not
    # the curve's own: on an AVX2 CPU the decoder's Q8_0 product (the tied LM head) multiplies at a third of the
    # Q4_1 products' rate (signed bytes: no vpmaddubsw), where VNNI runs both alike
    gemm_compute_frac_by_format: Mapping[str, float] = field(default_factory=dict)
    # and that format's own row-tile pass costs (one per gemm_row_tiles entry): on the AVX2 paths the Q8_0 product
    # takes M = 1..3 at about the Q4_1 rate and M = 4 at twice M = 3's time (its tile is another kernel)
    gemm_tile_pass_cost_by_format: Mapping[str, tuple] = field(default_factory=dict)

    def compute_frac_for(self, weight_format: str) -> float:
        """The GEMM compute fraction for weights of `weight_format` (the curve's own where not measured apart)."""
        return self.gemm_compute_frac_by_format.get(weight_format, self.gemm_compute_frac)

    def for_format(self, weight_format: str) -> "KernelProfile":
        """This curve as the products of `weight_format` follow it: that format's compute fraction and tile
        pass costs where they were measured apart, the curve's own elsewhere."""
        frac = self.gemm_compute_frac_by_format.get(weight_format)
        costs = self.gemm_tile_pass_cost_by_format.get(weight_format)
        if frac is None and costs is None:
            return self
        return replace(self, gemm_compute_frac=self.gemm_compute_frac if frac is None else frac,
                       gemm_tile_pass_cost=self.gemm_tile_pass_cost if costs is None else costs,
                       gemm_compute_frac_by_format={}, gemm_tile_pass_cost_by_format={})

    def __post_init__(self) -> None:
        where = "kernels"
        by_format = dict(self.gemm_compute_frac_by_format)
        for fmt, v in by_format.items():
            if fmt not in WEIGHT_FORMATS:
                raise field_error(where, "gemm_compute_frac_by_format", fmt, f"weight formats among {', '.join(WEIGHT_FORMATS)}")
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0.0 < v <= 1.0:
                raise field_error(where, f"gemm_compute_frac_by_format.{fmt}", v, "a fraction in (0, 1]")
        object.__setattr__(self, "gemm_compute_frac_by_format", MappingProxyType(by_format))
        tiles_by_format = {}
        for fmt, costs in dict(self.gemm_tile_pass_cost_by_format).items():
            costs = tuple(costs)
            if fmt not in WEIGHT_FORMATS:
                raise field_error(where, "gemm_tile_pass_cost_by_format", fmt, f"weight formats among {', '.join(WEIGHT_FORMATS)}")
            if len(costs) != len(self.gemm_row_tiles) or not all(
                    isinstance(c, (int, float)) and not isinstance(c, bool) and math.isfinite(c) and c > 0 for c in costs):
                raise field_error(where, f"gemm_tile_pass_cost_by_format.{fmt}", list(costs),
                                  f"one positive cost per entry of gemm_row_tiles {list(self.gemm_row_tiles)}")
            tiles_by_format[fmt] = tuple(float(c) for c in costs)
        object.__setattr__(self, "gemm_tile_pass_cost_by_format", MappingProxyType(tiles_by_format))
        row_tiles = tuple(self.gemm_row_tiles)
        if row_tiles and (not all(isinstance(x, int) and not isinstance(x, bool) and x > 0 for x in row_tiles)
                          or list(row_tiles) != sorted(set(row_tiles), reverse=True) or row_tiles[-1] != 1):
            raise field_error(where, "gemm_row_tiles", list(self.gemm_row_tiles),
                              "tile sizes in query rows, strictly decreasing and ending in 1 (e.g. [8, 4, 1])")
        object.__setattr__(self, "gemm_row_tiles", row_tiles)
        u = self.gemm_tile_pass_rows
        if not (isinstance(u, (int, float)) and not isinstance(u, bool) and math.isfinite(u) and u >= 0):
            raise field_error(where, "gemm_tile_pass_rows", u, "a number >= 0 (rows' worth of compute per tile pass)")
        if u and not row_tiles:
            raise field_error(where, "gemm_tile_pass_rows", u, "0 unless gemm_row_tiles is given")
        costs = tuple(self.gemm_tile_pass_cost)
        if costs:
            if len(costs) != len(row_tiles):
                raise field_error(where, "gemm_tile_pass_cost", list(costs),
                                  f"one cost per entry of gemm_row_tiles {list(row_tiles)} (rows' worth of compute a pass)")
            if not all(isinstance(c, (int, float)) and not isinstance(c, bool) and math.isfinite(c) and c > 0
                       for c in costs):
                raise field_error(where, "gemm_tile_pass_cost", list(costs), "positive numbers (rows' worth of compute a pass)")
            if u:
                raise field_error(where, "gemm_tile_pass_rows", u, "0 when gemm_tile_pass_cost gives each tile's cost")
        object.__setattr__(self, "gemm_tile_pass_cost", tuple(float(c) for c in costs))
        pa = self.attention_overlap_exponent
        if not (isinstance(pa, (int, float)) and not isinstance(pa, bool) and pa >= 1.0 and pa == pa):
            raise field_error(where, "attention_overlap_exponent", pa, "a number >= 1 (1: memory and compute add up; "
                                                                        "inf: the roofline's max)")
        _positive(where, "n_sm", self.n_sm, integer=True)
        _positive(where, "elementwise_rows_per_sm", self.elementwise_rows_per_sm, integer=True)
        for name in ("gemm_floor_s", "elementwise_floor_s"):
            _positive(where, name, getattr(self, name), allow_zero=True)
        for name in ("gemm_bandwidth_frac", "gemm_compute_frac"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and 0.0 < v <= 1.0):
                raise field_error(where, name, v, "a fraction in (0, 1]")
        p = self.gemm_overlap_exponent
        if not (isinstance(p, (int, float)) and math.isfinite(p) and p >= 1.0):
            raise field_error(where, "gemm_overlap_exponent", p, "a number >= 1 (1: memory and compute add up)")
        tile = tuple(self.gemm_tile)
        if len(tile) != 2 or not all(isinstance(x, int) and not isinstance(x, bool) and x > 0 for x in tile):
            raise field_error(where, "gemm_tile", self.gemm_tile, "[rows, columns], two positive integers")
        object.__setattr__(self, "gemm_tile", tile)
        fracs = dict(self.elementwise_bandwidth_frac)
        if set(fracs) != set(ELEMENTWISE_KINDS):
            raise field_error(where, "elementwise_bandwidth_frac", sorted(fracs), f"one fraction for each of {ELEMENTWISE_KINDS}")
        for kind, v in fracs.items():
            if not (isinstance(v, (int, float)) and 0.0 < v <= 1.0):
                raise field_error(where, f"{kind}_bandwidth_frac", v, "a fraction in (0, 1]")
        rows = dict(self.elementwise_row_s_per_elem)
        if set(rows) != set(ROW_BLOCKED_KINDS):
            raise field_error(where, "elementwise_row_s_per_elem", sorted(rows), f"one figure for each of {ROW_BLOCKED_KINDS}")
        for kind, v in rows.items():
            _positive(where, f"{kind}_row_s_per_elem", v, allow_zero=True)
        object.__setattr__(self, "elementwise_bandwidth_frac", MappingProxyType(fracs))
        object.__setattr__(self, "elementwise_row_s_per_elem", MappingProxyType(rows))


@dataclass(frozen=True, slots=True, kw_only=True)
class AllReduceProfile:
    """Measured all-reduce cost per group size n: latency_s[i] + 2(n − 1)/n · bytes / bus bandwidth[i]
    (the NCCL 'bus bandwidth' convention, so the ring's traffic factor is explicit)."""

    group_sizes: tuple[int, ...]
    latency_s: tuple[float, ...]
    bus_bandwidth_bytes_per_s: tuple[float, ...]
    transferred_from: str = ""

    def __post_init__(self) -> None:
        where = "all_reduce"
        sizes, lats, bws = (tuple(getattr(self, f)) for f in ("group_sizes", "latency_s", "bus_bandwidth_bytes_per_s"))
        if not sizes or not (len(sizes) == len(lats) == len(bws)):
            raise field_error(where, "group_sizes", list(sizes),
                              "a non-empty list as long as latency_us and bus_gb_s (one figure per group size)")
        for n in sizes:
            if isinstance(n, bool) or not isinstance(n, int) or n < 2:
                raise field_error(where, "group_sizes", n, "integers >= 2")
        if len(set(sizes)) != len(sizes):
            raise field_error(where, "group_sizes", list(sizes), "distinct group sizes")
        for v in lats:
            _positive(where, "latency_s", v, allow_zero=True)
        for v in bws:
            _positive(where, "bus_bandwidth_bytes_per_s", v)
        object.__setattr__(self, "group_sizes", sizes)
        object.__setattr__(self, "latency_s", tuple(float(v) for v in lats))
        object.__setattr__(self, "bus_bandwidth_bytes_per_s", tuple(float(v) for v in bws))

    def for_group(self, n: int) -> tuple[float, float] | None:
        """(latency_s, bus_bandwidth_bytes_per_s) measured for a group of n, or None."""
        if n in self.group_sizes:
            i = self.group_sizes.index(n)
            return self.latency_s[i], self.bus_bandwidth_bytes_per_s[i]
        return None


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
    kernels: KernelProfile | None = None
    all_reduce: AllReduceProfile | None = None
    loads_as: Mapping[str, str] = field(default_factory=dict)
    sources: Mapping[str, str] = field(default_factory=dict)
    notes: str = ""
    machine: MachineIdentity | None = None  # the machine and run a measured profile describes (specs.machine)
    operator_tables: str = ""  # aiconfigurator-core's system folder holding this part's measured tables (specs.operator_tables)

    def __post_init__(self) -> None:
        where = f"hardware {self.id!r}"
        object.__setattr__(self, "loads_as", MappingProxyType(dict(self.loads_as)))
        for stored, runs in self.loads_as.items():
            if stored not in DTYPES or runs not in DTYPES:
                raise field_error(where, f"loads_as.{stored}", runs, f"a checkpoint dtype mapped to a dtype in {DTYPES}")
            if runs not in self.peak_flops_per_s:
                raise field_error(where, f"loads_as.{stored}", runs, f"a dtype this part lists a peak for "
                                  f"({', '.join(sorted(self.peak_flops_per_s))})")
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
        for name, cls in (("kernels", KernelProfile), ("all_reduce", AllReduceProfile)):
            v = getattr(self, name)
            if v is not None and not isinstance(v, cls):
                raise field_error(where, name, v, f"a {cls.__name__} or None")
        if self.operator_tables != "":  # '' is the default: no tables
            check_system(where, self.operator_tables, self.kind)
        object.__setattr__(self, "peak_flops_per_s", MappingProxyType(dict(self.peak_flops_per_s)))
        object.__setattr__(self, "sources", MappingProxyType(dict(self.sources)))

    def all_reduce_cost(self, n: int) -> tuple[float, float]:
        """(latency_s, bus_bandwidth_bytes_per_s) of an all-reduce over n devices: the measured
        figures for this group size where `[all_reduce]` has them, else the datasheet link
        bandwidth and the profile's `interconnect_latency_s`."""
        measured = self.all_reduce.for_group(n) if self.all_reduce is not None else None
        return measured or (self.interconnect_latency_s, self.interconnect_bandwidth_bytes_per_s)

    def runs_checkpoint_as(self, stored: str) -> str | None:
        """The dtype this part's usual software loads and runs a checkpoint stored in `stored` as (the
        `[loads_as]` table: a TPU v4 restores fp32 checkpoints as bf16), or None when it runs them as
        stored."""
        return self.loads_as.get(stored)

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
_KERNEL_SCALARS = {
    "n_sm": ("n_sm", 1),
    "gemm_bandwidth_frac": ("gemm_bandwidth_frac", 1.0),
    "gemm_compute_frac": ("gemm_compute_frac", 1.0),
    "gemm_overlap_exponent": ("gemm_overlap_exponent", 1.0),
    "gemm_floor_us": ("gemm_floor_s", 1e-6),
    "elementwise_floor_us": ("elementwise_floor_s", 1e-6),
    "elementwise_rows_per_sm": ("elementwise_rows_per_sm", 1),
}
_KERNEL_KEYS = {*_KERNEL_SCALARS, "gemm_tile", "transfer_from",
                *(f"{k}_bandwidth_frac" for k in ELEMENTWISE_KINDS), *(f"{k}_row_ns_per_elem" for k in ROW_BLOCKED_KINDS)}
_KERNEL_OPTIONAL = {"gemm_row_tiles", "gemm_tile_pass_rows", "gemm_tile_pass_cost",  # CPU row-tiled kernels only
                    "attention_overlap_exponent", "gemm_compute_frac_by_format", "gemm_tile_pass_cost_by_format"}
_ALL_REDUCE_KEYS = {"group_sizes", "latency_us", "bus_gb_s", "transfer_from"}
_TOP_KEYS = {"id", "name", "kind", "notes", "operator_tables", "peak_tflops", "efficiency", "sources", "kernels", "all_reduce", "loads_as", "machine",
             *_SCALARS}


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
    needed += [f"loads_as.{k}" for k in raw.get("loads_as", {})]
    for table in ("kernels", "all_reduce"):
        needed += [f"{table}.{k}" for k in raw.get(table, {})]
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
    loads_as = raw.get("loads_as", {})
    if not isinstance(loads_as, dict) or not all(isinstance(v, str) for v in loads_as.values()):
        raise field_error(where, "loads_as", loads_as, 'a table of checkpoint dtype = dtype it runs as, e.g. fp32 = "bf16"')
    kwargs["loads_as"] = loads_as
    if "kernels" in raw:
        kwargs["kernels"] = _kernels_from_dict(where, raw["kernels"], raw["id"])
    if "all_reduce" in raw:
        kwargs["all_reduce"] = _all_reduce_from_dict(where, raw["all_reduce"], raw["id"])
    if "machine" in raw:
        kwargs["machine"] = machine_from_dict(where, raw["machine"])
    if "operator_tables" in raw:
        check_system(where, raw["operator_tables"], raw.get("kind"))
        if "operator_tables" not in kwargs["sources"]:
            raise field_error(where, "operator_tables", raw["operator_tables"],
                              "an aiconfigurator-core system folder name with a sources.operator_tables entry")
        kwargs["operator_tables"] = raw["operator_tables"]
    try:
        return HardwareProfile(**kwargs)
    except SpecError as exc:  # name the file too, not only the id
        raise SpecError(f"{where}: {exc}") from None


def _transfer_source(where: str, table: str, raw: dict, own_id: str):
    """The profile a `transfer_from` names; it must hold its own (not itself transferred) table."""
    src_id = raw["transfer_from"]
    if not isinstance(src_id, str) or not src_id or src_id == own_id:
        raise field_error(where, f"{table}.transfer_from", src_id, "the catalog id of another part")
    src = load_hardware(src_id)
    got = getattr(src, table)
    if got is None or got.transferred_from:
        raise field_error(where, f"{table}.transfer_from", src_id, f"a part with its own fitted [{table}] table")
    return got


def _kernels_from_dict(where: str, raw, own_id: str) -> KernelProfile:
    if not isinstance(raw, dict):
        raise field_error(where, "kernels", raw, "a [kernels] table")
    reject_unknown_keys(f"{where} [kernels]", raw, _KERNEL_KEYS | _KERNEL_OPTIONAL)
    if "transfer_from" in raw:
        reject_unknown_keys(f"{where} [kernels] (with transfer_from, only the part's own n_sm)", raw,
                            {"transfer_from", "n_sm"})
        if "n_sm" not in raw:
            raise field_error(where, "kernels.n_sm", None, "this part's own SM count (datasheet) beside transfer_from")
        src = _transfer_source(where, "kernels", raw, own_id)
        n_sm = _number(where, "kernels.n_sm", raw["n_sm"])
        try:
            return replace(src, n_sm=int(n_sm) if n_sm.is_integer() else n_sm, transferred_from=raw["transfer_from"])
        except SpecError as exc:
            raise SpecError(f"{where}: {exc}") from None
    missing = sorted(_KERNEL_KEYS - {"transfer_from"} - set(raw))
    if missing:
        raise field_error(where, f"kernels.{missing[0]}", None, "a value (a fitted [kernels] table needs every key)")
    kw: dict = {}
    for key, (attr, scale) in _KERNEL_SCALARS.items():
        v = _number(where, f"kernels.{key}", raw[key]) * scale
        kw[attr] = int(v) if attr in ("n_sm", "elementwise_rows_per_sm") and float(v).is_integer() else v
    tile = raw["gemm_tile"]
    if not isinstance(tile, list):
        raise field_error(where, "kernels.gemm_tile", tile, "[rows, columns]")
    kw["gemm_tile"] = tuple(tile)
    if "gemm_row_tiles" in raw:
        if not isinstance(raw["gemm_row_tiles"], list):
            raise field_error(where, "kernels.gemm_row_tiles", raw["gemm_row_tiles"], "a list of tile sizes, e.g. [8, 4, 1]")
        kw["gemm_row_tiles"] = tuple(raw["gemm_row_tiles"])
    if "gemm_tile_pass_rows" in raw:
        kw["gemm_tile_pass_rows"] = _number(where, "kernels.gemm_tile_pass_rows", raw["gemm_tile_pass_rows"])
    if "gemm_tile_pass_cost" in raw:
        if not isinstance(raw["gemm_tile_pass_cost"], list):
            raise field_error(where, "kernels.gemm_tile_pass_cost", raw["gemm_tile_pass_cost"],
                              "a list of rows' worth of compute, one per gemm_row_tiles entry, e.g. [8, 4.9, 1.3]")
        kw["gemm_tile_pass_cost"] = tuple(_number(where, "kernels.gemm_tile_pass_cost", c)
                                          for c in raw["gemm_tile_pass_cost"])
    if "attention_overlap_exponent" in raw:
        kw["attention_overlap_exponent"] = _number(where, "kernels.attention_overlap_exponent",
                                                   raw["attention_overlap_exponent"])
    if "gemm_compute_frac_by_format" in raw:
        table = raw["gemm_compute_frac_by_format"]
        if not isinstance(table, dict):
            raise field_error(where, "kernels.gemm_compute_frac_by_format", table,
                              'a table of weight format -> fraction, e.g. { "gguf-q8_0" = 0.3 }')
        kw["gemm_compute_frac_by_format"] = {k: _number(where, f"kernels.gemm_compute_frac_by_format.{k}", v)
                                             for k, v in table.items()}
    if "gemm_tile_pass_cost_by_format" in raw:
        table = raw["gemm_tile_pass_cost_by_format"]
        if not isinstance(table, dict) or not all(isinstance(v, list) for v in table.values()):
            raise field_error(where, "kernels.gemm_tile_pass_cost_by_format", table,
                              'a table of weight format -> tile pass costs, e.g. { "gguf-q8_0" = [8, 7.2, 0.9] }')
        kw["gemm_tile_pass_cost_by_format"] = {
            k: tuple(_number(where, f"kernels.gemm_tile_pass_cost_by_format.{k}", c) for c in v) for k, v in table.items()}
    kw["elementwise_bandwidth_frac"] = {k: _number(where, f"kernels.{k}_bandwidth_frac", raw[f"{k}_bandwidth_frac"])
                                        for k in ELEMENTWISE_KINDS}
    kw["elementwise_row_s_per_elem"] = {k: _number(where, f"kernels.{k}_row_ns_per_elem", raw[f"{k}_row_ns_per_elem"]) * 1e-9
                                        for k in ROW_BLOCKED_KINDS}
    try:
        return KernelProfile(**kw)
    except SpecError as exc:
        raise SpecError(f"{where}: {exc}") from None


def _all_reduce_from_dict(where: str, raw, own_id: str) -> AllReduceProfile:
    if not isinstance(raw, dict):
        raise field_error(where, "all_reduce", raw, "an [all_reduce] table")
    reject_unknown_keys(f"{where} [all_reduce]", raw, _ALL_REDUCE_KEYS)
    if "transfer_from" in raw:
        reject_unknown_keys(f"{where} [all_reduce] (with transfer_from)", raw, {"transfer_from"})
        return replace(_transfer_source(where, "all_reduce", raw, own_id), transferred_from=raw["transfer_from"])
    lists = {}
    for key in ("group_sizes", "latency_us", "bus_gb_s"):
        v = raw.get(key)
        if not isinstance(v, list):
            raise field_error(where, f"all_reduce.{key}", v, "a list with one entry per group size")
        lists[key] = v
    for n in lists["group_sizes"]:
        if isinstance(n, bool) or not isinstance(n, int):
            raise field_error(where, "all_reduce.group_sizes", n, "integers >= 2")
    try:
        return AllReduceProfile(group_sizes=tuple(lists["group_sizes"]),
                                latency_s=tuple(_number(where, "all_reduce.latency_us", v) * 1e-6 for v in lists["latency_us"]),
                                bus_bandwidth_bytes_per_s=tuple(_number(where, "all_reduce.bus_gb_s", v) * 1e9
                                                                for v in lists["bus_gb_s"]))
    except SpecError as exc:
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
