"""Silicon-measured operator tables (aiconfigurator-core's parquet database), found and read.

NVIDIA's aiconfigurator-core wheel ships latencies measured on real parts under
`aiconfigurator_core/systems/data/<system>/<op>/<framework>/<version>/<table>.parquet` (milliseconds;
Apache-2.0). specsim reads those files with pandas, never the package's own engine: this module
finds them, picks the framework version a scenario's stack runs, checks each table has the columns
specsim's pass model reads, and converts latencies to seconds once. `cost.measured` prices passes
from what it returns.

A hardware profile names its system in its TOML (`operator_tables = "h100_sxm"`, sourced); a stack
id maps to a framework (`STACK_FRAMEWORKS`). A stack_version picks the nearest collected version of
each op (distance over `regimes.parse_version` tuples, ties to the newer; a version collected exactly
is taken as is); none picks the newest GEMM collection and every other table nearest that release.
Pre-releases of one release order among themselves (1.3.0rc10 < 1.3.0rc20), below the release.

The data version is pinned: `DATA_VERSION`. Another installed version is still read, and the result
says so (`OperatorTables.version_note`). Where the package is absent every caller falls back to the
roofline and `fallback_note()` says so once per process.

Table layouts 0.12.0 ships (every gemm, attention, all-reduce and moe table of every system read,
tests/test_operator_tables.py keeps this true). Columns specsim reads are required; an optional
column has a documented default (`OPTIONAL`), so an older layout is read, never refused:
- generation/context_attention_perf: a100_sxm's sglang 0.5.10 and vllm 0.14.0 collections have no
  `window_size`; they measured full attention only, so window_size = 0. b60 and b200 vllm 0.22.0 put
  the columns in another order or add power columns (read by name, so no matter).
- custom_allreduce_perf: `backend` (sglang_graph / vllm_eager ...) only in sglang 0.5.9+ and vllm
  collections; trtllm and sglang 0.5.6.post2 have none (one backend measured) or `implementation`.
- gemm_perf and moe_perf: one layout everywhere.
Systems with tables: `SYSTEMS`; folders 0.12.0 ships empty: `EMPTY_SYSTEMS`.
"""
from __future__ import annotations

import functools
import importlib.metadata
import importlib.util
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

import numpy as np

from ..errors import SpecError, field_error
from .regimes import parse_version

PACKAGE = "aiconfigurator-core"
DATA_VERSION = "0.12.0"

# stack id -> framework folder. A stack not listed here has no measured tables (hf-eager, llama.cpp...).
STACK_FRAMEWORKS: Mapping[str, str] = {
    "vllm": "vllm", "vllm-v0": "vllm", "sglang": "sglang", "sglang-specforge": "sglang", "trtllm": "trtllm",
}

# The system folders of DATA_VERSION that hold tables, and the ones it ships empty (a .gitkeep only).
# A hardware profile may name only the first (specs.hardware checks it on load), so a typo, a path or
# an empty string is refused there, not found missing when a pass is priced.
SYSTEMS: tuple[str, ...] = ("a100_sxm", "b200_sxm", "b300_sxm", "b60", "gb200", "gb300", "h100_sxm", "h200_sxm",
                            "l40s", "rtx_pro_6000_server")
EMPTY_SYSTEMS: tuple[str, ...] = ("a100_pcie", "a30", "h100_pcie", "l4")

# (framework, system) -> the attention kernel the framework runs by default there, where the tables
# hold several: aiconfigurator-core 0.12.0's systems/attention_lane_defaults.yaml, sglang 0.5.14 by SM
# (90: fa3, 100 and 103: triton, 120: flashinfer; citing SGLang's own backend dispatch), with each
# system's sm_version from its systems/<system>.yaml. Elsewhere specsim takes the non-Triton kernel.
ATTENTION_DEFAULTS: Mapping[tuple[str, str], str] = {
    ("sglang", "h100_sxm"): "fa3", ("sglang", "h200_sxm"): "fa3",
    ("sglang", "b200_sxm"): "triton", ("sglang", "gb200"): "triton",
    ("sglang", "b300_sxm"): "triton", ("sglang", "gb300"): "triton",
    ("sglang", "rtx_pro_6000_server"): "flashinfer",
}

# table -> (op folder, columns specsim reads). A table missing any of them is refused.
TABLES: Mapping[str, tuple[str, tuple[str, ...]]] = {
    "gemm_perf": ("gemm", ("kernel_source", "gemm_dtype", "m", "n", "k", "latency")),
    "generation_attention_perf": ("attention", ("kernel_source", "batch_size", "isl", "num_heads", "num_key_value_heads",
                                                "head_dim", "kv_cache_dtype", "step", "window_size", "latency")),
    "context_attention_perf": ("attention", ("kernel_source", "batch_size", "isl", "num_heads", "num_key_value_heads",
                                             "head_dim", "kv_cache_dtype", "window_size", "latency")),
    # `backend` (graph / eager) only from 0.5.9-era sglang and vllm collections; others measured one backend
    "custom_allreduce_perf": ("comm", ("allreduce_dtype", "num_gpus", "message_size", "latency")),
    "moe_perf": ("moe", ("kernel_source", "moe_dtype", "num_tokens", "hidden_size", "inter_size", "topk", "num_experts",
                         "moe_tp_size", "moe_ep_size", "distribution", "latency")),
}
# table -> {column: value it takes where a collection left it out}. window_size: the a100_sxm sglang
# 0.5.10 and vllm 0.14.0 attention collections predate sliding-window rows and measured full attention.
OPTIONAL: Mapping[str, Mapping[str, object]] = {
    "generation_attention_perf": {"window_size": 0},
    "context_attention_perf": {"window_size": 0},
}


def check_system(where: str, system: object, kind: str) -> None:
    """Refuse an `operator_tables` value that names no system with tables in DATA_VERSION, or one on
    a part that is not a GPU (the tables are measured on NVIDIA and Intel GPUs only)."""
    if not isinstance(system, str) or system not in SYSTEMS:
        extra = f" ({system!r} ships empty in {DATA_VERSION})" if system in EMPTY_SYSTEMS else ""
        raise field_error(where, "operator_tables", system,
                          f"one of {PACKAGE} {DATA_VERSION}'s system folders with tables: {', '.join(SYSTEMS)}{extra}")
    if kind != "gpu":
        raise field_error(where, "operator_tables", system,
                          f"absent on a kind = {kind!r} part: the tables are measured on GPUs (kind = 'gpu')")


def package_root() -> Path | None:
    """The installed aiconfigurator_core folder's `systems/data`, or None where it is not installed.
    Found by its spec, so the compiled module is never imported."""
    spec = importlib.util.find_spec("aiconfigurator_core")
    if spec is None or not spec.submodule_search_locations:
        return None
    data = Path(list(spec.submodule_search_locations)[0]) / "systems" / "data"
    return data if data.is_dir() else None


def installed_version() -> str | None:
    try:
        return importlib.metadata.version(PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        return None


_WARNED: list[bool] = []


def fallback_note() -> str:
    """The one line printed (once per process, on stderr) when the tables are absent."""
    line = (f"specsim: {PACKAGE}=={DATA_VERSION} is not installed (no wheel for this platform?): GPU passes are "
            "priced on the roofline and fitted terms instead of measured operator tables")
    if not _WARNED:
        _WARNED.append(True)
        print(line, file=sys.stderr)
    return line


def framework_for_stack(stack_id: str) -> str | None:
    return STACK_FRAMEWORKS.get(stack_id)


def collected_versions(root: Path, system: str, op: str, framework: str, table: str) -> tuple[str, ...]:
    """The versions of `framework` whose folder holds `table` for this op on this system, oldest first."""
    base = root / system / op / framework
    if not base.is_dir():
        return ()
    found = [p.name for p in base.iterdir() if (p / f"{table}.parquet").is_file()]
    return tuple(sorted(found, key=lambda v: _version_key(v, where=f"{base} version")))


def _version_key(v: str, *, where: str) -> tuple:
    """Release order; pre-releases of one release (which parse_version reads as the release) below it
    and in their own order, so TensorRT-LLM's 1.3.0rc20 is newer than its 1.3.0rc10 whatever order the
    folder lists them in."""
    pre = re.search(r"(a|b|rc|dev)\d*$", v.lower()) is not None
    parts = tuple((0, int(t), "") if t.isdigit() else (1, 0, t) for t in re.findall(r"\d+|\D+", v))
    return parse_version(v, where=where), not pre, parts


def nearest_version(versions: tuple[str, ...], wanted: str | None) -> str:
    """The collected version nearest `wanted` (None: the newest). Nearest compares release tuples
    lexicographically: the closest one at or below, else the closest above; equal releases pick the
    later listed."""
    if not versions:
        raise SpecError("operator tables: no collected version to pick from")
    if wanted is None:
        return versions[-1]
    if wanted in versions:
        return wanted
    w = parse_version(wanted, where="stack_version")
    keyed = [(parse_version(v), v) for v in versions]
    below = [v for t, v in keyed if t <= w]
    return below[-1] if below else keyed[0][1]


def _read(path: Path, table: str):
    import pandas as pd  # heavy; only where tables are read
    df = pd.read_parquet(path)
    defaults = OPTIONAL.get(table, {})
    missing = [c for c in TABLES[table][1] if c not in df.columns and c not in defaults]
    if missing:
        raise SpecError(f"operator table {path}: missing column(s) {', '.join(missing)}; expected "
                        f"{', '.join(TABLES[table][1])} ({PACKAGE} {DATA_VERSION} layout)")
    df = df.copy()
    for col, value in defaults.items():
        if col not in df.columns:
            df[col] = value
    df["latency_s"] = df["latency"].astype(float) * 1e-3  # the tables are in milliseconds
    return df


@functools.lru_cache(maxsize=64)
def read_table(path_s: str, table: str):
    """One table file read (latency_s added, optional columns filled), once per process."""
    return _read(Path(path_s), table)


class _Frames(Mapping):
    """table name -> DataFrame, each file read on first use: most passes never touch moe_perf or the
    context table, and a parquet read is 10-100 ms."""

    def __init__(self, paths: Mapping[str, Path]):
        self._paths = dict(paths)

    def __getitem__(self, table: str):
        return read_table(str(self._paths[table]), table)

    def __iter__(self):
        return iter(self._paths)

    def __len__(self) -> int:
        return len(self._paths)


@dataclass(frozen=True, slots=True, kw_only=True)
class OperatorTables:
    """The measured tables of one system and framework, at the versions picked.

    frames: table name -> DataFrame (latency_s added, seconds); versions: table name -> version;
    root: the data folder they came from ("" when built by hand), for stand-in lookups."""

    system: str
    framework: str
    versions: Mapping[str, str]
    frames: Mapping[str, object]
    package_version: str
    root: str = ""

    @property
    def version_note(self) -> str:
        if self.package_version == DATA_VERSION:
            return ""
        return (f"{PACKAGE} {self.package_version} is installed; specsim pins {DATA_VERSION} "
                "(its tables may differ from the ones specsim was checked against)")

    def label(self, parts: tuple[str, ...] = ()) -> str:
        """'aiconfigurator-core 0.12.0 h100_sxm sglang 0.5.14 (gemm bfloat16, ...)'."""
        v = self.versions.get("gemm_perf") or next(iter(self.versions.values()))
        extra = [f"{t.split('_perf')[0]} {ver}" for t, ver in self.versions.items() if ver != v]
        detail = ", ".join(list(parts) + extra)
        return f"{PACKAGE} {self.package_version} {self.system} {self.framework} {v}" + (f" ({detail})" if detail else "")


def load_tables(system: str, framework: str, stack_version: str | None = None, *,
                root: Path | None = None) -> OperatorTables | None:
    """The tables of `system` for `framework` at the version nearest `stack_version`, or None where
    the package is absent or the system has no GEMM table for the framework."""
    root = root if root is not None else package_root()
    if root is None:
        fallback_note()
        return None
    return _load(str(root), system, framework, stack_version)


@functools.lru_cache(maxsize=32)
def _load(root_s: str, system: str, framework: str, stack_version: str | None) -> OperatorTables | None:
    root = Path(root_s)
    versions: dict[str, str] = {}
    paths: dict[str, Path] = {}
    # every table at the version nearest the stack's; without one, nearest the GEMM table's newest
    # collection, so the tables come from one release where it has them (b200_sxm trtllm 1.3.0rc23
    # collected only one MoE dtype; its 1.3.0rc20 holds the release's full set)
    gemm_found = collected_versions(root, system, "gemm", framework, "gemm_perf")
    wanted = stack_version if stack_version is not None or not gemm_found else gemm_found[-1]
    for table, (op, _) in TABLES.items():
        found = collected_versions(root, system, op, framework, table)
        if not found:
            continue
        v = nearest_version(found, wanted)
        versions[table] = v
        paths[table] = root / system / op / framework / v / f"{table}.parquet"
    if "gemm_perf" not in paths:
        return None
    frames = _Frames(paths)
    for table in ("gemm_perf", "generation_attention_perf"):  # the layouts every pass reads, checked now
        if table in frames:
            frames[table]
    return OperatorTables(system=system, framework=framework, versions=versions, frames=frames,
                          package_version=installed_version() or DATA_VERSION, root=root_s)


# Frameworks whose kernel stands in for a GEMM dtype the scenario's framework did not collect on the
# part, in this order after the framework's own other versions: TensorRT-LLM collected the weight-only
# and SmoothQuant kernels; vLLM and SGLang share CUTLASS/DeepGEMM fp8 and FlashInfer nvfp4 kernels.
STAND_IN_ORDER: tuple[str, ...] = ("trtllm", "vllm", "sglang")


def gemm_stand_in(tables: OperatorTables, gemm_dtype: str):
    """(framework, version, frame) of the nearest collection on the same system whose gemm_perf holds
    `gemm_dtype`, for a dtype `tables` lacks: the framework's other versions (nearest first), then the
    other frameworks (STAND_IN_ORDER, newest first). None where no collection on the part has it."""
    if not tables.root:
        return None
    return _stand_in(tables.root, tables.system, tables.framework, tables.versions.get("gemm_perf"), gemm_dtype)


@functools.lru_cache(maxsize=64)
def _stand_in(root_s: str, system: str, framework: str, own: str | None, gemm_dtype: str):
    root = Path(root_s)
    mine = [v for v in collected_versions(root, system, "gemm", framework, "gemm_perf") if v != own]
    if own is not None:  # nearest first: the versions below, newest first, then the ones above, oldest first
        o = parse_version(own)
        mine.sort(key=lambda v: (parse_version(v) > o,
                                 tuple(-x for x in parse_version(v)) if parse_version(v) <= o else parse_version(v)))
    order = [(framework, v) for v in mine]
    for fw in STAND_IN_ORDER:
        if fw != framework:
            order += [(fw, v) for v in reversed(collected_versions(root, system, "gemm", fw, "gemm_perf"))]
    for fw, v in order:
        df = read_table(str(root / system / "gemm" / fw / v / "gemm_perf.parquet"), "gemm_perf")
        if (df["gemm_dtype"] == gemm_dtype).any():
            return fw, v, df
    return None


def grid_values(values) -> np.ndarray:
    return np.unique(np.asarray(values, dtype=np.float64))


__all__ = ["PACKAGE", "DATA_VERSION", "STACK_FRAMEWORKS", "SYSTEMS", "ATTENTION_DEFAULTS", "EMPTY_SYSTEMS", "TABLES", "OPTIONAL",
           "STAND_IN_ORDER", "OperatorTables", "package_root", "installed_version", "fallback_note",
           "framework_for_stack", "collected_versions", "nearest_version", "load_tables", "read_table",
           "gemm_stand_in", "check_system"]
