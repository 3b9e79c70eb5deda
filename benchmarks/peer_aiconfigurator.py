"""Side by side with NVIDIA's AIConfigurator (issue 32, item 3): the same load-sweep rows, the same protocol.

    .venv/bin/python benchmarks/peer_aiconfigurator.py [--only SWEEP,...] [--json]

AIConfigurator 0.12.0 runs as its own CLI (`aiconfigurator cli estimate --estimate-mode static_gen`) from
its own virtualenv, ~/.cache/specsim/peer-aic-0.12.0, created on first use with
`pip install aiconfigurator==0.12.0` (by name from the registry; offline afterwards). Each command's
output is cached per command line under ~/.cache/specsim/peer-aic/.

Protocol: the plain curve and the lowest-load speculative row are the fit rows for both. AIC's one
knob, accepted draft tokens a step (`--nextn-accepted`), is chosen so that its speedup at the
lowest-load speculative row equals the measured one. AIC divides its iteration time by 1 + accepted
(aiconfigurator/sdk/speculative.py), so the knob follows in closed form from one run; every row,
the fit row included, is then run at that value. A concurrency row's users are AIC's static batch;
isl/osl are the row's prompt and output tokens; the speedup is AIC's generation latency plain over
speculative at the same batch. specsim's side is `specsim calibrate load --roles plain+lowest`
(calibration.load_fit.calibrate_load). Rows AIC cannot express are listed with the reason.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import re
import statistics
import subprocess
import sys
from pathlib import Path

AIC_VERSION = "0.12.0"
VENV = Path.home() / ".cache" / "specsim" / f"peer-aic-{AIC_VERSION}"
CACHE = Path.home() / ".cache" / "specsim" / "peer-aic"
SLOWDOWN, BAR = 0.95, 1.05

# specsim catalog id -> AIC model config (aiconfigurator_core/model_configs); Llama 3.3 70B shares 3.1 70B's shape
MODELS = {"qwen3-8b": "Qwen/Qwen3-8B", "qwen3-30b-a3b": "Qwen/Qwen3-30B-A3B",
          "llama-3.1-8b-instruct": "meta-llama/Meta-Llama-3.1-8B", "llama-3.3-70b-instruct": "meta-llama/Meta-Llama-3.1-70B",
          "llama-3.1-405b": "meta-llama/Meta-Llama-3.1-405B"}
SYSTEMS = {"h100-sxm": "h100_sxm", "h200-sxm": "h200_sxm", "b200": "b200_sxm", "a100-sxm-80gb": "a100_sxm"}
BACKENDS = {"vllm": "vllm", "sglang": "sglang", "sglang-specforge": "sglang", "trtllm": "trtllm"}
# the queryable version AIC 0.12.0 accepts for each backend on these systems (systems/query_versions.yaml 'current')
VERSIONS = {("h100_sxm", "sglang"): "0.5.14", ("h100_sxm", "vllm"): "0.24.0", ("h100_sxm", "trtllm"): "1.3.0rc20",
            ("h200_sxm", "sglang"): "0.5.14", ("h200_sxm", "vllm"): "0.24.0", ("h200_sxm", "trtllm"): "1.3.0rc20"}


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


def aic_inputs(sw) -> dict | str:
    """AIC's inputs for a sweep, or why AIC cannot express it."""
    top_k = sw.drafter_options.get("eagle_top_k", 1)
    if sw.method not in ("eagle", "mtp"):
        return f"method {sw.method}: AIC's nextn prices a chain of MTP/EAGLE-like draft steps only"
    if sw.tree_size or (top_k and int(top_k) > 1):
        return f"tree ({sw.tree_size} nodes): AIC's nextn is a chain, top-k 1"
    if sw.load_kind != "concurrency":
        return f"load_kind {sw.load_kind}: AIC's static batch has no queueing under a rate"
    if sw.hardware not in SYSTEMS:
        return f"hardware {sw.hardware}: no AIC tables"
    if sw.target not in MODELS:
        return f"target {sw.target}: AIC ships no model config"
    system, backend = SYSTEMS[sw.hardware], BACKENDS.get(sw.stack)
    if backend is None or (system, backend) not in VERSIONS:
        return f"stack {sw.stack} on {system}: no queryable AIC version"
    return {"model": MODELS[sw.target], "system": system, "backend": backend, "version": VERSIONS[(system, backend)],
            "tp": sw.n_devices, "k": sw.k}


def _argv(inp: dict, row, *, nextn: int, accepted: float) -> list[str]:
    batch = row.n_users or int(row.load)
    a = ["--model", inp["model"], "--system", inp["system"], "--backend", inp["backend"], "--backend-version",
         inp["version"], "--estimate-mode", "static_gen", "--isl", str(row.prompt_tokens), "--osl",
         str(row.output_tokens), "--batch-size", str(batch), "--tp", str(inp["tp"])]
    if "A3B" in inp["model"]:  # AIC refuses an MoE model without its MoE split: experts tensor-parallel like the rest
        a += ["--moe-tp-size", str(inp["tp"])]
    if nextn:
        a += ["--nextn", str(nextn), "--nextn-accepted", f"{accepted:.4f}"]
    return a


def aic_sweep(exe, sw, inp) -> dict:
    spec = sorted(sw.speculative(), key=lambda r: r.load)
    lo = spec[0]
    s_lo, _ = sw.measured_speedup(lo)
    plain = run_aic(exe, _argv(inp, lo, nextn=0, accepted=0))["generation_latency_ms"]
    probe = run_aic(exe, _argv(inp, lo, nextn=inp["k"], accepted=0.0))["generation_latency_ms"]  # iteration at 0 accepted
    accepted = s_lo * probe / plain - 1.0  # speedup = plain / (iteration / (1 + accepted))
    note = ""
    if not 0.0 <= accepted <= inp["k"]:
        note = f"fitted accepted {accepted:.3f} outside AIC's [0, {inp['k']}]: run at the bound"
        accepted = min(max(accepted, 0.0), float(inp["k"]))
    out = {}
    for r in spec:
        p = run_aic(exe, _argv(inp, r, nextn=0, accepted=0))["generation_latency_ms"]
        s = run_aic(exe, _argv(inp, r, nextn=inp["k"], accepted=round(accepted, 4)))["generation_latency_ms"]
        out[r.load] = p / s
    return {"accepted": accepted, "speedups": out, "note": note}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", help="comma-separated sweep names")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    from specsim.calibration.load import read_load_sweeps
    from specsim.calibration.load_fit import calibrate_load
    from specsim.specs.data import data_path

    sweeps = read_load_sweeps(data_path("published/load_sweeps.csv"),
                              sweeps=args.only.split(",") if args.only else None)
    try:
        exe = ensure_aic()
        cal = calibrate_load(sweeps, roles="plain+lowest")
        rows = cal.rows
        report = []
        for sw in sweeps:
            inp = aic_inputs(sw)
            aic = aic_sweep(exe, sw, inp) if isinstance(inp, dict) else None
            lowest = min(r.load for r in sw.speculative())
            t = rows[(rows["sweep"] == sw.name) & (rows["speculative"] == 1)]
            per = []
            for r in t.itertuples():
                ms, ps = r.measured_speedup, r.predicted_speedup
                per.append({"load": r.load, "role": "fit" if r.load == lowest else "check", "measured": ms,
                            "specsim": ps, "aic": None if aic is None else aic["speedups"].get(r.load)})
            chk = [p for p in per if p["role"] == "check" and p["measured"] == p["measured"] and p["measured"] is not None]

            def med(key):
                e = [abs(p[key] / p["measured"] - 1) for p in chk if p[key] is not None and p[key] == p[key]]
                return statistics.median(e) if e else None

            slow = [p for p in per if p["measured"] is not None and p["measured"] < SLOWDOWN]
            report.append({"sweep": sw.name, "stack": sw.stack, "method": sw.method, "n_check": len(chk),
                           "aic_inputs": inp if isinstance(inp, dict) else None,
                           "aic_reason": None if isinstance(inp, dict) else inp,
                           "aic_accepted": None if aic is None else aic["accepted"], "aic_note": "" if aic is None else aic["note"],
                           "median_abs_error_aic": med("aic") if aic else None, "median_abs_error_specsim": med("specsim"),
                           "n_slowdowns": len(slow),
                           "missed_aic": None if aic is None else sum(p["aic"] >= BAR for p in slow),
                           "missed_specsim": sum((p["specsim"] or 0) >= BAR for p in slow), "rows": per})
    except PeerError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(report, indent=1, default=float))
        return 0
    f = lambda v: "-" if v is None else f"{v:.1%}"
    for s in report:
        print(f"{s['sweep']} ({s['stack']}, {s['method']}): {s['n_check']} check rows; median |error| "
              f"AIC {f(s['median_abs_error_aic'])}, specsim {f(s['median_abs_error_specsim'])}; slowdowns {s['n_slowdowns']}, "
              f"missed AIC {'-' if s['missed_aic'] is None else s['missed_aic']}, specsim {s['missed_specsim']}")
        if s["aic_reason"]:
            print(f"  AIC cannot express it: {s['aic_reason']}")
        else:
            i = s["aic_inputs"]
            print(f"  AIC: {i['model']} on {i['system']}, {i['backend']} {i['version']}, tp {i['tp']}, nextn {i['k']}, "
                  f"accepted {s['aic_accepted']:.3f} (fitted at the lowest load) {s['aic_note']}")
        for p in s["rows"]:
            a = "-" if p["aic"] is None else f"{p['aic']:.3f}"
            sp = "-" if p["specsim"] is None or p["specsim"] != p["specsim"] else f"{p['specsim']:.3f}"
            print(f"    load {p['load']:>6g} {p['role']:<5} measured {p['measured']:.3f}  AIC {a:>6}  specsim {sp:>6}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
