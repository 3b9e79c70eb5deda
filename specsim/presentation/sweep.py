"""Sweeps: a scenario's `[sweep]` grid evaluated into one tidy DataFrame, one row per point.

The categorical axes (hardware, target, method, drafter, stack, tp, attention, temperature) are
looped over; the numeric axes (K, tree size M, batch size B, context L, acceptance α) are evaluated
in one broadcast per categorical combination (`speculation.evaluate_grid`), so a 10⁶-point sweep
costs a few numpy passes, not 10⁶ Python calls.

`[sweep]` keys (each a value or a list; a missing key takes the scenario's top-level value):
  hardware, target, drafter, method, stack, tp, attention, temperature   categorical axes
  k, tree_size, batch_size, context_len, alpha, tau                       numeric axes
  drafter_options   a table of family knobs (see drafters.OPTION_KEYS)
  n_ranks, rank_decay   how a single α becomes a per-rank tree vector (speculation docs)
  tau_k             the K at which the given τ values were measured (default: the scenario's k)
  context_decay_per_token, temperature_slope, reference_context_len, reference_temperature
                    acceptance falling with context and temperature (`acceptance.AcceptanceModel`):
                    α_eff = clip(α · exp(−λ(L − L_ref) − s(T − T_ref))); default: no dependence,
                    references the scenario's context_len and temperature. Column alpha_effective.
tree_size applies to the families that verify trees (drafters.TREE_METHODS); the others run chains
with tree_size = K + 1. τ values are converted to the i.i.d. α that gives them at tau_k.
Columns (SI units in the names): see COLUMNS.
"""
from __future__ import annotations

import itertools
import numpy as np
import pandas as pd

from ..speculation import families as drafters
from ..speculation.acceptance import AcceptanceModel, alpha_from_tau
from ..errors import SpecError, field_error, reject_unknown_keys
from ..specs.hardware import load_hardware
from ..specs.models import load_model
from ..cost.roofline import kv_bytes_per_device, weight_bytes_per_device
from ..specs.scenario import Scenario
from ..speculation.cycle import DEFAULT_N_RANKS, DEFAULT_RANK_DECAY, Deployment, evaluate_grid
from ..specs.stacks import load_stack

CATEGORICAL = ("hardware", "target", "method", "drafter", "stack", "tp", "attention", "temperature")
NUMERIC = ("k", "tree_size", "batch_size", "context_len", "alpha", "tau")
ACCEPTANCE_KEYS = ("context_decay_per_token", "temperature_slope", "reference_context_len", "reference_temperature")
OTHER_KEYS = ("drafter_options", "n_ranks", "rank_decay", "tau_k", "plots") + ACCEPTANCE_KEYS
SWEEP_KEYS = CATEGORICAL + NUMERIC + OTHER_KEYS

COLUMNS = ("hardware", "target", "drafter", "method", "stack", "tp", "attention", "temperature", "k", "tree_size",
           "is_tree", "batch_size", "context_len", "alpha", "tokens_per_cycle", "draft_time_s", "verify_time_s",
           "cycle_overhead_s", "cycle_time_s", "target_step_time_s", "verify_q_len", "tokens_per_s",
           "baseline_tokens_per_s", "speedup", "regression", "memory_per_device_bytes", "fits", "alpha_effective")


def _as_list(value) -> list:
    if value is None:
        return [None]
    if isinstance(value, (list, tuple)):
        return list(value)
    return [value]


def sweep_axes(scenario: Scenario) -> dict:
    """The grid a scenario describes: its `[sweep]` table over its top-level values, validated."""
    raw = dict(scenario.section("sweep"))
    where = f"scenario {scenario.path or scenario.name!r} [sweep]"
    reject_unknown_keys(where, raw, SWEEP_KEYS)
    axes = {
        "hardware": _as_list(raw.get("hardware", scenario.hardware)),
        "target": _as_list(raw.get("target", scenario.target)),
        "method": _as_list(raw.get("method", scenario.method)),
        "drafter": _as_list(raw.get("drafter", scenario.drafter)),
        "stack": _as_list(raw.get("stack", scenario.stack)),
        "tp": _as_list(raw.get("tp", scenario.tp)),
        "attention": _as_list(raw.get("attention", scenario.attention)),
        "temperature": _as_list(raw.get("temperature", scenario.temperature)),
        "k": _as_list(raw.get("k", scenario.k)),
        "tree_size": _as_list(raw.get("tree_size")) if "tree_size" in raw else None,
        "batch_size": _as_list(raw.get("batch_size", scenario.batch_size)),
        "context_len": _as_list(raw.get("context_len", scenario.context_len)),
    }
    if "alpha" in raw and "tau" in raw:
        raise field_error(where, "tau", raw["tau"], "either alpha or tau, not both")
    tau_k = int(raw.get("tau_k", scenario.k))
    if "alpha" in raw:
        alphas = _as_list(raw["alpha"])
    elif "tau" in raw:
        alphas = [alpha_from_tau(float(t), tau_k) for t in _as_list(raw["tau"])]
    elif scenario.alpha is not None:
        alphas = [scenario.alpha]
    elif scenario.tau is not None:
        alphas = [alpha_from_tau(float(scenario.tau), scenario.k)]
    else:
        raise field_error(where, "alpha", None, "acceptance rates (alpha) or mean tokens per cycle (tau)")
    axes["alpha"] = alphas
    for name in ("k", "batch_size", "context_len", "tp") + (("tree_size",) if axes["tree_size"] else ()):
        for v in axes[name]:
            if isinstance(v, bool) or not isinstance(v, int) or v < (0 if name in ("k", "context_len") else 1):
                raise field_error(where, name, v, "whole numbers (K, L >= 0; B, M, tp >= 1)")
    for a in axes["alpha"]:
        if isinstance(a, bool) or not isinstance(a, (int, float)) or not 0.0 <= a <= 1.0:
            raise field_error(where, "alpha", a, "acceptance rates in [0, 1]")
    axes["drafter_options"] = dict(raw.get("drafter_options", {}))
    axes["n_ranks"] = int(raw.get("n_ranks", DEFAULT_N_RANKS))
    axes["rank_decay"] = float(raw.get("rank_decay", DEFAULT_RANK_DECAY))
    axes["plots"] = _as_list(raw.get("plots", "all"))
    axes["acceptance"] = {
        "context_decay_per_token": float(raw.get("context_decay_per_token", 0.0)),
        "temperature_slope": float(raw.get("temperature_slope", 0.0)),
        "reference_context_len": float(raw.get("reference_context_len", scenario.context_len)),
        "reference_temperature": float(raw.get("reference_temperature", scenario.temperature)),
    }
    return axes


def n_points(axes: dict) -> int:
    """How many rows the sweep will have (before any combination is skipped)."""
    numeric = len(axes["k"]) * len(axes["batch_size"]) * len(axes["context_len"]) * len(axes["alpha"])
    total = 0
    for method in axes["method"]:
        per = numeric * (1 + len(axes["tree_size"]) if axes["tree_size"] and method in drafters.TREE_METHODS else 1)
        n_drafters = len(axes["drafter"]) if method == "draft_model" else 1
        total += per * n_drafters
    other = (len(axes["hardware"]) * len(axes["target"]) * len(axes["stack"]) * len(axes["tp"])
             * len(axes["attention"]) * len(axes["temperature"]))
    return total * other


def _combos(axes: dict):
    """(hardware, target, method, drafter, stack, tp, attention, temperature, tree?) per evaluation.
    A family that verifies trees runs twice when tree sizes are given: as a chain and as trees."""
    for hw, tgt, method, stack, tp, attn, temp in itertools.product(
            axes["hardware"], axes["target"], axes["method"], axes["stack"], axes["tp"], axes["attention"],
            axes["temperature"]):
        topologies = (False, True) if axes["tree_size"] and method in drafters.TREE_METHODS else (False,)
        for drafter in (axes["drafter"] if method == "draft_model" else [None]):
            for tree in topologies:
                yield hw, tgt, method, drafter, stack, tp, attn, temp, tree


def run_sweep(scenario: Scenario, *, progress: bool = False, skipped: list | None = None) -> pd.DataFrame:
    """Evaluate the scenario's grid; one row per point (COLUMNS). Combinations that cannot be
    evaluated at all (a tokenizer mismatch, an MTP method on a target without MTP layers, a tree on a
    chain-only stack is run as a chain) are appended to `skipped` with the reason, if given."""
    from tqdm.auto import tqdm  # presentation layer only

    axes = sweep_axes(scenario)
    frames = []
    combos = list(_combos(axes))
    cache: dict = {}
    for hw_id, tgt_id, method, drafter_id, stack_id, tp, attn, temp, tree in tqdm(
            combos, disable=not progress, desc="sweep", unit="combo"):
        hw = cache.setdefault(("hw", hw_id), load_hardware(hw_id))
        target = cache.setdefault(("model", tgt_id), load_model(tgt_id))
        if scenario.target_dtype:
            target = target.with_weight_format(scenario.target_dtype)
        stack_id = None if stack_id in ("", "none") else stack_id
        stack = cache.setdefault(("stack", stack_id), load_stack(stack_id)) if stack_id else None
        try:
            dep = Deployment.from_stack(hw, stack, n_devices=int(tp), attention=attn)
            cfg = drafters.make_config(method, target, drafter=drafter_id, drafter_tp=scenario.drafter_tp,
                                       allow_cross_tokenizer=scenario.allow_cross_tokenizer,
                                       options=axes["drafter_options"])
            acc = AcceptanceModel(alpha=1.0, **axes["acceptance"])
            factor = acc.factor(np.asarray(axes["context_len"], dtype=float), float(temp or 0.0))
            g = evaluate_grid(cfg, target, dep, k=axes["k"], tree_size=axes["tree_size"] if tree else None,
                              alpha_factor=factor, batch_size=axes["batch_size"],
                              context_len=axes["context_len"], alpha=axes["alpha"], n_ranks=axes["n_ranks"],
                              rank_decay=axes["rank_decay"])
        except SpecError as exc:
            if skipped is None:
                raise
            skipped.append({"hardware": hw_id, "target": tgt_id, "method": method, "drafter": drafter_id,
                            "stack": stack_id, "tp": tp, "reason": str(exc)})
            continue
        n = g.speedup.size
        mem = _memory(cfg, target, dep, g)
        cols = {
            "hardware": hw_id, "target": tgt_id, "drafter": drafter_id or _self_drafter(method), "method": method,
            "stack": stack_id or "", "tp": int(tp), "attention": attn, "temperature": float(temp or 0.0),
            "k": g.k.ravel().astype(np.int64), "tree_size": g.tree_size.ravel().astype(np.int64),
            "is_tree": np.full(n, g.is_tree), "batch_size": g.batch_size.ravel().astype(np.int64),
            "context_len": g.context_len.ravel().astype(np.int64), "alpha": g.alpha.ravel(),
            "tokens_per_cycle": g.tokens_per_cycle.ravel(), "draft_time_s": g.draft_time_s.ravel(),
            "verify_time_s": g.verify_time_s.ravel(), "cycle_overhead_s": g.overhead_s.ravel(),
            "cycle_time_s": g.cycle_time_s.ravel(), "target_step_time_s": g.target_step_time_s.ravel(),
            "verify_q_len": g.verify_q_len.ravel(), "tokens_per_s": g.tokens_per_s.ravel(),
            "baseline_tokens_per_s": g.baseline_tokens_per_s.ravel(), "speedup": g.speedup.ravel(),
        }
        cols["regression"] = cols["speedup"] < 1.0
        cols["memory_per_device_bytes"] = np.broadcast_to(mem, g.shape).ravel()
        cols["fits"] = cols["memory_per_device_bytes"] <= hw.memory_bytes
        cols["alpha_effective"] = g.alpha_effective.ravel()
        frames.append((n, cols))
    if not frames:
        return pd.DataFrame({c: [] for c in COLUMNS})
    return _assemble(frames)


def _assemble(frames) -> pd.DataFrame:
    """One DataFrame from per-combination column dicts: numeric columns concatenated, constant
    string columns built once as Categoricals from codes (no per-row string objects)."""
    sizes = np.array([n for n, _ in frames])
    out = {}
    for c in COLUMNS:
        values = [cols[c] for _, cols in frames]
        if isinstance(values[0], str):
            cats = sorted(set(values))
            codes = np.repeat(np.array([cats.index(v) for v in values], dtype=np.int32), sizes)
            out[c] = pd.Categorical.from_codes(codes, categories=cats)
        elif np.isscalar(values[0]):
            out[c] = np.repeat(np.array(values), sizes)
        else:
            out[c] = np.concatenate(values)
    return pd.DataFrame(out)


def _self_drafter(method: str) -> str:
    return {"prompt_lookup": "(prompt n-grams)", "medusa": "(medusa heads)", "eagle": "(eagle head)",
            "lookahead": "(lookahead pool)", "layer_skip": "(early layers)", "mtp": "(mtp module)",
            "sparse_kv": "(sparse-KV self)"}.get(method, "")


def _memory(cfg, target, dep: Deployment, g) -> np.ndarray:
    """Per-device bytes at each grid point: target weights + KV at L + M, plus the drafter's share."""
    b, l = g.batch_size, g.context_len
    k, m = g.k[:, :, :1, :1, :1], g.tree_size[:, :, :1, :1, :1]
    split = dep.n_devices // dep.tp
    total = (weight_bytes_per_device(target, dep.tp)
             + kv_bytes_per_device(target, batch_size=b, ctx_len=l, tp=dep.tp)) / split
    extra = drafters.footprint(cfg, target, batch_size=b, ctx_len=l, k=k, tree_size=m if g.is_tree else None,
                               tp=dep.tp)
    for v in extra.values():
        total = total + np.asarray(v, dtype=float) / split
    return np.asarray(total, dtype=float)


def write_sweep(df: pd.DataFrame, out_dir) -> dict:
    """DIR/sweep.csv and DIR/sweep.parquet; returns the paths."""
    from pathlib import Path

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"csv": out / "sweep.csv", "parquet": out / "sweep.parquet"}
    df.to_csv(paths["csv"], index=False)
    df.to_parquet(paths["parquet"], index=False)
    return paths


__all__ = ["run_sweep", "sweep_axes", "n_points", "write_sweep", "COLUMNS", "SWEEP_KEYS"]


def verify_roofline_points(target_id: str, hardware_id: str, *, tree_sizes=range(1, 65), batch_sizes=(1,),
                           context_len: int = 0, tp: int = 1, stack: str | None = None,
                           attention: str = "fused") -> pd.DataFrame:
    """The verify pass over M = tree_sizes query tokens per sequence, as roofline points: one row per
    (B, M) with FLOPs, bytes, operational intensity, attained FLOP/s, time, and time relative to the
    one-token step at the same B (the seed's 'barely more than over 1' ratio)."""
    from ..cost.roofline import step_cost

    hw = load_hardware(hardware_id)
    target = load_model(target_id)
    dep = Deployment.from_stack(hw, load_stack(stack) if stack else None, n_devices=tp, attention=attention)
    m = np.asarray(list(tree_sizes), dtype=float)[None, :]
    b = np.asarray(list(batch_sizes), dtype=float)[:, None]
    c = step_cost(target, hw, batch_size=b, q_len=m, ctx_len=context_len, tp=dep.tp, attention=attention,
                  efficiency=dep.eff)
    one = step_cost(target, hw, batch_size=b, q_len=1, ctx_len=context_len, tp=dep.tp, attention=attention,
                    efficiency=dep.eff)
    flops = np.broadcast_to(c.flops, c.time_s.shape)
    bytes_ = np.broadcast_to(c.bytes, c.time_s.shape)
    bb, mm = np.broadcast_arrays(b, m)
    dtype = hw.compute_dtype_for(target.compute_dtype)
    return pd.DataFrame({
        "hardware": hardware_id, "target": target_id, "batch_size": bb.ravel().astype(int),
        "tree_size": mm.ravel().astype(int), "tokens_in_flight": (bb * mm).ravel().astype(int),
        "flops": flops.ravel(), "bytes": bytes_.ravel(), "intensity_flops_per_byte": (flops / bytes_).ravel(),
        "attained_flops_per_s": (flops / c.time_s).ravel(), "time_s": c.time_s.ravel(),
        "time_vs_one_token": (c.time_s / one.time_s).ravel(),
        "peak_flops_per_s": hw.peak_flops_per_s[dtype] * dep.eff.compute_frac,
        "peak_bandwidth_bytes_per_s": hw.mem_bandwidth_bytes_per_s * dep.eff.bandwidth_frac,
        "ridge_flops_per_byte": hw.ridge_flops_per_byte(target.compute_dtype),
        # each token in flight does 2 FLOP per weight byte-count of weight_bytes_per_param: the weight
        # GEMMs turn compute bound at B·M = ridge × bytes_per_weight / 2 (156 for fp16 on the seed part)
        "ridge_tokens_in_flight": hw.ridge_flops_per_byte(target.compute_dtype) * target.weight_bytes_per_param / 2.0,
    })
