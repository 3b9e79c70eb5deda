"""A serving engine's host (CPU) work per iteration, fitted to Vidur's published measurements.

Vidur (microsoft/vidur, data/profiling/a100/cpu_overheads.csv, shipped as
data/perf/vidur/cpu_overheads/a100.csv) timed the per-iteration host work of a vLLM-V0-style Python
engine (Sarathi-Serve's scheduler, sampler and input preparation, Ray workers for tensor
parallelism) on an A100 server, for six models at batch 8 to 128 and tp 1, 2 or 4. The parts that
run on the host every iteration are schedule, sampler (end to end), prepare_inputs (end to end),
model_execution_launch and process_model_outputs; with tp > 1 the Ray broadcast of each step to
the workers (ray_comm_time) comes on top.

`fit_host_overheads()` fits host = step + per_seq · B by least squares on the medians of every
tp = 1 model (the per-sequence slope is the engine's, not the model's: 42–43 µs on every model
but Qwen-72B, whose 152k-token vocabulary makes sampling dearer), and the multi-GPU extra as the
median over the tp > 1 models of (their intercept − the tp = 1 intercept + Ray's time).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..errors import InputError, SpecError
from ..specs.data import data_path
from ..specs.tables import numeric_column, read_csv_table, require_columns, text_column

HOST_PARTS = ("schedule_median", "sampler_e2e_median", "prepare_inputs_e2e_median", "model_execution_launch_median",
              "process_model_outputs_median")
DEFAULT_PATH = "perf/vidur/cpu_overheads/a100.csv"


@dataclass(frozen=True, slots=True, kw_only=True)
class HostFit:
    """step_s + per_seq_s · B per iteration (tp = 1), multi_gpu_step_s added for tp > 1; per-model
    residuals (max |relative error| of the fit on that model's rows) and the data it came from."""

    step_s: float
    per_seq_s: float
    multi_gpu_step_s: float
    max_relative_error: dict
    n_rows: int
    source: str


def read_cpu_overheads(path=None) -> pd.DataFrame:
    """Vidur's cpu_overheads CSV with the columns the fit reads checked: times in ms finite and >= 0,
    batch sizes and tensor-parallel degrees whole numbers >= 1, a model name on every row."""
    where = str(path or DEFAULT_PATH)
    try:
        p = data_path(path or DEFAULT_PATH, what="Vidur cpu_overheads CSV")
    except SpecError as exc:
        raise InputError(str(exc)) from None
    raw = read_csv_table(p, what="Vidur cpu_overheads CSV")
    require_columns(raw, (*HOST_PARTS, "model_name", "batch_size", "tensor_parallel_degree", "ray_comm_time_mean"),
                    where=where, what="Vidur's cpu_overheads format")
    df = raw.copy()
    df["model_name"] = text_column(raw, "model_name", where=where)
    for col in ("batch_size", "tensor_parallel_degree"):
        df[col] = numeric_column(raw, col, where=where, integer=True, minimum=1)
    for col in (*HOST_PARTS, "ray_comm_time_mean"):
        df[col] = numeric_column(raw, col, where=where, minimum=0.0, expected="a time in milliseconds >= 0 (finite)")
    df["host_ms"] = df[list(HOST_PARTS)].sum(axis=1)
    one = df[df["tensor_parallel_degree"] == 1]
    if one["batch_size"].nunique() < 2:
        raise InputError(f"{where}: {len(one)} rows at tensor_parallel_degree 1 with {one['batch_size'].nunique()} "
                         f"batch size(s); the fit needs rows at two batch sizes or more")
    return df


def fit_host_overheads(path=None) -> HostFit:
    df = read_cpu_overheads(path)
    one = df[df["tensor_parallel_degree"] == 1]
    X = np.vstack([np.ones(len(one)), one["batch_size"].to_numpy(float)]).T
    (step_ms, per_seq_ms), *_ = np.linalg.lstsq(X, one["host_ms"].to_numpy(float), rcond=None)
    extras, errors = [], {}
    for model, g in df.groupby("model_name"):
        b = g["batch_size"].to_numpy(float)
        Xg = np.vstack([np.ones(len(g)), b]).T
        (a, _), *_ = np.linalg.lstsq(Xg, g["host_ms"].to_numpy(float), rcond=None)
        tp = int(g["tensor_parallel_degree"].iloc[0])
        extra = 0.0
        if tp > 1:
            extra = (a - step_ms) + float(g["ray_comm_time_mean"].median())
            extras.append(extra)
        pred = step_ms + per_seq_ms * b + extra
        meas = g["host_ms"].to_numpy(float) + (g["ray_comm_time_mean"].to_numpy(float) if tp > 1 else 0.0)
        errors[model] = float(np.max(np.abs(pred / meas - 1.0)))
    return HostFit(step_s=float(step_ms) * 1e-3, per_seq_s=float(per_seq_ms) * 1e-3,
                   multi_gpu_step_s=float(np.median(extras)) * 1e-3 if extras else 0.0, max_relative_error=errors,
                   n_rows=len(df), source=f"Vidur cpu_overheads ({path or DEFAULT_PATH}), medians of {', '.join(HOST_PARTS)}")


__all__ = ["HostFit", "fit_host_overheads", "read_cpu_overheads", "HOST_PARTS"]
