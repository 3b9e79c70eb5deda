"""Replay: predict each row of a table of measured speculative-decoding results, compare.

Input columns (CSV; empty cells where a column does not apply):
  id, hardware, n_devices, stack, target, drafter, method, k, tree_size, batch_size, context_len,
  temperature, alpha, tau, measured_speedup
optional: target_dtype (overrides the catalog's weight format), drafter_options ("key=value;..." with
keys from drafters.OPTION_KEYS), source (citation), and anything else (carried through).

Per row: the catalogs give the hardware, target (ids or aliases) and stack; the family's cost model
gives the cycle time (`speculation.speculative_cycle`); the acceptance gives tokens per cycle — a
measured τ (mean tokens per cycle including the bonus token; for trees the measured mean accepted
length) is used as is, else α through the family's closed form or the optimal tree. A row that
cannot be predicted (unknown id, missing acceptance, a method that needs a drafter without one) is
kept, with the reason, and left out of the error statistics. Defaults applied to missing optional
inputs (n_devices 1, context_len 512) are listed in the row's `assumptions`.

relative_error = predicted / measured − 1.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..speculation import families as drafters
from ..errors import SpecError
from ..specs.hardware import load_hardware
from ..specs.models import load_model
from ..speculation.cycle import Deployment, speculative_cycle, tokens_per_cycle
from ..specs.stacks import load_stack

REQUIRED_COLUMNS = ("id", "hardware", "n_devices", "stack", "target", "drafter", "method", "k", "tree_size",
                    "batch_size", "context_len", "temperature", "alpha", "tau", "measured_speedup")
DEFAULT_CONTEXT_LEN = 512


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplayResult:
    table: pd.DataFrame
    n_rows: int
    n_predicted: int
    median_relative_error: float | None
    p90_relative_error: float | None
    worst_relative_error: float | None
    worst_id: str | None

    def to_dict(self) -> dict:
        rows = self.table.replace({np.nan: None}).to_dict(orient="records")
        return {"n_rows": self.n_rows, "n_predicted": self.n_predicted,
                "median_relative_error": self.median_relative_error, "p90_relative_error": self.p90_relative_error,
                "worst_relative_error": self.worst_relative_error, "worst_id": self.worst_id, "rows": rows}


def _blank(v) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v)) or (isinstance(v, str) and not v.strip())


def _int(row, key, default=None):
    v = row.get(key)
    if _blank(v):
        return default
    f = float(v)
    if f != round(f):
        raise SpecError(f"column {key!r} = {v!r}: expected a whole number")
    return int(f)


def _float(row, key):
    v = row.get(key)
    return None if _blank(v) else float(v)


def _options(text) -> dict:
    if _blank(text):
        return {}
    out = {}
    for part in str(text).split(";"):
        if not part.strip():
            continue
        key, _, value = part.partition("=")
        value = value.strip()
        out[key.strip()] = float(value) if "." in value or "e" in value.lower() else int(value)
    return out


def predict_row(row: dict) -> tuple[float, list[str]]:
    """Predicted speedup of one measured row, and the defaults it assumed. Raises SpecError with the
    reason when the row cannot be predicted."""
    assumed: list[str] = []
    method = str(row.get("method") or "").strip()
    if method not in drafters.METHODS:
        raise SpecError(f"method {method!r} is not one of {', '.join(drafters.METHODS)}")
    for key in ("hardware", "target"):
        if _blank(row.get(key)):
            raise SpecError(f"missing {key}")
    hw = load_hardware(str(row["hardware"]).strip())
    target = load_model(str(row["target"]).strip())
    if not _blank(row.get("target_dtype")):
        target = target.with_weight_format(str(row["target_dtype"]).strip())
    stack = None if _blank(row.get("stack")) else load_stack(str(row["stack"]).strip())
    n_dev = _int(row, "n_devices")
    if n_dev is None:
        n_dev = 1
        assumed.append("n_devices = 1")
    b = _int(row, "batch_size")
    if b is None:
        raise SpecError("missing batch_size")
    ctx = _int(row, "context_len")
    if ctx is None:
        ctx = DEFAULT_CONTEXT_LEN
        assumed.append(f"context_len = {DEFAULT_CONTEXT_LEN}")
    k = _int(row, "k")
    if k is None:
        if method != "lookahead":
            raise SpecError("missing k (draft length or tree depth)")
        k = 1
    m = _int(row, "tree_size")
    drafter = None if _blank(row.get("drafter")) else str(row["drafter"]).strip()
    cfg = drafters.make_config(method, target, drafter=drafter, options=_options(row.get("drafter_options")),
                               allow_cross_tokenizer=True)
    dep = Deployment.from_stack(hw, stack, n_devices=n_dev)
    tree = m if (m is not None and cfg.supports_tree and m != k + 1) else None
    if tree is not None and not dep.supports_tree:
        tree = None
        assumed.append(f"stack {dep.stack_id} verifies chains: tree of {m} run as a chain of {k}")
    tau = _float(row, "tau")
    alpha = _float(row, "alpha")
    if tau is None and alpha is None:
        raise SpecError("missing acceptance: give alpha or tau")
    if tau is None:
        tau = float(tokens_per_cycle(cfg, alpha=alpha, k=k, tree_size=tree))
    cyc = speculative_cycle(cfg, target, dep, batch_size=b, k=k, ctx_len=ctx, tokens_per_cycle=tau, tree_size=tree)
    return float(cyc.speedup), assumed


def replay(table: pd.DataFrame) -> ReplayResult:
    """Predict every row of a measured table (see the module docstring)."""
    missing = [c for c in REQUIRED_COLUMNS if c not in table.columns]
    if missing:
        raise SpecError(f"replay table lacks columns {missing}; required: {', '.join(REQUIRED_COLUMNS)}")
    preds, errs, reasons, assumptions = [], [], [], []
    for row in table.to_dict(orient="records"):
        try:
            p, assumed = predict_row(row)
        except (SpecError, ValueError) as exc:
            preds.append(np.nan)
            errs.append(np.nan)
            reasons.append(str(exc))
            assumptions.append("")
            continue
        meas = _float(row, "measured_speedup")
        preds.append(p)
        errs.append(p / meas - 1.0 if meas else np.nan)
        reasons.append("" if meas else "no measured_speedup to compare with")
        assumptions.append("; ".join(assumed))
    out = table.copy()
    out["predicted_speedup"] = preds
    out["relative_error"] = errs
    out["reason"] = reasons
    out["assumptions"] = assumptions
    ok = out["relative_error"].notna()
    abs_err = out.loc[ok, "relative_error"].abs()
    if len(abs_err):
        worst_i = abs_err.idxmax()
        stats = dict(median_relative_error=float(abs_err.median()), p90_relative_error=float(abs_err.quantile(0.9)),
                     worst_relative_error=float(abs_err.max()), worst_id=str(out.loc[worst_i, "id"]))
    else:
        stats = dict(median_relative_error=None, p90_relative_error=None, worst_relative_error=None, worst_id=None)
    return ReplayResult(table=out, n_rows=len(out), n_predicted=int(ok.sum()), **stats)


def replay_file(path) -> ReplayResult:
    try:
        table = pd.read_csv(path, dtype={"id": str}, comment=None)
    except FileNotFoundError:
        raise SpecError(f"{path}: file not found") from None
    return replay(table)


def format_replay(r: ReplayResult) -> str:
    lines = [f"{'id':<28} {'method':<14} {'measured':>8} {'predicted':>9} {'error':>7}  note"]
    for row in r.table.to_dict(orient="records"):
        meas = row.get("measured_speedup")
        pred = row["predicted_speedup"]
        err = row["relative_error"]
        note = row["reason"] or row["assumptions"]
        lines.append(f"{str(row['id']):<28} {str(row['method']):<14} "
                     f"{'' if _blank(meas) else f'{float(meas):.2f}':>8} "
                     f"{'' if _blank(pred) else f'{pred:.2f}':>9} {'' if _blank(err) else f'{err:+.0%}':>7}  {note}")
    if r.median_relative_error is None:
        lines.append(f"\n{r.n_rows} rows, none predictable")
    else:
        lines.append(f"\n{r.n_rows} rows, {r.n_predicted} predicted: |relative error| median "
                     f"{r.median_relative_error:.1%}, p90 {r.p90_relative_error:.1%}, worst "
                     f"{r.worst_relative_error:.1%} ({r.worst_id})")
    return "\n".join(lines)


__all__ = ["replay", "replay_file", "predict_row", "format_replay", "ReplayResult", "REQUIRED_COLUMNS"]
