"""Replay: predict each row of a table of measured speculative-decoding results, and compare.

Input columns (CSV; empty cells where a column does not apply):
  id, hardware, n_devices, stack, target, drafter, method, k, tree_size, batch_size, context_len,
  temperature, alpha, tau, measured_speedup
optional: target_dtype (overrides the catalog's weight format), kv_cache_dtype (the KV cache's, likewise),
drafter_options ("key=value;..."
with keys from speculation.families.OPTION_KEYS), source (citation), notes, role ("fit" for a row a
catalog figure was fitted to, "check" or empty otherwise: the summary gives the error over the rows no
figure was fitted to apart). Any other column is refused with the closest known name (a misspelt
override must not silently not apply), unless its name starts with `x_` (carried through untouched).

Each row becomes a scenario and is resolved into an operating point like any other
(`speculation.operating_point.resolve`), then predicted (`speculation.predict.predict`). A measured
τ (mean tokens per cycle including the bonus token; for trees the measured mean accepted length) is
used as is; otherwise α through the family's closed form or the optimal tree. A row that cannot be
predicted (an unknown id, missing acceptance, an impossible value such as τ > K + 1, a batch that
does not fit) is kept with the reason and left out of the error statistics. Defaults applied to
missing inputs are listed in the row's `assumptions` and counted in the summary:
- n_devices 1;
- context_len 512, or less where a model holds fewer tokens: the default the tool assumes itself must
  fit the model, L + the verify step's tokens ≤ max_context for the target and a draft model;
- a draft length (and tree, and top-k) the row does not state: the family's published default
  (`speculation.families.published_default`: EAGLE-1/2/3's, Medusa's and Hydra's trees, one token per
  MTP module, transformers' assisted-generation schedule on hf-eager); a row whose method publishes
  none is refused;
- a checkpoint dtype the hardware does not run as stored (`HardwareProfile.loads_as`: a TPU v4 runs
  fp32 checkpoints as bf16), and a dtype whose matmuls the part runs in another (no fp32 peak);
- Lookahead's verify width given as tree_size: accepted when it is the 1 + (W + G)(N − 1) of the
  row's W, N and G (the width those give is used), refused otherwise.

relative_error = predicted / measured − 1.
"""
from __future__ import annotations

import difflib
import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..errors import InputError, SpecError, field_error
from .load import MIN_SPEEDUP
from ..specs.scenario import Scenario
from ..speculation.families import FAMILIES, METHODS, OPTION_KEYS
from ..speculation.operating_point import resolve
from ..speculation.predict import predict

REQUIRED_COLUMNS = ("id", "hardware", "n_devices", "stack", "target", "drafter", "method", "k", "tree_size",
                    "batch_size", "context_len", "temperature", "alpha", "tau", "measured_speedup")
OPTIONAL_COLUMNS = ("target_dtype", "kv_cache_dtype", "drafter_options", "baseline_tokens_per_s", "source", "notes", "role")
ROLES = ("fit", "check")
DEFAULT_CONTEXT_LEN = 512


# A measured slowdown counts as predicted when the prediction is below this speedup (issue 9's bar: a
# planner reading 1.05 or more would leave speculation on where it measurably loses).
SLOWDOWN_BAR = 1.05


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplayResult:
    table: pd.DataFrame
    n_rows: int
    n_predicted: int
    median_relative_error: float | None
    p90_relative_error: float | None
    worst_relative_error: float | None
    worst_id: str | None
    n_fit_rows: int = 0
    median_relative_error_check: float | None = None
    n_assumed: int = 0
    assumption_counts: tuple = ()

    def by(self, column: str) -> list[dict]:
        """Median |relative error| and row count per value of `column` (method, stack, ...), predicted
        rows only; a blank value groups as '(none)'."""
        ok = self.table[self.table["relative_error"].notna()]
        key = ok[column].where(ok[column].notna() & (ok[column].astype(str).str.strip() != ""), "(none)")
        out = []
        for value, grp in ok.groupby(key.astype(str), sort=True):
            err = grp["relative_error"].abs()
            check = grp[grp["role"] != "fit"]["relative_error"].abs() if "role" in grp else err
            out.append({column: value, "n_rows": int(len(grp)), "median_abs_error": float(err.median()),
                        "worst_abs_error": float(err.max()), "n_fit_rows": int(len(grp) - len(check)),
                        "median_abs_error_check": float(check.median()) if len(check) else None})
        return out

    def slowdowns(self, bar: float = SLOWDOWN_BAR) -> dict:
        """The rows measured below 1 (speculation slower than plain decoding) and how many of them are
        predicted below `bar`; the ids that are not."""
        t = self.table
        meas = pd.to_numeric(t["measured_speedup"], errors="coerce")
        slow = t[(meas < 1.0) & t["predicted_speedup"].notna()]
        missed = slow[slow["predicted_speedup"] >= bar]
        return {"bar": bar, "n_measured_below_1": int(len(slow)),
                "n_predicted_below_bar": int(len(slow) - len(missed)), "missed": missed["id"].astype(str).tolist()}

    def to_dict(self) -> dict:
        rows = self.table.replace({np.nan: None}).to_dict(orient="records")
        return {"n_rows": self.n_rows, "n_predicted": self.n_predicted, "n_refused": self.n_rows - self.n_predicted,
                "median_relative_error": self.median_relative_error, "p90_relative_error": self.p90_relative_error,
                "worst_relative_error": self.worst_relative_error, "worst_id": self.worst_id,
                "n_fit_rows": self.n_fit_rows, "median_relative_error_check": self.median_relative_error_check,
                "n_rows_with_assumptions": self.n_assumed,
                "assumption_counts": {k: n for k, n in self.assumption_counts},
                "by_method": self.by("method"), "by_group": self.by("group"), "by_stack": self.by("stack"),
                "slowdowns": self.slowdowns(), "rows": rows}


def _blank(v) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v)) or (isinstance(v, str) and not v.strip())


def _int(row, key, default=None):
    v = row.get(key)
    if _blank(v):
        return default
    try:
        f = float(v)
    except (TypeError, ValueError):
        raise SpecError(f"column {key!r} = {v!r}: expected a whole number") from None
    if not math.isfinite(f) or f != round(f):
        raise SpecError(f"column {key!r} = {v!r}: expected a whole number")
    return int(f)


def _float(row, key):
    v = row.get(key)
    if _blank(v):
        return None
    try:
        f = float(v)
    except (TypeError, ValueError):
        raise SpecError(f"column {key!r} = {v!r}: expected a number") from None
    if not math.isfinite(f):
        raise SpecError(f"column {key!r} = {v!r}: expected a finite number")
    return f


def _str(row, key):
    v = row.get(key)
    return None if _blank(v) else str(v).strip()


def _options(text) -> dict:
    if _blank(text):
        return {}
    out = {}
    for part in str(text).split(";"):
        if not part.strip():
            continue
        key, sep, value = part.partition("=")
        if not sep or not value.strip():
            raise SpecError(f"column 'drafter_options' = {text!r}: expected 'key=value;...'")
        value = value.strip()
        try:
            out[key.strip()] = float(value) if any(c in value for c in ".eE") else int(value)
        except ValueError:
            if not value.replace("-", "").replace("_", "").isalnum():
                raise SpecError(f"column 'drafter_options' = {text!r}: {key.strip()} = {value!r} is neither a number "
                                f"nor a name") from None
            out[key.strip()] = value
    return out


def _published_shape(method: str, row: dict, options: dict) -> tuple[int, int | None, dict, str]:
    """(k, tree_size, options, label) of the published default draft shape for a row that states no k
    (`speculation.families.published_default`), the row's own options kept; refused when none exists."""
    from ..specs.models import load_model
    from ..speculation.families import DrafterConfig, published_default

    try:
        cfg = DrafterConfig(method=method, **{k: v for k, v in options.items() if k in OPTION_KEYS},
                            drafter=load_model(_str(row, "drafter")) if _str(row, "drafter") else None)
        target = load_model(_str(row, "target"))
    except (SpecError, TypeError) as exc:
        raise SpecError(f"missing k (draft length or tree depth), and no published default could be looked up: "
                        f"{exc}") from None
    d = published_default(cfg, target, _str(row, "stack"))
    if d is None:
        raise SpecError(f"missing k (draft length or tree depth): method {method!r} on stack {_str(row, 'stack')!r} has "
                        f"no published default draft length")
    merged = {**dict(d.options), **options}
    tree = _int(row, "tree_size")
    shape = f"k = {d.k}" + (f", tree_size = {d.tree_size}" if tree is None and d.tree_size else "")
    extra = "".join(f", {k} = {v}" for k, v in d.options.items() if k not in options)
    return d.k, (tree if tree is not None else d.tree_size), merged, f"{shape}{extra}: the published default, {d.source}"


def row_scenario(row: dict) -> tuple[Scenario, list[str]]:
    """The scenario a measured row describes, and the defaults it assumed (the context default is
    fitted to the models later, in `predict_row_cycle`)."""
    assumed: list[str] = []
    method = _str(row, "method") or ""
    if method not in METHODS:
        raise SpecError(f"method {method!r} is not one of {', '.join(METHODS)}")
    for key in ("hardware", "target"):
        if _blank(row.get(key)):
            raise SpecError(f"missing {key}")
    role = _str(row, "role")
    if role is not None and role not in ROLES:
        raise SpecError(f"column 'role' = {role!r}: expected one of {', '.join(ROLES)} or empty")
    n_dev = _int(row, "n_devices")
    if n_dev is None:
        n_dev = 1
        assumed.append("n_devices = 1")
    b = _int(row, "batch_size")
    if b is None:
        raise SpecError("missing batch_size")
    ctx = _int(row, "context_len")
    if ctx is None:
        ctx = DEFAULT_CONTEXT_LEN  # fitted to the models' maximum in predict_row_cycle
    options = _options(row.get("drafter_options"))
    k = _int(row, "k")
    m = _int(row, "tree_size")
    if k is None:
        if FAMILIES[method].uses_k:
            k, m, options, label = _published_shape(method, row, options)
            assumed.append(label)
        else:
            k = 1
    elif k < 1 and FAMILIES[method].uses_k:
        raise SpecError(f"column 'k' = {k}: expected a draft length >= 1 (the row measured speculation)")
    if m is not None and not FAMILIES[method].uses_k:  # Lookahead's verify width given as a tree size
        from ..speculation.families import DrafterConfig, lookahead_width

        try:
            known = {k_: v for k_, v in options.items() if k_ in OPTION_KEYS}
            width = lookahead_width(DrafterConfig(method=method, **known))
        except (SpecError, TypeError) as exc:
            raise SpecError(f"column 'drafter_options': {exc}") from None
        if m != width:
            w_, n_, g_ = (options.get(f"lookahead_{x}", "default") for x in ("window", "ngram", "guesses"))
            raise SpecError(f"column 'tree_size' = {m}: expected Lookahead's verify width 1 + (W + G)(N - 1) = {width} "
                            f"for the row's W = {w_}, N = {n_}, G = {g_} (or empty)")
        assumed.append(f"tree_size = {m} read as Lookahead's verify width, which agrees with 1 + (W + G)(N - 1) of the "
                       f"row's W, N, G (that width is used)")
        m = None
    tau, alpha = _float(row, "tau"), _float(row, "alpha")
    if tau is None and alpha is None:
        raise SpecError("missing acceptance: give alpha or tau")
    measured = _float(row, "measured_speedup")
    if measured is not None and measured < MIN_SPEEDUP:
        raise SpecError(f"column 'measured_speedup' = {measured}: expected a speedup >= {MIN_SPEEDUP:g} (a speculating "
                        f"run 100 times slower than plain decoding is a unit or column mistake, as in a load sweep)")
    temperature = _float(row, "temperature")
    baseline = _float(row, "baseline_tokens_per_s")
    if baseline is not None:
        assumed.append(f"anchored to the measured baseline {baseline:g} tokens/s")
    s = Scenario(name=str(row.get("id") or "row"), hardware=_str(row, "hardware"), target=_str(row, "target"),
                 drafter=_str(row, "drafter"), method=method, k=k,
                 tree_size=m if (m is not None and m != k + 1) else None, alpha=alpha, tau=tau, batch_size=b,
                 context_len=ctx, tp=n_dev, stack=_str(row, "stack"), target_dtype=_str(row, "target_dtype"),
                 kv_cache_dtype=_str(row, "kv_cache_dtype"),
                 temperature=0.0 if temperature is None else temperature, allow_cross_tokenizer=True,
                 baseline_tokens_per_s=baseline,
                 sections={"drafter_options": options}, path=f"row {row.get('id')!r}",
                 given=frozenset())
    return s, assumed


PREDICTED_COLUMNS = ("predicted_speedup", "predicted_plain_step_s", "predicted_draft_s", "predicted_verify_s",
                     "predicted_cycle_s", "predicted_tokens_per_cycle")


def _fitted_context(s: Scenario, stack_profile) -> tuple[int, str]:
    """Replay's default context, DEFAULT_CONTEXT_LEN, lowered where a model holds fewer tokens: the
    largest L with L + the verify step's tokens within the target's and a draft model's max_context."""
    probe = resolve(s.with_overrides(context_len=1), stack_profile=stack_profile)
    q = probe.verify_q_len
    models = [(probe.target, "target")]
    if probe.drafter is not None and probe.drafter.drafter is not None:
        models.append((probe.drafter.drafter, "drafter"))
    limits = [(mdl.max_context - q, mdl, label) for mdl, label in models if mdl.max_context]
    if not limits or min(x[0] for x in limits) >= DEFAULT_CONTEXT_LEN:
        return DEFAULT_CONTEXT_LEN, f"context_len = {DEFAULT_CONTEXT_LEN} (replay's default)"
    cap, mdl, label = min(limits, key=lambda x: x[0])  # >= 1: the probe refuses a step as long as the model
    return cap, (f"context_len = {cap} (replay's default {DEFAULT_CONTEXT_LEN} lowered so that L + the verify step's "
                 f"{q} tokens fit the {label} {mdl.id!r}'s {mdl.max_context})")


def predict_row_cycle(row: dict, *, stack_profile=None, cost_source: str | None = None):
    """The Prediction of one measured row and the defaults it assumed. Raises SpecError with the
    reason when the row cannot be predicted. stack_profile: use this StackProfile for the row's stack
    (calibration varies a stack's figures); cost_source: what prices the passes (None: the default)."""
    s, assumed = row_scenario(row)
    if cost_source is not None:
        s = s.with_overrides(cost_source=cost_source)
    if _int(row, "context_len") is None:
        ctx, label = _fitted_context(s, stack_profile)
        s = s.with_overrides(context_len=ctx)
        assumed.append(label)
    try:
        op = resolve(s, stack_profile=stack_profile)
    except SpecError as exc:
        if s.tree_size is None or "verifies chains only" not in str(exc):
            raise
        op = resolve(s.with_overrides(tree_size=0), stack_profile=stack_profile)
        assumed.append(f"stack {op.deployment.stack_id} verifies chains: tree of {s.tree_size} run as a chain of {s.k}")
    for key in ("target_weight_format", "drafter_weight_format"):
        if key in op.sources:
            assumed.append(op.sources[key])
    p = predict(op)
    used = p.plain_step.compute_dtype
    if used != op.target.compute_dtype:
        assumed.append(f"{op.target.compute_dtype} matmuls run as {used} on {op.hardware.id} (it lists no "
                       f"{op.target.compute_dtype} figure)")
    return p, assumed


ASSUMPTION_KINDS = (("n_devices", "n_devices = "), ("context_len", "context_len = "),
                    ("published draft shape", "the published default"), ("checkpoint dtype", "checkpoint runs as"),
                    ("compute dtype", "matmuls run as"), ("lookahead width", "Lookahead's verify width"),
                    ("tree run as a chain", "verifies chains"), ("baseline anchor", "anchored to"))


def assumption_kind(text: str) -> str:
    for kind, marker in ASSUMPTION_KINDS:
        if marker in text:
            return kind
    return "other"


def method_group(method: str, options: dict) -> str:
    """The group a row's error is summarised in: the method, EAGLE by version (1, 2, 3), Medusa and
    Hydra together."""
    from ..speculation.families import DrafterConfig

    if method == "eagle":
        return f"eagle-{options.get('eagle_version', DrafterConfig.__dataclass_fields__['eagle_version'].default)}"
    if method in ("medusa", "hydra"):
        return "medusa/hydra"
    return method


def predict_row(row: dict) -> tuple[float, list[str]]:
    """Predicted speedup of one measured row, and the defaults it assumed."""
    p, assumed = predict_row_cycle(row)
    return float(p.cycle.speedup), assumed


def _check_columns(table: pd.DataFrame, where: str = "replay table") -> None:
    missing = [c for c in REQUIRED_COLUMNS if c not in table.columns]
    if missing:
        raise InputError(f"{where}: lacks columns {missing}; required: {', '.join(REQUIRED_COLUMNS)}")
    known = set(REQUIRED_COLUMNS) | set(OPTIONAL_COLUMNS)
    for c in table.columns:
        if c not in known and not str(c).startswith("x_"):
            close = difflib.get_close_matches(str(c), sorted(known), n=1, cutoff=0.6)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise InputError(f"{where}: unknown column {c!r}{hint}; known: {', '.join(sorted(known))} "
                             f"(prefix a column with x_ to carry it through untouched)")


def _quantile(values: np.ndarray, q: float) -> float:
    """numpy's linear quantile, with an infinite error (a measured speedup so near 0 that predicted /
    measured overflows) read as infinite: numpy interpolates b - (b - a)(1 - t), which is inf - inf = nan
    (with a RuntimeWarning) when b is infinite, where the value between a finite a and b = inf is inf."""
    v = np.sort(np.asarray(values, dtype=np.float64))
    pos = q * (v.size - 1)
    lo, hi = int(np.floor(pos)), int(np.ceil(pos))
    t = pos - lo
    if t == 0.0 or v[lo] == v[hi]:
        return float(v[lo])
    return float(v[lo] + (v[hi] - v[lo]) * t)


def replay(table: pd.DataFrame, *, where: str = "replay table", stack_for=None,
           cost_source: str | None = None) -> ReplayResult:
    """Predict every row of a measured table (see the module docstring). `where` names the table
    (its file) in the errors about its columns. stack_for: None, or a function of (position, row)
    giving the StackProfile to predict that row with (None: the catalog's), as leave-one-source-out
    replay (`leave_one_source_out`) varies a stack's fitted figures row by row."""
    _check_columns(table, where)
    cols = {c: [] for c in PREDICTED_COLUMNS}
    errs, reasons, assumptions, groups, priced = [], [], [], [], []
    kinds: dict[str, int] = {}
    n_assumed = 0
    for pos, row in enumerate(table.to_dict(orient="records")):
        try:
            groups.append(method_group(_str(row, "method") or "", _options(row.get("drafter_options"))))
        except SpecError:
            groups.append(_str(row, "method") or "")
        try:
            pred, assumed = predict_row_cycle(row, stack_profile=None if stack_for is None else stack_for(pos, row),
                                              cost_source=cost_source)
            meas = _float(row, "measured_speedup")
        except SpecError as exc:
            for c in cols:
                cols[c].append(np.nan)
            errs.append(np.nan)
            reasons.append(str(exc))
            assumptions.append("")
            priced.append("")
            continue
        priced.append(pred.plain_step.source)  # what priced the target's passes (cost.pricing)
        c = pred.cycle
        for name, v in zip(PREDICTED_COLUMNS, (c.speedup, c.target_step_time_s, c.draft_time_s, c.verify_time_s,
                                               c.cycle_time_s, c.tokens_per_cycle)):
            cols[name].append(float(v))
        p = float(c.speedup)
        errs.append(p / meas - 1.0 if meas else np.nan)
        reasons.append("" if meas else "no measured_speedup to compare with")
        assumptions.append("; ".join(assumed))
        n_assumed += bool(assumed)
        for text in assumed:
            k = assumption_kind(text)
            kinds[k] = kinds.get(k, 0) + 1
    out = table.copy()
    out["group"] = groups
    out["priced_by"] = priced
    if "role" not in out:
        out["role"] = ""
    out["role"] = out["role"].where(out["role"].notna(), "").astype(str).str.strip()
    for name, values in cols.items():
        out[name] = values
    out["relative_error"] = errs
    out["reason"] = reasons
    out["assumptions"] = assumptions
    ok = out["relative_error"].notna()
    abs_err = out.loc[ok, "relative_error"].abs()
    check = out.loc[ok & (out["role"] != "fit"), "relative_error"].abs()
    if len(abs_err):
        worst_i = abs_err.idxmax()
        stats = dict(median_relative_error=float(abs_err.median()), p90_relative_error=_quantile(abs_err.to_numpy(), 0.9),
                     worst_relative_error=float(abs_err.max()), worst_id=str(out.loc[worst_i, "id"]))
    else:
        stats = dict(median_relative_error=None, p90_relative_error=None, worst_relative_error=None, worst_id=None)
    return ReplayResult(table=out, n_rows=len(out), n_predicted=int(ok.sum()), **stats,
                        n_fit_rows=int((ok & (out["role"] == "fit")).sum()),
                        median_relative_error_check=float(check.median()) if len(check) else None,
                        n_assumed=n_assumed, assumption_counts=tuple(sorted(kinds.items())))


def read_replay_table(path) -> pd.DataFrame:
    """A replay CSV read with clear errors (a path, or one relative to the data folder)."""
    from pathlib import Path

    from ..specs.data import data_path
    from ..specs.tables import read_csv_table

    p = Path(path)
    if str(path).strip() and not p.exists() and not p.is_absolute():
        try:
            p = data_path(path, what="replay table")
        except SpecError:
            raise InputError(f"{path}: file not found") from None
    return read_csv_table(p, what="replay table (CSV)", dtype={"id": str}, infer=True)


def replay_file(path, *, cost_source: str | None = None) -> ReplayResult:
    return replay(read_replay_table(path), where=str(path), cost_source=cost_source)


def _shown(v) -> str:
    """A measured cell as the table prints it: two decimals, or the cell as given where it is no number (its
    row's note says why it was refused)."""
    if _blank(v):
        return ""
    try:
        return f"{float(v):.2f}"
    except (TypeError, ValueError):
        return str(v)[:8]


def format_replay(r: ReplayResult) -> str:
    lines = [f"{'id':<28} {'method':<14} {'measured':>8} {'predicted':>9} {'error':>7}  note"]
    for row in r.table.to_dict(orient="records"):
        meas = row.get("measured_speedup")
        pred = row["predicted_speedup"]
        err = row["relative_error"]
        note = row["reason"] or row["assumptions"]
        if row.get("role") == "fit":
            note = "[fit row] " + note
        lines.append(f"{str(row['id']):<28} {str(row['method']):<14} {_shown(meas):>8} "
                     f"{'' if _blank(pred) else f'{pred:.2f}':>9} {'' if _blank(err) else f'{err:+.0%}':>7}  {note}")
    if r.median_relative_error is None:
        lines.append(f"\n{r.n_rows} rows, none predictable")
    else:
        fits = r.n_fit_rows > 0
        for column in ("group", "method", "stack"):
            lines.append(f"\nby {column:<12} {'rows':>5} {'median |error|':>15} {'worst':>7}"
                         + (f" {'fit rows':>9} {'median, others':>15}" if fits else ""))
            for g in r.by(column):
                line = (f"  {g[column]:<20} {g['n_rows']:>3} {g['median_abs_error']:>15.1%} "
                        f"{g['worst_abs_error']:>7.0%}")
                if fits:
                    other = g["median_abs_error_check"]
                    line += f" {g['n_fit_rows']:>9} {'' if other is None else f'{other:.1%}':>15}"
                lines.append(line)
        sd = r.slowdowns()
        if sd["n_measured_below_1"]:
            lines.append(f"\nmeasured slowdowns (speedup < 1): {sd['n_measured_below_1']}, predicted below "
                         f"{sd['bar']:g}: {sd['n_predicted_below_bar']}"
                         + (f"; not: {', '.join(sd['missed'])}" if sd["missed"] else ""))
        if r.assumption_counts:
            lines.append(f"\nassumptions: {r.n_assumed} of {r.n_predicted} predicted rows assume something the row does "
                         f"not state: " + ", ".join(f"{k} {n}" for k, n in r.assumption_counts))
        refused = r.n_rows - r.n_predicted
        lines.append(f"\n{r.n_rows} rows, {r.n_predicted} predicted, {refused} refused: |relative error| median "
                     f"{r.median_relative_error:.1%}, p90 {r.p90_relative_error:.1%}, worst "
                     f"{r.worst_relative_error:.1%} ({r.worst_id})"
                     + (f"; over the {r.n_predicted - r.n_fit_rows} rows no figure was fitted to: median "
                        f"{r.median_relative_error_check:.1%}"
                        if fits and r.median_relative_error_check is not None else ""))
    return "\n".join(lines)


__all__ = ["replay", "replay_file", "predict_row", "predict_row_cycle", "row_scenario", "format_replay",
           "ReplayResult", "REQUIRED_COLUMNS", "OPTIONAL_COLUMNS", "PREDICTED_COLUMNS", "ROLES", "method_group",
           "assumption_kind", "draft_target_ratios", "RatioCheck", "leave_one_source_out", "scope_summary",
           "format_scopes", "REPLAY_FITS", "FittedFigure", "SERVING_STACK_PREFIXES"]


# ---- fitting one stack term to chosen rows -----------------------------------------------------------

HOST_TERMS = ("step_us", "per_seq_us", "per_token_us", "multi_gpu_step_us", "spec_per_seq_us",
              "spec_per_draft_token_us", "spec_per_draft_pass_us", "cycle_overhead_us",
              "drafting.head_pass_us", "drafting.masked_score_bytes")


@dataclass(frozen=True, slots=True, kw_only=True)
class TermFit:
    """One stack figure fitted so that the chosen rows' predicted speedups match their measured
    ones (least squares on log(predicted / measured)); the other rows' errors before and after."""

    stack: str
    term: str
    value_us: float
    before_us: float | None  # None: unset in the stack (a head pass then costs its op count)
    fit_ids: tuple
    table: pd.DataFrame  # id, measured, predicted before, predicted after, fitted?, source_key, fit_source?

    def with_errors(self) -> pd.DataFrame:
        """The table with error_before and error_after (predicted / measured - 1; NaN where the row
        has no measured speedup)."""
        t = self.table
        return t.assign(error_before=t["predicted_before"] / t["measured_speedup"] - 1,
                        error_after=t["predicted_after"] / t["measured_speedup"] - 1)

    def unseen(self) -> pd.DataFrame:
        """The rows of sources no fit row comes from (`sources.source_key`): a row of a fit row's
        source (a twin, a sibling setting of one thread) is not unseen though it was not fitted."""
        return self.table[~self.table["fit_source"]]


def _with_term(stack, term: str, value_us: float | None, *, cost_source: str | None = None):
    """The stack with `term` set (None: unset, for the drafting figures that may be absent). cost_source
    'measured' (`_term_scope`): a figure the stack keeps per source is set in its [measured] table, which
    applies only where the tables price the target; otherwise the top-level figure."""
    from dataclasses import replace as _replace

    if value_us is None:
        if not term.startswith("drafting.") or term == "drafting.masked_score_bytes":
            raise SpecError(f"term {term!r}: cannot be unset (only a [drafting] duration can)")
        return _replace(stack, drafting=_replace(stack.drafting, **{term[len("drafting."): -len("_us")] + "_s": None}))
    if term == "cycle_overhead_us":
        if cost_source == "measured":
            return _replace(stack, measured={**stack.measured, "cycle_overhead_s": value_us * 1e-6})
        return _replace(stack, cycle_overhead_s=value_us * 1e-6)
    if term == "drafting.masked_score_bytes":  # a figure in bytes: 'value_us' carries it as is
        return _replace(stack, drafting=_replace(stack.drafting, masked_score_bytes=value_us))
    if term.startswith("drafting."):
        attr = term[len("drafting."): -len("_us")] + "_s"
        return _replace(stack, drafting=_replace(stack.drafting, **{attr: value_us * 1e-6}))
    attr = term[: -len("_us")] + "_s"
    return _replace(stack, host=_replace(stack.host, **{attr: value_us * 1e-6}))


def _fit_measured(row: dict, *, what: str) -> float:
    """A fit row's measured speedup, which the figure is fitted to: a number > 0, else refused naming
    the row, the column and the value (a blank or 0 would end the fit in a division)."""
    v = row.get("measured_speedup")
    try:
        m = _float(row, "measured_speedup")
    except SpecError:
        m = None
    if m is None or m < MIN_SPEEDUP:
        shown = "" if _blank(v) else v
        raise field_error(f"{what}: fit row {str(row.get('id'))!r}", "measured_speedup", shown,
                          f"a measured speedup >= {MIN_SPEEDUP:g} (the figure is fitted to it)")
    return m


def _prepared(row: dict, stack, cost_source: str | None) -> dict:
    """The row with replay's default context filled in where it states none: the default depends on
    the models and the verify width, never on a stack figure, so a fit works it out once, not at every
    value it tries. A row the probe refuses is kept as it is (predicting it refuses it again)."""
    if _int(row, "context_len") is not None:
        return row
    try:
        s, _ = row_scenario(row)
        if cost_source is not None:
            s = s.with_overrides(cost_source=cost_source)
        ctx, _ = _fitted_context(s, stack)
    except SpecError:
        return row
    return {**row, "context_len": ctx}


PER_SOURCE_TERMS = ("cycle_overhead_us",)  # kept per source in a stack file (specs.stacks [measured])


def _term_scope(rows: dict, fit_ids, stack, term: str, cost_source: str | None) -> str:
    """Which copy of `term` a fit on rows `fit_ids` sets: 'measured' (the stack's [measured] figure) where
    the tables price every fit row's target, 'roofline' (the top-level figure) where none; fit rows priced
    by both are refused, since one figure cannot stand for two sources."""
    from ..cost.pricing import source_for

    if term not in PER_SOURCE_TERMS or cost_source == "roofline":
        return "roofline"
    kinds = {}
    for i in fit_ids:
        try:
            op = predict_row_cycle(_prepared(rows[i], stack, cost_source), stack_profile=stack,
                                   cost_source=cost_source)[0].point
        except SpecError:
            continue
        kinds[i] = source_for(op.target, op.deployment, target=True).kind
    if len(set(kinds.values())) > 1:
        on = sorted(i for i, k in kinds.items() if k == "measured")
        raise SpecError(f"{term}: fit rows priced by the measured tables ({', '.join(on)}) and by the roofline (the "
                        "others): fit them apart, or with --cost-source roofline")
    return "measured" if set(kinds.values()) == {"measured"} else "roofline"


def _fit_term_value(rows: dict, *, stack, term: str, fit_ids: tuple, cost_source: str | None, what: str) -> float:
    """The value of `term` (its unit) that fits the rows `fit_ids` of `rows` (id -> row): least squares
    on log(predicted / measured) over those rows only."""
    from scipy.optimize import minimize_scalar

    measured = {i: _fit_measured(rows[i], what=what) for i in fit_ids}
    prepared = {i: _prepared(rows[i], stack, cost_source) for i in fit_ids}
    scope = _term_scope(rows, fit_ids, stack, term, cost_source)

    def loss(value_us):
        patched = _with_term(stack, term, value_us, cost_source=scope)
        total = 0.0
        for i in fit_ids:
            try:
                s = float(predict_row_cycle(prepared[i], stack_profile=patched,
                                            cost_source=cost_source)[0].cycle.speedup)
            except SpecError:
                s = float("nan")
            total += float(np.log(s / measured[i]) ** 2)
        return total

    res = minimize_scalar(loss, bounds=(0.0, 1e5), method="bounded", options={"xatol": 1e-3})
    return float(res.x)


def fit_stack_term(table: pd.DataFrame, *, stack_id: str, term: str, fit_ids, stack=None,
                   cost_source: str | None = None) -> TermFit:
    """Fit `term` of stack `stack_id` on the rows `fit_ids`, then predict every row of the table
    that uses that stack with the fitted value. The stack file is not changed: the value is
    reported, to be written into the stack's [host] table with this fit as its source. stack: the
    StackProfile to start from (default the catalog's `stack_id`). The table marks each row's source
    (`sources.source_key`) and whether a fit row shares it: only the other rows are unseen. A fit
    row's measured_speedup must be a number > 0; another row's may be blank (its errors are then NaN)."""
    from ..specs.stacks import load_stack
    from .sources import source_key

    if term not in HOST_TERMS:
        raise SpecError(f"--term {term!r}: expected one of {', '.join(HOST_TERMS)}")
    _check_columns(table)
    stack = load_stack(stack_id) if stack is None else stack
    rows = [r for r in table.to_dict(orient="records") if _str(r, "stack") == stack_id]
    by_id = {str(r["id"]): r for r in rows}
    fit_ids = tuple(fit_ids)
    missing = [i for i in fit_ids if i not in by_id]
    if missing:
        raise SpecError(f"--rows: {missing} are not rows of stack {stack_id!r} in the table")

    scope = _term_scope(by_id, fit_ids, stack, term, cost_source)

    def speedups(value_us):
        patched = stack if value_us is None else _with_term(stack, term, value_us, cost_source=scope)
        out = {}
        for r in rows:
            try:
                out[str(r["id"])] = float(predict_row_cycle(r, stack_profile=patched,
                                                            cost_source=cost_source)[0].cycle.speedup)
            except SpecError:
                out[str(r["id"])] = float("nan")
        return out

    value_us = _fit_term_value(by_id, stack=stack, term=term, fit_ids=fit_ids, cost_source=cost_source,
                               what=f"stack {stack_id!r} {term}")
    measured = {}
    for i, r in by_id.items():  # a row the fit does not use may lack a measurement (or hold a refused one)
        try:
            m = _float(r, "measured_speedup")
        except SpecError:
            m = None
        measured[i] = m if m is not None and m >= MIN_SPEEDUP else float("nan")
    before_us = _catalog_value(stack, term, scope)  # None: a [drafting] duration the stack leaves unset
    before, after = speedups(before_us), speedups(value_us)
    keys = {i: source_key(r.get("source"), fallback=i) for i, r in by_id.items()}
    fit_keys = {keys[i] for i in fit_ids}
    out = pd.DataFrame({"id": list(measured), "measured_speedup": list(measured.values()),
                        "predicted_before": [before[i] for i in measured], "predicted_after": [after[i] for i in measured],
                        "fitted_on": [i in fit_ids for i in measured], "source_key": [keys[i] for i in measured],
                        "fit_source": [keys[i] in fit_keys for i in measured]})
    return TermFit(stack=stack_id, term=term, value_us=value_us, before_us=before_us, fit_ids=fit_ids, table=out)


# ---- leave one source out ------------------------------------------------------------------------

# Stack ids whose rows are the serving stacks' (vLLM, SGLang, TensorRT-LLM, and the measured
# deployments' profiles derived from them, such as sglang-specforge and vllm-v0).
SERVING_STACK_PREFIXES = ("vllm", "sglang", "trtllm")


@dataclass(frozen=True, slots=True, kw_only=True)
class FittedFigure:
    """A catalog figure fitted on rows of the shipped replay set (`fit_stack_term`): its stack and
    term, the rows it was fitted on, and the value it takes where no fit row may be used (`prior`, in
    the term's unit; None: unset), with where that value comes from."""

    stack: str
    term: str
    fit_ids: tuple
    prior: float | None
    prior_source: str


# The figures of stacks/*.toml fitted on rows of data/published/speculative_decoding.csv (each
# stack file's source for the term names the fit; tests/test_published_set.py checks the two agree).
REPLAY_FITS = (
    FittedFigure(stack="hf-eager", term="drafting.head_pass_us",
                 fit_ids=("specbench-a100-sxm-80gb-v7b-eagle", "specbench-a100-sxm-80gb-v13b-eagle",
                          "specbench-a100-sxm-80gb-v33b-eagle", "specbench-rtx-3090-v7b-eagle"),
                 prior=None, prior_source="unset: a head pass costs its family's op count x eager_op_us, the code's "
                                          "figure"),
    FittedFigure(stack="vllm", term="cycle_overhead_us",
                 fit_ids=tuple(f"vllm-issue20780-llama3.1-8b-eagle1-k{k}-b1" for k in range(2, 8)),
                 prior=300.0, prior_source="the estimate the fit replaced (stacks/vllm.toml's source)"),
    FittedFigure(stack="sglang-specforge", term="cycle_overhead_us",
                 fit_ids=("angelslim-i163-h100x4-qwen3-30b-a3b-eagle3-s3-t3-d4-b1",
                          "angelslim-i163-h100x4-qwen3-30b-a3b-eagle3-s3-t2-d8-b1",
                          "angelslim-i163-h100x4-qwen3-30b-a3b-eagle3-s4-t4-d16-b1",
                          "angelslim-i163-h100x4-qwen3-30b-a3b-eagle3-s7-t10-d64-b1"),
                 prior=200.0, prior_source="the sglang stack's estimate (stacks/sglang.toml), which the profile "
                                           "copies in everything else"),
)


def _catalog_value(stack, term: str, scope: str = "roofline"):
    """The stack's figure for `term` (scope 'measured': its [measured] copy where it keeps one)."""
    if term == "drafting.masked_score_bytes":
        return stack.drafting.masked_score_bytes
    if term.startswith("drafting."):
        v = getattr(stack.drafting, term[len("drafting."): -len("_us")] + "_s")
        return None if v is None else v * 1e6
    if term == "cycle_overhead_us":
        return stack.measured.get("cycle_overhead_s", stack.cycle_overhead_s) * 1e6 if scope == "measured" \
            else stack.cycle_overhead_s * 1e6
    return getattr(stack.host, term[: -len("_us")] + "_s") * 1e6


def leave_one_source_out(table: pd.DataFrame, *, fits=REPLAY_FITS, where: str = "replay table",
                         cost_source: str | None = None) -> ReplayResult:
    """Replay every row with each fitted figure fitted on no row of the row's source.

    The rows are grouped by source (`sources.source_key` of their `source` text, the id where it is
    empty: Spec-Bench's leaderboard at every commit is one source, each GitHub issue or PR one). For
    each group and each figure in `fits`: a figure whose fit rows are all outside the group keeps its
    catalog value; one with fit rows inside and outside is refitted (`fit_stack_term`) on those
    outside; one whose fit rows all lie inside takes its `prior`. The group's rows are then predicted
    with those stacks. The result's table adds `source_key` and `left_out` (what each figure was for
    that row); its error statistics are all out of source (no row is a fit row here: `role` is kept
    as the table gives it, for reference)."""
    from ..specs.stacks import load_stack
    from .sources import source_key

    _check_columns(table, where)
    records = table.to_dict(orient="records")
    ids = [str(r.get("id")) for r in records]
    keys = [source_key(r.get("source"), fallback=i) for r, i in zip(records, ids)]
    key_of = dict(zip(ids, keys))
    for f in fits:
        missing = [i for i in f.fit_ids if i not in key_of]
        if missing:
            raise SpecError(f"fitted figure {f.stack} {f.term}: fit rows {missing} are not rows of the {where}")
    by_id = dict(zip(ids, records))
    for f in fits:  # every figure's fit rows checked before any fit: one refusal, not a failure minutes in
        for i in f.fit_ids:
            _fit_measured(by_id[i], what=f"{where}: fitted figure {f.stack} {f.term}")
    # A refit depends only on the figure, the fit rows left and the figures already set on its stack:
    # sources that leave the same fit rows (every source but the fit rows' own, or each row its own
    # source when the text is blank) share one fit.
    refits: dict = {}
    scopes: dict = {}
    catalog: dict = {}
    plans: dict = {}
    for key in dict.fromkeys(keys):
        stacks: dict = {}
        applied: dict = {}
        notes: list[str] = []
        for f in fits:
            inside = [i for i in f.fit_ids if key_of[i] == key]
            if not inside:
                continue
            if f.stack not in catalog:
                catalog[f.stack] = load_stack(f.stack)
            base = stacks.get(f.stack) or catalog[f.stack]
            outside = tuple(i for i in f.fit_ids if key_of[i] != key)
            if outside:
                memo = (f.stack, f.term, outside, tuple(applied.get(f.stack, ())))
                if memo not in refits:
                    refits[memo] = _fit_term_value(by_id, stack=base, term=f.term, fit_ids=outside,
                                                   cost_source=cost_source,
                                                   what=f"{where}: fitted figure {f.stack} {f.term}")
                value = refits[memo]
                notes.append(f"{f.stack} {f.term} refitted on the {len(outside)} fit row(s) of other sources: {value:.4g}")
            else:
                value = f.prior
                notes.append(f"{f.stack} {f.term} = {'unset' if value is None else f'{value:g}'} ({f.prior_source}; "
                             f"every fit row is of this source)")
            at = (f.stack, f.term, tuple(applied.get(f.stack, ())))  # the same for every source: asked once
            if at not in scopes:
                scopes[at] = _term_scope(by_id, f.fit_ids, base, f.term, cost_source)
            stacks[f.stack] = _with_term(base, f.term, value, cost_source=scopes[at])
            applied.setdefault(f.stack, []).append((f.term, value))
        plans[key] = (stacks, "; ".join(notes))

    def stack_for(pos, row):
        return plans[keys[pos]][0].get(_str(row, "stack"))

    r = replay(table, where=where, stack_for=stack_for, cost_source=cost_source)
    out = r.table.copy()
    out["source_key"] = keys
    out["left_out"] = [plans[k][1] for k in keys]
    from dataclasses import replace as _replace

    return _replace(r, table=out, n_fit_rows=0, median_relative_error_check=r.median_relative_error)


def scope_summary(r: ReplayResult) -> list[dict]:
    """Median |relative error| and measured slowdowns over the predicted rows, the serving stacks'
    rows (stack id starting vllm, sglang or trtllm) and the rows at batch > 1."""
    t = r.table[r.table["relative_error"].notna()]
    stack = t["stack"].map(lambda v: "" if _blank(v) else str(v))  # an all-blank column reads as float NaN
    scopes = (("all rows", np.ones(len(t), bool)),
              ("serving stacks (vLLM, SGLang, TensorRT-LLM)", stack.str.startswith(SERVING_STACK_PREFIXES).to_numpy()),
              ("batch > 1", (pd.to_numeric(t["batch_size"], errors="coerce") > 1).to_numpy()))
    out = []
    for name, mask in scopes:
        g = t[mask]
        meas = pd.to_numeric(g["measured_speedup"], errors="coerce")
        slow = g[meas < 1.0]
        missed = slow[slow["predicted_speedup"] >= SLOWDOWN_BAR]
        out.append({"scope": name, "n_rows": int(len(g)),
                    "median_abs_error": float(g["relative_error"].abs().median()) if len(g) else None,
                    "n_measured_below_1": int(len(slow)), "missed": missed["id"].astype(str).tolist()})
    return out


def format_scopes(r: ReplayResult) -> str:
    lines = []
    for sc in scope_summary(r):
        med = "-" if sc["median_abs_error"] is None else f"{sc['median_abs_error']:.1%}"
        lines.append(f"  {sc['scope']:<46} {sc['n_rows']:>4} rows  median |error| {med:>6}  slowdowns "
                     f"{sc['n_measured_below_1']}, predicted >= {SLOWDOWN_BAR:g}: {len(sc['missed'])}"
                     + (f" ({', '.join(sc['missed'])})" if sc["missed"] else ""))
    return "\n".join(lines)


# ---- draft/target step-cost ratios of published pairs -------------------------------------------------

@dataclass(frozen=True, slots=True, kw_only=True)
class RatioCheck:
    """Published draft and target speeds on one deployment against the model's step costs there."""

    table: pd.DataFrame  # pair, published_ratio, model_ratio, relative_error, the modelled speeds

    @property
    def median_abs_error(self) -> float:
        return float(self.table["relative_error"].abs().median())


def draft_target_ratios(path="published/draft_target_ratios.csv") -> RatioCheck:
    """For each published pair (a CSV of `data/published/draft_target_ratios.csv`'s columns: the two
    models, their formats, the deployment, and each model's own published decoding speed at batch 1),
    the published step-cost ratio c = t_draft / t_target = v_target / v_draft against the model's: one
    plain decoding step of each model on the same deployment (`cost.pricing.target_step_time`,
    the stack's per-pass cost included), the draft at the target's tensor-parallel degree."""
    from ..cost.deployment import Deployment
    from ..cost.pricing import target_step_time
    from ..specs.data import data_path
    from ..specs.hardware import load_hardware
    from ..specs.models import load_model
    from ..specs.stacks import load_stack
    from ..specs.tables import read_csv_table

    from pathlib import Path

    p = Path(path)
    if not p.exists():
        p = data_path(str(path), what="draft/target ratio table")
    t = read_csv_table(p, what="draft/target ratio table (CSV)", dtype={"pair": str}, infer=True)
    out = []
    for r in t.to_dict(orient="records"):
        hw = load_hardware(r["hardware"])
        stack = load_stack(r["stack"]) if not _blank(r.get("stack")) else None
        dep = Deployment.from_stack(hw, stack, n_devices=int(r["n_devices"]))
        models = []
        for key in ("drafter", "target"):
            m = load_model(r[key])
            if not _blank(r.get(f"{key}_dtype")):
                m = m.with_weight_format(str(r[f"{key}_dtype"]))
            models.append(m)
        steps = [float(target_step_time(m, dep, batch_size=1, q_len=1, context_len=int(r["context_len"]))) for m in models]
        published = float(r["target_tokens_per_s"]) / float(r["drafter_tokens_per_s"])
        model = steps[0] / steps[1]
        out.append({"pair": r["pair"], "hardware": r["hardware"], "n_devices": int(r["n_devices"]),
                    "stack": r.get("stack") if not _blank(r.get("stack")) else "(none)",
                    "published_ratio": published, "model_ratio": model, "relative_error": model / published - 1.0,
                    "drafter_tokens_per_s": float(r["drafter_tokens_per_s"]), "model_drafter_tokens_per_s": 1.0 / steps[0],
                    "target_tokens_per_s": float(r["target_tokens_per_s"]), "model_target_tokens_per_s": 1.0 / steps[1],
                    "recalled": "RECALLED" in str(r.get("notes") or "")})
    return RatioCheck(table=pd.DataFrame(out))
