"""What an exit 0 must satisfy: strict JSON, finite positive figures and each command's invariants."""
from __future__ import annotations

import hashlib
import json
import math
import os
import re
from pathlib import Path

from .cases import Case


class Nonsense(Exception):
    pass


def strict_json(text: str):
    def bad(c):
        raise Nonsense(f"{c} in JSON output")
    try:
        return json.loads(text, parse_constant=bad)
    except Nonsense:
        raise
    except ValueError as exc:
        raise Nonsense(f"exit 0 but stdout is not JSON ({exc})") from None


def _num(d: dict, key: str, *, positive=True, where="") -> float:
    v = d.get(key)
    if v is None or isinstance(v, bool) or not isinstance(v, (int, float)):
        raise Nonsense(f"{where}{key} = {v!r} where a number is due")
    if not math.isfinite(v) or (positive and v <= 0):
        raise Nonsense(f"{where}{key} = {v!r}: expected a positive finite number")
    return float(v)


def check_predict(d: dict, meta: dict) -> None:
    for key in ("target_step_time_s", "baseline_tokens_per_s"):
        _num(d, key)
    if d.get("method") in (None, "none"):
        return
    for key in ("cycle_time_s", "verify_time_s", "tokens_per_s", "speedup", "tokens_per_cycle"):
        _num(d, key)
    k = d.get("k", meta.get("k"))
    tpc = d["tokens_per_cycle"]
    chain = not d.get("tree_size")
    if isinstance(k, int) and chain and d.get("method") not in ("lookahead",):
        if tpc > k + 1 + 1e-9 or tpc < 1 - 1e-9:
            raise Nonsense(f"tokens_per_cycle = {tpc} outside [1, K + 1 = {k + 1}]")
        if d["speedup"] > k + 1 + 1e-9:
            raise Nonsense(f"speedup = {d['speedup']} > K + 1 = {k + 1} on a chain")
    b = d.get("batch_size")
    if isinstance(b, int) and b > 0:
        expect = tpc * b / d["cycle_time_s"]
        if abs(expect / d["tokens_per_s"] - 1) > 1e-6:
            raise Nonsense(f"tokens_per_s = {d['tokens_per_s']} but tokens_per_cycle x batch / cycle = {expect}")
        ratio = d["tokens_per_s"] / d["baseline_tokens_per_s"]
        if abs(ratio / d["speedup"] - 1) > 1e-6:
            raise Nonsense(f"speedup = {d['speedup']} but tokens_per_s / baseline = {ratio}")
    ctx = d.get("context_len")
    maxc = meta.get("max_context_of_target")
    if isinstance(ctx, int) and maxc and isinstance(k, int) and ctx + k + 1 > maxc:
        raise Nonsense(f"context {ctx} + K + 1 past the model's maximum context {maxc}")


def check_simulate(d: dict, meta: dict) -> None:
    runs = d.get("runs")
    if not isinstance(runs, list) or not runs:
        raise Nonsense("no runs in the simulate output")
    for r in runs:
        w = f"run {r.get('policy')}@{r.get('rate_per_s')}: "
        n = r.get("n_requests")
        if not isinstance(n, int) or n < 1:
            raise Nonsense(f"{w}n_requests = {n!r}: an empty workload reported as a result")
        parts = [r.get(k) for k in ("n_done", "n_rejected", "n_unfinished")]
        if any(not isinstance(p, int) or p < 0 for p in parts) or sum(parts) != n:
            raise Nonsense(f"{w}requests not conserved: done/rejected/unfinished {parts} vs {n}")
        if r["n_done"] == 0:
            raise Nonsense(f"{w}no request finished (all {n} rejected or unfinished) but exit 0")
        _num(r, "makespan_s", where=w)
        _num(r, "throughput_tokens_per_s", where=w)
        for key in ("ttft_p50_s", "e2e_p50_s"):
            _num(r, key, where=w)
        out = meta.get("out_tokens")
        if out and r.get("output_tokens") is not None and r["n_done"] == n:
            if r["output_tokens"] != n * out:
                raise Nonsense(f"{w}output_tokens = {r['output_tokens']} but {n} requests x {out} tokens")
        nd, na = r.get("num_draft_tokens") or 0, r.get("num_accepted_tokens") or 0
        if na > nd:
            raise Nonsense(f"{w}accepted {na} > drafted {nd} tokens")
        mal = r.get("mean_acceptance_length")
        if mal is not None and (not math.isfinite(mal) or mal < 1 - 1e-9 or mal > meta.get("k_max_policy", 1000) + 1):
            raise Nonsense(f"{w}mean_acceptance_length = {mal}")
        for key in ("slo_attainment_frac", "busy_frac"):
            v = r.get(key)
            if v is not None and not (0 <= v <= 1 + 1e-9):
                raise Nonsense(f"{w}{key} = {v} outside [0, 1]")


def check_threshold(d: dict, meta: dict) -> None:
    bo = d.get("batch_off")
    if bo is not None and (not isinstance(bo, int) or bo < 1):
        raise Nonsense(f"batch_off = {bo!r}")
    ao = d.get("alpha_off")
    if ao is not None and (not isinstance(ao, (int, float)) or not 0 <= ao <= 1):
        raise Nonsense(f"alpha_off = {ao!r}")
    for row in d.get("per_batch", []):
        s = row.get("best_speedup")
        if s is not None and (not math.isfinite(s) or s <= 0):
            raise Nonsense(f"per_batch best_speedup = {s!r}")


def check_replay(d: dict, meta: dict) -> None:
    rows = d.get("rows", [])
    bad = meta.get("bad_row")
    for r in rows:
        p = r.get("predicted_speedup")
        if r.get("id") == bad and p is not None:
            raise Nonsense(f"row {bad} (an impossible or malformed input) predicted: speedup {p}")
        if p is None:
            continue
        if not isinstance(p, (int, float)) or not math.isfinite(p) or p <= 0:
            raise Nonsense(f"row {r.get('id')}: predicted_speedup = {p!r}")
        k = r.get("k")
        if isinstance(k, (int, float)) and k == k and not r.get("tree_size") and r.get("method") not in ("lookahead",):
            if p > k + 1 + 1e-9:
                raise Nonsense(f"row {r.get('id')}: predicted speedup {p} > K + 1 = {k + 1}")


def check_sweep(case_dir: Path, meta: dict) -> None:
    import csv as _csv

    p = case_dir / "out" / "sweep.csv"
    if not p.is_file():
        raise Nonsense("exit 0 but no sweep.csv")
    with open(p, newline="") as f:
        rows = list(_csv.DictReader(f))
    if not rows:
        raise Nonsense("sweep.csv has no rows")
    for r in rows:
        for key, v in r.items():
            if key and (key.endswith("_time_s") or key in ("speedup", "tokens_per_s")) and v not in ("", None):
                x = float(v)
                # K = 0 is plain decoding, the sweep's reference row: it drafts nothing
                no_draft = key == "draft_time_s" and x == 0 and float(r.get("k") or 1) == 0
                if not math.isfinite(x) or (x <= 0 and not no_draft):
                    raise Nonsense(f"sweep.csv {key} = {v}")
        k = r.get("k")
        if k and not (r.get("tree_size") or "").strip() and r.get("speedup"):
            if float(r["speedup"]) > float(k) + 1 + 1e-9:
                raise Nonsense(f"sweep.csv speedup {r['speedup']} > K + 1 at k = {k}")


TEXT_NONSENSE = re.compile(r"(?<![\w.])(nan|-?inf|infinity|-nan)(?![\w])", re.I)


def check_load(d: dict, meta: dict, case_dir: Path) -> None:
    """`calibrate load --json`: every predicted figure finite and positive, every predicted speedup of a
    chain at most K + 1 (a cycle emits at most K drafted tokens and the bonus one), the files
    --write-scenario was asked for written inside its folder with the mode specsim's other outputs get
    (the umask's, not 0600)."""
    k_of = {s.get("sweep"): s.get("k") for s in d.get("sweeps", [])}
    for r in d.get("rows", []):
        where = f"sweep {r.get('sweep')} line {r.get('line')}"
        for key in ("predicted", "predicted_tpot_s", "predicted_output_tokens_per_s", "predicted_e2e_latency_s",
                    "predicted_speedup"):
            v = r.get(key)
            if v is not None and not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
                raise Nonsense(f"{where}: {key} = {v!r}")
        k, s = k_of.get(r.get("sweep")), r.get("predicted_speedup")
        if k and s is not None and r.get("speculative") and s > k + 1 + 1e-9:
            raise Nonsense(f"{where}: predicted speedup {s:.3f} > K + 1 = {k + 1}")
    umask = os.umask(0)
    os.umask(umask)
    for rel in meta.get("written", []):
        p = case_dir / rel
        if not p.is_file() or p.is_symlink():
            raise Nonsense(f"--write-scenario did not write {rel}")
        mode = p.stat().st_mode & 0o777
        if mode != 0o666 & ~umask:
            raise Nonsense(f"{rel} written with mode {mode:o}; specsim's other outputs get {0o666 & ~umask:o}")


def check_output(case: Case, stdout: str, case_dir: Path, meta: dict) -> None:
    kind = case.check
    if kind in ("predict", "simulate", "threshold", "replay", "json", "load"):
        d = strict_json(stdout)
        if kind == "load":
            check_load(d, meta, case_dir)
        if kind == "predict":
            check_predict(d, meta)
        elif kind == "simulate":
            check_simulate(d, meta)
        elif kind == "threshold":
            check_threshold(d, meta)
        elif kind == "replay":
            check_replay(d, meta)
    elif kind == "sweep":
        check_sweep(case_dir, meta)
    elif kind == "decoder-json":
        p = case_dir / "r.json"
        if p.is_file():
            d = strict_json(p.read_text())
            txt = json.dumps(d)
            if "null" in txt and False:
                raise Nonsense("null in decoder JSON")
    if kind not in ("predict", "simulate", "threshold", "replay", "json", "load") and TEXT_NONSENSE.search(stdout):
        raise Nonsense(f"'{TEXT_NONSENSE.search(stdout).group(0)}' in the output")


def snapshot(root: Path) -> dict:
    out = {}
    if root.is_file():
        return {"": (hashlib.sha1(root.read_bytes()).hexdigest(), root.stat().st_mtime_ns)}
    if not root.is_dir():
        return out
    for p in root.rglob("*"):
        rel = p.relative_to(root)
        if any(part.startswith(".") for part in rel.parts) or not p.is_file():
            continue
        # the modification time too: a rerun that rewrites a file with the same bytes did write it
        out[str(rel)] = (hashlib.sha1(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns)
    return out
