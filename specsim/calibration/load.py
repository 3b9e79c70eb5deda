"""A deployment's load sweep as specsim reads it: one row per measured point, grouped into sweeps.

The table (CSV, `specsim calibrate load FILE`; the importers in `load_import` produce the same):

    sweep, stack, hardware, n_devices, target, target_dtype, method, drafter, k, tree_size,
    drafter_options, load_kind, load, prompt_tokens, output_tokens, context_len, speculative,
    tpot_s, e2e_latency_s, output_tokens_per_s, measured_speedup, tau, alpha, role, source

optional: stack_version (the stack's release, for its load regimes), kv_cache_dtype (the KV cache's
dtype where the deployment's differs from the target file's, e.g. fp8), n_requests (requests the
benchmark sent at that load; default 4 a user, 100 at a rate), n_users (the users a concurrency row's
closed loop really had, when the benchmark sent fewer independent prompts than its concurrency: a
multi-turn benchmark of 20 questions at concurrency 64 keeps 20 in flight; default `load`),
max_num_seqs (the most sequences the launch let the engine run at once: vLLM's --max-num-seqs, SGLang's
--max-running-requests; empty: the launch left it at the engine's default, and a stack's
`spec_max_running` load regime may lower it for a speculative row: SGLang runs EAGLE and NGRAM 48 at a
time unless the launch sets it), draft_frac (a speculative row's share of sequence-steps in which the
proposer drafted at all: vLLM's num_drafts over the decode steps, where its n-gram lookup found no match
in the rest; empty: every step drafted, or the sweep's drafter_options say; with it, tau and alpha
describe the steps that drafted, as vLLM's counters do), temperature, notes, and any
`x_` column (carried through untouched). Rows of one `sweep` share its configuration (stack,
version, hardware, devices, target and dtype, the load kind, and for its speculative rows the
method, drafter, K, tree and options; a plain row may leave the drafting columns empty).

- load_kind: `concurrency` (a closed loop of `load` users, think time 0), `rate` (Poisson arrivals
  at `load` requests/s), `batch` (decode at a fixed batch of `load` sequences and `context_len`);
  concurrency and rate rows need prompt_tokens and output_tokens, batch rows context_len.
- speculative: 0 (plain decoding) or 1; a row gives at least one metric (tpot_s, e2e_latency_s,
  output_tokens_per_s), or, speculative, measured_speedup against plain decoding at the same load.
- tau (tokens per verify, bonus included) or alpha may be empty: the fit then finds the acceptance.
- role: `fit` (the calibration may use it) or `check` (it only checks the calibration).

Every bad cell is refused in one line naming the file, its line, the column, the value and what
was expected (`specs.tables`).
"""
from __future__ import annotations

import difflib
import math
from collections import Counter
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping

import pandas as pd

from ..errors import InputError, SpecError
from ..specs.regimes import check_version
from ..specs.serving_tables import MAX_NUM_SEQS
from ..specs.tables import numeric_column, read_csv_table, require_columns

COLUMNS = ("sweep", "stack", "hardware", "n_devices", "target", "target_dtype", "method", "drafter", "k", "tree_size",
           "drafter_options", "load_kind", "load", "prompt_tokens", "output_tokens", "context_len", "speculative",
           "tpot_s", "e2e_latency_s", "output_tokens_per_s", "measured_speedup", "tau", "alpha", "role", "source")
OPTIONAL = ("stack_version", "kv_cache_dtype", "n_requests", "n_users", "max_num_seqs", "draft_frac", "temperature",
            "notes")
LOAD_KINDS = ("concurrency", "rate", "batch")
ROLES = ("fit", "check")
METRICS = ("output_tokens_per_s", "tpot_s", "e2e_latency_s")  # preference order for a speedup
# configuration every row of a sweep shares, and what drafting rows share besides
SWEEP_KEYS = ("stack", "stack_version", "hardware", "n_devices", "target", "target_dtype", "kv_cache_dtype", "load_kind",
              "temperature")
DRAFT_KEYS = ("method", "drafter", "k", "tree_size", "drafter_options")
DEFAULT_REQUESTS_PER_USER = 4
DEFAULT_RATE_REQUESTS = 100
# Size limits. Every row is simulated (a serving run of its load: tenths of a second to seconds), the
# fit re-runs or re-times each, so a table far past what a benchmark campaign measures would run for
# hours; the shipped sweeps hold 8 to 14 rows each, 92 in all.
MAX_ROWS = 1000  # rows in one table (or imported results in one run)
MAX_SWEEP_ROWS = 100  # rows in one sweep (100 loads, each plain and speculative, is a dense curve)
# Plausibility bounds on the metrics: past them the figure is a unit mistake (ms written as s, a count
# as a rate), and a fit to it would move the device's scale to its bound and report nonsense.
MIN_TIME_S, MAX_TIME_S = 1e-6, 1e6  # tpot_s, e2e_latency_s: no forward pass takes under a microsecond, no
#                                    benchmark request waits 11 days
MIN_RATE_PER_S, MAX_RATE_PER_S = 1e-6, 1e9  # output_tokens_per_s: a billion tokens a second is far past any
#                                    deployment (the shipped sweeps peak near 10^4)
MIN_SPEEDUP = 0.01  # measured_speedup: a speculating run 100 times slower than plain decoding is a unit or
#                     column mistake (a drafter as large as the target at K = 64 costs at most 65 passes a token)


@dataclass(frozen=True, slots=True, kw_only=True)
class LoadRow:
    """One measured point (SI units; None where the table left the cell empty)."""

    sweep: str
    line: int
    load: float
    speculative: bool
    role: str
    prompt_tokens: int | None = None
    output_tokens: int | None = None
    context_len: int | None = None
    n_requests: int | None = None
    n_users: int | None = None
    max_num_seqs: int | None = None
    draft_frac: float | None = None
    tpot_s: float | None = None
    e2e_latency_s: float | None = None
    output_tokens_per_s: float | None = None
    measured_speedup: float | None = None
    tau: float | None = None
    alpha: float | None = None
    source: str = ""
    notes: str = ""
    extra: Mapping[str, str] = field(default_factory=dict)

    def metric(self, name: str) -> float | None:
        return getattr(self, name)

    @property
    def metrics(self) -> dict[str, float]:
        return {m: getattr(self, m) for m in METRICS if getattr(self, m) is not None}


@dataclass(frozen=True, slots=True, kw_only=True)
class LoadSweep:
    """The rows of one sweep and the configuration they share."""

    name: str
    stack: str
    hardware: str
    n_devices: int
    target: str
    load_kind: str
    rows: tuple
    file: str = ""
    stack_version: str | None = None
    target_dtype: str | None = None
    kv_cache_dtype: str | None = None
    cost_source: str = "auto"  # what prices the passes the rows are simulated with (not a column: calibrate load's flag)
    method: str = "none"
    drafter: str | None = None
    k: int = 0
    tree_size: int | None = None
    drafter_options: Mapping[str, object] = field(default_factory=dict)
    temperature: float = 0.0

    def plain(self, role: str | None = None) -> list[LoadRow]:
        return [r for r in self.rows if not r.speculative and (role is None or r.role == role)]

    def speculative(self, role: str | None = None) -> list[LoadRow]:
        return [r for r in self.rows if r.speculative and (role is None or r.role == role)]

    def plain_at(self, load: float) -> LoadRow | None:
        for r in self.rows:
            if not r.speculative and math.isclose(r.load, load, rel_tol=1e-9):
                return r
        return None

    def measured_speedup(self, row: LoadRow) -> tuple[float | None, str | None]:
        """(speedup, the metric it came from) of a speculative row: as published, else the ratio of
        its metric to the plain row's at the same load (throughput spec/plain; latencies plain/spec)."""
        if row.measured_speedup is not None:
            return row.measured_speedup, "measured_speedup"
        base = self.plain_at(row.load)
        if base is None:
            return None, None
        for m in METRICS:
            a, b = row.metric(m), base.metric(m)
            if a is not None and b is not None:
                return (a / b if m == "output_tokens_per_s" else b / a), m
        return None, None

    @property
    def loads(self) -> list[float]:
        return sorted({r.load for r in self.rows})

    def load_range(self, rows=None) -> tuple[float, float]:
        ls = [r.load for r in (rows if rows is not None else self.rows)]
        return min(ls), max(ls)


def _cell(value) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    return str(value).strip()


def _options(text: str, *, where: str) -> dict:
    """'key=value;key=value' -> {key: int | float | str}."""
    out: dict = {}
    if not text:
        return out
    for part in text.split(";"):
        part = part.strip()
        if not part:
            continue
        if "=" not in part:
            raise SpecError(f"{where}: column 'drafter_options' = {text!r}: expected key=value;key=value")
        k, v = (x.strip() for x in part.split("=", 1))
        for conv in (int, float):
            try:
                out[k] = conv(v)
                break
            except ValueError:
                continue
        else:
            out[k] = v
    return out


def sweeps_from_table(table: pd.DataFrame, *, where: str) -> list[LoadSweep]:
    """The sweeps of a load-sweep table (see the module docstring), validated."""
    require_columns(table, COLUMNS, where=where, what="a load-sweep table: `specsim calibrate load --help`")
    known = set(COLUMNS) | set(OPTIONAL)
    for c in table.columns:
        if c not in known and not c.startswith("x_"):
            close = difflib.get_close_matches(c, sorted(known), n=1)
            raise InputError(f"{where}: line 1: unknown column {c!r}" + (f" (did you mean {close[0]!r}?)" if close else "")
                             + "; extra columns must start with x_")
    if len(table) > MAX_ROWS:
        raise InputError(f"{where}: {len(table)} rows: expected at most {MAX_ROWS} in one table (each row is "
                         f"simulated, tenths of a second to seconds each; split the table and calibrate it in parts)")
    t = table.copy()
    for c in OPTIONAL:
        if c not in t.columns:
            t[c] = ""
    num = {}
    num["n_devices"] = numeric_column(t, "n_devices", where=where, integer=True, minimum=1)
    num["load"] = numeric_column(t, "load", where=where, minimum=0, exclusive_minimum=True)
    num["speculative"] = numeric_column(t, "speculative", where=where, integer=True, minimum=0, maximum=1,
                                        expected="0 (plain decoding) or 1 (speculative)")
    for c in ("prompt_tokens", "output_tokens", "n_requests", "n_users"):
        num[c] = numeric_column(t, c, where=where, integer=True, minimum=1, blank=True)
    num["max_num_seqs"] = numeric_column(t, "max_num_seqs", where=where, integer=True, minimum=1, maximum=MAX_NUM_SEQS,
                                         blank=True, expected=f"the launch's running-sequence limit, an integer in "
                                                              f"[1, {MAX_NUM_SEQS}], or empty (the engine's default)")
    num["context_len"] = numeric_column(t, "context_len", where=where, integer=True, minimum=0, blank=True)
    num["k"] = numeric_column(t, "k", where=where, integer=True, minimum=0, maximum=64, blank=True)
    num["tree_size"] = numeric_column(t, "tree_size", where=where, integer=True, minimum=1, blank=True)
    for c in ("tpot_s", "e2e_latency_s"):
        num[c] = numeric_column(t, c, where=where, minimum=MIN_TIME_S, maximum=MAX_TIME_S, blank=True,
                                expected=f"seconds in [{MIN_TIME_S:g}, {MAX_TIME_S:g}] (past them a unit mistake), "
                                         f"or empty")
    num["output_tokens_per_s"] = numeric_column(
        t, "output_tokens_per_s", where=where, minimum=MIN_RATE_PER_S, maximum=MAX_RATE_PER_S, blank=True,
        expected=f"tokens a second in [{MIN_RATE_PER_S:g}, {MAX_RATE_PER_S:g}] (past them a unit mistake), or empty")
    num["measured_speedup"] = numeric_column(t, "measured_speedup", where=where, minimum=MIN_SPEEDUP, blank=True,
                                             expected=f"a speedup >= {MIN_SPEEDUP:g} (and at most K + 1), or empty")
    num["tau"] = numeric_column(t, "tau", where=where, minimum=1, blank=True,
                                expected="mean tokens per verify >= 1 (the bonus token included), or empty")
    num["alpha"] = numeric_column(t, "alpha", where=where, minimum=0, maximum=1, blank=True)
    num["draft_frac"] = numeric_column(t, "draft_frac", where=where, minimum=0, maximum=1, exclusive_minimum=True,
                                       blank=True, expected="the share of sequence-steps that drafted, in (0, 1], "
                                                            "or empty")
    num["temperature"] = numeric_column(t, "temperature", where=where, minimum=0, blank=True)

    def val(c, i):
        v = float(num[c].iloc[i])
        return None if math.isnan(v) else v

    groups: dict[str, list[int]] = {}
    for i in range(len(t)):
        line = i + 2
        name = _cell(t["sweep"].iloc[i])
        if not name:
            raise SpecError(f"{where}: line {line}: column 'sweep' is empty: expected the sweep's name")
        for c in ("stack", "hardware", "target", "source"):
            if not _cell(t[c].iloc[i]):
                raise SpecError(f"{where}: line {line}: column {c!r} is empty: expected a value")
        kind = _cell(t["load_kind"].iloc[i])
        if kind not in LOAD_KINDS:
            raise SpecError(f"{where}: line {line}: column 'load_kind' = {kind!r}: expected one of {', '.join(LOAD_KINDS)}")
        role = _cell(t["role"].iloc[i])
        if role not in ROLES:
            raise SpecError(f"{where}: line {line}: column 'role' = {role!r}: expected fit or check")
        if _cell(t["stack_version"].iloc[i]):  # one release (specs.regimes), not 'latest' or a range
            check_version(f"{where}: line {line}", "stack_version", _cell(t["stack_version"].iloc[i]))
        load = float(num["load"].iloc[i])
        if kind in ("concurrency", "batch") and load != int(load):
            raise SpecError(f"{where}: line {line}: column 'load' = {t['load'].iloc[i]!r}: expected a whole number "
                            f"of {'users' if kind == 'concurrency' else 'sequences'} for load_kind = {kind}")
        if kind in ("concurrency", "rate"):
            for c in ("prompt_tokens", "output_tokens"):
                if val(c, i) is None:
                    raise SpecError(f"{where}: line {line}: column {c!r} is empty: expected tokens per request for "
                                    f"load_kind = {kind} (the serving simulator runs those lengths)")
        if kind in ("concurrency", "rate") and val("output_tokens", i) < 2:
            raise SpecError(f"{where}: line {line}: column 'output_tokens' = {t['output_tokens'].iloc[i]!r}: expected "
                            f"at least 2 for load_kind = {kind} (a request's first token comes from its prefill: with "
                            f"one, no decode step runs, and decode steps are what the calibration fits)")
        if kind == "batch" and val("context_len", i) is None:
            raise SpecError(f"{where}: line {line}: column 'context_len' is empty: expected the cached tokens per "
                            f"sequence for load_kind = batch")
        if val("n_users", i) is not None:
            if kind != "concurrency" or val("n_users", i) > load:
                raise SpecError(f"{where}: line {line}: column 'n_users' = {t['n_users'].iloc[i]!r}: expected at most "
                                f"the load for load_kind = concurrency (empty otherwise)")
            if val("n_requests", i) is not None and val("n_users", i) > val("n_requests", i):
                raise SpecError(f"{where}: line {line}: column 'n_users' = {t['n_users'].iloc[i]!r}: expected at most "
                                f"n_requests = {int(val('n_requests', i))}")
        spec = bool(val("speculative", i))
        has_metric = any(val(c, i) is not None for c in METRICS)
        if not has_metric and not (spec and val("measured_speedup", i) is not None):
            raise SpecError(f"{where}: line {line}: no metric: expected tpot_s, e2e_latency_s or output_tokens_per_s"
                            + (", or measured_speedup" if spec else " (a plain row has no speedup)"))
        if val("draft_frac", i) is not None and kind == "batch":
            raise SpecError(f"{where}: line {line}: column 'draft_frac' = {t['draft_frac'].iloc[i]!r}: expected empty "
                            f"for load_kind = batch (a batch row is priced as one iteration of its sequences; the "
                            f"share that drafts is simulated for concurrency and rate rows)")
        if val("draft_frac", i) is not None and not spec:
            raise SpecError(f"{where}: line {line}: column 'draft_frac' = {t['draft_frac'].iloc[i]!r}: expected "
                            f"empty on a plain row (speculative = 0)")
        if not spec:
            for c in ("measured_speedup", "tau", "alpha"):  # a plain run has no speedup and no acceptance
                if val(c, i) is not None:
                    raise SpecError(f"{where}: line {line}: column {c!r} = {t[c].iloc[i]!r}: expected empty on a "
                                    f"plain row (speculative = 0)")
        if spec:
            m = _cell(t["method"].iloc[i])
            if not m or m == "none":
                raise SpecError(f"{where}: line {line}: column 'method' = {m!r}: expected the drafter family of a "
                                f"speculative row")
            if val("k", i) is None:
                raise SpecError(f"{where}: line {line}: column 'k' is empty: expected the draft length (a tree's depth)")
            k = int(val("k", i))
            if k < 1:
                raise SpecError(f"{where}: line {line}: column 'k' = {t['k'].iloc[i]!r}: expected a draft length >= 1 "
                                f"on a speculative row")
            if val("tau", i) is not None and val("alpha", i) is not None:
                raise SpecError(f"{where}: line {line}: columns 'tau' and 'alpha' both given: expected one of them")
            # a cycle emits at most the K drafted tokens and the bonus one, so neither the tokens per verify
            # nor a speedup over one-token-a-step decoding can pass K + 1
            if val("tau", i) is not None and val("tau", i) > k + 1:
                raise SpecError(f"{where}: line {line}: column 'tau' = {t['tau'].iloc[i]!r}: expected tokens per "
                                f"verify in [1, K + 1] = [1, {k + 1}] (K = {k}: the drafted tokens and the bonus one)")
            if val("measured_speedup", i) is not None and val("measured_speedup", i) > k + 1:
                raise SpecError(f"{where}: line {line}: column 'measured_speedup' = {t['measured_speedup'].iloc[i]!r}: "
                                f"expected at most K + 1 = {k + 1} (a cycle emits at most K + 1 tokens and costs at "
                                f"least one plain step)")
        groups.setdefault(name, []).append(i)

    def one_value(name: str, c: str, idx: list, rows_what: str, expected: str):
        """The one value column c takes on rows idx of sweep `name`, refused where they differ."""
        vals = {(_cell(t[c].iloc[i]) if c not in num else val(c, i)) for i in idx}
        if len(vals) > 1:
            raise SpecError(f"{where}: sweep {name!r}: column {c!r} differs between its {rows_what} "
                            f"({sorted(map(str, vals))}): expected {expected} a sweep")
        return next(iter(vals))

    sweeps = []
    for name, idx in groups.items():
        first = idx[0]
        shared = {c: one_value(name, c, idx, "rows", "one configuration") for c in SWEEP_KEYS}
        spec_idx = [i for i in idx if val("speculative", i)]
        draft = {"method": "none", "drafter": "", "k": 0, "tree_size": None, "drafter_options": ""}
        if spec_idx:
            for c in DRAFT_KEYS:
                draft[c] = one_value(name, c, spec_idx, "speculative rows", "one drafting configuration")
            for i in idx:
                if not val("speculative", i):
                    for c in ("method", "k"):
                        v = _cell(t[c].iloc[i]) if c not in num else val(c, i)
                        if v not in ("", None, "none", draft[c], 0) and v != draft[c]:
                            raise SpecError(f"{where}: line {i + 2}: column {c!r} = {v!r} on a plain row of sweep "
                                            f"{name!r} whose speculative rows give {draft[c]!r}: expected the same or empty")
        rows = []
        for i in idx:
            extra = {c: _cell(t[c].iloc[i]) for c in t.columns if c.startswith("x_")}
            rows.append(LoadRow(
                sweep=name, line=i + 2, load=float(val("load", i)), speculative=bool(val("speculative", i)),
                role=_cell(t["role"].iloc[i]), prompt_tokens=_int(val("prompt_tokens", i)),
                output_tokens=_int(val("output_tokens", i)), context_len=_int(val("context_len", i)),
                n_requests=_int(val("n_requests", i)), n_users=_int(val("n_users", i)),
                max_num_seqs=_int(val("max_num_seqs", i)), draft_frac=val("draft_frac", i),
                tpot_s=val("tpot_s", i), e2e_latency_s=val("e2e_latency_s", i),
                output_tokens_per_s=val("output_tokens_per_s", i), measured_speedup=val("measured_speedup", i),
                tau=val("tau", i), alpha=val("alpha", i), source=_cell(t["source"].iloc[i]),
                notes=_cell(t["notes"].iloc[i]), extra=MappingProxyType(extra)))
        rows.sort(key=lambda r: (r.load, r.speculative))
        if len(rows) > MAX_SWEEP_ROWS:
            raise InputError(f"{where}: sweep {name!r}: {len(rows)} rows: expected at most {MAX_SWEEP_ROWS} in one "
                             f"sweep (each row is simulated, and the fit re-times every fit row at each trial)")
        seen = Counter((r.load, r.speculative) for r in rows)  # counted once: a pairwise scan is quadratic
        dupes = {key for key, n in seen.items() if n > 1}
        if dupes:
            load, s = sorted(dupes)[0]
            raise SpecError(f"{where}: sweep {name!r}: two {'speculative' if s else 'plain'} rows at load {load:g}: "
                            f"expected one row per load and mode")
        kind = shared["load_kind"]
        if kind == "batch":
            ctxs = {r.context_len for r in rows}
            if len(ctxs) > 1:
                pass  # a batch sweep may vary the context with the batch; each row keeps its own
        sweeps.append(LoadSweep(
            name=name, stack=shared["stack"], stack_version=shared["stack_version"] or None, hardware=shared["hardware"],
            n_devices=int(shared["n_devices"]), target=shared["target"], target_dtype=shared["target_dtype"] or None,
            kv_cache_dtype=shared["kv_cache_dtype"] or None, load_kind=kind, method=draft["method"] or "none", drafter=draft["drafter"] or None, k=int(draft["k"] or 0),
            tree_size=_int(draft["tree_size"]),
            drafter_options=MappingProxyType(_options(draft["drafter_options"], where=f"{where}: sweep {name!r}")),
            temperature=float(shared["temperature"]) if shared["temperature"] is not None else 0.0,
            rows=tuple(rows), file=where))
        del first
        sw = sweeps[-1]
        for r in sw.speculative():  # a speedup worked from the row's metric and the plain row's at its load
            sp, metric = sw.measured_speedup(r)
            if metric not in (None, "measured_speedup") and sp > sw.k + 1:
                base = sw.plain_at(r.load)
                raise SpecError(f"{where}: line {r.line}: column {metric!r} = {r.metric(metric):g} against "
                                f"{base.metric(metric):g} on the plain row (line {base.line}) at load {r.load:g}: a "
                                f"speedup of {sp:.3g}, expected at most K + 1 = {sw.k + 1} (a cycle emits at most "
                                f"K + 1 tokens and costs at least one plain step)")
    return sweeps


def _int(v) -> int | None:
    return None if v is None else int(v)


def read_load_sweeps(path, *, sweeps=None) -> list[LoadSweep]:
    """The sweeps of the load-sweep CSV at `path` (only those named in `sweeps`, when given)."""
    table = read_csv_table(path, what="load-sweep CSV (specsim calibrate load)")
    out = sweeps_from_table(table, where=str(path))
    if sweeps:
        names = [s.name for s in out]
        missing = [n for n in sweeps if n not in names]
        if missing:
            close = difflib.get_close_matches(missing[0], names, n=3)
            raise SpecError(f"--sweep {missing[0]!r}: no such sweep in {path}"
                            + (f" (did you mean {', '.join(close)}?)" if close else f"; its sweeps: {', '.join(names)}"))
        out = [s for s in out if s.name in sweeps]
    return out


def rows_to_table(rows: list[dict]) -> pd.DataFrame:
    """Row dicts (the importers' output) as a load-sweep table with the columns in order."""
    df = pd.DataFrame(rows)
    for c in COLUMNS:
        if c not in df.columns:
            df[c] = ""
    extra = [c for c in df.columns if c not in COLUMNS]
    return df[list(COLUMNS) + extra].astype(object).where(df[list(COLUMNS) + extra].notna(), "")


__all__ = ["COLUMNS", "OPTIONAL", "LOAD_KINDS", "ROLES", "METRICS", "LoadRow", "LoadSweep", "read_load_sweeps",
           "sweeps_from_table", "rows_to_table", "DEFAULT_REQUESTS_PER_USER", "DEFAULT_RATE_REQUESTS"]
