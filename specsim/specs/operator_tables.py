"""Silicon-measured operator tables (aiconfigurator-core's parquet database), found and read.

NVIDIA's aiconfigurator-core wheel ships latencies measured on real parts under
`aiconfigurator_core/systems/data/<system>/<op>/<framework>/<version>/<table>.parquet` (milliseconds;
Apache-2.0). specsim reads those files with pandas, never the package's own engine: this module
finds them, picks the framework version a scenario's stack runs, checks each table has the columns
specsim's pass model reads, and converts latencies to seconds once. `cost.measured` prices passes
from what it returns.

A hardware profile names its system in its TOML (`operator_tables = "h100_sxm"`, sourced); a stack
id maps to a framework (`STACK_FRAMEWORKS`). A stack_version picks the nearest collected version of
each op (distance over `regimes.parse_version` tuples, ties to the newer); none picks the newest.

The data version is pinned: `DATA_VERSION`. Another installed version is still read, and the result
says so (`OperatorTables.version_note`). Where the package is absent every caller falls back to the
roofline and `fallback_note()` says so once per process.
"""
from __future__ import annotations

import functools
import importlib.metadata
import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

import numpy as np

from ..errors import SpecError
from .regimes import parse_version

PACKAGE = "aiconfigurator-core"
DATA_VERSION = "0.12.0"

# stack id -> framework folder. A stack not listed here has no measured tables (hf-eager, llama.cpp...).
STACK_FRAMEWORKS: Mapping[str, str] = {
    "vllm": "vllm", "vllm-v0": "vllm", "sglang": "sglang", "sglang-specforge": "sglang", "trtllm": "trtllm",
}

# table -> (op folder, columns specsim reads). A table missing any of them is refused.
TABLES: Mapping[str, tuple[str, tuple[str, ...]]] = {
    "gemm_perf": ("gemm", ("kernel_source", "gemm_dtype", "m", "n", "k", "latency")),
    "generation_attention_perf": ("attention", ("kernel_source", "batch_size", "isl", "num_heads", "num_key_value_heads",
                                                "head_dim", "kv_cache_dtype", "step", "window_size", "latency")),
    "context_attention_perf": ("attention", ("kernel_source", "batch_size", "isl", "num_heads", "num_key_value_heads",
                                             "head_dim", "kv_cache_dtype", "window_size", "latency")),
    # `backend` (graph / eager) only from 0.5.14-era collections on; older ones measured one backend
    "custom_allreduce_perf": ("comm", ("allreduce_dtype", "num_gpus", "message_size", "latency")),
}


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
    return tuple(sorted(found, key=lambda v: parse_version(v, where=f"{base} version")))


def nearest_version(versions: tuple[str, ...], wanted: str | None) -> str:
    """The collected version nearest `wanted` (None: the newest). Nearest compares release tuples
    lexicographically: the closest one at or below, else the closest above; equal releases pick the
    later listed."""
    if not versions:
        raise SpecError("operator tables: no collected version to pick from")
    if wanted is None:
        return versions[-1]
    w = parse_version(wanted, where="stack_version")
    keyed = [(parse_version(v), v) for v in versions]
    below = [v for t, v in keyed if t <= w]
    return below[-1] if below else keyed[0][1]


def _read(path: Path, table: str):
    import pandas as pd  # heavy; only where tables are read
    df = pd.read_parquet(path)
    missing = [c for c in TABLES[table][1] if c not in df.columns]
    if missing:
        raise SpecError(f"operator table {path}: missing column(s) {', '.join(missing)}; expected "
                        f"{', '.join(TABLES[table][1])} ({PACKAGE} {DATA_VERSION} layout)")
    df = df.copy()
    df["latency_s"] = df["latency"].astype(float) * 1e-3  # the tables are in milliseconds
    return df


@dataclass(frozen=True, slots=True, kw_only=True)
class OperatorTables:
    """The measured tables of one system and framework, at the versions picked.

    frames: table name -> DataFrame (latency_s added, seconds); versions: table name -> version."""

    system: str
    framework: str
    versions: Mapping[str, str]
    frames: Mapping[str, object]
    package_version: str

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
    frames: dict[str, object] = {}
    for table, (op, _) in TABLES.items():
        found = collected_versions(root, system, op, framework, table)
        if not found:
            continue
        v = nearest_version(found, stack_version)
        versions[table] = v
        frames[table] = _read(root / system / op / framework / v / f"{table}.parquet", table)
    if "gemm_perf" not in frames:
        return None
    return OperatorTables(system=system, framework=framework, versions=versions, frames=frames,
                          package_version=installed_version() or DATA_VERSION)


def grid_values(values) -> np.ndarray:
    return np.unique(np.asarray(values, dtype=np.float64))


__all__ = ["PACKAGE", "DATA_VERSION", "STACK_FRAMEWORKS", "TABLES", "OperatorTables", "package_root", "installed_version",
           "fallback_note", "framework_for_stack", "collected_versions", "nearest_version", "load_tables"]
