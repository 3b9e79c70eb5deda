"""Fitting a part's kernel curve and all-reduce figures to published operator profiles.

Input: the Vidur simulator's measured per-layer operator times (microsoft/vidur, `data/perf/vidur/`,
see its README): one row per (tokens in the batch T = 1..4096, tensor-parallel degree 1..8) of one
transformer layer's operators on one A100 or H100, in ms, for several Llama-family models, and its
NCCL all-reduce times by message size and group size on DGX A100 / H100 nodes.

`fit_operator_profiles` fits the `[kernels]` table of a part (`specsim.cost.kernels` has the
formulas) and the part's GEMM bandwidth and compute fractions on the models named as training
models, by least squares on log(predicted / measured) (scipy's trust-region solver, soft-L1 loss
so an odd kernel choice does not drag the fit, each octave of T weighted alike so the few decode-
sized rows count as much as the many prefill-sized ones), and reports every model's error, the
held-out models' separately. `fit_all_reduce` fits latency + ring bytes / bus bandwidth per group
size to the all-reduce times. Both return frozen results that print as the TOML to paste into the
hardware file.

The operators of a Vidur row are those `specsim.cost.kernels.step_operators` lists for a one-layer
model of the row's shape (the same function the roofline charges a step with), matched by name, so
what is fitted here is exactly what `roofline.step_cost` uses.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

from ..cost import kernels as K
from ..errors import InputError, SpecError, field_error
from ..specs.data import data_path
from ..specs.tables import numeric_column, read_csv_table, require_columns
from ..specs.hardware import ELEMENTWISE_KINDS, ROW_BLOCKED_KINDS, Efficiency, HardwareProfile, KernelProfile
from ..specs.models import ModelSpec, model_from_dict

VIDUR_COMMIT = "7d47513363ec447a741ac5e47241580b47724fbf"
# Vidur's device names → catalog parts. Vidur's device configs give the A100 and the H100 80 GB of
# memory, and the measured weight-streaming rates (about 1.6 and 3.0 TB/s) exceed the A100 40 GB's
# and the H100 PCIe's datasheet bandwidth, so these are the SXM 80 GB parts of DGX nodes.
VIDUR_GPUS = {"a100": "a100-sxm-80gb", "h100": "h100-sxm"}
VIDUR_NETWORKS = {"a100-sxm-80gb": "a100_dgx", "h100-sxm": "h100_dgx"}
VIDUR_OPERATORS = ("emb", "input_layernorm", "attn_pre_proj", "attn_rope", "attn_post_proj", "post_attention_layernorm",
                   "mlp_up_proj", "mlp_act", "mlp_down_proj", "add")
GEMM_OPERATORS = ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj")
SHAPE_COLUMNS = ("n_head", "n_kv_head", "n_embd", "n_expanded_embd", "vocab_size", "use_gated_mlp")
DEFAULT_TRAIN_MODELS = ("Llama-2-7b-hf", "Llama-2-70b-hf")
# Output tiles (rows × columns) of fp16 tensor-core GEMM thread blocks on Ampere and Hopper
# (CUTLASS's threadblock shapes: 64 or 128 rows, 64 to 256 columns); the fit keeps the one whose
# padding and waves fit the training models best.
CANDIDATE_TILES = ((64, 64), (64, 128), (64, 256), (128, 64), (128, 128), (128, 256))
ROWS_PER_SM_CHOICES = (1, 2, 4)


def _vidur_root(root) -> Path:
    return Path(root) if root is not None else data_path("perf/vidur")


# ---- reading ----------------------------------------------------------------------------------------

def load_operator_profiles(root=None, *, gpus: tuple[str, ...] | None = None) -> pd.DataFrame:
    """Vidur's `compute/<gpu>/<org>/<model>/mlp.csv` files as one table: a row per (gpu, model, tp,
    n_tokens) with the median time of each operator in seconds (`<op>_s`, the median over repeated
    measurements of that configuration) and the model's shape columns. `hardware` is the catalog id."""
    base = _vidur_root(root) / "compute"
    files = sorted(base.glob("*/*/*/mlp.csv"))
    if not files:
        raise InputError(f"{base}: no Vidur operator profiles (compute/<gpu>/<org>/<model>/mlp.csv) found")
    frames = []
    for f in files:
        gpu, model = f.parts[-4], f.parts[-2]
        if gpus is not None and gpu not in gpus:
            continue
        raw = read_csv_table(f, what="Vidur operator profile (mlp.csv)", infer=True)
        cols = [f"time_stats.{op}.median" for op in VIDUR_OPERATORS]
        needed = [*cols, *SHAPE_COLUMNS, "num_tokens", "num_tensor_parallel_workers"]
        missing = [c for c in needed if c not in raw.columns]
        if missing:
            raise field_error(str(f), missing[0], None, "a column of Vidur's mlp.csv")
        for c in cols:
            raw[c] = numeric_column(raw, c, where=str(f), minimum=0.0, exclusive_minimum=True,
                                    expected="a median time in ms > 0 (finite)", error=InputError)
        for c in ("num_tokens", "num_tensor_parallel_workers", *(c for c in SHAPE_COLUMNS if c != "use_gated_mlp")):
            raw[c] = numeric_column(raw, c, where=str(f), integer=True, minimum=1, error=InputError)
        agg = {c: "median" for c in cols} | {c: "first" for c in SHAPE_COLUMNS}
        g = raw.groupby(["num_tokens", "num_tensor_parallel_workers"], as_index=False).agg(agg)
        out = pd.DataFrame({"gpu": gpu, "hardware": VIDUR_GPUS.get(gpu, gpu), "model": model,
                            "tp": g["num_tensor_parallel_workers"].astype(int), "n_tokens": g["num_tokens"].astype(int)})
        for op, c in zip(VIDUR_OPERATORS, cols):
            out[f"{op}_s"] = g[c].to_numpy(dtype=float) * 1e-3  # the files are in ms
        for c in SHAPE_COLUMNS:
            out[c] = g[c].to_numpy()
        frames.append(out)
    if not frames:
        raise SpecError(f"{base}: no operator profiles for GPUs {gpus}; found {sorted({f.parts[-4] for f in files})}")
    return pd.concat(frames, ignore_index=True)


def profile_model(shape: pd.Series | dict, name: str = "profiled") -> ModelSpec:
    """A one-layer fp16 ModelSpec of the shape in a Vidur row (its shape columns)."""
    d, h = int(shape["n_embd"]), int(shape["n_head"])
    return model_from_dict({
        "id": name, "name": name, "tokenizer": "none", "n_layers": 1, "hidden_size": d, "n_heads": h,
        "n_kv_heads": int(shape["n_kv_head"]), "head_dim": d // h, "ffn_size": int(shape["n_expanded_embd"]),
        "vocab_size": int(shape["vocab_size"]), "ffn_kind": "gated" if bool(shape["use_gated_mlp"]) else "mlp",
        "weight_format": "fp16", "kv_cache_dtype": "fp16", "sources": {"shape": "Vidur profile columns"}})


# ---- the operators of the profiles, as long vectors -------------------------------------------------

@dataclass(frozen=True)
class _Ops:
    """Every (configuration, operator) of one part's profiles, flattened for vectorised evaluation."""

    frame: pd.DataFrame  # one row per (configuration, operator): gpu, model, tp, n_tokens, op, kind, measured_s
    t: np.ndarray
    k: np.ndarray
    n: np.ndarray
    bytes_: np.ndarray
    row: np.ndarray
    weight: np.ndarray  # equal weight per octave of T within each operator


def _operators(profiles: pd.DataFrame) -> _Ops:
    parts = []
    for (model, tp), g in profiles.groupby(["model", "tp"], sort=False):
        spec = profile_model(g.iloc[0], model)
        ops = {op.name: op for op in K.step_operators(spec, int(tp))}
        for name in VIDUR_OPERATORS:
            op = ops[name]
            t = g["n_tokens"].to_numpy(dtype=float)
            parts.append(pd.DataFrame({"gpu": g["gpu"].to_numpy(), "model": model, "tp": int(tp), "n_tokens": t,
                                       "op": name, "kind": op.kind, "k": op.k, "n": op.n,
                                       "bytes": t * op.bytes_per_token, "row": op.row_elems,
                                       "measured_s": g[f"{name}_s"].to_numpy(dtype=float)}))
    f = pd.concat(parts, ignore_index=True)
    octave = np.floor(np.log2(f["n_tokens"].to_numpy()))
    counts = f.groupby([f["gpu"], f["model"], f["tp"], f["op"], octave])["n_tokens"].transform("size").to_numpy()
    return _Ops(frame=f, t=f["n_tokens"].to_numpy(float), k=f["k"].to_numpy(float), n=f["n"].to_numpy(float),
                bytes_=f["bytes"].to_numpy(float), row=f["row"].to_numpy(float), weight=1.0 / np.sqrt(counts))


def _predict(ops: _Ops, hw: HardwareProfile, kernels: KernelProfile | None, eff: Efficiency) -> np.ndarray:
    """Predicted time of every (configuration, operator) on `hw` with `kernels` in place of its own
    table (None: the pure roofline with `eff`'s fractions)."""
    out = np.empty(len(ops.t))
    kind = ops.frame["kind"].to_numpy()
    g = kind == "gemm"
    bw = hw.mem_bandwidth_bytes_per_s
    hw_ = replace(hw, kernels=kernels)
    rate_bw, rate_flops = K.gemm_rates(hw_, hw.compute_dtype_for("fp16"), eff)
    out[g] = K.gemm_time_s(kernels, n_tokens=ops.t[g], k=ops.k[g], n=ops.n[g], bandwidth_bytes_per_s=rate_bw,
                           flops_per_s=rate_flops)
    for kd in ELEMENTWISE_KINDS:
        m = kind == kd
        if not m.any():
            continue
        if kernels is None:
            out[m] = ops.bytes_[m] / (bw * eff.bandwidth_frac)
        else:
            out[m] = K.elementwise_time_s(kernels, kd, n_tokens=ops.t[m], bytes_=ops.bytes_[m], row_elems=ops.row[m],
                                          peak_bandwidth_bytes_per_s=bw)
    return out


# ---- fitting ----------------------------------------------------------------------------------------

_PLACEHOLDER_ELEMENTWISE = {"elementwise_floor_s": 1e-6, "elementwise_rows_per_sm": 1,
                            "elementwise_bandwidth_frac": {k: 0.5 for k in ELEMENTWISE_KINDS},
                            "elementwise_row_s_per_elem": {k: 0.0 for k in ROW_BLOCKED_KINDS}}


def _gemm_profile(theta, n_sm: int, tile, rest: dict) -> KernelProfile:
    bw_frac, c_frac, p, floor_us = (float(x) for x in theta)
    return KernelProfile(n_sm=n_sm, gemm_bandwidth_frac=bw_frac, gemm_compute_frac=c_frac, gemm_overlap_exponent=p,
                         gemm_tile=tuple(tile), gemm_floor_s=floor_us * 1e-6, **rest)


def _elementwise_profile(theta, rows_per_sm: int, base: KernelProfile) -> KernelProfile:
    floor_us, *rest = (float(x) for x in theta)
    fracs = dict(zip(ELEMENTWISE_KINDS, rest[:len(ELEMENTWISE_KINDS)]))
    rows = {k: v * 1e-9 for k, v in zip(ROW_BLOCKED_KINDS, rest[len(ELEMENTWISE_KINDS):])}
    return replace(base, elementwise_floor_s=floor_us * 1e-6, elementwise_rows_per_sm=rows_per_sm,
                   elementwise_bandwidth_frac=fracs, elementwise_row_s_per_elem=rows)


@dataclass(frozen=True, slots=True, kw_only=True)
class OperatorFit:
    """A part's fitted kernel curve and the errors it leaves.

    operators: one row per (model, tp, n_tokens, op) with measured_s, before_s (pure roofline with
    the part's catalog efficiency) and after_s (the fitted curve). sums: the same per configuration,
    summed over the layer's operators (`sum`) and over its four projections (`gemm`). errors: per
    model, the median, 90th percentile and worst |relative error| of the operator sums before and
    after, and whether the fit saw the model (`split` = train / held-out)."""

    hardware: str
    kernels: KernelProfile
    train_models: tuple[str, ...]
    operators: pd.DataFrame
    sums: pd.DataFrame
    errors: pd.DataFrame  # over 1..MAX_TOKENS tokens; median_after_beyond for the rows past it
    success: bool
    message: str

    def held_out_median(self) -> float:
        """The largest per-model median error of the operator sums among models the fit never saw."""
        e = self.errors[self.errors["split"] == "held-out"]
        return float(e["median_after"].max()) if len(e) else float("nan")

    def toml(self) -> str:
        """The `[kernels]` table, ready for the hardware file (its source goes in `[sources]`)."""
        k = self.kernels
        lines = ["[kernels]", f"n_sm = {k.n_sm}", f"gemm_bandwidth_frac = {k.gemm_bandwidth_frac:.3f}",
                 f"gemm_compute_frac = {k.gemm_compute_frac:.3f}", f"gemm_overlap_exponent = {k.gemm_overlap_exponent:.3f}",
                 f"gemm_tile = [{k.gemm_tile[0]}, {k.gemm_tile[1]}]", f"gemm_floor_us = {k.gemm_floor_s * 1e6:.3f}",
                 f"elementwise_floor_us = {k.elementwise_floor_s * 1e6:.3f}",
                 f"elementwise_rows_per_sm = {k.elementwise_rows_per_sm}"]
        lines += [f"{kd}_bandwidth_frac = {v:.3f}" for kd, v in k.elementwise_bandwidth_frac.items()]
        lines += [f"{kd}_row_ns_per_elem = {v * 1e9:.4f}" for kd, v in k.elementwise_row_s_per_elem.items()]
        return "\n".join(lines) + "\n"


MAX_TOKENS = 4096  # the range every profile covers (the Llama-3 files go on to 32768)


def _error_table(sums: pd.DataFrame, train: tuple[str, ...]) -> pd.DataFrame:
    """Per model, over 1..MAX_TOKENS tokens (every tp); rows beyond it get their own median."""
    rows = []
    for (gpu, model), g_all in sums.groupby(["gpu", "model"], sort=True):
        g = g_all[g_all["n_tokens"] <= MAX_TOKENS]
        beyond = g_all[g_all["n_tokens"] > MAX_TOKENS]
        before = (g["before_s"] / g["measured_s"] - 1).abs()
        after = (g["after_s"] / g["measured_s"] - 1).abs()
        gemm = (g["gemm_after_s"] / g["gemm_measured_s"] - 1).abs()
        rows.append({"gpu": gpu, "model": model, "split": "train" if model in train else "held-out", "n_rows": len(g),
                     "median_before": before.median(), "median_after": after.median(),
                     "p90_after": after.quantile(0.9), "worst_after": after.max(), "gemm_median_after": gemm.median(),
                     "n_rows_beyond": len(beyond),
                     "median_after_beyond": (beyond["after_s"] / beyond["measured_s"] - 1).abs().median()
                     if len(beyond) else float("nan")})
    return pd.DataFrame(rows)


def _tables(ops: _Ops, before: np.ndarray, after: np.ndarray, train) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    f = ops.frame[["gpu", "model", "tp", "n_tokens", "op", "kind", "measured_s"]].copy()
    f["before_s"], f["after_s"] = before, after
    keys = ["gpu", "model", "tp", "n_tokens"]
    sums = f.groupby(keys, as_index=False)[["measured_s", "before_s", "after_s"]].sum()
    gemm = f[f["kind"] == "gemm"].groupby(keys, as_index=False)[["measured_s", "after_s"]].sum()
    sums = sums.merge(gemm.rename(columns={"measured_s": "gemm_measured_s", "after_s": "gemm_after_s"}), on=keys)
    sums["split"] = np.where(sums["model"].isin(train), "train", "held-out")
    return f, sums, _error_table(sums, tuple(train))


def fit_operator_profiles(profiles: pd.DataFrame, hw: HardwareProfile, *,
                          train_models: tuple[str, ...] = DEFAULT_TRAIN_MODELS, n_sm: int | None = None,
                          tiles=CANDIDATE_TILES) -> OperatorFit:
    """Fit `hw`'s kernel curve to the rows of `profiles` measured on it (column `hardware` = hw.id),
    using only `train_models`; every model's error is reported. n_sm: the part's SM count (default:
    its `[kernels]` table's)."""
    rows = profiles[profiles["hardware"] == hw.id]
    if rows.empty:
        raise SpecError(f"no operator profiles measured on {hw.id!r}; the profiles cover "
                        f"{sorted(profiles['hardware'].unique())}")
    unknown = sorted(set(train_models) - set(rows["model"]))
    if unknown or not train_models:
        raise field_error(f"operator fit on {hw.id}", "train_models", list(train_models),
                          f"models among {sorted(rows['model'].unique())}")
    if n_sm is None:
        if hw.kernels is None:
            raise field_error(f"hardware {hw.id!r}", "kernels.n_sm", None,
                              "the part's SM count (pass n_sm, or give the part a [kernels] table)")
        n_sm = hw.kernels.n_sm
    ops = _operators(rows)
    train = ops.frame["model"].isin(train_models).to_numpy()
    measured = ops.frame["measured_s"].to_numpy()
    kind = ops.frame["kind"].to_numpy()
    tiles = tuple(tuple(t) for t in tiles)

    # 1. the GEMMs: fractions, overlap exponent, floor; the tile by the lowest training cost
    g = train & (kind == "gemm")
    sub = _Ops(ops.frame[g], ops.t[g], ops.k[g], ops.n[g], ops.bytes_[g], ops.row[g], ops.weight[g])
    own = hw.efficiency
    best = None
    for tile in tiles:
        def gemm_residuals(theta, tile=tile):
            return sub.weight * np.log(_predict(sub, hw, _gemm_profile(theta, n_sm, tile, _PLACEHOLDER_ELEMENTWISE), own)
                                       / measured[g])

        r = least_squares(gemm_residuals, [0.85, 0.7, 2.0, 4.0], bounds=([0.3, 0.2, 1.0, 0.0], [1.0, 1.0, 20.0, 100.0]),
                          loss="soft_l1", f_scale=0.05, x_scale="jac")
        if best is None or r.cost < best[0].cost:
            best = (r, tile)
    r1, tile = best
    base = _gemm_profile(r1.x, n_sm, tile, _PLACEHOLDER_ELEMENTWISE)

    # 2. the element-wise operators: floor, bandwidth fraction per kind, row cost per row-blocked kind
    e = train & (kind != "gemm")
    sub_e = _Ops(ops.frame[e], ops.t[e], ops.k[e], ops.n[e], ops.bytes_[e], ops.row[e], ops.weight[e])
    n_frac = len(ELEMENTWISE_KINDS)
    best = None
    for rows_per_sm in ROWS_PER_SM_CHOICES:
        def elem_residuals(theta, rps=rows_per_sm):
            return sub_e.weight * np.log(_predict(sub_e, hw, _elementwise_profile(theta, rps, base), own) / measured[e])

        lo_e = [0.0] + [0.01] * n_frac + [0.0] * len(ROW_BLOCKED_KINDS)
        hi_e = [50.0] + [1.0] * n_frac + [20.0] * len(ROW_BLOCKED_KINDS)
        x0 = [1.0] + [0.5] * n_frac + [0.5] * len(ROW_BLOCKED_KINDS)
        r = least_squares(elem_residuals, x0, bounds=(lo_e, hi_e), loss="soft_l1", f_scale=0.05, x_scale="jac")
        if best is None or r.cost < best[0].cost:
            best = (r, rows_per_sm)
    r2, rows_per_sm = best
    kernels = _elementwise_profile(r2.x, rows_per_sm, base)

    before = _predict(ops, hw, None, own)
    after = _predict(ops, hw, kernels, own)
    f, sums, errors = _tables(ops, before, after, tuple(train_models))
    return OperatorFit(hardware=hw.id, kernels=kernels, train_models=tuple(train_models), operators=f, sums=sums, errors=errors,
                       success=bool(r1.success and r2.success), message=f"GEMM: {r1.message}; element-wise: {r2.message}")


def evaluate_operator_profiles(profiles: pd.DataFrame, hw: HardwareProfile, *,
                               train_models: tuple[str, ...] = DEFAULT_TRAIN_MODELS) -> OperatorFit:
    """The errors of `hw`'s shipped kernel curve (no fitting) on its operator profiles."""
    if hw.kernels is None:
        raise field_error(f"hardware {hw.id!r}", "kernels", None, "a [kernels] table to evaluate")
    rows = profiles[profiles["hardware"] == hw.id]
    if rows.empty:
        raise SpecError(f"no operator profiles measured on {hw.id!r}")
    ops = _operators(rows)
    before = _predict(ops, hw, None, hw.efficiency)
    after = _predict(ops, hw, hw.kernels, hw.efficiency)
    f, sums, errors = _tables(ops, before, after, tuple(train_models))
    return OperatorFit(hardware=hw.id, kernels=hw.kernels, train_models=tuple(train_models), operators=f,
                       sums=sums, errors=errors, success=True, message="shipped profile, not refitted")


# ---- all-reduce -------------------------------------------------------------------------------------

def load_all_reduce(network: str, root=None) -> pd.DataFrame:
    """Vidur's `network/<network>/all_reduce.csv`: rows with every device of the group in one node
    (devices_per_node = num_workers), as group_size, message_bytes, measured_s."""
    path = _vidur_root(root) / "network" / network / "all_reduce.csv"
    raw = read_csv_table(path, what="Vidur all_reduce.csv", infer=True)
    needed = ("num_workers", "devices_per_node", "size", "time_stats.all_reduce.median")
    for c in needed:
        if c not in raw.columns:
            raise field_error(str(path), c, None, "a column of Vidur's all_reduce.csv")
    for c in ("num_workers", "devices_per_node", "size"):
        raw[c] = numeric_column(raw, c, where=str(path), integer=True, minimum=1, error=InputError)
    raw["time_stats.all_reduce.median"] = numeric_column(raw, "time_stats.all_reduce.median", where=str(path),
                                                         minimum=0.0, exclusive_minimum=True, error=InputError,
                                                         expected="a median time in ms > 0 (finite)")
    raw = raw[raw["devices_per_node"] == raw["num_workers"]]
    # `size` is bytes: Vidur's profiler allocates `size` fp16 elements and records size * 2
    return pd.DataFrame({"group_size": raw["num_workers"].astype(int), "message_bytes": raw["size"].astype(float),
                         "measured_s": raw["time_stats.all_reduce.median"].astype(float) * 1e-3}).reset_index(drop=True)


def all_reduce_model_s(latency_s, bus_bytes_per_s, group_size, message_bytes):
    n = np.asarray(group_size, dtype=float)
    return latency_s + 2.0 * (n - 1.0) / n * np.asarray(message_bytes, dtype=float) / bus_bytes_per_s


@dataclass(frozen=True, slots=True, kw_only=True)
class AllReduceFit:
    """Per group size: latency_s, bus_bandwidth_bytes_per_s and the |relative error| of every
    measured row (median, p90) under the fitted line."""

    network: str
    table: pd.DataFrame

    def toml(self) -> str:
        """The `[all_reduce]` table, ready for the hardware file (its source goes in `[sources]`)."""
        t = self.table
        return ("[all_reduce]\n" f"group_sizes = {[int(v) for v in t['group_size']]}\n"
                f"latency_us = {[round(float(v) * 1e6, 1) for v in t['latency_s']]}\n"
                f"bus_gb_s = {[round(float(v) / 1e9, 1) for v in t['bus_bandwidth_bytes_per_s']]}\n")


def fit_all_reduce(rows: pd.DataFrame, network: str = "") -> AllReduceFit:
    """latency + 2(n − 1)/n · bytes / bus bandwidth per group size n. The measurements are noisy at
    small sizes (NCCL switches protocols), so each half-octave of message size contributes its
    median once, and the fit is least squares on log time with a soft-L1 loss."""
    out = []
    for n, g in rows.groupby("group_size"):
        band = np.floor(np.log2(g["message_bytes"]) * 2) / 2
        med = g.groupby(band).agg(b=("message_bytes", "median"), t=("measured_s", "median"))

        def res(theta, b=med["b"].to_numpy(), t=med["t"].to_numpy(), n=n):
            return np.log(all_reduce_model_s(theta[0] * 1e-6, theta[1] * 1e9, n, b) / t)

        r = least_squares(res, [10.0, 200.0], bounds=([0.0, 1.0], [1e4, 1e4]), loss="soft_l1", f_scale=0.1)
        lat, bus = r.x[0] * 1e-6, r.x[1] * 1e9
        err = np.abs(all_reduce_model_s(lat, bus, n, g["message_bytes"]) / g["measured_s"] - 1)
        out.append({"group_size": int(n), "latency_s": lat, "bus_bandwidth_bytes_per_s": bus, "n_rows": len(g),
                    "median_abs_error": float(np.median(err)), "p90_abs_error": float(np.quantile(err, 0.9))})
    return AllReduceFit(network=network, table=pd.DataFrame(out))


# ---- Splitwise's measured decode steps against the device-time model ---------------------------------

def splitwise_decode_breakdown(path, hardware: HardwareProfile, model: ModelSpec, *, prompt_size: int = 512,
                               token_size: int = 128) -> pd.DataFrame:
    """Splitwise's measured decode step (token_time, median of its repeats) of Llama-2-70B against
    batch size and tp, beside what `roofline.step_cost` charges for the device work of that step
    (per class) with no fixed overheads: how much of the measured step the device-time model
    explains, and what is left for fixed and host costs. Context: the prompt plus half the output."""
    from ..cost.roofline import step_cost  # noqa: PLC0415 - layer 2, fine from here
    from .fit import SPLITWISE_HARDWARE, SPLITWISE_MODELS

    raw = read_csv_table(path, what="Splitwise perf_model.csv", infer=True)
    require_columns(raw, ("model", "hardware", "prompt_size", "token_size", "tensor_parallel", "batch_size",
                          "token_time"), where=str(path), what="Splitwise's perf_model.csv")
    for c in ("prompt_size", "token_size", "tensor_parallel", "batch_size"):
        raw[c] = numeric_column(raw, c, where=str(path), integer=True, minimum=1, error=InputError)
    raw["token_time"] = numeric_column(raw, "token_time", where=str(path), minimum=0.0, exclusive_minimum=True,
                                       expected="a time in ms > 0 (finite)", error=InputError)
    name = {v: k for k, v in SPLITWISE_HARDWARE.items()}.get(hardware.id)
    mname = {v: k for k, v in SPLITWISE_MODELS.items()}.get(model.id)
    if name is None or mname is None:
        raise SpecError(f"Splitwise's profile has no rows for {model.id} on {hardware.id}")
    sel = raw[(raw["hardware"] == name) & (raw["model"] == mname) & (raw["prompt_size"] == prompt_size)
              & (raw["token_size"] == token_size)]
    med = sel.groupby(["tensor_parallel", "batch_size"], as_index=False)["token_time"].median()
    no_overhead = replace(hardware.efficiency, step_overhead_s=0.0, per_layer_overhead_s=0.0)
    rows = []
    for r in med.itertuples(index=False):
        tp, b = int(r.tensor_parallel), int(r.batch_size)
        c = step_cost(model, hardware, batch_size=b, q_len=1, context_len=prompt_size + token_size // 2, tp=tp,
                      efficiency=no_overhead)
        device = float(c.time_s)
        measured = float(r.token_time) * 1e-3
        rows.append({"hardware": hardware.id, "tp": tp, "batch_size": b, "measured_s": measured,
                     "gemm_s": float(c.weights.time_s + c.lm_head.time_s), "elementwise_s": float(c.activations.time_s),
                     "attention_s": float(c.attention.time_s + c.kv_write.time_s),
                     "all_reduce_s": float(c.communication_s), "device_s": device,
                     "explained_frac": device / measured, "unexplained_s": measured - device})
    return pd.DataFrame(rows)


# ---- one target's measured layer curve, for the verify-cost chart -----------------------------------

def measured_layer_curve(profiles: pd.DataFrame, hw: HardwareProfile, model: ModelSpec, tp: int,
                         eff: Efficiency | None = None) -> pd.DataFrame:
    """The measured time of one transformer layer's operators (the four projections, norms, rotary
    embedding, activation, residual add: Vidur's mlp.csv) against tokens in the step, for a profiled
    model of `model`'s layer shape on `hw` at tensor-parallel degree `tp`, beside what specsim's
    kernel model (`hw.kernels`, else the roofline with `eff`) charges for the same operators.

    Columns: vidur_model, n_tokens, measured_s, predicted_s. Empty when no profile matches: another
    part, a tp the profiles lack, a mixture-of-experts or latent-attention layer, or no model of the
    same hidden size, heads, KV heads and FFN width (the vocabulary does not enter a layer)."""
    empty = pd.DataFrame({"vidur_model": [], "n_tokens": [], "measured_s": [], "predicted_s": []})
    if model.moe is not None or model.mla is not None or profiles.empty:
        return empty
    same = ((profiles["hardware"] == hw.id) & (profiles["tp"] == int(tp))
            & (profiles["n_embd"] == model.hidden_size) & (profiles["n_head"] == model.n_heads)
            & (profiles["n_kv_head"] == model.n_kv_heads) & (profiles["n_expanded_embd"] == model.ffn_size)
            & (profiles["use_gated_mlp"].astype(bool) == (model.ffn_kind == "gated")))
    rows = profiles[same]
    if rows.empty:
        return empty
    rows = rows[rows["model"] == sorted(rows["model"].unique())[0]]
    ops = _operators(rows)
    predicted = _predict(ops, hw, hw.kernels, eff if eff is not None else hw.efficiency)
    f = ops.frame.assign(predicted_s=predicted)
    sums = f.groupby(["model", "n_tokens"], as_index=False)[["measured_s", "predicted_s"]].sum()
    return sums.rename(columns={"model": "vidur_model"}).sort_values("n_tokens", ignore_index=True)
