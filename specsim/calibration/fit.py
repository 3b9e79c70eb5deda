"""Calibration: fit how close to the roofline a real stack gets, from measured step times.

The roofline (`roofline.step_cost`) is exact about bytes and FLOPs but has to be told the stack's
achievable bandwidth and compute fractions and its fixed costs. Given measured forward-pass times
(decode steps, verify passes, prefills) of known models on known hardware, we fit

    bandwidth_frac, compute_frac ∈ (0, 1]     achievable fractions of the part's peaks
    step_overhead_s, per_layer_overhead_s ≥ 0 fixed cost per pass and per layer
    interconnect_latency_s ≥ 0                per all-reduce (only identifiable with tp > 1 rows; it
                                              replaces the measured [all_reduce] latencies too)

by least squares on log(predicted / measured) with scipy's bounded trust-region solver and a
soft-L1 loss, so one odd measurement does not drag the fit. The result is a frozen `Calibration`
(like scipy's OptimizeResult) carrying the fitted `Efficiency`, the per-row predictions before and
after, and the errors — ready to save as a stack profile.

Input rows: `hardware, target, tp, batch_size, q_len, context_len, logit_len, measured_time_s` (one
forward pass each). `splitwise_rows` turns the Splitwise simulator's published profile
(`perf_model.csv`: per-token decode time and prompt time, in ms, of Llama-2-70B and BLOOM-176B on
DGX-A100/H100, tp 2–8) into such rows.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

from ..errors import InputError, SpecError, field_error
from ..specs.hardware import Efficiency, load_hardware
from ..specs.models import load_model
from ..specs.tables import numeric_column, read_csv_table, require_columns, text_column
from ..cost.roofline import kv_bytes_per_device, mixed_step_cost

ROW_COLUMNS = ("hardware", "target", "tp", "batch_size", "q_len", "context_len", "logit_len", "measured_time_s")
PARAMETERS = ("bandwidth_frac", "compute_frac", "step_overhead_s", "per_layer_overhead_s", "interconnect_latency_s")
# Splitwise names → catalog ids. The power-capped H100 rows are left out: no catalog part models the cap.
SPLITWISE_HARDWARE = {"a100-80gb": "a100-sxm-80gb", "h100-80gb": "h100-sxm"}
SPLITWISE_MODELS = {"llama2-70b": "llama-2-70b"}
# every name Splitwise's perf_model.csv uses (the commit in data/perf/splitwise_sim/README.md); another
# name is not Splitwise's profile (a typo, another file), refused naming its line
SPLITWISE_NAMES = {"model": ("llama2-70b", "bloom-176b"), "hardware": ("a100-80gb", "h100-80gb", "h100-80gb-pcap")}
POINT_COLUMNS = ("hardware", "target", "tp", "batch_size", "q_len", "context_len", "logit_len")


@dataclass(frozen=True, slots=True, kw_only=True)
class Calibration:
    efficiency: Efficiency
    interconnect_latency_s: float
    rows: pd.DataFrame  # the input rows plus predicted_before_s, predicted_after_s and relative errors
    cost: float
    n_rows: int
    success: bool
    message: str

    def summary(self) -> dict:
        before = self.rows["relative_error_before"].abs()
        after = self.rows["relative_error_after"].abs()
        return {
            "n_rows": self.n_rows,
            "bandwidth_frac": self.efficiency.bandwidth_frac, "compute_frac": self.efficiency.compute_frac,
            "step_overhead_s": self.efficiency.step_overhead_s,
            "per_layer_overhead_s": self.efficiency.per_layer_overhead_s,
            "interconnect_latency_s": self.interconnect_latency_s,
            "median_relative_error_before": float(before.median()), "median_relative_error_after": float(after.median()),
            "p90_relative_error_after": float(after.quantile(0.9)), "worst_relative_error_after": float(after.max()),
            "success": self.success, "message": self.message,
        }


def check_rows(rows: pd.DataFrame, *, where: str = "calibration rows") -> pd.DataFrame:
    """The rows with their columns as numbers, or a SpecError naming the line, the column, the value
    and what was expected: ids that are not in the catalogs, counts that are not whole numbers >= 1
    (tp, batch_size, q_len) or >= 0 (context_len, logit_len), a time that is not a finite number > 0, and
    a context that runs past the target's maximum (context_len + q_len <= max_context)."""
    if "ctx_len" in rows.columns and "context_len" not in rows.columns:
        rows = rows.rename(columns={"ctx_len": "context_len"})  # the column's name in files written before 0.1
    require_columns(rows, ROW_COLUMNS, where=where, what="one measured forward pass per row")
    if rows.empty:
        raise InputError(f"{where}: no rows to fit")
    rows = rows.reset_index(drop=True)
    out = rows.copy()
    for col in ("hardware", "target"):
        out[col] = text_column(rows, col, where=where)
    for col in ("tp", "batch_size", "q_len"):
        out[col] = numeric_column(rows, col, where=where, integer=True, minimum=1)
    for col in ("context_len", "logit_len"):
        out[col] = numeric_column(rows, col, where=where, integer=True, minimum=0)
    out["measured_time_s"] = numeric_column(rows, "measured_time_s", where=where, minimum=0.0, exclusive_minimum=True,
                                            expected="a time in seconds > 0 (finite)")
    for col, loader in (("hardware", load_hardware), ("target", load_model)):
        for first, value in out.groupby(col, sort=False).head(1)[col].items():
            try:
                loader(value)
            except SpecError as exc:
                raise type(exc)(f"{where}: line {first + 2}: column {col!r} = {value!r}: {exc}") from None
    for target, idx in out.groupby("target", sort=False).groups.items():
        m = load_model(target)
        if not m.max_context:
            continue
        span = out.loc[idx, "context_len"] + out.loc[idx, "q_len"]
        over = span[span > m.max_context]
        if len(over):
            i = int(over.index[0])
            raise field_error(f"{where}: line {i + 2}", "context_len", int(out.loc[i, "context_len"]),
                              f"<= {m.max_context - int(out.loc[i, 'q_len'])}: {target!r} holds at most {m.max_context} "
                              f"tokens and the pass adds q_len = {int(out.loc[i, 'q_len'])}")
    # a measured pass ran: its batch's cache (context and the pass's own tokens) fitted in the device's memory
    for (hw_id, target), idx in out.groupby(["hardware", "target"], sort=False).groups.items():
        hw, m = load_hardware(hw_id), load_model(target)
        d = out.loc[idx]
        kv = kv_bytes_per_device(m, batch_size=d["batch_size"].to_numpy(float),
                                 context_len=(d["context_len"] + d["q_len"]).to_numpy(float), tp=1)
        kv = kv / d["tp"].to_numpy(float)  # the least one device of the group can hold: a 1/tp share
        over = np.flatnonzero(kv > hw.memory_bytes)
        if len(over):
            i = int(d.index[over[0]])
            raise field_error(f"{where}: line {i + 2}", "batch_size", int(out.loc[i, "batch_size"]),
                              f"a batch whose KV cache fits on {hw_id!r} ({hw.memory_bytes / 1e9:.1f} GB a device): "
                              f"{int(out.loc[i, 'batch_size'])} sequences of {int(out.loc[i, 'context_len'] + out.loc[i, 'q_len'])} "
                              f"tokens need {float(kv[over[0]]) / 1e9:.4g} GB a device at tp {int(out.loc[i, 'tp'])}")
    return out


def predict_rows(rows: pd.DataFrame, efficiency: Efficiency | None = None,
                 interconnect_latency_s: float | None = None) -> np.ndarray:
    """Roofline time of each row's forward pass (the hardware's own efficiency unless one is given)."""
    out = np.empty(len(rows))
    cache: dict = {}
    for i, r in enumerate(rows.itertuples(index=False)):
        key = (r.hardware, r.target)
        if key not in cache:
            cache[key] = (load_hardware(r.hardware), load_model(r.target))
        hw, model = cache[key]
        if interconnect_latency_s is not None:
            hw = _with_latency(hw, interconnect_latency_s)
        b = int(r.batch_size)
        out[i] = float(mixed_step_cost(model, hw, q_lens=np.full(b, int(r.q_len)), context_lens=np.full(b, int(r.context_len)),
                                       logit_lens=np.full(b, int(r.logit_len)), tp=int(r.tp),
                                       efficiency=efficiency).time_s)
    return out


def _with_latency(hw, latency_s: float):
    """`hw` with every all-reduce's latency set to `latency_s` (the scalar and any measured table's)."""
    ar = hw.all_reduce
    if ar is not None:
        ar = replace(ar, latency_s=(latency_s,) * len(ar.group_sizes))
    return replace(hw, interconnect_latency_s=latency_s, all_reduce=ar)


def _unpack(theta) -> tuple[Efficiency, float]:
    bw, comp, step_us, layer_us, lat_us = theta
    return (Efficiency(bandwidth_frac=float(bw), compute_frac=float(comp), step_overhead_s=float(step_us) * 1e-6,
                       per_layer_overhead_s=float(layer_us) * 1e-6), float(lat_us) * 1e-6)


def check_identifiable(rows: pd.DataFrame, fit: tuple[str, ...], *, where: str = "calibration rows") -> None:
    """Refuse a fit the rows cannot determine: no more distinct measured passes (by hardware, target,
    tp, batch, query and context length, logits) than parameters, or both fractions fitted from rows
    that all put one number of tokens in flight (batch_size × q_len), where bandwidth and compute
    trade one for the other."""
    n = len(rows.drop_duplicates(list(POINT_COLUMNS)))
    if n <= len(fit):
        raise SpecError(f"{where}: {n} distinct measured pass{'es' if n != 1 else ''} for {len(fit)} fitted "
                        f"parameter{'s' if len(fit) != 1 else ''} ({', '.join(fit)}): expected more distinct points "
                        f"than parameters (more rows, or fewer with --fit)")
    if {"bandwidth_frac", "compute_frac"} <= set(fit):
        tokens = (rows["batch_size"].astype(np.int64) * rows["q_len"].astype(np.int64)).unique()
        if len(tokens) < 2:
            raise SpecError(f"{where}: every row has batch_size x q_len = {int(tokens[0])} tokens in flight: "
                            f"bandwidth_frac and compute_frac cannot both be fitted from one; expected rows at two "
                            f"or more batch or query sizes (or --fit without one of them)")


def fit_efficiency(rows: pd.DataFrame, *, fit: tuple[str, ...] = PARAMETERS,
                   where: str = "calibration rows") -> Calibration:
    """Fit the parameters named in `fit` (others stay at the first row's hardware defaults) to the
    measured times of `rows`, all of which must be on hardware of one kind (one stack)."""
    rows = check_rows(rows, where=where)
    unknown = [p for p in fit if p not in PARAMETERS]
    if unknown:
        raise field_error("fit_efficiency", "fit", unknown[0], f"parameters among {PARAMETERS}")
    check_identifiable(rows, tuple(dict.fromkeys(fit)), where=where)
    hw0 = load_hardware(rows["hardware"].iloc[0])
    e0 = hw0.efficiency
    # work in µs for the fixed costs so every parameter is of order 1..1e3
    x0 = np.array([e0.bandwidth_frac, e0.compute_frac, e0.step_overhead_s * 1e6, e0.per_layer_overhead_s * 1e6,
                   hw0.all_reduce_cost(max(2, int(rows["tp"].max())))[0] * 1e6])
    lo = np.array([0.05, 0.02, 0.0, 0.0, 0.0])
    hi = np.array([1.0, 1.0, 1e6, 1e5, 1e5])
    free = np.array([p in fit for p in PARAMETERS])
    x0 = np.clip(x0, lo, hi)
    measured = rows["measured_time_s"].to_numpy(dtype=float)

    def residuals(z):
        theta = x0.copy()
        theta[free] = z
        eff, lat = _unpack(theta)
        return np.log(predict_rows(rows, eff, lat) / measured)

    res = least_squares(residuals, x0[free], bounds=(lo[free], hi[free]), loss="soft_l1", f_scale=0.1,
                        x_scale="jac")
    theta = x0.copy()
    theta[free] = res.x
    eff, lat = _unpack(theta)
    before = predict_rows(rows)
    after = predict_rows(rows, eff, lat)
    table = rows.copy()
    table["predicted_before_s"] = before
    table["predicted_after_s"] = after
    table["relative_error_before"] = before / measured - 1.0
    table["relative_error_after"] = after / measured - 1.0
    return Calibration(efficiency=eff, interconnect_latency_s=lat, rows=table, cost=float(res.cost), n_rows=len(rows),
                       success=bool(res.success), message=str(res.message))


def splitwise_rows(path, *, hardware: str | None = None) -> tuple[pd.DataFrame, list[str]]:
    """Rows from Splitwise's `perf_model.csv`, median of the repeated measurements of each
    configuration: one decode row (per-token time; context = prompt + half the generated tokens, the
    mean over the generation) and one prefill row (B prompts at once, logits for the last token of
    each). Returns (rows, skipped) where `skipped` says which source rows were left out and why."""
    raw = read_csv_table(path, what="Splitwise perf_model.csv")
    needed = ("model", "hardware", "prompt_size", "batch_size", "token_size", "prompt_time", "token_time",
              "tensor_parallel")
    require_columns(raw, needed, where=str(path), what="Splitwise's perf_model.csv")
    for col in ("model", "hardware"):
        raw[col] = text_column(raw, col, where=str(path))
    for col in ("prompt_size", "batch_size", "token_size", "tensor_parallel"):
        raw[col] = numeric_column(raw, col, where=str(path), integer=True, minimum=1)
    for col in ("prompt_time", "token_time"):  # milliseconds
        raw[col] = numeric_column(raw, col, where=str(path), minimum=0.0, exclusive_minimum=True,
                                  expected="a time in milliseconds > 0 (finite)")
    for col, names in SPLITWISE_NAMES.items():
        bad = raw.index[~raw[col].isin(names)]
        if len(bad):
            i = int(bad[0])
            raise SpecError(f"{path}: line {i + 2}: column {col!r} = {raw.loc[i, col]!r}: expected one of Splitwise's "
                            f"{col} names, {', '.join(names)}")
    skipped = []
    for (m, h), n in raw.groupby(["model", "hardware"]).size().items():
        if m not in SPLITWISE_MODELS:
            skipped.append(f"{n} rows of {m} on {h}: model not in the catalog")
        elif h not in SPLITWISE_HARDWARE:
            skipped.append(f"{n} rows of {m} on {h}: no catalog part models this (power-capped) configuration")
    raw = raw[raw["model"].isin(list(SPLITWISE_MODELS)) & raw["hardware"].isin(list(SPLITWISE_HARDWARE))]
    if hardware is not None:
        raw = raw[raw["hardware"].map(SPLITWISE_HARDWARE) == hardware]
    keys = ["model", "hardware", "tensor_parallel", "prompt_size", "batch_size", "token_size"]
    med = raw.groupby(keys, as_index=False)[["prompt_time", "token_time"]].median()
    common = {"hardware": med["hardware"].map(SPLITWISE_HARDWARE), "target": med["model"].map(SPLITWISE_MODELS),
              "tp": med["tensor_parallel"].astype(int), "batch_size": med["batch_size"].astype(int)}
    decode = pd.DataFrame({**common, "phase": "decode", "q_len": 1,
                           "context_len": (med["prompt_size"] + med["token_size"] // 2).astype(int), "logit_len": 1,
                           "measured_time_s": med["token_time"] / 1e3})
    # the prefill of a configuration is measured once per (prompt, batch); keep one row of each
    pre = med.drop_duplicates(["hardware", "tensor_parallel", "prompt_size", "batch_size"])
    prefill = pd.DataFrame({"hardware": pre["hardware"].map(SPLITWISE_HARDWARE), "target": pre["model"].map(SPLITWISE_MODELS),
                            "tp": pre["tensor_parallel"].astype(int), "batch_size": pre["batch_size"].astype(int),
                            "phase": "prefill", "q_len": pre["prompt_size"].astype(int), "context_len": 0, "logit_len": 1,
                            "measured_time_s": pre["prompt_time"] / 1e3})
    rows = pd.concat([decode, prefill], ignore_index=True)
    # Splitwise profiled some configurations past the model's trained context (the timing is real,
    # but the catalog refuses such a context everywhere else): leave them out and say so
    span = rows["context_len"] + rows["q_len"]
    limit = rows["target"].map(lambda t: load_model(t).max_context or np.inf)
    over = rows[span > limit]
    if len(over):
        for (target, phase), g in over.groupby(["target", "phase"]):
            skipped.append(f"{len(g)} {phase} rows of {target}: context past its maximum of "
                           f"{load_model(target).max_context} tokens")
        rows = rows[span <= limit].reset_index(drop=True)
    return rows, skipped
