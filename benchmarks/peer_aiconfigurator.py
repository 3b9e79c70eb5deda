"""Side by side with NVIDIA's AIConfigurator (issue 32 item 3, issue 36 item 6): every load sweep and replay row.

    .venv/bin/python benchmarks/peer_aiconfigurator.py [--only-sweeps NAME,...] [--only-rows ID,...]
                                                       [--no-sweeps] [--no-replay] [--json] [--json-out FILE]

AIConfigurator 0.12.0 runs as its own CLI (`aiconfigurator cli estimate --estimate-mode static_gen`) from
its own virtualenv, ~/.cache/specsim/peer-aic-0.12.0, created on first use with
`pip install aiconfigurator==0.12.0` (by name from the registry; offline afterwards). Each command's
output is cached per command line under ~/.cache/specsim/peer-aic/.

What AIC can express (read in the installed package: `cli estimate --help`, aiconfigurator/sdk/speculative.py,
aiconfigurator_core/sdk/models/helpers.py `mtp_scale_factor`, aiconfigurator_core/systems/). Its one speculative
knob pair is `--nextn` (a chain of nextn MTP draft steps: the decode ops queried at batch x (nextn + 1), scaled by
(layers + nextn) / layers, i.e. nextn target-shaped layers) and `--nextn-accepted` (average accepted draft tokens
a decode step; the iteration is divided by 1 + accepted). So it expresses a chain of MTP/EAGLE-like one-layer draft
steps, top-k 1, on its silicon tables: systems h100_sxm, h200_sxm, a100_sxm (the 80 GB part; its l4 folder holds no
data), backends trtllm, sglang, vllm at one queryable version each (systems/query_versions.yaml 'current'), model
configs it ships (Llama 3.1 8B/70B/405B, Qwen3 8B/30B-A3B here), weight formats bf16/fp16 (its bfloat16 GEMMs), fp8.
It does not model a separate draft model, n-gram / prompt lookup (no drafting pass: nextn would add nextn layers),
Medusa/Hydra heads, Lookahead, sparse-KV self-speculation, token trees, an HF-eager or research code base, vLLM's
V0 engine (its tables are V1 releases), or a request-rate (open-loop) load. Every such row is printed with why.

Protocol, load sweeps (data/published/load_sweeps.csv): the plain curve and the lowest-load speculative row are
the fit rows for both. AIC's knob `--nextn-accepted` is chosen so that its speedup at the lowest-load speculative
row equals the measured one (AIC divides its iteration by 1 + accepted, so the knob follows in closed form from one
run at 0 accepted); every row is then run at that value. A concurrency row's users are AIC's static batch; isl/osl
are the row's prompt and output tokens; AIC's speedup is its generation latency plain over speculative at the same
batch. specsim's side is `specsim calibrate load --roles plain+lowest` (calibration.load_fit.calibrate_load),
under `--cost-source roofline` and the default `auto`. Errors and slowdowns are counted on the check rows (the fit
rows are matched by construction on both sides); a slowdown is a measured speedup < 0.95.

Protocol, replay rows (data/published/speculative_decoding.csv): AIC static_gen at the row's batch, isl = the row's
context_len (replay's default 512 where blank), osl = 2 (one generation step at that context: the point specsim
prices); `--nextn` = the row's K and `--nextn-accepted` = tau - 1 from the row's own tau (mean tokens a verify step,
the bonus token included, so tau - 1 accepted draft tokens), or alpha (1 - alpha^K) / (1 - alpha) from its alpha
where it gives only alpha (a chain's expected accepted drafts at a per-token rate alpha). That is the fair protocol:
specsim's replay is given the same tau/alpha, so neither side fits anything to the row's speedup and both are
judged on pricing the iteration. specsim's side is `specsim replay --leave-source-out`
(calibration.replay.leave_one_source_out: every fitted figure fitted on no row of the row's source), under both
cost sources. A slowdown is a measured speedup < 1. On both sets a slowdown is missed when predicted >= 1.05, and
a false slowdown is a prediction < 1 where the measured speedup is > 1.05.

Figures from one complete run (2026-12-07, at 0408aae: `.venv/bin/python benchmarks/peer_aiconfigurator.py`) are in
data/published/README.md, section "Peer: AIConfigurator". Over the 22 rows AIC expresses (7 sweep check rows, 15
replay rows) median |error| AIC 30.0 %, specsim roofline 11.2 %, auto 11.5 %; of their 4 measured slowdowns AIC
misses 3, the roofline 0, auto 1; no false slowdowns. Over every row, specsim alone: sweeps 7.3 % roofline / 13.7 %
auto (slowdowns missed 2 / 7 of 12, false 1 / 0), replay 23.6 % / 21.5 % (7 / 4 of 16 missed).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import math
import re
import statistics
import subprocess
import sys
from pathlib import Path

import pandas as pd

from specsim.calibration.load import read_load_sweeps
from specsim.calibration.load_fit import SLOWDOWN as SWEEP_SLOWDOWN, SLOWDOWN_BAR as BAR, calibrate_load, sweep_priced_by
from specsim.calibration.replay import DEFAULT_CONTEXT_LEN, leave_one_source_out, read_replay_table
from specsim.errors import SpecError
from specsim.specs.data import data_path
from specsim.specs.models import load_model

AIC_VERSION = "0.12.0"
VENV = Path.home() / ".cache" / "specsim" / f"peer-aic-{AIC_VERSION}"
CACHE = Path.home() / ".cache" / "specsim" / "peer-aic"
REPLAY_SLOWDOWN = 1.0  # replay's rows: a measured speedup below 1 (calibration.replay.ReplayResult.slowdowns)
FALSE_MEASURED = 1.05  # a prediction < 1 where the measured speedup is above this is a false slowdown
COST_SOURCES = ("roofline", "auto")

# specsim catalog id (after aliases) -> AIC model config (aiconfigurator_core/model_configs); Llama 3.3 70B
# resolves to llama-3.1-70b in the catalog (same shape)
MODELS = {"qwen3-8b": "Qwen/Qwen3-8B", "qwen3-30b-a3b": "Qwen/Qwen3-30B-A3B",
          "llama-3.1-8b": "meta-llama/Meta-Llama-3.1-8B", "llama-3.1-70b": "meta-llama/Meta-Llama-3.1-70B",
          "llama-3.1-405b": "meta-llama/Meta-Llama-3.1-405B"}
# hardware with AIC silicon tables (aiconfigurator_core/systems/data/<system>/ non-empty)
SYSTEMS = {"h100-sxm": "h100_sxm", "h200-sxm": "h200_sxm", "a100-sxm-80gb": "a100_sxm"}
NO_TABLES = {"l4": "AIC 0.12.0 ships l4.yaml but systems/data/l4 holds no tables",
             "a100-sxm-40gb": "AIC's a100_sxm is the 80 GB part (2.039 TB/s in a100_sxm.yaml), not the 40 GB one (1.555 TB/s)"}
BACKENDS = {"vllm": "vllm", "sglang": "sglang", "sglang-specforge": "sglang", "trtllm": "trtllm"}
# the one queryable version AIC 0.12.0 accepts for each backend (systems/query_versions.yaml 'current')
VERSIONS = {("h100_sxm", "sglang"): "0.5.14", ("h100_sxm", "vllm"): "0.24.0", ("h100_sxm", "trtllm"): "1.3.0rc20",
            ("h200_sxm", "sglang"): "0.5.14", ("h200_sxm", "vllm"): "0.24.0", ("h200_sxm", "trtllm"): "1.3.0rc20",
            ("a100_sxm", "sglang"): "0.5.10", ("a100_sxm", "vllm"): "0.14.0", ("a100_sxm", "trtllm"): "1.0.0"}
# specsim weight format / KV-cache dtype -> AIC --gemm-quant-mode / --kvcache-quant-mode (None: AIC's inferred bfloat16)
GEMM_MODES = {"bf16": None, "fp16": None, "fp8": "fp8"}
KV_MODES = {"bf16": None, "fp16": None, "fp8": "fp8"}
NOT_MODELLED = {
    "draft_model": "a separate draft model: AIC's nextn prices nextn target-shaped MTP layers, not another model's passes",
    "prompt_lookup": "n-gram / prompt lookup has no drafting pass; AIC's nextn adds nextn target-shaped layers",
    "medusa": "Medusa heads verified as a token tree: AIC's nextn is a chain of MTP steps",
    "hydra": "Hydra heads verified as a token tree: AIC's nextn is a chain of MTP steps",
    "lookahead": "Lookahead (Jacobi n-gram pool) verifies a window: AIC models MTP chains only",
    "sparse_kv": "self-speculation with a sparse KV cache (MagicDec): AIC models MTP chains only",
    "none": "no speculation",
}


class PeerError(Exception):
    pass


def ensure_aic() -> Path:
    exe = VENV / "bin" / "aiconfigurator"
    if exe.exists():
        return exe
    try:
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True, capture_output=True, text=True)
        subprocess.run([str(VENV / "bin" / "pip"), "install", "-q", f"aiconfigurator=={AIC_VERSION}"], check=True,
                       capture_output=True, text=True)
    except subprocess.CalledProcessError as exc:
        last = (exc.stderr or "").strip().splitlines()[-1:] or ["(no stderr)"]
        raise PeerError(f"AIConfigurator {AIC_VERSION} not installable into {VENV}: {last[0]}") from None
    return exe


_FIELDS = {"Backend": "backend", "ISL": "isl", "OSL": "osl", "Batch Size": "batch_size", "TP Size": "tp",
           "Generation lat.": "generation_latency_ms", "TPOT": "tpot_ms", "tokens/s": "tokens_per_s",
           "MTP nextn": "nextn"}


def parse_estimate(text: str) -> dict:
    """The summary box of `aiconfigurator cli estimate --estimate-mode static_gen` as numbers."""
    if "Performance Estimate (static_gen)" not in text:
        raise PeerError("AIC output: no 'Performance Estimate (static_gen)' box")
    out: dict = {"nextn": 0, "nextn_accepted": 0.0}
    for line in text.splitlines():
        m = re.match(r"^  ([A-Za-z/. ]+?):\s+(.+?)\s*$", line)
        if not m or m.group(1) not in _FIELDS:
            continue
        key, val = _FIELDS[m.group(1)], m.group(2)
        if key == "backend":
            b = re.match(r"(\S+) \((\S+)\)", val)
            out["backend"], out["backend_version"] = b.group(1), b.group(2)
        elif key == "nextn":
            n = re.match(r"(\d+) \(nextn_accepted=([0-9.eE+-]+)\)", val)
            out["nextn"], out["nextn_accepted"] = int(n.group(1)), float(n.group(2))
        else:
            out[key] = float(val.split()[0].replace(",", ""))
    missing = [k for k in ("generation_latency_ms", "tpot_ms", "batch_size") if k not in out]
    if missing:
        raise PeerError(f"AIC output: field {missing[0]} not found in the summary box")
    return out


def run_aic(exe: Path, argv: list[str]) -> dict:
    key = hashlib.sha256(json.dumps([AIC_VERSION] + argv).encode()).hexdigest()[:20]
    path = CACHE / f"{key}.json"
    if path.exists():
        rec = json.loads(path.read_text())
    else:
        p = subprocess.run([str(exe), "cli", "estimate", *argv], capture_output=True, text=True, timeout=600)
        if p.returncode != 0:
            last = (p.stderr.strip().splitlines() or ["(no stderr)"])[-1]
            raise PeerError(f"aiconfigurator cli estimate {' '.join(argv)}: exit {p.returncode}: {last}")
        rec = {"argv": argv, "stdout": p.stdout}
        CACHE.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(rec))
    return parse_estimate(rec["stdout"])


def _blank(v) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v)) or str(v).strip() == ""


def weight_format(target: str, target_dtype) -> str:
    """The target's weight format: the row's target_dtype, else the catalog model's."""
    return str(target_dtype).strip() if not _blank(target_dtype) else load_model(target).weight_format


def aic_config(*, stack, hardware: str, n_devices: int, target: str, target_dtype, kv_cache_dtype, method: str,
               k, tree_size, top_k) -> dict | str:
    """AIC's inputs for one configuration, or why AIC cannot express it (the first reason found, in the order
    method, tree, hardware, stack, model, weight format)."""
    if method not in ("eagle", "mtp"):
        return f"method {method}: " + NOT_MODELLED.get(method, "AIC models MTP chains only")
    wide = not _blank(top_k) and int(top_k) > 1
    if wide or (not _blank(tree_size) and (_blank(k) or int(tree_size) != int(k) + 1)):  # K + 1 nodes: a chain
        shape = ", ".join(x for x in ("" if _blank(tree_size) else f"{int(tree_size)} nodes",
                                       f"top-k {top_k}" if wide else "") if x)
        return f"tree ({shape}): AIC's nextn is a chain of K steps, top-k 1, verifying K + 1 tokens"
    if hardware in NO_TABLES:
        return f"hardware {hardware}: {NO_TABLES[hardware]}"
    if hardware not in SYSTEMS:
        return f"hardware {hardware}: AIC 0.12.0 has no tables for it"
    system = SYSTEMS[hardware]
    if _blank(stack):
        return "no stack (a research code base): AIC's backends are trtllm, sglang, vllm"
    if stack == "vllm-v0":
        return "stack vllm-v0 (V0 engine, batch-expansion scorer): AIC's vllm tables are V1 releases"
    backend = BACKENDS.get(stack)
    if backend is None:
        return f"stack {stack}: AIC's backends are trtllm, sglang, vllm"
    if (system, backend) not in VERSIONS:
        return f"stack {stack} on {system}: no queryable AIC version"
    canon = load_model(target).id
    if canon not in MODELS:
        return f"target {target} ({canon}): AIC ships no model config"
    fmt = weight_format(target, target_dtype)
    if fmt not in GEMM_MODES:
        return f"weight format {fmt}: no AIC GEMM mode mapped"
    kv = None if _blank(kv_cache_dtype) else str(kv_cache_dtype).strip()
    if kv is not None and kv not in KV_MODES:
        return f"KV-cache dtype {kv}: no AIC KV-cache mode mapped"
    if _blank(k) or int(k) < 1:
        return "no draft length K"
    return {"model": MODELS[canon], "system": system, "backend": backend, "version": VERSIONS[(system, backend)],
            "tp": int(n_devices), "k": int(k), "gemm": GEMM_MODES[fmt], "kv": None if kv is None else KV_MODES[kv]}


def _argv(inp: dict, *, isl: int, osl: int, batch: int, nextn: int, accepted: float) -> list[str]:
    a = ["--model", inp["model"], "--system", inp["system"], "--backend", inp["backend"], "--backend-version",
         inp["version"], "--estimate-mode", "static_gen", "--isl", str(isl), "--osl", str(osl), "--batch-size",
         str(batch), "--tp", str(inp["tp"])]
    if "A3B" in inp["model"]:  # AIC refuses an MoE model without its MoE split: experts tensor-parallel like the rest
        a += ["--moe-tp-size", str(inp["tp"])]
    if inp.get("gemm"):
        a += ["--gemm-quant-mode", inp["gemm"]]
    if inp.get("kv"):
        a += ["--kvcache-quant-mode", inp["kv"]]
    if nextn:
        a += ["--nextn", str(nextn), "--nextn-accepted", f"{accepted:.4f}"]
    return a


# ---- load sweeps ------------------------------------------------------------------------------------------

def sweep_config(sw) -> dict | str:
    if sw.load_kind != "concurrency":
        return f"load_kind {sw.load_kind}: AIC's static batch has no queueing under a rate"
    return aic_config(stack=sw.stack, hardware=sw.hardware, n_devices=sw.n_devices, target=sw.target,
                      target_dtype=sw.target_dtype, kv_cache_dtype=sw.kv_cache_dtype, method=sw.method, k=sw.k,
                      tree_size=sw.tree_size, top_k=sw.drafter_options.get("eagle_top_k"))


def aic_sweep(exe, sw, inp) -> dict:
    spec = sorted(sw.speculative(), key=lambda r: r.load)
    lo = spec[0]
    s_lo, _ = sw.measured_speedup(lo)

    def argv(r, nextn, accepted):
        return _argv(inp, isl=r.prompt_tokens, osl=r.output_tokens, batch=r.n_users or int(r.load), nextn=nextn,
                     accepted=accepted)

    plain = run_aic(exe, argv(lo, 0, 0))["generation_latency_ms"]
    probe = run_aic(exe, argv(lo, inp["k"], 0.0))["generation_latency_ms"]  # iteration at 0 accepted
    accepted = s_lo * probe / plain - 1.0  # speedup = plain / (iteration / (1 + accepted))
    note = ""
    if not 0.0 <= accepted <= inp["k"]:
        note = f"fitted accepted {accepted:.3f} outside AIC's [0, {inp['k']}]: run at the bound"
        accepted = min(max(accepted, 0.0), float(inp["k"]))
    out = {}
    for r in spec:
        p = run_aic(exe, argv(r, 0, 0))["generation_latency_ms"]
        s = run_aic(exe, argv(r, inp["k"], round(accepted, 4)))["generation_latency_ms"]
        out[r.load] = p / s
    return {"accepted": accepted, "speedups": out, "note": note}


def sweep_records(exe, sweeps, cals: dict) -> tuple[list[dict], list[dict]]:
    """One record per speculative sweep row (measured, AIC, specsim under each source) and one per sweep.
    cals: cost source -> LoadCalibration."""
    fits = {cs: {f.sweep.name: f for f in cal.fits} for cs, cal in cals.items()}
    records: dict = {}
    heads = []
    for sw in sweeps:
        inp = sweep_config(sw)
        aic, reason = None, None if isinstance(inp, dict) else inp
        if reason is None:
            try:
                aic = aic_sweep(exe, sw, inp)
            except PeerError as exc:
                reason = f"AIC refused: {exc}"
        fmt = weight_format(sw.target, sw.target_dtype)
        heads.append({"sweep": sw.name, "stack": sw.stack, "method": sw.method, "weight_format": fmt,
                      "aic_inputs": inp if isinstance(inp, dict) else None, "aic_reason": reason,
                      "aic_accepted": None if aic is None else aic["accepted"], "aic_note": "" if aic is None else aic["note"],
                      "priced_by": {cs: sweep_priced_by(f[sw.name].sweep, f[sw.name].stack) for cs, f in fits.items()}})
        for cs, f in fits.items():
            t = f[sw.name].rows
            for r in t[t["speculative"] == 1].to_dict(orient="records"):
                rec = records.setdefault((sw.name, float(r["load"])), {
                    "set": "sweep", "id": sw.name, "load": float(r["load"]), "stack": sw.stack, "method": sw.method,
                    "weight_format": fmt, "role": str(r["role"]), "measured": _num(r["measured_speedup"]),
                    "aic": None if aic is None else aic["speedups"].get(r["load"]), "aic_reason": reason,
                    "priced_by": heads[-1]["priced_by"]})
                rec[cs] = _num(r["predicted_speedup"])
    return list(records.values()), heads


# ---- replay rows ------------------------------------------------------------------------------------------

def replay_accepted(row: dict) -> tuple[float, str]:
    """AIC's --nextn-accepted from the row's own acceptance figure, and which figure it came from."""
    k = int(row["k"])
    if not _blank(row.get("tau")):
        return float(row["tau"]) - 1.0, "tau - 1"
    a = float(row["alpha"])
    return (float(k) if a >= 1.0 else a * (1.0 - a ** k) / (1.0 - a)), "alpha (1 - alpha^K) / (1 - alpha)"


def _opt(text, key):
    if _blank(text):
        return None
    for part in str(text).split(";"):
        if "=" in part and part.split("=", 1)[0].strip() == key:
            return part.split("=", 1)[1].strip()
    return None


def aic_replay_row(exe, row: dict) -> dict | str:
    """AIC's speedup for one replay row, or why it cannot express the row."""
    inp = aic_config(stack=row.get("stack"), hardware=str(row["hardware"]), n_devices=int(row.get("n_devices") or 1),
                     target=str(row["target"]), target_dtype=row.get("target_dtype"),
                     kv_cache_dtype=row.get("kv_cache_dtype"), method=str(row["method"]), k=row.get("k"),
                     tree_size=row.get("tree_size"), top_k=_opt(row.get("drafter_options"), "eagle_top_k"))
    if isinstance(inp, str):
        return inp
    accepted, basis = replay_accepted(row)
    if not 0.0 <= accepted <= inp["k"]:
        return f"accepted {accepted:.3f} ({basis}) outside AIC's [0, K = {inp['k']}]"
    isl = DEFAULT_CONTEXT_LEN if _blank(row.get("context_len")) else int(row["context_len"])
    batch = int(row["batch_size"])
    try:
        plain = run_aic(exe, _argv(inp, isl=isl, osl=2, batch=batch, nextn=0, accepted=0))["generation_latency_ms"]
        spec = run_aic(exe, _argv(inp, isl=isl, osl=2, batch=batch, nextn=inp["k"],
                                  accepted=round(accepted, 4)))["generation_latency_ms"]
    except PeerError as exc:
        return f"AIC refused: {exc}"
    return {"speedup": plain / spec, "accepted": accepted, "basis": basis, "isl": isl, "inputs": inp}


def replay_records(exe, table: pd.DataFrame, results: dict) -> list[dict]:
    out = []
    for i, row in enumerate(table.to_dict(orient="records")):
        a = aic_replay_row(exe, row)
        fmt = weight_format(str(row["target"]), row.get("target_dtype"))
        rec = {"set": "replay", "id": str(row["id"]), "load": float(row["batch_size"]),
               "stack": "(none)" if _blank(row.get("stack")) else str(row["stack"]), "method": str(row["method"]),
               "weight_format": fmt, "role": "check", "measured": _num(row.get("measured_speedup")),
               "aic": a["speedup"] if isinstance(a, dict) else None, "aic_reason": a if isinstance(a, str) else None,
               "aic_accepted": a["accepted"] if isinstance(a, dict) else None,
               "aic_basis": a["basis"] if isinstance(a, dict) else None, "priced_by": {}}
        for cs, t in results.items():
            r = t.iloc[i]
            assert str(r["id"]) == rec["id"]
            rec[cs] = _num(r["predicted_speedup"])
            rec["priced_by"][cs] = str(r.get("priced_by", ""))
        out.append(rec)
    return out


# ---- roll-up ----------------------------------------------------------------------------------------------

def _num(v):
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(f) else f


def slowdown_below(rec: dict) -> float:
    return SWEEP_SLOWDOWN if rec["set"] == "sweep" else REPLAY_SLOWDOWN


def counts(recs: list[dict], key: str) -> dict:
    """Median |error|, measured slowdowns missed (predicted >= 1.05) and false slowdowns (predicted < 1 where
    measured > 1.05) of one predictor over the records where it and the measurement both have a value."""
    ok = [r for r in recs if r.get(key) is not None and r["measured"] is not None]
    err = [abs(r[key] / r["measured"] - 1.0) for r in ok]
    slow = [r for r in ok if r["measured"] < slowdown_below(r)]
    return {"n": len(ok), "median_abs_error": statistics.median(err) if err else None, "n_slowdowns": len(slow),
            "missed": sum(r[key] >= BAR for r in slow),
            "false_slowdowns": sum(r[key] < 1.0 and r["measured"] > FALSE_MEASURED for r in ok)}


def rollup(records: list[dict]) -> dict:
    """By (set, stack, method, weight format): on the rows AIC expresses, AIC and specsim under both sources on
    the same rows; on every row, specsim under both sources. Sweeps count their check rows only."""
    counted = [r for r in records if r["set"] == "replay" or r["role"] == "check"]
    groups: dict = {}
    for r in counted:
        groups.setdefault((r["set"], r["stack"], r["method"], r["weight_format"]), []).append(r)
    groups = dict(sorted(groups.items()))
    for s in ("sweep", "replay"):
        groups[(s, "all", "", "")] = [r for r in counted if r["set"] == s]
    groups[("all", "", "", "")] = counted
    out = []
    for key, recs in groups.items():
        if not recs:
            continue
        same = [r for r in recs if r["aic"] is not None]
        out.append({"set": key[0], "stack": key[1], "method": key[2], "weight_format": key[3], "n_rows": len(recs),
                    "aic_rows": {k: counts(same, k) for k in ("aic",) + COST_SOURCES},
                    "every_row": {k: counts(recs, k) for k in COST_SOURCES}})
    return {"groups": out}


# ---- output -----------------------------------------------------------------------------------------------

def _pct(v):
    return "-" if v is None else f"{v:.1%}"


def _sp(v):
    return "-" if v is None else f"{v:.3f}"


def format_report(heads, records, roll) -> str:
    lines = []
    if heads:
        lines.append("== Load sweeps (AIC's accepted fitted at the lowest-load speculative row; specsim calibrate load "
                     "--roles plain+lowest)")
        for h in heads:
            pb = ", ".join(f"{cs} -> {kind}" for cs, kind in h["priced_by"].items())
            lines.append(f"{h['sweep']} ({h['stack']}, {h['method']}, {h['weight_format']}; specsim's target priced: {pb})")
            if h["aic_reason"]:
                lines.append(f"  AIC cannot express it: {h['aic_reason']}")
            else:
                i = h["aic_inputs"]
                lines.append(f"  AIC: {i['model']} on {i['system']}, {i['backend']} {i['version']}, tp {i['tp']}, "
                             f"nextn {i['k']}, accepted {h['aic_accepted']:.3f} (fitted at the lowest load) {h['aic_note']}")
            for r in (x for x in records if x["set"] == "sweep" and x["id"] == h["sweep"]):
                lines.append(f"    load {r['load']:>6g} {r['role']:<5} measured {_sp(r['measured'])}  AIC {_sp(r['aic']):>6}"
                             f"  specsim roofline {_sp(r.get('roofline')):>6}  auto {_sp(r.get('auto')):>6}")
    rep = [r for r in records if r["set"] == "replay"]
    if rep:
        lines.append("== Replay rows AIC expresses (nextn = K, accepted from the row's tau/alpha; specsim replay "
                     "--leave-source-out)")
        for r in rep:
            if r["aic"] is not None:
                lines.append(f"  {r['id']}: measured {_sp(r['measured'])}  AIC {_sp(r['aic'])} (accepted "
                             f"{r['aic_accepted']:.3f} = {r['aic_basis']})  specsim roofline {_sp(r.get('roofline'))}"
                             f"  auto {_sp(r.get('auto'))} [{r['priced_by'].get('auto', '')}]")
        lines.append("== Replay rows AIC cannot express, and why")
        for r in rep:
            if r["aic"] is None:
                lines.append(f"  {r['id']}: {r['aic_reason']}")
    lines.append("== Roll-up by set, stack, method and weight format (sweeps: check rows; replay: every row). "
                 "median |error|; slowdowns missed (predicted >= 1.05) / measured; false slowdowns (predicted < 1 "
                 "where measured > 1.05)")
    lines.append("  on AIC's rows: AIC, specsim --cost-source roofline (r) and auto (a) on the same rows; every row: "
                 "specsim alone")
    lines.append(f"{'set':<6} {'stack':<24} {'method':<13} {'fmt':<5} {'rows':>4} | {'n':>3} "
                 f"{'AIC':>6} {'roof':>6} {'auto':>6}  missed A/r/a   false A/r/a | {'roof':>6} {'auto':>6}"
                 f"  missed r/a    false r/a")
    for g in roll["groups"]:
        a, e = g["aic_rows"], g["every_row"]
        n_slow = a["aic"]["n_slowdowns"]
        lines.append(
            f"{g['set']:<6} {g['stack']:<24} {g['method']:<13} {g['weight_format']:<5} {g['n_rows']:>4} |"
            f" {a['aic']['n']:>3} {_pct(a['aic']['median_abs_error']):>6} {_pct(a['roofline']['median_abs_error']):>6}"
            f" {_pct(a['auto']['median_abs_error']):>6}  {a['aic']['missed']}/{a['roofline']['missed']}/{a['auto']['missed']}"
            f" of {n_slow:<2}  {a['aic']['false_slowdowns']}/{a['roofline']['false_slowdowns']}/{a['auto']['false_slowdowns']}"
            f"       | {_pct(e['roofline']['median_abs_error']):>6} {_pct(e['auto']['median_abs_error']):>6}"
            f"  {e['roofline']['missed']}/{e['auto']['missed']} of {e['roofline']['n_slowdowns']:<2}"
            f" {e['roofline']['false_slowdowns']}/{e['auto']['false_slowdowns']}")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only-sweeps", help="comma-separated sweep names")
    ap.add_argument("--only-rows", help="comma-separated replay row ids")
    ap.add_argument("--no-sweeps", action="store_true")
    ap.add_argument("--no-replay", action="store_true")
    ap.add_argument("--json", action="store_true", help="print JSON instead of the text report")
    ap.add_argument("--json-out", help="also write the JSON to this file")
    args = ap.parse_args(argv)
    try:
        exe = ensure_aic()
        records, heads = [], []
        if not args.no_sweeps:
            sweeps = read_load_sweeps(data_path("published/load_sweeps.csv"),
                                      sweeps=args.only_sweeps.split(",") if args.only_sweeps else None)
            cals = {cs: calibrate_load(sweeps, roles="plain+lowest", cost_source=cs) for cs in COST_SOURCES}
            recs, heads = sweep_records(exe, sweeps, cals)
            records += recs
        if not args.no_replay:
            table = read_replay_table(data_path("published/speculative_decoding.csv"))
            # left out by source over the whole set (a figure's fit rows must be rows of the table), then filtered
            results = {cs: leave_one_source_out(table, cost_source=cs).table for cs in COST_SOURCES}
            if args.only_rows:
                keep = table["id"].astype(str).isin(args.only_rows.split(","))
                table = table[keep].reset_index(drop=True)
                results = {cs: t[keep.to_numpy()].reset_index(drop=True) for cs, t in results.items()}
            records += replay_records(exe, table, results)
    except (PeerError, SpecError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    roll = rollup(records)
    doc = json.dumps({"sweeps": heads, "rows": records, "rollup": roll}, indent=1, default=float)
    if args.json_out:
        Path(args.json_out).write_text(doc)
    if args.json:
        print(doc)
    else:
        print(format_report(heads, records, roll))
    return 0


if __name__ == "__main__":
    sys.exit(main())
