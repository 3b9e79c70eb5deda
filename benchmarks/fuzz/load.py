"""`calibrate load` under hostile input (issue 37): load-sweep tables with one fault each, checked
against the rules data/published/README.md states for load sweeps ("Rules and limits"): metrics in
[1e-6, 1e6] s and [1e-6, 1e9] tok/s, k >= 1, tau and every speedup (published or worked from the
metrics) in [1, K + 1] and [0.01, K + 1], output_tokens >= 2 on concurrency and rate rows, at most
1,000 rows in a table and 100 in a sweep, and --write-scenario's refusals (an empty path, two sweeps of
one file name, a file already there without --force) and its promise to write only inside DIR.

The base tables are small so that a valid case finishes in seconds: a decode-at-batch sweep (5 rows,
each priced as one iteration) and a closed-loop sweep of 8 requests a load (3 rows, simulated)."""
from __future__ import annotations

import csv
import io

from .cases import D

COLUMNS = ("sweep", "stack", "stack_version", "hardware", "n_devices", "target", "target_dtype", "method", "drafter",
           "k", "tree_size", "drafter_options", "load_kind", "load", "prompt_tokens", "output_tokens", "n_requests",
           "n_users", "context_len", "speculative", "tpot_s", "e2e_latency_s", "output_tokens_per_s",
           "measured_speedup", "tau", "alpha", "role", "source")
K = 4  # the speculative rows' draft length: tau and speedups are bounded by K + 1 = 5
_PLAIN = {"sweep": "fz-batch", "stack": "vllm", "hardware": "h100-sxm", "n_devices": 1, "target": "llama-3.1-8b",
          "method": "none", "load_kind": "batch", "context_len": 1024, "speculative": 0, "role": "fit",
          "source": "fuzz campaign base table"}
_SPEC = {**_PLAIN, "method": "draft_model", "drafter": "llama-3.2-1b", "k": K, "speculative": 1, "tau": 2.5}
# a plain step of an 8B fp16 model on an H100 (16 GB over 3.35 TB/s is 4.8 ms, plus the stack's own time)
BATCH_ROWS = [{**_PLAIN, "load": 1, "tpot_s": 0.0070}, {**_PLAIN, "load": 8, "tpot_s": 0.0076},
              {**_PLAIN, "load": 32, "tpot_s": 0.0092},
              {**_SPEC, "load": 1, "tpot_s": 0.0040}, {**_SPEC, "load": 8, "tpot_s": 0.0047, "role": "check"}]
_LOOP = {**_PLAIN, "sweep": "fz-loop", "load_kind": "concurrency", "context_len": "", "prompt_tokens": 64,
         "output_tokens": 32, "n_requests": 8}
LOOP_ROWS = [{**_LOOP, "load": 1, "output_tokens_per_s": 140.0}, {**_LOOP, "load": 4, "output_tokens_per_s": 520.0},
             {**_LOOP, "method": "draft_model", "drafter": "llama-3.2-1b", "k": K, "speculative": 1, "tau": 2.5,
              "load": 1, "output_tokens_per_s": 240.0}]


def table(rows) -> str:
    f = io.StringIO()
    w = csv.DictWriter(f, COLUMNS, lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({c: r.get(c, "") for c in COLUMNS})
    return f.getvalue()


def _with(rows, i: int, **changes):
    out = [dict(r) for r in rows]
    out[i].update(changes)
    return out


def add_cases(g) -> None:
    def add(title, rows, exp, culprit=(), flags=(), **kw):
        g.add("load", title, ["calibrate", "load", f"{D}/sweep.csv", "--json", *flags],
              files={"sweep.csv": table(rows), **kw.pop("files", {})}, expect=exp, culprit=culprit,
              check="load", timeout_s=kw.pop("timeout_s", 120.0), **kw)

    add("the base batch table as it is", BATCH_ROWS, "valid")
    # -- metrics out of units
    for v in ("1e-9", "2e6", "0", "-0.007", "nan", "inf", "7ms", ""):
        add(f"plain tpot_s = {v!r}", _with(BATCH_ROWS, 0, tpot_s=v), "refuse", ("tpot_s",))
    # milliseconds typed as seconds on the plain row: 7 s a step passes the unit bounds, but the speculative
    # row at the same load is then 1750x faster than plain, past K + 1
    add("plain tpot_s in ms (7.0)", _with(BATCH_ROWS, 0, tpot_s=7.0), "refuse", ("tpot_s", "speedup"))
    for v in ("1e10", "1e-9", "-140"):
        add(f"output_tokens_per_s = {v}", _with(LOOP_ROWS, 0, output_tokens_per_s=v), "refuse",
            ("output_tokens_per_s",))
    add("e2e_latency_s = 1e7 instead of the rate", _with(LOOP_ROWS, 1, output_tokens_per_s="", e2e_latency_s=1e7),
        "refuse", ("e2e_latency_s",))
    # -- one-token outputs: no decode step runs, and the calibration fits decode steps
    for v in (1, 0, -1, 1.5):
        add(f"output_tokens = {v}", [{**r, "output_tokens": v} for r in LOOP_ROWS], "refuse", ("output_tokens",))
    add("output_tokens = 2 (the fewest that decode)", [{**r, "output_tokens": 2} for r in LOOP_ROWS], "valid",
        timeout_s=240.0)
    # -- acceptance and speedups past what a cycle can emit (K drafted tokens and the bonus one)
    for v, exp in ((K + 1.5, "refuse"), (0.5, "refuse"), (-1, "refuse"), ("nan", "refuse"), (K + 1, "valid"), (1, "valid")):
        add(f"tau = {v} at K = {K}", _with(BATCH_ROWS, 3, tau=v), exp, ("tau",))
    for v in (0, -1, 1.5):
        add(f"k = {v}", [{**r, "k": v} if r["speculative"] else r for r in BATCH_ROWS], "refuse", ("k",))
    for v, exp in ((K + 2, "refuse"), (0.001, "refuse"), (K + 1, "either")):
        add(f"measured_speedup = {v} on a row without a metric",
            _with(BATCH_ROWS, 3, tpot_s="", measured_speedup=v), exp, ("measured_speedup", "speedup"))
    add("speculative tpot_s worked to a speedup of K + 2", _with(BATCH_ROWS, 3, tpot_s=0.0070 / (K + 2)), "refuse",
        ("tpot_s", "speedup"))
    # -- sizes: every row is simulated, so a table past the limits is refused with its size before any fit
    many = [{**_PLAIN, "sweep": f"fz-{i // 10}", "load": 1 + i % 10, "tpot_s": 0.007} for i in range(1001)]
    add("1001 rows in one table", many, "refuse", ("1001", "1000", "rows"), timeout_s=60.0)
    wide = [{**_PLAIN, "load": 1 + i, "tpot_s": 0.007 + 1e-5 * i} for i in range(101)]
    add("101 rows in one sweep", wide, "refuse", ("101", "100", "sweep"), timeout_s=60.0)
    # -- the per-token share
    add("--token-share 1.5", BATCH_ROWS, "refuse", ("--token-share",), flags=("--token-share", "1.5"))
    add("--token-share-loo ''", BATCH_ROWS, "refuse", ("--token-share-loo",), flags=("--token-share-loo", ""))
    add("--token-share-loo with 1000 values", BATCH_ROWS, "either", ("--token-share-loo",),
        flags=("--token-share-loo", ",".join(f"{i / 1000:.3f}" for i in range(1000))), timeout_s=60.0)
    # -- --write-scenario
    add("--write-scenario ''", BATCH_ROWS, "refuse", ("--write-scenario",), flags=("--write-scenario", ""))
    add("--write-scenario onto a file", BATCH_ROWS, "refuse", ("--write-scenario", "scen"),
        flags=("--write-scenario", f"{D}/scen"), files={"scen": "a file, not a folder\n"})
    add("--write-scenario: the files are there, no --force", BATCH_ROWS, "refuse", ("--force", "fz-batch"),
        flags=("--write-scenario", f"{D}/scen"), out="scen", prefill={"fz-batch.toml": "earlier\n"})
    add("--write-scenario: the files are there, --force", BATCH_ROWS, "valid",
        flags=("--write-scenario", f"{D}/scen", "--force"), out="scen", prefill={"fz-batch.toml": "earlier\n"},
        meta={"written": ["scen/fz-batch.toml", "scen/fz-batch.stack.toml"]})
    add("--write-scenario: two sweeps give one file name", [*BATCH_ROWS, *[{**r, "sweep": "FZ batch"} for r in BATCH_ROWS]],
        "refuse", ("fz-batch", "fz batch", "file name"), flags=("--write-scenario", f"{D}/scen"))
    add("--write-scenario: a sweep named to climb out of DIR", [{**r, "sweep": "../../escape"} for r in BATCH_ROWS],
        "either", ("sweep",), flags=("--write-scenario", f"{D}/scen"), meta={"absent": ["escape.toml", "../escape.toml"]})
    # a link in DIR to a file outside it: --force replaces what is in DIR, never the file the link points to
    add("--write-scenario --force over a symlink to a file outside DIR", BATCH_ROWS, "either", ("fz-batch", "link"),
        flags=("--write-scenario", f"{D}/scen", "--force"),
        files={"outside.toml": "must stay\n", "scen/fz-batch.toml": ("symlink", "../outside.toml")},
        meta={"unchanged": {"outside.toml": "must stay\n"}})
    add("--write-scenario over a dangling symlink to outside DIR", BATCH_ROWS, "either", ("fz-batch", "link"),
        flags=("--write-scenario", f"{D}/scen", "--force"),
        files={"scen/fz-batch.toml": ("symlink", "../made-outside.toml")}, meta={"absent": ["made-outside.toml"]})
