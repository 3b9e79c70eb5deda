"""The fuzz campaign: malformed flags, TOML, traces, CSVs and GGUF headers, interrupts, reused output
folders and random valid configurations (issue 14), and every field of every scenario table, the
rules that join them, calibration files, stack metrics, step-cost fits and replay rows (issue 28),
each run as a subprocess of a given specsim installation and classified by what it did.

Groups added for issue 28: `tables` (each field of [workload], [engine], [fleet], [slo], [policies],
[sweep], [threshold], [acceptance] and [drafter_options] set to a string, a boolean, a list, NaN,
infinity, -1, 0, 0.5, 1e30 and 2^63 - 1, or for a choice field to an unknown name, run by the
command that reads the table), `cross-field` (one joining rule broken per case; a typo or an
impossible value in every table run by `predict`; runs that cannot end soon), `calibration-file`,
`stack-metrics` (`calibrate acceptance --import`), `step-fit` (`calibrate steps` on rows that cannot
determine the fit; Splitwise names) and more `trace` and `csv-replay` cases.

Group added for issue 37: `load` (`calibrate load` on tables with metrics out of units, one-token
outputs, tau or a speedup above K + 1, k below 1, oversized tables and sweeps, the per-token share
flags, and `--write-scenario` onto an empty path, a file, an existing file with and without --force,
two sweeps of one file name, and symlinks in the folder that point outside it).

Layout: this file is the runner (the case list in a fixed order, the pool, the summary); each group's
cases are built in `benchmarks/fuzz/<group>.py` (`add_cases(g, ...)`), from the vocabulary in
`fuzz/cases.py`; `fuzz/install.py` maps a case onto an installation and writes its files,
`fuzz/running.py` runs and classifies it, `fuzz/checks.py` holds what an exit 0 must satisfy.

    .venv/bin/python benchmarks/fuzz_campaign.py --python .venv/bin/python --out /tmp/fuzz-after
    .venv/bin/python benchmarks/fuzz_campaign.py --python /tmp/before/.venv/bin/python \
        --env SPECSIM_DATA=/work/shared/data --out /tmp/fuzz-before

The cases are generated from --seed alone (the same list for every installation); each is written
in the abstract form of the current command line and mapped onto the installation's own flags,
which the harness reads from its `--help` (`calibrate steps FILE` becomes `calibrate FILE` where
calibrate had no subcommands, `--force` is dropped where a rerun always overwrote). A case that uses
a flag or command the installation does not have is counted as "n/a". Catalog files that cases
mutate (hardware, model, stack TOML) are the installation's own, with the same mutation applied.

Outcome classes (the first that applies):
  hang            no exit within the timeout (after a SIGINT: within 30 s of it); or a run on an input that
                  must be refused that went on until the case's SIGINT; or a run expected to take
                  long that did not say so ("specsim: note: ...") before it was interrupted
  native crash    killed by a signal other than the SIGINT the case sent
  traceback       a Python traceback on stdout/stderr, or exit 70 "internal error"
  partial output  a failed or interrupted run changed or added a non-hidden file in its output, or a
                  completed rerun left an earlier run's files beside its own with nothing (a
                  manifest) telling them apart
  stray output    files written into the current folder instead of --out
  silent nonsense exit 0 where the input was impossible (a refusal was due), or with NaN, Infinity
                  or null where a number is due, or a figure that breaks an invariant (times
                  positive and finite, speedup <= K + 1 on a chain, tokens conserved, requests
                  conserved, the same answer twice, the same answer for a reordered grid)
  clean refusal   exit 2-6 (or 130 after the SIGINT) with one error line on stderr (argparse's
                  usage line and "specsim: note:" lines allowed) that names the flag, key or file of
                  the case
  unclear refusal exit 2-6 but more than one line, or not naming what was wrong
  valid result    exit 0 and every check passed
  other exit      any other exit status without a traceback
Failing cases (every class but clean refusal, valid result and n/a) are written to
OUT/failures/<class>/<case id>/ with the command line, the inputs, stdout, stderr and the reason;
OUT/summary.json holds the counts per class and per group.
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

try:
    import tomllib
except ImportError:  # pragma: no cover
    import tomli as tomllib

from fuzz import (calibration_file, cross_field, csvs, flags, gguf_headers, interrupt, json_config, load,
                  more_inputs, output, stack_metrics, step_fit, tables, toml_catalog, toml_scenario, traces, valid)
from fuzz.cases import CLASS_ORDER, FAILURE_CLASSES, HW_SPECS, MODEL_SPECS, REPO, STACK_SPECS, Case, Gen
from fuzz.install import Installation
from fuzz.running import Outcome, run_case, write_failure


def build_cases(seed: int, catalog_ctx: dict) -> list[Case]:
    """Every group's cases from one seed. The groups draw from one random stream in this order, so a
    group added at the end leaves every earlier case as it was."""
    g = Gen(seed)
    flags.add_cases(g)
    toml_scenario.add_cases(g, 220)
    toml_catalog.add_cases(g, "hardware", "h100-sxm", HW_SPECS, 70,
                           extra_keys=(("mem_bandwidth_gb_s", 5e-324, "either"),))
    toml_catalog.add_cases(g, "models", "llama-3.1-8b", MODEL_SPECS, 70,
                           extra_keys=(("n_kv_heads", 3, "refuse"), ("n_heads", 7, "refuse"), ("head_dim", 7, "either")))
    toml_catalog.add_cases(g, "stacks", "vllm", STACK_SPECS, 40)
    traces.add_cases(g)
    csvs.add_cases(g)
    json_config.add_cases(g)
    gguf_headers.add_cases(g)
    tables.add_cases(g)
    cross_field.add_cases(g)
    calibration_file.add_cases(g)
    stack_metrics.add_cases(g)
    step_fit.add_cases(g)
    more_inputs.add_cases(g)
    interrupt.add_cases(g)
    output.add_cases(g)
    valid.add_cases(g, 320, catalog_ctx)
    load.add_cases(g)
    return g.cases


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--python", required=True, help="the interpreter of the specsim installation under test")
    ap.add_argument("--env", action="append", default=[], help="NAME=VALUE for the runs (repeatable)")
    ap.add_argument("--out", required=True, help="folder for summary.json, results.jsonl and failures/")
    ap.add_argument("--seed", type=int, default=14)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--only", help="comma-separated groups (or case ids) to run")
    ap.add_argument("--limit", type=int, help="run only the first N cases (after --only)")
    ap.add_argument("--per-group", type=int, help="run only every group's first N cases (a smoke run)")
    ap.add_argument("--keep", action="store_true", help="keep each case's working folder")
    args = ap.parse_args(argv)

    out = Path(args.out)
    if out.exists() and any(out.iterdir()):
        print(f"--out {out}: not empty", file=sys.stderr)
        return 2
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="specsim-fuzz-"))
    shared = work / "_shared"
    shared.mkdir()
    env = dict(e.split("=", 1) for e in args.env)
    inst = Installation(args.python, env, work)
    catalog_ctx = {}
    for m in ("llama-3.1-8b", "llama-3.1-70b", "qwen2.5-7b", "qwen2.5-72b", "llama-2-7b", "codellama-34b", "mistral-7b",
              "llama-2-13b", "qwen3-8b", "llama-3.2-1b", "llama-3.2-3b", "qwen2.5-0.5b", "qwen2.5-1.5b", "llama-68m",
              "codellama-7b"):
        try:
            t = tomllib.loads((REPO / "models" / f"{m}.toml").read_text())
            catalog_ctx[m] = (int(t["max_context"]), int(t["n_heads"]))
        except Exception:
            catalog_ctx[m] = (4096, 32)
    cases = build_cases(args.seed, catalog_ctx)
    if args.only:
        keep = set(args.only.split(","))
        cases = [c for c in cases if c.group in keep or c.id in keep]
    if args.per_group:
        seen: dict = {}
        cases = [c for c in cases if seen.setdefault(c.group, []).append(c) or len(seen[c.group]) <= args.per_group]
    if args.limit:
        cases = cases[: args.limit]
    print(f"{len(cases)} cases against {args.python} (package {inst.package}); work folder {work}", flush=True)
    t0 = time.monotonic()
    results = {}
    lock = threading.Lock()
    done = [0]

    def one(case):
        try:
            o = run_case(case, inst, work, shared)
        except Exception as exc:  # the harness's own failure: recorded, never silent
            o = Outcome("harness error", f"{type(exc).__name__}: {exc}")
        with lock:
            results[case.id] = o
            done[0] += 1
            if o.cls in FAILURE_CLASSES:
                write_failure(out, case, o, work)
            if done[0] % 50 == 0:
                print(f"  {done[0]}/{len(cases)} ({time.monotonic() - t0:.0f} s)", flush=True)
        if not args.keep:
            shutil.rmtree(work / case.id, ignore_errors=True)
        return o

    # interrupts are timing cases: run them alone, after the rest
    timed = [c for c in cases if c.interrupt_s is not None]
    rest = [c for c in cases if c.interrupt_s is None]
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        list(as_completed([pool.submit(one, c) for c in rest]))
    for c in timed:
        one(c)
    elapsed = time.monotonic() - t0

    counts = {c: 0 for c in CLASS_ORDER}
    by_group: dict = {}
    with open(out / "results.jsonl", "w") as f:
        for case in cases:
            o = results[case.id]
            counts[o.cls] = counts.get(o.cls, 0) + 1
            by_group.setdefault(case.group, {}).setdefault(o.cls, 0)
            by_group[case.group][o.cls] += 1
            f.write(json.dumps({"id": case.id, "group": case.group, "title": case.title, "class": o.cls,
                                "reason": o.reason, "exit": o.rc, "argv": o.argv, "seconds": round(o.seconds, 2)}) + "\n")
    n_run = sum(v for k, v in counts.items() if k not in ("n/a", "harness error"))
    summary = {"python": args.python, "package": str(inst.package), "seed": args.seed, "n_cases": len(cases),
               "n_run": n_run, "seconds": round(elapsed, 1), "counts": counts, "by_group": by_group}
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    width = max(len(c) for c in CLASS_ORDER)
    print(f"\n{len(cases)} cases ({n_run} run, {counts.get('n/a', 0)} n/a) in {elapsed:.0f} s")
    for c in CLASS_ORDER:
        print(f"  {c:<{width}}  {counts.get(c, 0)}")
    print("\nper group:")
    for g, cs in sorted(by_group.items()):
        print(f"  {g:<16} " + ", ".join(f"{k} {v}" for k, v in sorted(cs.items(), key=lambda kv: CLASS_ORDER.index(kv[0]))))
    print(f"\nfailing cases in {out / 'failures'}")
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
