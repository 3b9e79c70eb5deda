"""Load sweeps from the files benchmarking tools write, as `calibration.load` tables.

`import_load_files(paths, format=..., config=...)` reads one or more result files and returns the
load-sweep table (`load.COLUMNS`) of one sweep: the configuration the files do not hold (stack,
hardware, devices, target, drafting) comes from `config`; each result gives one row. A path may be
prefixed `plain:` or `spec:` to say whether its results ran with speculation; otherwise a result
is speculative when the tool recorded speculation counters (vLLM's `spec_decode_acceptance_length`,
SGLang's `accept_length`), and GuideLLM results, which hold none, are plain unless prefixed.

Formats (the field names read from each tool's source, cited in tests/test_calibration_load_import.py):
- `vllm`: `vllm bench serve --save-result` JSON (vllm/benchmarks/serve.py): one object per file
  (or one a line with --append-result): `max_concurrency` (a concurrency row) or a finite
  `request_rate` (a rate row), `completed`, `total_input_tokens`, `total_output_tokens`,
  `output_throughput` (tok/s), `mean_tpot_ms`, `mean_e2el_ms` (when the e2el percentile metric
  was asked for), `spec_decode_acceptance_length` (tokens per verify, bonus included).
- `sglang`: `python -m sglang.bench_serving --output-file X.jsonl` (python/sglang/bench_serving.py):
  one JSON object a line, appended per run: `max_concurrency`, `request_rate`, `completed`,
  `total_input_tokens`, `total_output_tokens`, `output_throughput`, `mean_tpot_ms`,
  `mean_e2e_latency_ms`, `accept_length` (the server's avg_spec_accept_length, null without
  speculation).
- `guidellm`: `guidellm benchmark --output-path X.json` (src/guidellm/benchmark/benchmark.py,
  GenerativeBenchmark): `{"benchmarks": [...]}`, each with `args.strategy` (`type_` concurrent with
  `streams`, synchronous, constant or poisson with `rate`) and `metrics` distributions (their
  `successful.mean`): `prompt_token_count`, `output_token_count`, `inter_token_latency_ms` (TPOT:
  the first token excluded), `request_latency` (s), `output_tokens_per_second`; `request_totals.successful`.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd

from ..errors import InputError, SpecError
from ..specs.tables import read_text_file
from .load import COLUMNS, MAX_ROWS, rows_to_table

FORMATS = ("vllm", "sglang", "guidellm")
CONFIG_KEYS = ("sweep", "stack", "stack_version", "hardware", "n_devices", "target", "target_dtype", "method",
               "drafter", "k", "tree_size", "drafter_options", "temperature")
REQUIRED_CONFIG = ("sweep", "stack", "hardware", "n_devices", "target")


def _read_json_records(path: Path) -> list:
    """The JSON objects of a file: one document, or one a line (JSONL, --append-result)."""
    text = read_text_file(path, what="JSON benchmark result file")
    if not text.strip():
        raise InputError(f"{path}: empty; expected a JSON benchmark result")
    try:
        doc = json.loads(text)
        return doc if isinstance(doc, list) else [doc]
    except json.JSONDecodeError:
        pass
    out = []
    for n, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError as exc:
            raise InputError(f"{path}: line {n}: not JSON ({exc.msg}); expected one JSON object a line") from None
    return out


def _num(rec: dict, key: str, *, where: str, required: bool = True, positive: bool = True):
    v = rec.get(key)
    if v is None:
        if required:
            raise InputError(f"{where}: field {key!r} missing: expected a number")
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or (positive and v <= 0) or v < 0:
        raise InputError(f"{where}: field {key!r} = {v!r}: expected a {'positive' if positive else 'non-negative'} "
                         f"finite number")
    return float(v)


def _load_of(rec: dict, *, where: str, concurrency_key: str = "max_concurrency") -> tuple[str, float]:
    c = rec.get(concurrency_key)
    if c is not None:
        if isinstance(c, bool) or not isinstance(c, (int, float)) or c < 1 or c != int(c):
            raise InputError(f"{where}: field {concurrency_key!r} = {c!r}: expected a whole number of requests >= 1")
        return "concurrency", float(c)
    r = rec.get("request_rate")
    if isinstance(r, (int, float)) and not isinstance(r, bool) and math.isfinite(r) and r > 0:
        return "rate", float(r)
    raise InputError(f"{where}: no load: {concurrency_key} is null and request_rate is {r!r} (every request sent at "
                     f"once): expected a run at a fixed concurrency or a finite request rate")


def _per_request(rec: dict, total_key: str, where: str) -> int:
    done = _num(rec, "completed", where=where)
    return max(int(round(_num(rec, total_key, where=where) / done)), 1)


def _vllm(rec: dict, where: str) -> dict:
    kind, load = _load_of(rec, where=where)
    tau = _num(rec, "spec_decode_acceptance_length", where=where, required=False)
    if tau is not None and tau < 1:
        raise InputError(f"{where}: field 'spec_decode_acceptance_length' = {tau!r}: expected tokens per verify >= 1 "
                         f"(the bonus token included)")
    e2e = _num(rec, "mean_e2el_ms", where=where, required=False)
    return {"load_kind": kind, "load": load, "prompt_tokens": _per_request(rec, "total_input_tokens", where),
            "output_tokens": _per_request(rec, "total_output_tokens", where),
            "n_requests": int(_num(rec, "completed", where=where)),
            "output_tokens_per_s": _num(rec, "output_throughput", where=where),
            "tpot_s": _num(rec, "mean_tpot_ms", where=where) / 1000.0,
            "e2e_latency_s": None if e2e is None else e2e / 1000.0, "tau": tau, "_spec": tau is not None,
            "_tau_key": "spec_decode_acceptance_length"}


def _sglang(rec: dict, where: str) -> dict:
    kind, load = _load_of(rec, where=where)
    acc = rec.get("accept_length")
    tau = None
    if acc is not None:
        tau = _num(rec, "accept_length", where=where)
        if tau < 1:
            raise InputError(f"{where}: field 'accept_length' = {acc!r}: expected tokens per verify >= 1")
    return {"load_kind": kind, "load": load, "prompt_tokens": _per_request(rec, "total_input_tokens", where),
            "output_tokens": _per_request(rec, "total_output_tokens", where),
            "n_requests": int(_num(rec, "completed", where=where)),
            "output_tokens_per_s": _num(rec, "output_throughput", where=where),
            "tpot_s": _num(rec, "mean_tpot_ms", where=where) / 1000.0,
            "e2e_latency_s": _num(rec, "mean_e2e_latency_ms", where=where) / 1000.0, "tau": tau,
            "_spec": tau is not None and tau > 1.0, "_tau_key": "accept_length"}


def _mean(rec: dict, key: str, where: str) -> float:
    m = rec.get("metrics", {}).get(key)
    if not isinstance(m, dict) or not isinstance(m.get("successful"), dict):
        raise InputError(f"{where}: field 'metrics.{key}.successful' missing: expected a distribution summary")
    return _num(m["successful"], "mean", where=f"{where}: metrics.{key}.successful")


def _guidellm(bench: dict, where: str) -> dict:
    strat = (bench.get("args") or {}).get("strategy")
    if not isinstance(strat, dict):
        raise InputError(f"{where}: field 'args.strategy' missing: expected the benchmark's scheduling strategy")
    t = strat.get("type_")
    if t == "concurrent":
        kind, load = "concurrency", _num(strat, "streams", where=f"{where}: args.strategy")
    elif t == "synchronous":
        kind, load = "concurrency", 1.0
    elif t in ("constant", "poisson"):
        kind, load = "rate", _num(strat, "rate", where=f"{where}: args.strategy")
    else:
        raise InputError(f"{where}: field 'args.strategy.type_' = {t!r}: expected concurrent, synchronous, constant "
                         f"or poisson (a 'throughput' run sends every request at once: no load to model)")
    totals = bench.get("request_totals") or {}
    done = totals.get("successful")
    if isinstance(done, bool) or not isinstance(done, int) or done < 1:
        raise InputError(f"{where}: field 'request_totals.successful' = {done!r}: expected a count >= 1")
    return {"load_kind": kind, "load": load, "prompt_tokens": max(int(round(_mean(bench, "prompt_token_count", where))), 1),
            "output_tokens": max(int(round(_mean(bench, "output_token_count", where))), 1), "n_requests": done,
            "output_tokens_per_s": _mean(bench, "output_tokens_per_second", where),
            "tpot_s": _mean(bench, "inter_token_latency_ms", where) / 1000.0,
            "e2e_latency_s": _mean(bench, "request_latency", where), "tau": None, "_spec": False}


def _records(path: Path, fmt: str) -> list[tuple[str, dict]]:
    recs = _read_json_records(path)
    if fmt == "guidellm":
        out = []
        for i, doc in enumerate(recs):
            if not isinstance(doc, dict) or not isinstance(doc.get("benchmarks"), list):
                raise InputError(f"{path}: expected a GuideLLM report {{\"benchmarks\": [...]}}")
            if not doc["benchmarks"]:
                raise InputError(f"{path}: field 'benchmarks' is empty: expected at least one benchmark (a report of "
                                 f"a run that measured nothing)")
            for j, b in enumerate(doc["benchmarks"]):
                if not isinstance(b, dict):
                    raise InputError(f"{path}: benchmarks[{j}]: expected an object")
                out.append((f"{path}: benchmarks[{j}]", _guidellm(b, f"{path}: benchmarks[{j}]")))
        return out
    reader = {"vllm": _vllm, "sglang": _sglang}[fmt]
    if len(recs) > MAX_ROWS:  # refused before any is read: each result becomes a row the fit simulates
        raise InputError(f"{path}: {len(recs)} results: expected at most {MAX_ROWS} in one run (each is simulated, "
                         f"tenths of a second to seconds each; import them in parts)")
    out = []
    for i, rec in enumerate(recs):
        where = f"{path}: record {i + 1}" if len(recs) > 1 else str(path)
        if not isinstance(rec, dict):
            raise InputError(f"{where}: expected a JSON object")
        out.append((where, reader(rec, where)))
    return out


def import_load_files(paths, *, format: str, config: dict) -> pd.DataFrame:
    """One sweep's load-sweep table from benchmark result files (see the module docstring). Its
    plain rows and lowest-load speculative row are `fit`, the rest `check`."""
    if format not in FORMATS:
        raise SpecError(f"--format {format!r}: expected one of {', '.join(FORMATS)} (or table)")
    unknown = [k for k in config if k not in CONFIG_KEYS]
    if unknown:
        raise SpecError(f"import: unknown setting {unknown[0]!r}; known: {', '.join(CONFIG_KEYS)}")
    for key in REQUIRED_CONFIG:
        if config.get(key) in (None, ""):
            raise SpecError(f"--{key.replace('_', '-')}: required to import {format} results (the files do not "
                            f"say it)")
    rows = []
    for raw in paths:
        text = str(raw)
        mode = None
        for prefix in ("plain:", "spec:"):
            if text.startswith(prefix):
                mode, text = prefix[:-1], text[len(prefix):]
        path = Path(text)
        for where, rec in _records(path, format):
            spec = rec.pop("_spec") if mode is None else (mode == "spec")
            rec.pop("_spec", None)
            tau_key = rec.pop("_tau_key", "tau")
            k = config.get("k")
            if spec and rec.get("tau") is not None and k not in (None, "") and rec["tau"] > int(k) + 1:
                raise InputError(f"{where}: field {tau_key!r} = {rec['tau']:g}: expected tokens per verify in [1, K + 1] "
                                 f"= [1, {int(k) + 1}] (--k {k}: the drafted tokens and the bonus one)")
            row = {k: config.get(k, "") for k in CONFIG_KEYS}
            row.update(rec)
            row["speculative"] = int(spec)
            if not spec:
                row.update(method="none", drafter="", k="", tree_size="", drafter_options="", tau="")
            elif not config.get("method") or config.get("method") == "none":
                raise SpecError(f"{where}: a speculative result, but --method is not given: expected the drafter "
                                f"family (and --k) the run used")
            row["source"] = f"{where} ({format} result)"
            rows.append(row)
    if not rows:
        raise InputError("import: no results in the files given")
    if len(rows) > MAX_ROWS:
        raise InputError(f"import: {len(rows)} results in the files given: expected at most {MAX_ROWS} in one run "
                         f"(each is simulated, tenths of a second to seconds each; import them in parts)")
    spec_loads = [r["load"] for r in rows if r["speculative"]]
    lowest = min(spec_loads) if spec_loads else None
    for r in rows:
        r["role"] = "fit" if (not r["speculative"] or r["load"] == lowest) else "check"
        r["role"] = r["role"]
    kinds = {r["load_kind"] for r in rows}
    if len(kinds) > 1:
        raise InputError(f"import: the files mix load kinds ({', '.join(sorted(kinds))}): one sweep holds one kind "
                         f"(import concurrency and rate runs as two sweeps)")
    table = rows_to_table(rows)
    return table[[c for c in table.columns if c in COLUMNS or c in CONFIG_KEYS or c == "n_requests"]]


__all__ = ["FORMATS", "CONFIG_KEYS", "import_load_files"]
