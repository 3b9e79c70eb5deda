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
import copy
import hashlib
import json
import math
import os
import random
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path

try:
    import tomllib
except ImportError:  # pragma: no cover
    import tomli as tomllib

RUNNER = "import sys; from specsim.cli import main; sys.exit(main(sys.argv[1:]))"
REPO = Path(__file__).resolve().parents[1]
FAILURE_CLASSES = ("traceback", "silent nonsense", "native crash", "hang", "partial output", "stray output",
                   "unclear refusal", "other exit")
CLASS_ORDER = ("clean refusal", "valid result", "unclear refusal", "traceback", "silent nonsense",
               "native crash", "hang", "partial output", "stray output", "other exit", "n/a", "harness error")
D = "{d}"  # replaced by the case's folder


# ------------------------------------------------------------------------------------------ cases

@dataclass
class Case:
    id: str
    group: str
    title: str
    argv: list
    files: dict = field(default_factory=dict)       # name -> bytes | str | ("catalog", kind, id, mutate)
    expect: str = "either"                          # refuse | valid | either
    culprit: tuple = ()                             # tokens a refusal should name (any one, case-insensitive)
    check: str = "none"                             # what an exit 0 must satisfy (see check_output)
    meta: dict = field(default_factory=dict)
    out: str | None = None                          # output folder or file (relative to the case folder)
    prerun: list = field(default_factory=list)      # argv lists run first (their outcome is not classified)
    prefill: dict = field(default_factory=dict)     # out-folder files written before the run
    interrupt_s: float | None = None
    interrupt_group: bool = True                    # SIGINT the process group (a terminal's Ctrl-C) or the process
    timeout_s: float = 120.0
    twin: list | None = None                        # a second argv whose answer must agree (determinism, reordering)


def _toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{_key(k)} = {_toml_value(x)}" for k, x in v.items()) + " }"
    if isinstance(v, RawToml):
        return v.text
    raise TypeError(v)


class RawToml:
    """A value written verbatim (a TOML datetime, say)."""

    def __init__(self, text: str):
        self.text = text


def _key(k: str) -> str:
    return k if re.fullmatch(r"[A-Za-z0-9_-]+", k) else json.dumps(k)


def to_toml(table: dict) -> str:
    lines = [f"{_key(k)} = {_toml_value(v)}" for k, v in table.items() if not isinstance(v, dict)]
    for k, v in table.items():
        if isinstance(v, dict):
            lines += ["", f"[{_key(k)}]"]
            for kk, vv in v.items():
                if isinstance(vv, dict) and k not in ("policies", "workload", "sources"):
                    lines.append(f"{_key(kk)} = {_toml_value(vv)}")
                else:
                    lines.append(f"{_key(kk)} = {_toml_value(vv)}")
    return "\n".join(lines) + "\n"


POINT = {"name": "fz", "hardware": "h100-sxm", "target": "llama-3.1-8b", "drafter": "llama-3.2-1b",
         "method": "draft_model", "k": 4, "alpha": 0.7, "batch_size": 4, "context_len": 1024, "tp": 1,
         "drafter_tp": 1, "attention": "fused", "temperature": 0.0}
THRESHOLD = {"margin": 0.05, "batch_sizes": [1, 2, 4, 8, 16, 32, 64, 128],
             "alphas": [0.2, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9]}
SWEEP = {"k": [2, 4], "batch_size": [1, 4, 16], "alpha": [0.6, 0.8], "context_len": [512, 2048]}
WORKLOAD = {"kind": "poisson", "n_requests": 30, "rate_per_s": 4.0,
            "prompt": {"kind": "fixed", "tokens": 256}, "output": {"kind": "fixed", "tokens": 32}}
ENGINE = {"max_num_seqs": 64, "max_num_batched_tokens": 4096, "chunked_prefill": True, "block_size": 16,
          "gpu_memory_utilization": 0.9}
POLICIES = {"never": {"kind": "never"}, "static_k4": {"kind": "static", "k": 4},
            "gate_bs16": {"kind": "disable_by_batch_size", "k": 4, "threshold": 16}}
SLO = {"ttft_s": 2.0, "tpot_s": 0.05}


def point_scenario(**extra) -> dict:
    s = dict(POINT)
    s.update(extra)
    return s


def analysis_scenario() -> dict:
    s = point_scenario()
    s["threshold"] = copy.deepcopy(THRESHOLD)
    s["sweep"] = copy.deepcopy(SWEEP)
    return s


def serving_scenario(workload=None) -> dict:
    s = point_scenario()
    s["workload"] = copy.deepcopy(workload or WORKLOAD)
    s["engine"] = copy.deepcopy(ENGINE)
    s["policies"] = copy.deepcopy(POLICIES)
    s["slo"] = copy.deepcopy(SLO)
    return s


# bad values: (value, kind) with kind "type" (never acceptable where a number is due), or a number
NUM_BAD = [("abc", "type"), ("4", "type"), ("", "type"), ([1, 2], "type"), ({"a": 1}, "type"), (True, "type"),
           (RawToml("1979-05-27T07:32:00Z"), "type"), (float("nan"), "nan"), (float("inf"), "inf"),
           (float("-inf"), "inf"), (-1, -1), (0, 0), (-0.0, 0.0), (1e308, 1e308), (5e-324, 5e-324), (10**7, 10**7),
           (2**63 - 1, 2**63 - 1), (0.5, 0.5), (1.5, 1.5), (3, 3), (-1e-9, -1e-9)]


def judge(spec, value, kind) -> str:
    """What a value deserves against a field spec: 'refuse' or 'either'."""
    typ, lo, hi = spec
    if kind == "type":
        if typ == "str" and isinstance(value, str) and value:
            return "either"
        return "refuse"
    if typ == "str":
        return "refuse"
    if kind == "inf" and typ == "float+inf" and value == float("inf"):
        return "either"
    if kind in ("nan", "inf"):
        return "refuse"
    v = float(kind)
    if typ == "int" and (isinstance(value, float) or not float(v).is_integer()):
        return "refuse"
    if typ == "bool":
        return "refuse"
    if (lo is not None and v < lo) or (hi is not None and v > hi):
        return "refuse"
    return "either"


# field specs: (type, lowest acceptable, highest acceptable); None = unbounded or unsure
TOP_SPECS = {
    "k": ("int", 0, 64), "alpha": ("float", 0.0, 1.0), "batch_size": ("int", 1, 4096), "context_len": ("int", 0, 131000),
    "tp": ("int", 1, None), "drafter_tp": ("int", 1, 1), "temperature": ("float", 0.0, None),
    "allow_cross_tokenizer": ("bool", None, None), "attention": ("str", None, None), "method": ("str", None, None),
    "hardware": ("str", None, None), "target": ("str", None, None), "drafter": ("str", None, None),
}
THRESHOLD_SPECS = {"margin": ("float", 0.0, 10.0), "k_max": ("int", 1, 64), "batch_limit": ("int", 1, None)}
WORKLOAD_SPECS = {"n_requests": ("int", 1, 100000), "rate_per_s": ("float", 1e-6, None)}
ENGINE_SPECS = {"max_num_seqs": ("int", 1, None), "max_num_batched_tokens": ("int", 1, None),
                "block_size": ("int", 1, None), "gpu_memory_utilization": ("float", 1e-9, 1.0),
                "chunked_prefill": ("bool", None, None)}
SLO_SPECS = {"ttft_s": ("float+inf", 5e-324, None), "tpot_s": ("float+inf", 5e-324, None)}  # inf: no target
HW_SPECS = {"memory_gib": ("float", 1e-9, None), "mem_bandwidth_gb_s": ("float", 1e-9, None),
            "interconnect_gb_s": ("float", 0.0, None), "interconnect_latency_us": ("float", 0.0, None),
            "llc_mb": ("float", 0.0, None), "peak_tflops.bf16": ("float", 1e-9, None),
            "peak_tflops.fp16": ("float", 1e-9, None), "efficiency.bandwidth_frac": ("float", 1e-9, 1.0),
            "efficiency.compute_frac": ("float", 1e-9, 1.0), "efficiency.step_overhead_us": ("float", 0.0, None),
            "efficiency.per_layer_overhead_us": ("float", 0.0, None)}
MODEL_SPECS = {"n_layers": ("int", 1, None), "hidden_size": ("int", 1, None), "n_heads": ("int", 1, None),
               "n_kv_heads": ("int", 1, None), "head_dim": ("int", 1, None), "ffn_size": ("int", 1, None),
               "vocab_size": ("int", 1, None), "max_context": ("int", 1, None),
               "tied_embeddings": ("bool", None, None), "published_params_b": ("float", 1e-9, None)}
STACK_SPECS = {"bandwidth_frac": ("float", 1e-9, 1.0), "compute_frac": ("float", 1e-9, 1.0),
               "step_overhead_us": ("float", 0.0, None), "per_layer_overhead_us": ("float", 0.0, None),
               "cycle_overhead_us": ("float", 0.0, None)}


def set_path(table: dict, dotted: str, value) -> None:
    parts = dotted.split(".")
    for p in parts[:-1]:
        table = table.setdefault(p, {})
    table[parts[-1]] = value


def del_path(table: dict, dotted: str) -> None:
    parts = dotted.split(".")
    for p in parts[:-1]:
        table = table.get(p, {})
    table.pop(parts[-1], None)


def typo(key: str, rng: random.Random) -> str:
    last = key.split(".")[-1]
    if len(last) < 3:
        return ".".join(key.split(".")[:-1] + [last + "_"])
    i = rng.randrange(len(last) - 1)
    swapped = last[:i] + last[i + 1] + last[i] + last[i + 2:]
    if swapped == last:
        swapped = last + "x"
    return ".".join(key.split(".")[:-1] + [swapped])


def file_level_bad(rng: random.Random, good: bytes) -> list[tuple[str, bytes, str]]:
    """(title, content, expectation) for whole-file damage of a text input."""
    cut = max(1, len(good) // 2 + rng.randrange(-20, 20))
    return [
        ("empty file", b"", "refuse"),
        ("random binary", bytes(rng.randrange(256) for _ in range(300)), "refuse"),
        ("NUL bytes", good[:40] + b"\x00\x00\x00" + good[40:], "refuse"),
        ("UTF-16 encoded", good.decode("utf-8").encode("utf-16"), "refuse"),
        ("invalid UTF-8", good[:30] + b"\xff\xfe\xfa" + good[30:], "refuse"),
        ("truncated mid-file", good[:cut], "either"),
    ]


class Gen:
    """Builds the case list from one seed."""

    def __init__(self, seed: int):
        self.rng = random.Random(seed)
        self.cases: list[Case] = []
        self.n = {}

    def add(self, group: str, title: str, argv: list, **kw) -> Case:
        self.n[group] = self.n.get(group, 0) + 1
        if kw.get("twin") is not None:
            kw["twin"] = [str(a) for a in kw["twin"]]
        c = Case(id=f"{group}-{self.n[group]:04d}", group=group, title=title, argv=[str(a) for a in argv], **kw)
        self.cases.append(c)
        return c

    # -- bad flags ------------------------------------------------------------------------------
    def flags(self) -> None:
        rng = self.rng
        base = ["predict", "--hardware", "h100-sxm", "--target", "llama-3.1-8b", "--drafter", "llama-3.2-1b",
                "--method", "draft_model", "--json"]
        numeric = {
            "--k": ("int", 0, 64), "--alpha": ("float", 0.0, 1.0), "--tau": ("float", 1.0, 5.0),
            "--batch": ("int", 1, 4096), "--context": ("int", 0, 131000), "--tp": ("int", 1, 8),
            "--drafter-tp": ("int", 1, 1), "--temperature": ("float", 0.0, None),
            "--tree-size": ("int", 5, 4096), "--baseline-tokens-per-s": ("float", 1e-3, 1e7),
            "--baseline-step-time-s": ("float", 1e-7, 100.0),
        }
        values = ["nan", "inf", "-inf", "-1", "0", "-0", "", " ", "abc", "1.5", "1e308", "5e-324", "10000000",
                  "1e400", "0x10", "1_000", "4,4", "2", "65", "0.999", "1e-300", "-1e-9", "NaN", "Infinity", "3"]
        fields = {"--batch": "batch_size", "--context": "context_len", "--tree-size": "tree_size",
                  "--drafter-tp": "drafter_tp", "--baseline-tokens-per-s": "baseline_tokens_per_s",
                  "--baseline-step-time-s": "baseline_step_time_s"}
        for flag, spec in numeric.items():
            name = fields.get(flag, flag.lstrip("-").replace("-", "_"))
            bare = flag.lstrip("-")
            culprit = (flag, f"'{name}'", f"{name} =", f"{name}=") + ((name,) if len(name) > 3 else ()) + \
                ((bare,) if len(bare) > 3 else ())
            for v in values:
                typ, lo, hi = spec
                try:
                    num = float(v.replace("_", "")) if v.strip() and v != "0x10" else None
                except ValueError:
                    num = None
                if num is None or (typ == "int" and not re.fullmatch(r"-?\d+", v.strip().replace("_", ""))):
                    exp = "refuse"
                elif not math.isfinite(num) or (lo is not None and num < lo) or (hi is not None and num > hi):
                    exp = "refuse"
                else:
                    exp = "either"
                if flag == "--tree-size" and num == 0:
                    exp = "either"  # 0 asks for a chain (documented)
                argv = base + ([] if flag in ("--alpha", "--tau") else ["--alpha", "0.7"]) + [f"{flag}={v}"]
                meta = {"k": int(num) if flag == "--k" and exp == "either" else 4}
                self.add("flags", f"predict {flag}={v!r}", argv, expect=exp, culprit=culprit, check="predict",
                         meta=meta)
        for flag, vals in {"--hardware": ["", "h100-sxn", "/dev/null", "/", "no/such/file.toml", "a" * 300],
                           "--target": ["", "llama-3.1-8", "/dev/null", "/etc"],
                           "--drafter": ["", "llama-3.2-1", "/dev/zero"],
                           "--target-dtype": ["", "fp3", "int4-awq", "FP8", "fp8"],
                           "--method": ["", "medus", "none"], "--attention": ["", "flash"],
                           "--stack": ["", "vllm2", "/dev/null", "none"]}.items():
            for v in vals:
                # "" and "none" clear an optional id (drafter, stack, target dtype): documented
                exp = "either" if v in ("int4-awq", "fp8", "none") or (v == "" and flag in ("--stack", "--target-dtype")) \
                    else "refuse"
                bare = flag.lstrip("-")
                culprit = (flag, bare, bare.replace("-", "_")) + (("model",) if flag in ("--target", "--drafter") else ()) \
                    + ((v,) if len(v) > 3 else ())
                self.add("flags", f"predict {flag}={v!r}", base + ["--alpha", "0.7", f"{flag}={v}"], expect=exp,
                         culprit=culprit, check="predict", meta={"k": 4})
        # the model's maximum context: llama-3.1-8b holds 131072 tokens
        for ctx in (131068, 131072, 131100, 200000, 10**9):
            self.add("flags", f"predict --context {ctx} past the model's maximum", base + ["--alpha", "0.7", "--context", ctx],
                     expect="refuse", culprit=("context",), check="predict", meta={"k": 4})
        for ctx in (1024, 100000, 131067):
            self.add("flags", f"predict --context {ctx} within the maximum", base + ["--alpha", "0.7", "--context", ctx],
                     expect="either", check="predict", meta={"k": 4, "context": ctx})
        for tau in ("100", "5.01", "0.99", "-1"):
            self.add("flags", f"predict --tau {tau} at K = 4", base + ["--k", "4", "--tau", tau], expect="refuse",
                     culprit=("--tau", "tau"), check="predict", meta={"k": 4})
        for combo in (["--alpha", "0.7", "--tau", "3"], ["--method", "prompt_lookup", "--alpha", "0.7"],
                      ["--alpha", "0.7", "--method", "medusa"], ["--alpha", "0.7", "--drafter", "llama-3.1-8b"],
                      ["--alpha", "0.7", "--drafter", "qwen2.5-0.5b"], ["--alpha", "0.7", "--tp", "3"],
                      ["--alpha", "0.7", "--tp", "1024"], ["--alpha", "0.7", "--batch", "100000000"],
                      ["--alpha", "0.7", "--k", "1", "--tree-size", "1000000"]):
            names = [a for a in combo if a.startswith("--")]
            culprit = tuple(names) + tuple(f"'{n.lstrip('-').replace('-', '_')}'" for n in names) + \
                ("tokenizer", "batch", "drafter", "tau", "alpha", "tree_size", "prompt_lookup", "medusa")
            self.add("flags", "predict " + " ".join(combo), base + combo, expect="either", check="predict",
                     meta={"k": 4}, culprit=culprit)
        # threshold
        for v in ("nan", "inf", "-1", "-0.5", "abc", "", "1e308", "0", "0.1", "10", "-inf"):
            exp = "either" if v in ("0", "0.1", "10") else "refuse"
            self.add("flags", f"threshold --margin={v!r}", ["threshold", "seed-70b-hbm", f"--margin={v}", "--json"],
                     expect=exp, culprit=("--margin", "margin"), check="threshold")
        # simulate
        serve = to_toml(serving_scenario())
        for v in ("1,1", "0", "-1", "nan", "inf", "", ",", "1,,2", "a", "1e-300", "2,1", "1e9", "4", "0.5,2",
                  "1 2", "-inf", "1e400"):
            exp = "either" if v in ("2,1", "4", "0.5,2", "1e9", "1e-300") else "refuse"
            self.add("flags", f"simulate --rates={v!r}", ["simulate", f"{D}/s.toml", f"--rates={v}", "--json"],
                     files={"s.toml": serve}, expect=exp, culprit=("--rates",), check="simulate",
                     meta={"k": 4, "out_tokens": 32}, timeout_s=180)
        for v in ("never,never", "", "nope", "never,nope", ",", "never", "static_k4,never"):
            exp = "either" if v in ("never", "static_k4,never") else "refuse"
            self.add("flags", f"simulate --policies={v!r}", ["simulate", f"{D}/s.toml", f"--policies={v}", "--json"],
                     files={"s.toml": serve}, expect=exp, culprit=("--policies", "nope"), check="simulate",
                     meta={"k": 4, "out_tokens": 32}, timeout_s=180)
        for v in ("-1", "abc", "", "1.5", str(2**64), "0", "7"):
            exp = "either" if v in ("0", "7", str(2**64)) else "refuse"
            self.add("flags", f"simulate --seed={v!r}", ["simulate", f"{D}/s.toml", f"--seed={v}", "--json"],
                     files={"s.toml": serve}, expect=exp, culprit=("--seed",), check="simulate",
                     meta={"k": 4, "out_tokens": 32}, timeout_s=180)
        # calibrate steps
        rows = calibrate_rows()
        for v in ("", "nope", "bandwidth_frac,bandwidth_frac", "bandwidth_frac,,compute_frac", ",", "compute_frac"):
            exp = "either" if v == "compute_frac" else "refuse"
            self.add("flags", f"calibrate steps --fit={v!r}", ["calibrate", "steps", f"{D}/rows.csv", f"--fit={v}", "--json"],
                     files={"rows.csv": rows}, expect=exp, culprit=("--fit", "nope"), check="json")
        for v in ("", "nope", "a100-sxm-80gb"):
            self.add("flags", f"calibrate steps --hardware={v!r}", ["calibrate", "steps", f"{D}/rows.csv",
                     f"--hardware={v}", "--json"], files={"rows.csv": rows}, expect="refuse",
                     culprit=("--hardware", "hardware", "nope"), check="json")
        # catalog look-ups
        for cmd in (["hardware", "show"], ["models", "show"], ["scenarios", "show"]):
            for v in ("", "nope", "/dev/null", "/", "../../etc/passwd", "x" * 500):
                self.add("flags", f"{' '.join(cmd)} {v[:20]!r}", cmd + [v, "--json"], expect="refuse",
                         culprit=(v[:40] if v else cmd[0][:-1], cmd[0][:-1], "file", "id"), check="json")
        # decoder run: flags refused before any kernel runs
        model = "/work/shared/data/SmolLM2-135M-Instruct.Q4_1.gguf"
        dbase = ["decoder", "run", "--model", f"{D}/tiny.gguf", "--prompt-file", f"{D}/p.txt", "--raw", "--tokens", "4"]
        dfiles = {"tiny.gguf": ("tiny_gguf", {}), "p.txt": "hello world, this is a test\n"}
        dec = {"--tokens": ["0", "-1", "abc", "1e9"], "--layers": ["0", "-1", "1000"], "--threads": ["0", "-1", "100000"],
               "--temperature": ["inf", "nan", "-1"], "--top-k": ["-1"], "--top-p": ["0", "1.5", "nan", "-1"],
               "-k": ["0", "-1", "1000"], "--min-n": ["0", "-1"], "--max-n": ["0"], "--n-prompts": ["0", "-1"],
               "--tree": ["", ";", "a", "0,0", "0;0", "-1"], "--repeats": ["0", "-1"], "--seed": ["-1", "x"]}
        for flag, vals in dec.items():
            for v in vals:
                argv = dbase + [f"{flag}={v}"] if flag != "-k" else dbase + ["-k", v]
                if flag in ("--tree",):
                    argv += ["--drafter", "tree"]
                if flag == "--layers":
                    argv += ["--drafter", "layer-skip"]
                self.add("flags", f"decoder run {flag}={v!r}", argv, files=dfiles, expect="refuse",
                         culprit=(flag, flag.lstrip("-")), check="none", timeout_s=240)
        for flag, v in (("--prompt-file", f"{D}/missing.txt"), ("--prompt-file", f"{D}/bin.txt"),
                        ("--prompt-file", f"{D}/empty.txt"), ("--model", f"{D}/missing.gguf"), ("--model", "/")):
            argv = ["decoder", "run", "--model", f"{D}/tiny.gguf", "--prompt-file", f"{D}/p.txt", "--raw", "--tokens",
                    "4"]
            argv[argv.index(flag) + 1] = v
            self.add("flags", f"decoder run {flag} {Path(v).name}", argv,
                     files={**dfiles, "bin.txt": bytes(range(256)) * 4, "empty.txt": ""}, expect="refuse",
                     culprit=(flag, Path(v).name or v), check="none", timeout_s=240)
        for flag, vals in {"--m": ["", "0", "-1", "1,1", "a", "100000"], "--contexts": ["", "-1", "1,1", "x", "10000000"],
                           "--repeats": ["0", "-1"]}.items():
            for v in vals:
                self.add("flags", f"decoder bench {flag}={v!r}", ["decoder", "bench", "--model", f"{D}/tiny.gguf",
                         f"{flag}={v}"], files=dfiles, expect="refuse", culprit=(flag, flag.lstrip("-")),
                         check="none", timeout_s=240)
        del model

    # -- TOML ------------------------------------------------------------------------------------
    def toml_scenarios(self, n: int) -> None:
        rng = self.rng
        sections = [("", TOP_SPECS, "predict"), ("threshold", THRESHOLD_SPECS, "threshold"),
                    ("workload", WORKLOAD_SPECS, "simulate"), ("engine", ENGINE_SPECS, "simulate"),
                    ("slo", SLO_SPECS, "simulate")]
        for i in range(n):
            sec, specs, cmd = sections[0] if i < n * 0.4 else rng.choice(sections)
            scen = serving_scenario() if cmd == "simulate" else analysis_scenario()
            op = rng.random()
            key = rng.choice(sorted(specs))
            dotted = f"{sec}.{key}" if sec else key
            if op < 0.72:
                value, kind = rng.choice(NUM_BAD if specs[key][0] != "str" else
                                         [("", "type"), (5, "type"), ([1], "type"), ("nope-x", "type"),
                                          (True, "type"), ({"a": 1}, "type")])
                set_path(scen, dotted, value)
                exp = judge(specs[key], value, kind)
                if specs[key][0] == "str" and isinstance(value, str):
                    exp = "refuse"
                if key == "context_len" and kind not in ("type", "nan", "inf") and exp == "either":
                    exp = "either"
                title = f"[{sec or 'top'}] {key} = {_toml_value(value)[:30]}"
                culprit = (key, key.split("_")[0] if len(key.split("_")[0]) > 3 else key) + \
                    ((value,) if isinstance(value, str) and len(value) > 2 else ()) + \
                    (("model",) if key in ("target", "drafter") else ())
            elif op < 0.84:
                bad = typo(dotted, rng)
                v = copy.deepcopy(scen)
                del_path(v, dotted)
                set_path(v, bad, 1)
                scen = v
                exp, title, culprit = "refuse", f"unknown key {bad}", (bad.split(".")[-1],)
            elif op < 0.92 and sec:
                scen.pop(sec, None)
                exp = "either" if sec in ("threshold", "slo", "engine") else "refuse"
                title, culprit = f"section [{sec}] missing", (sec,)
            else:
                set_path(scen, f"{sec}.bogus_table" if sec else "bogus_table", {"x": 1})
                exp, title, culprit = "refuse", f"unknown table in [{sec or 'top'}]", ("bogus_table",)
            self._scenario_case("toml-scenario", title, scen, cmd, exp, culprit)
        # list-valued keys and policy tables
        lists = [("threshold.batch_sizes", [[], [0, 1], [-4], [1, "a"], [1, 1, 2], "4", [1.5], [10**7]]),
                 ("threshold.alphas", [[], [1.5], [-0.1], [float("nan")], [0.5, 0.5], ["x"], [0.0]]),
                 ("sweep.batch_size", [[], [-1], [0], ["a"], [10**8], 4]),
                 ("sweep.k", [[0], [-1], [1000], ["x"]]), ("sweep.alpha", [[1.5], [-0.2], [float("nan")]]),
                 ("sweep.context_len", [[-1], [10**8]]), ("sweep.hardware", [["nope"], [1], []]),
                 ("workload.prompt", [{"kind": "fixed", "tokens": 0}, {"kind": "fixed", "tokens": -5},
                                      {"kind": "fixed", "tokens": 10**7}, {"kind": "fixed"}, {"kind": "nope", "tokens": 5},
                                      {"kind": "uniform", "low": 10, "high": 5}, {"kind": "lognormal", "mean": -1},
                                      {"kind": "fixed", "tokens": "256"}, "256"]),
                 ("workload.output", [{"kind": "fixed", "tokens": 0}, {"kind": "fixed", "tokens": -1},
                                      {"kind": "fixed", "tokens": 2.5}, {"kind": "fixed", "tokens": 10**7}]),
                 ("workload.rates", [[], [0], [-1], ["a"], [1, 1], [float("inf")]]),
                 ("workload.kind", ["nope", 5, ""]), ("workload.cv", [0, -1, float("nan")]),
                 ("workload.window_s", [[600, 0], [1e9, 2e9], [0], ["a", "b"], [-5, -1]]),
                 ("policies.static_k4", [{"kind": "static", "k": 0}, {"kind": "static", "k": -1},
                                         {"kind": "static", "k": 1000}, {"kind": "nope"}, {"kind": "static"},
                                         {"kind": "static", "k": "4"}, {"kind": "static", "k": 4, "sticky": "no"}]),
                 ("policies.gate_bs16", [{"kind": "disable_by_batch_size", "k": 4, "threshold": 0},
                                         {"kind": "disable_by_batch_size", "k": 4, "threshold": -3},
                                         {"kind": "disable_by_batch_size", "k": 4, "threshold": "16"},
                                         {"kind": "disable_by_batch_size", "k": 4}]),
                 ("policies", [{}, {"never": {"kind": "never"}, "never2": {"kind": "never"}}]),
                 ("engine.chunked_prefill", ["false", "no", 0]),
                 ]
        for dotted, vals in lists:
            for v in vals:
                sec = dotted.split(".")[0]
                cmd = {"threshold": "threshold", "sweep": "sweep"}.get(sec, "simulate")
                scen = serving_scenario() if cmd == "simulate" else analysis_scenario()
                set_path(scen, dotted, v)
                exp = "refuse"
                if (dotted, repr(v)) in {("threshold.batch_sizes", "[1, 1, 2]"), ("sweep.batch_size", "4"),
                                         ("threshold.batch_sizes", "[10000000]"), ("sweep.batch_size", "[100000000]"),
                                         ("sweep.k", "[0]"), ("workload.rates", "[]"), ("policies", "{}"),
                                         ("policies.static_k4", "{'kind': 'static', 'k': 0}"),
                                         ("workload.output", "{'kind': 'fixed', 'tokens': 10000000}"),
                                         ("policies.static_k4", "{'kind': 'static', 'k': 1000}"),
                                         ("sweep.k", "[1000]"), ("threshold.alphas", "[0.0]"),
                                         ("policies", "{'never': {'kind': 'never'}, 'never2': {'kind': 'never'}}"),
                                         ("workload.rates", "[1, 1]"), ("threshold.alphas", "[0.5, 0.5]")}:
                    exp = "either"
                self._scenario_case("toml-scenario", f"{dotted} = {_toml_value(v)[:40]}", scen, cmd, exp,
                                    (dotted.split(".")[-1], sec))
        # whole-file damage
        good = to_toml(analysis_scenario()).encode()
        for title, content, exp in file_level_bad(rng, good) + [
                ("duplicate key", good + b"k = 5\n", "refuse"), ("unclosed table", b"[threshold\nmargin = 1\n", "refuse"),
                ("a folder as the scenario", None, "refuse")]:
            for cmd in ("predict", "threshold", "sweep"):
                if content is None:
                    argv = self._argv_for(cmd, f"{D}/dir.toml")
                    self.add("toml-scenario", f"{cmd}: {title}", argv, files={"dir.toml/x": "a = 1\n"}, expect="refuse",
                             culprit=("dir.toml",), check=_check_for(cmd), meta={"k": 4},
                             out="out" if cmd == "sweep" else None)
                    continue
                argv = self._argv_for(cmd, f"{D}/s.toml")
                self.add("toml-scenario", f"{cmd}: {title}", argv, files={"s.toml": content}, expect=exp,
                         culprit=("s.toml",), check=_check_for(cmd), meta={"k": 4},
                         out="out" if cmd == "sweep" else None)

    def _argv_for(self, cmd: str, scen_path: str) -> list:
        return {"predict": ["predict", scen_path, "--json"], "threshold": ["threshold", scen_path, "--json"],
                "sweep": ["sweep", scen_path, "--out", f"{D}/out", "--no-plots", "--quiet"],
                "simulate": ["simulate", scen_path, "--json", "--quiet"]}[cmd]

    def _scenario_case(self, group, title, scen, cmd, exp, culprit, **kw) -> Case:
        meta = {"k": scen.get("k", 4) if isinstance(scen.get("k"), int) else 4, "out_tokens": 32}
        if isinstance(scen.get("context_len"), int) and exp == "either":
            meta["context"] = scen["context_len"]
        try:
            text = to_toml(scen)
        except TypeError:
            text = to_toml(POINT)
        return self.add(group, f"{cmd}: {title}", self._argv_for(cmd, f"{D}/s.toml"), files={"s.toml": text},
                        expect=exp, culprit=culprit, check=_check_for(cmd), meta=meta,
                        out="out" if cmd == "sweep" else None, timeout_s=180 if cmd == "simulate" else 120, **kw)

    def toml_catalog(self, kind: str, ident: str, specs: dict, n: int, extra_keys=()) -> None:
        """Mutations of the installation's own catalog file `kind/ident.toml`."""
        rng = self.rng
        group = {"hardware": "toml-hardware", "models": "toml-model", "stacks": "toml-stack"}[kind]
        for i in range(n):
            op = rng.random()
            key = rng.choice(sorted(specs))
            if op < 0.7:
                value, k = rng.choice(NUM_BAD)
                mut = ("set", key, value)
                exp = judge(specs[key], value, k)
                title, culprit = f"{key} = {_toml_value(value)[:30]}", (key.split(".")[-1],)
            elif op < 0.82:
                bad = typo(key, rng)
                mut = ("rename", key, bad)
                exp, title, culprit = "refuse", f"unknown key {bad}", (bad.split(".")[-1],)
            elif op < 0.92:
                mut = ("delete", key, None)
                exp, title, culprit = "refuse", f"{key} missing", (key.split(".")[-1],)
            else:
                mut = ("set", "id", rng.choice([5, "", "other-id"]))
                exp, title, culprit = "either", f"id = {mut[2]!r}", ("id",)
            self._catalog_case(group, kind, ident, mut, title, exp, culprit)
        for extra in extra_keys:
            self._catalog_case(group, kind, ident, ("set", extra[0], extra[1]), f"{extra[0]} = {extra[1]!r}",
                               extra[2], (extra[0].split(".")[-1],))
        for title, mut, exp in (("empty file", ("raw", b""), "refuse"),
                                ("random binary", ("raw", bytes(rng.randrange(256) for _ in range(200))), "refuse"),
                                ("UTF-16", ("utf16", None, None), "refuse"), ("truncated", ("truncate", None, None), "refuse")):
            self._catalog_case(group, kind, ident, mut, title, exp, (f"{kind[:5]}",))

    def _catalog_case(self, group, kind, ident, mut, title, exp, culprit) -> None:
        fname = {"hardware": "hw.toml", "models": "model.toml", "stacks": "stack.toml"}[kind]
        files = {fname: ("catalog", kind, ident, mut)}
        if kind == "hardware":
            argv = ["predict", "--hardware", f"{D}/{fname}", "--target", "llama-3.1-8b", "--drafter", "llama-3.2-1b",
                    "--alpha", "0.7", "--json"]
        elif kind == "models":
            argv = ["predict", "--target", f"{D}/{fname}", "--drafter", "llama-3.2-1b", "--alpha", "0.7", "--json"]
            if self.rng.random() < 0.25:
                argv = ["models", "show", f"{D}/{fname}", "--json"]
        else:
            files["s.toml"] = to_toml(point_scenario(stack=f"{D}/{fname}"))
            argv = ["predict", f"{D}/s.toml", "--json"]
        self.add(group, title, argv, files=files, expect=exp, culprit=culprit + (fname,),
                 check="predict" if argv[0] == "predict" else "json", meta={"k": 4})

    # -- traces ----------------------------------------------------------------------------------
    def traces(self) -> None:
        rng = self.rng
        azure = (REPO / "data/traces/azure_llm_inference_2023/AzureLLMInferenceTrace_conv.csv").read_text().splitlines()[:61]
        plain = ["arrival_time_s,prompt_tokens,output_tokens"] + [f"{0.25 * i:.2f},{200 + 7 * i},{20 + i % 13}"
                                                                  for i in range(50)]
        moon = (REPO / "data/traces/mooncake_fast25/conversation_trace.jsonl").read_text().splitlines()[:40]

        def add(fmt, title, lines_or_bytes, exp, culprit=("trace.",), **extra):
            data = lines_or_bytes if isinstance(lines_or_bytes, bytes) else ("\n".join(lines_or_bytes) + "\n").encode()
            name = {"azure": "trace.csv", "plain": "trace.csv", "mooncake": "trace.jsonl"}[fmt]
            wl = {"kind": "trace", "trace": f"{D}/{name}", "format": fmt}
            wl.update(extra)
            scen = serving_scenario(wl)
            self.add("trace", f"{fmt}: {title}", ["simulate", f"{D}/s.toml", "--json", "--quiet", "--rates", "2",
                                                  "--policies", "never,static_k4"],
                     files={"s.toml": to_toml(scen), name: data}, expect=exp, culprit=culprit + (name,),
                     check="simulate", meta={"k": 4}, timeout_s=240)

        for fmt, lines in (("azure", azure), ("plain", plain)):
            head, body = lines[0], lines[1:]
            add(fmt, "valid", lines, "either")
            add(fmt, "empty", b"", "refuse")
            add(fmt, "header only", [head], "refuse")
            add(fmt, "header and blank lines", [head, "", ""], "refuse")
            for title, content, exp in file_level_bad(rng, ("\n".join(lines) + "\n").encode())[1:]:
                add(fmt, title, content, exp)
            add(fmt, "BOM before the header", b"\xef\xbb\xbf" + ("\n".join(lines) + "\n").encode(), "either")
            add(fmt, "CRLF line ends", ("\r\n".join(lines) + "\r\n").encode(), "either")
            cols = head.split(",")
            add(fmt, "a column renamed", [",".join([cols[0], cols[1] + "x", cols[2]])] + body, "refuse", (cols[1],))
            add(fmt, "a column missing", [",".join(cols[:2])] + [",".join(r.split(",")[:2]) for r in body], "refuse",
                (cols[2],))
            add(fmt, "columns reordered", [",".join([cols[1], cols[0], cols[2]])] +
                [",".join([r.split(",")[1], r.split(",")[0], r.split(",")[2]]) for r in body], "either")
            add(fmt, "an extra column", [head + ",extra"] + [r + ",1" for r in body], "either")
            add(fmt, "a short row", [head] + body[:5] + [",".join(body[5].split(",")[:2])] + body[6:], "refuse")
            for col in (1, 2):
                for bad in ("-5", "0", "abc", "3.5", "", "nan", "inf", "1e9", "99999999999999999999"):
                    i = rng.randrange(len(body))
                    row = body[i].split(",")
                    row[col] = bad
                    exp = "either" if bad == "1e9" and False else "refuse"
                    if bad in ("1e9", "99999999999999999999"):
                        exp = "either"
                    add(fmt, f"{cols[col]} = {bad!r} on line {i + 2}", [head] + body[:i] + [",".join(row)] + body[i + 1:],
                        exp, (cols[col],))
            for bad in ("abc", "", "nan", "-1", "inf") + (("2023-13-45 99:99:99.0",) if fmt == "azure" else ()):
                i = rng.randrange(1, len(body))
                row = body[i].split(",")
                row[0] = bad
                exp = "refuse"
                add(fmt, f"time = {bad!r} on line {i + 2}", [head] + body[:i] + [",".join(row)] + body[i + 1:], exp,
                    (cols[0],))
            shuffled = body[:]
            i = rng.randrange(5, len(body) - 5)
            shuffled[i], shuffled[i + 3] = shuffled[i + 3], shuffled[i]
            add(fmt, "unsorted times", [head] + shuffled, "refuse", (cols[0],))
            add(fmt, "every prompt past the model's context", [head] + [
                ",".join([r.split(",")[0], "200000", r.split(",")[2]]) for r in body], "refuse", ("context", "reject"))
            add(fmt, "window with no requests", lines, "refuse", ("window",), window_s=[1e6, 2e6])
        add("mooncake", "valid", moon, "either")
        add("mooncake", "empty", b"", "refuse")
        add("mooncake", "not JSON", moon[:5] + ["{not json"] + moon[5:], "refuse")
        add("mooncake", "random binary", bytes(rng.randrange(256) for _ in range(300)), "refuse")
        for key, bad in (("input_length", -5), ("input_length", "x"), ("output_length", 0), ("timestamp", -1),
                         ("timestamp", "x"), ("output_length", None)):
            rows = [json.loads(x) for x in moon]
            i = rng.randrange(1, len(rows))
            if bad is None:
                rows[i].pop(key)
            else:
                rows[i][key] = bad
            add("mooncake", f"{key} = {bad!r} on line {i + 1}", [json.dumps(r) for r in rows], "refuse", (key,))

    # -- CSVs ------------------------------------------------------------------------------------
    def csvs(self) -> None:
        rng = self.rng
        replay = (REPO / "tests/data/published_examples.csv").read_text().splitlines()
        header, rows = replay[0], replay[1:6]
        cols = header.split(",")
        base_lines = [header] + rows + ["fz-r1,h100-sxm,1,vllm,llama-3.1-8b,llama-3.2-1b,draft_model,4,,1,1024,0,0.7,,1.8,,,fuzz"]
        import csv as _csv
        import io

        def parse(lines):
            return list(_csv.reader(io.StringIO("\n".join(lines))))

        def unparse(table):
            buf = io.StringIO()
            w = _csv.writer(buf, lineterminator="\n")
            w.writerows(table)
            return buf.getvalue().encode()

        table = parse(base_lines)

        def add(title, content, exp, culprit=(), bad_row=None):
            self.add("csv-replay", title, ["replay", f"{D}/rows.csv", "--json"], files={"rows.csv": content},
                     expect=exp, culprit=culprit + ("rows.csv",), check="replay", meta={"bad_row": bad_row})

        add("valid", unparse(table), "either")
        for title, content, exp in file_level_bad(rng, unparse(table)):
            add(title, content, exp)
        add("header only", unparse(table[:1]), "refuse")
        add("a required column missing", unparse([r[:7] + r[8:] for r in table]), "refuse", ("k",))
        add("optional column misspelt (target_dtyp)", unparse([[("target_dtyp" if c == "target_dtype" else c) for c in table[0]]]
                                                            + table[1:]), "refuse", ("target_dtyp",))
        add("an unknown column", unparse([table[0] + ["speedup_measured"]] + [r + ["1"] for r in table[1:]]), "refuse",
            ("speedup_measured",))
        add("duplicate ids", unparse(table + [table[-1]]), "either", ("id",))
        bad_values = {
            "k": ["-1", "0", "abc", "1.5", "nan", "1000"], "tree_size": ["0", "-3", "2", "abc"],
            "batch_size": ["0", "-1", "10000000", "abc", "1.5"], "context_len": ["-5", "abc", "10000000", "nan"],
            "temperature": ["-1", "nan", "inf", "abc"], "alpha": ["1.5", "-0.1", "nan", "abc", "inf"],
            "tau": ["100", "-1", "0.5", "nan", "abc", "0"], "measured_speedup": ["0", "-1", "nan", "inf", "abc", ""],
            "n_devices": ["0", "-1", "abc", "1.5"], "hardware": ["nope", ""], "target": ["nope", ""],
            "method": ["nope", ""], "stack": ["nope"], "target_dtype": ["fp3"], "drafter_options": ["x", "nope=1", "n_heads_medusa=-1"],
        }
        for col, vals in bad_values.items():
            ci = cols.index(col)
            for v in vals:
                t = copy.deepcopy(table)
                ri = len(t) - 1 if col not in ("tree_size",) else 1
                if col == "drafter_options":
                    ri = 2  # the medusa row
                t[ri][ci] = v
                exp = "refuse"
                if (col, v) in {("k", "1000"), ("stack", "nope")}:
                    exp = "refuse"
                if (col, v) == ("measured_speedup", ""):  # documented: a row predicted with nothing to compare
                    add(f"{col} = {v!r} in row {t[ri][0]}", unparse(t), "either", (col,))
                    continue
                culprit = (col, t[ri][0], col.split("_")[0]) + ((v,) if len(v) > 2 else ())
                add(f"{col} = {v!r} in row {t[ri][0]}", unparse(t), exp, culprit, bad_row=t[ri][0])
        # calibrate steps
        crow = calibrate_rows()
        ctable = parse(crow.decode().splitlines())
        ccols = ctable[0]

        def cadd(title, content, exp, culprit=()):
            self.add("csv-calibrate", title, ["calibrate", "steps", f"{D}/rows.csv", "--json"], files={"rows.csv": content},
                     expect=exp, culprit=culprit + ("rows.csv",), check="json")

        cadd("valid", crow, "either")
        for title, content, exp in file_level_bad(rng, crow):
            cadd(title, content, exp)
        cadd("header only", unparse(ctable[:1]), "refuse")
        cadd("a column missing", unparse([r[:-1] for r in ctable]), "refuse", ("measured_time_s",))
        cvals = {"measured_time_s": ["0", "-1", "nan", "inf", "abc", ""], "batch_size": ["0", "-1", "abc", "1.5"],
                 "tp": ["0", "3", "-1"], "q_len": ["0", "-1"], "context_len": ["-1", "10000000"], "logit_len": ["-1", "abc"],
                 "hardware": ["nope"], "target": ["nope"]}
        for col, vals in cvals.items():
            ci = ccols.index(col)
            for v in vals:
                t = copy.deepcopy(ctable)
                t[2][ci] = v
                cadd(f"{col} = {v!r}", unparse(t), "refuse" if (col, v) != ("tp", "3") else "either", (col,))
        # splitwise format
        split = (REPO / "data/perf/splitwise_sim/perf_model.csv").read_text().splitlines()
        sp = [split[0]] + [r for r in split[1:] if "llama2-70b,h100-80gb" in r][:40]
        sargs = ["calibrate", "steps", f"{D}/perf.csv", "--format", "splitwise", "--hardware", "h100-sxm", "--json"]
        self.add("csv-calibrate", "splitwise: valid", sargs, files={"perf.csv": "\n".join(sp) + "\n"}, check="json")
        stab = parse(sp)
        for col in ("token_time", "prompt_time", "batch_size", "tensor_parallel"):
            for v in ("-1", "0", "abc", "nan"):
                t = copy.deepcopy(stab)
                t[3][stab[0].index(col)] = v
                self.add("csv-calibrate", f"splitwise: {col} = {v!r}", sargs, files={"perf.csv": unparse(t)},
                         expect="refuse", culprit=(col, "perf.csv"), check="json")
        self.add("csv-calibrate", "splitwise: empty", sargs, files={"perf.csv": b""}, expect="refuse",
                 culprit=("perf.csv",), check="json")
        # calibrate host --file (Vidur's cpu_overheads format)
        host = (REPO / "data/perf/vidur/cpu_overheads/a100.csv") if (REPO / "data/perf/vidur/cpu_overheads/a100.csv").exists() else None
        if host is not None:
            hl = host.read_text().splitlines()[:60]
            hargs = ["calibrate", "host", "--file", f"{D}/cpu.csv", "--json"]
            self.add("csv-calibrate", "host: valid", hargs, files={"cpu.csv": "\n".join(hl) + "\n"}, check="json")
            for title, content, exp in file_level_bad(rng, ("\n".join(hl) + "\n").encode()) + [
                    ("header only", (hl[0] + "\n").encode(), "refuse")]:
                self.add("csv-calibrate", f"host: {title}", hargs, files={"cpu.csv": content}, expect=exp,
                         culprit=("cpu.csv",), check="json")
            htab = parse(hl)
            for ci in range(min(len(htab[0]), 8)):
                for v in ("-1", "abc", "nan"):
                    t = copy.deepcopy(htab)
                    t[4][ci] = v
                    self.add("csv-calibrate", f"host: {htab[0][ci]} = {v!r}", hargs, files={"cpu.csv": unparse(t)},
                             expect="either", culprit=(htab[0][ci], "cpu.csv"), check="json")

    # -- Hugging Face config.json (models import) --------------------------------------------------
    def hf_configs(self) -> None:
        rng = self.rng
        cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
               "intermediate_size": 14336, "num_attention_heads": 32, "num_key_value_heads": 8,
               "num_hidden_layers": 32, "vocab_size": 128256, "max_position_embeddings": 131072,
               "tie_word_embeddings": False, "torch_dtype": "bfloat16"}
        argv = ["models", "import", f"{D}/config.json", "--id", "fz-model", "--tokenizer", "llama3"]
        good = json.dumps(cfg).encode()
        self.add("json-config", "valid", argv, files={"config.json": good}, expect="either", check="none")
        for title, content, exp in file_level_bad(rng, good) + [("a JSON list", b"[1, 2]", "refuse"),
                                                               ("a JSON string", b'"x"', "refuse"),
                                                               ("JSON with NaN", good.replace(b"4096", b"NaN", 1), "refuse")]:
            self.add("json-config", title, argv, files={"config.json": content}, expect=exp,
                     culprit=("config.json",), check="none")
        for key in ("hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads",
                    "num_hidden_layers", "vocab_size", "max_position_embeddings"):
            for v in ("4096", 0, -8, 1.5, None, [1], 10**30, 3):
                c = dict(cfg)
                if v is None:
                    c.pop(key)
                else:
                    c[key] = v
                exp = "either" if v == 3 and key in ("num_hidden_layers", "vocab_size", "intermediate_size",
                                                    "max_position_embeddings") else "refuse"
                if v is None and key in ("num_key_value_heads", "max_position_embeddings"):
                    exp = "either"
                self.add("json-config", f"{key} = {v!r}", argv, files={"config.json": json.dumps(c).encode()},
                         expect=exp, culprit=(key, "config.json", "n_", "head", "hidden", "layers", "vocab", "ffn",
                                              "context"), check="none")
        for title, target, files, exp in (("--out is a folder", f"{D}/adir", {"adir/x": "x"}, "refuse"),
                                          ("--out below a file", f"{D}/afile/m.toml", {"afile": "x"}, "refuse"),
                                          ("--out in /proc", "/proc/specsim-fuzz.toml", {}, "refuse"),
                                          ("--out ''", "", {}, "refuse"),
                                          ("--out a new file", f"{D}/m.toml", {}, "either")):
            self.add("output", f"models import: {title}", argv + ["--out", target],
                     files={"config.json": good, **files}, expect=exp, culprit=("--out", "out", "adir", "afile", "proc"),
                     check="none")

    # -- GGUF headers ----------------------------------------------------------------------------
    def gguf(self) -> None:
        rng = self.rng
        sys.path.insert(0, str(REPO / "tests"))
        try:
            from test_decoder_gguf import TINY_CASES  # the decoder tests' cases, reused
        except Exception:  # pragma: no cover - without numba/gguf
            TINY_CASES = {}
        finally:
            sys.path.pop(0)
        argv = ["decoder", "run", "--model", f"{D}/m.gguf", "--prompt-file", f"{D}/p.txt", "--raw", "--tokens", "4"]
        p = "hello world, this is a test\n"
        for name, (kw, _) in sorted(TINY_CASES.items()):
            self.add("gguf", f"tiny: {name}", argv, files={"m.gguf": ("tiny_gguf", kw), "p.txt": p}, expect="refuse",
                     culprit=("m.gguf",), check="decoder", timeout_s=240)
        for i in range(30):
            op = rng.choice(["truncate", "flip", "zero-run", "magic", "version", "counts"])
            self.add("gguf", f"tiny, bytes damaged: {op} #{i}", argv,
                     files={"m.gguf": ("tiny_gguf_damaged", {"op": op, "seed": rng.randrange(2**31)}), "p.txt": p},
                     expect="either", culprit=("m.gguf",), check="decoder", timeout_s=240)
        for title, data in (("empty", b""), ("random bytes", bytes(rng.randrange(256) for _ in range(4096))),
                            ("text file", b"GGUF is not this\n" * 10)):
            self.add("gguf", title, argv, files={"m.gguf": data, "p.txt": p}, expect="refuse", culprit=("m.gguf",),
                     check="decoder", timeout_s=240)
        for name, fields, drop in (("SmolLM2 head_count 7", {"llama.attention.head_count": 7}, None),
                                   ("SmolLM2 head_count 8", {"llama.attention.head_count": 8}, None),
                                   ("SmolLM2 head_count_kv 2", {"llama.attention.head_count_kv": 2}, None),
                                   ("SmolLM2 five blocks removed", {}, "blocks")):
            self.add("gguf", name, argv, files={"m.gguf": ("smollm2_edit", {"fields": fields, "drop": drop}), "p.txt": p},
                     expect="refuse", culprit=("m.gguf", "head", "block"), check="decoder", timeout_s=300)

    # -- interrupts ------------------------------------------------------------------------------
    def interrupts(self) -> None:
        big_serve = serving_scenario({"kind": "poisson", "n_requests": 3000, "rate_per_s": 20.0,
                                      "prompt": {"kind": "fixed", "tokens": 512}, "output": {"kind": "fixed", "tokens": 256}})
        for t in (1, 2, 3, 4, 5, 1.5, 2.5, 3.5, 4.5, 5):
            self.add("interrupt", f"SIGINT sweep seed-70b-hbm after {t} s",
                     ["sweep", "seed-70b-hbm", "--out", f"{D}/out", "--quiet"], interrupt_s=t, out="out",
                     expect="either", culprit=("interrupt",), timeout_s=400)
        for t in (1, 2, 3, 4, 5):
            self.add("interrupt", f"SIGINT simulate after {t} s", ["simulate", f"{D}/s.toml", "--out", f"{D}/out",
                     "--quiet", "--rates", "5,10,20"], files={"s.toml": to_toml(big_serve)}, interrupt_s=t, out="out",
                     expect="either", culprit=("interrupt",), timeout_s=400)
        for t in (2, 4):
            self.add("interrupt", f"SIGINT simulate's own process (kill -INT, not its workers) after {t} s",
                     ["simulate", f"{D}/s.toml", "--out", f"{D}/out", "--quiet", "--rates", "5,10,20"],
                     files={"s.toml": to_toml(big_serve)}, interrupt_s=t, interrupt_group=False, out="out",
                     expect="either", culprit=("interrupt",), timeout_s=400)
        small = analysis_scenario()
        for t in (2, 4):
            self.add("interrupt", f"SIGINT a re-run of sweep into a finished folder after {t} s",
                     ["sweep", "seed-70b-hbm", "--out", f"{D}/out", "--quiet", "--force"], interrupt_s=t, out="out",
                     prerun=[["sweep", f"{D}/small.toml", "--out", f"{D}/out", "--quiet", "--no-plots"]],
                     files={"small.toml": to_toml(small)}, expect="either", culprit=("interrupt",), timeout_s=400)
            self.add("interrupt", f"SIGINT a re-run of simulate into a finished folder after {t} s",
                     ["simulate", f"{D}/s.toml", "--out", f"{D}/out", "--quiet", "--rates", "5,10,20", "--force"],
                     interrupt_s=t, out="out", prerun=[["simulate", f"{D}/small.toml", "--out", f"{D}/out", "--quiet",
                                                       "--no-plots"]],
                     files={"s.toml": to_toml(big_serve), "small.toml": to_toml(serving_scenario())},
                     expect="either", culprit=("interrupt",), timeout_s=400)

    # -- output folders --------------------------------------------------------------------------
    def outputs(self) -> None:
        serve = to_toml(serving_scenario())
        small = to_toml(analysis_scenario())
        replay = (REPO / "tests/data/published_examples.csv").read_text()
        crow = calibrate_rows()
        cmds = {
            "sweep": (["sweep", f"{D}/s.toml", "--quiet", "--no-plots", "--out"], {"s.toml": small}, "folder"),
            "simulate": (["simulate", f"{D}/s.toml", "--quiet", "--no-plots", "--out"], {"s.toml": serve}, "folder"),
            "replay": (["replay", f"{D}/rows.csv", "--out"], {"rows.csv": replay}, "file"),
            "calibrate": (["calibrate", "steps", f"{D}/rows.csv", "--out"], {"rows.csv": crow}, "file"),
        }
        for name, (argv, files, kind) in cmds.items():
            for title, target, extra_files, exp in (
                    ("--out is an existing file", f"{D}/afile", {"afile": "x"}, "refuse" if kind == "folder" else "either"),
                    ("--out below a file", f"{D}/afile/sub", {"afile": "x"}, "refuse"),
                    ("--out in /proc", "/proc/specsim-fuzz-out", {}, "refuse"),
                    ("--out ''", "", {}, "refuse"),
                    ("--out is a folder" if kind == "file" else "--out new nested folder", f"{D}/new/a/b" if kind == "folder" else f"{D}/adir",
                     {"adir/keep": "x"} if kind == "file" else {}, "refuse" if kind == "file" else "either"),
                    ("--out with a trailing slash", f"{D}/o2/", {}, "either" if kind == "folder" else "refuse")):
                self.add("output", f"{name}: {title}", argv + [target], files={**files, **extra_files}, expect=exp,
                         culprit=("--out", "out", "afile", "adir", "proc"), check="none",
                         out=target.replace(f"{D}/", "") if target.startswith(D) else None)
        # reused folders
        for name in ("sweep", "simulate"):
            argv, files, _ = cmds[name]
            self.add("output", f"{name}: non-empty --out without --force", argv + [f"{D}/out"], files=files,
                     prefill={"notes.txt": "mine"}, out="out", expect="refuse", culprit=("--out", "out", "force"),
                     check="none")
        self.add("output", "simulate: rerun with other policies into the same folder (--force where it exists)",
                 ["simulate", f"{D}/s.toml", "--quiet", "--no-plots", "--policies", "never", "--out", f"{D}/out", "--force"],
                 files={"s.toml": serve}, out="out", expect="either", check="none",
                 prerun=[["simulate", f"{D}/s.toml", "--quiet", "--no-plots", "--out", f"{D}/out"]])
        self.add("output", "sweep: rerun with plots off into a folder with plots (--force where it exists)",
                 ["sweep", f"{D}/s.toml", "--quiet", "--no-plots", "--out", f"{D}/out", "--force"],
                 files={"s.toml": small}, out="out", expect="either", check="none",
                 prerun=[["sweep", f"{D}/s.toml", "--quiet", "--out", f"{D}/out"]], timeout_s=240)
        self.add("output", "simulate: rerun into the same folder without --force",
                 ["simulate", f"{D}/s.toml", "--quiet", "--no-plots", "--policies", "never", "--out", f"{D}/out"],
                 files={"s.toml": serve}, out="out", expect="either", check="none", culprit=("--out", "force"),
                 prerun=[["simulate", f"{D}/s.toml", "--quiet", "--no-plots", "--out", f"{D}/out"]])
        self.add("output", "replay: --out over an existing CSV", ["replay", f"{D}/rows.csv", "--out", f"{D}/old.csv"],
                 files={"rows.csv": replay, "old.csv": "a,b\n1,2\n"}, expect="either", check="none", out="old.csv")
        # a failing run must leave --out as it was
        bad = serving_scenario()
        bad["policies"]["static_k4"]["k"] = -1
        self.add("output", "simulate: a run refused after --out was checked leaves no files",
                 ["simulate", f"{D}/s.toml", "--quiet", "--no-plots", "--out", f"{D}/out"], files={"s.toml": to_toml(bad)},
                 out="out", expect="refuse", culprit=("k", "static_k4"), check="none")
        badsweep = analysis_scenario()
        badsweep["sweep"]["batch_size"] = [1, 4, -1]
        self.add("output", "sweep: a grid refused leaves no files",
                 ["sweep", f"{D}/s.toml", "--quiet", "--no-plots", "--out", f"{D}/out"], files={"s.toml": to_toml(badsweep)},
                 out="out", expect="refuse", culprit=("batch_size",), check="none")

    # -- random valid configurations -------------------------------------------------------------
    def valid(self, n_predict: int, catalog: dict) -> None:
        rng = self.rng
        hws = ["h100-sxm", "a100-sxm-80gb", "h200-sxm", "l40s", "rtx-4090", "mi300x", "b200", "a100-sxm-40gb",
               "ddr5-5600-2ch", "apple-m2-ultra"]
        pairs = [("llama-3.1-8b", "llama-3.2-1b"), ("llama-3.1-70b", "llama-3.2-1b"), ("llama-3.1-8b", "llama-3.2-3b"),
                 ("qwen2.5-7b", "qwen2.5-0.5b"), ("qwen2.5-72b", "qwen2.5-1.5b"), ("llama-2-7b", "llama-68m"),
                 ("codellama-34b", "codellama-7b"), ("mistral-7b", None), ("llama-2-13b", None), ("qwen3-8b", None)]
        methods = ["draft_model", "prompt_lookup", "medusa", "eagle", "layer_skip"]
        for i in range(n_predict):
            target, drafter = rng.choice(pairs)
            method = "draft_model" if drafter and rng.random() < 0.6 else rng.choice(methods[1:])
            k = rng.randint(1, 8)
            maxctx, heads = catalog.get(target, (4096, 32))
            if method == "draft_model":
                maxctx = min(maxctx, catalog.get(drafter, (maxctx, 0))[0])
            ctx = rng.choice([0, 1, 128, 1024, 4096, rng.randrange(0, max(1, maxctx - k - 1))])
            ctx = min(ctx, maxctx - k - 1)
            hw = rng.choice(hws)
            tps = [t for t in (1, 1, 1, 2, 4, 8) if heads % t == 0] if hw not in ("ddr5-5600-2ch", "apple-m2-ultra") else [1]
            argv = ["predict", "--hardware", hw, "--target", target, "--method", method, "--k", k,
                    "--batch", rng.choice([1, 2, 4, 8, 16, 32, 64, 128, 256, rng.randint(1, 512)]), "--context", ctx,
                    "--tp", rng.choice(tps)]
            if method == "draft_model":
                argv += ["--drafter", drafter]
            if rng.random() < 0.5:
                argv += ["--alpha", round(rng.random(), 4)]
            else:
                argv += ["--tau", round(1 + rng.random() * k, 3)]
            if rng.random() < 0.2:
                argv += ["--attention", "naive"]
            argv += ["--json"]
            self.add("valid-predict", " ".join(str(a) for a in argv[1:-1]), argv, expect="valid", check="predict",
                     meta={"k": k, "context": ctx, "max_context": maxctx}, twin=argv if i % 4 == 0 else None)
        for i in range(30):
            wl = {"kind": rng.choice(["poisson", "gamma"]), "n_requests": rng.randint(5, 60),
                  "rate_per_s": round(rng.uniform(0.5, 30), 2),
                  "prompt": {"kind": "fixed", "tokens": rng.choice([16, 128, 512, 2048])},
                  "output": {"kind": "fixed", "tokens": rng.choice([1, 2, 8, 64, 200])}}
            if wl["kind"] == "gamma":
                wl["cv"] = round(rng.uniform(0.3, 4), 2)
            scen = serving_scenario(wl)
            scen["alpha"] = round(rng.uniform(0.1, 0.95), 3)
            scen["batch_size"] = 1
            argv = ["simulate", f"{D}/s.toml", "--json", "--quiet", "--seed", rng.randrange(1000)]
            self.add("valid-simulate", f"{wl}", argv, files={"s.toml": to_toml(scen)}, expect="valid", check="simulate",
                     meta={"k": 4, "out_tokens": wl["output"]["tokens"]}, timeout_s=240,
                     twin=argv if i % 5 == 0 else None)
        for i in range(24):
            scen = analysis_scenario()
            target, drafter = rng.choice([p for p in pairs if p[1]])
            scen.update(target=target, drafter=drafter, hardware=rng.choice(hws[:6]), alpha=round(rng.uniform(0.3, 0.95), 3),
                        context_len=rng.choice([256, 1024, 4096]))
            shuffled = copy.deepcopy(scen)
            rng.shuffle(shuffled["threshold"]["alphas"])
            rng.shuffle(shuffled["threshold"]["batch_sizes"])
            self.add("valid-threshold", f"{target}/{drafter} on {scen['hardware']}, grid reordered in the twin",
                     ["threshold", f"{D}/s.toml", "--json"], files={"s.toml": to_toml(scen), "t.toml": to_toml(shuffled)},
                     expect="valid", check="threshold", twin=["threshold", f"{D}/t.toml", "--json"], meta={"metamorphic": True})
        for i in range(8):
            scen = analysis_scenario()
            scen["sweep"] = {"k": sorted(rng.sample([1, 2, 3, 4, 6, 8], 2)), "batch_size": [1, rng.choice([8, 64, 256])],
                             "alpha": [round(rng.uniform(0.3, 0.95), 2)], "context_len": [rng.choice([128, 4096])],
                             "hardware": [rng.choice(hws[:6])]}
            self.add("valid-sweep", f"{scen['sweep']}", ["sweep", f"{D}/s.toml", "--out", f"{D}/out", "--quiet",
                     "--no-plots"], files={"s.toml": to_toml(scen)}, expect="valid", check="sweep", out="out",
                     timeout_s=240)
        self.add("valid-replay", "the shipped example rows", ["replay", str(REPO / "tests/data/published_examples.csv"),
                 "--json"], expect="valid", check="replay", meta={})
        self.add("valid-decoder", "tiny model, prompt lookup", ["decoder", "run", "--model", f"{D}/m.gguf",
                 "--prompt-file", f"{D}/p.txt", "--raw", "--tokens", "6", "--json", f"{D}/r.json"],
                 files={"m.gguf": ("tiny_gguf", {}), "p.txt": "hello world, hello world, hello\n"}, expect="valid",
                 check="decoder-json", timeout_s=400)

    # -- every scenario table and field (issue 28 item 3) ---------------------------------------------
    # field -> (type, lowest possible, highest possible, lowest open): what the README and the
    # system being modelled allow; a value outside is impossible and must be refused. None: no
    # bound the system sets (the simulator may still refuse a value as past its own limits).
    TABLE_FIELDS = {
        "workload": ("poisson", {"n_requests": ("int", 1, None, False), "rate_per_s": ("float", 0.0, None, True),
                                 "kind": ("choice:trace,poisson,gamma,closed_loop", None, None, False)}),
        "workload@gamma": ("gamma", {"cv": ("float", 0.0, None, True)}),
        "workload@closed": ("closed_loop", {"n_users": ("int", 1, 30, False), "think_time_s": ("float", 0.0, None, False)}),
        "workload.prompt": ("poisson", {"tokens": ("int", 1, None, False)}),
        "workload.output": ("poisson", {"tokens": ("int", 1, None, False)}),
        "workload.prompt@uniform": ("uniform", {"min": ("int", 1, 64, False), "max": ("int", 1, None, False)}),
        "workload.prompt@lognormal": ("lognormal", {"mu": ("float", None, None, False), "sigma": ("float", 0.0, None, False)}),
        "workload.prompt@lognormal-mean": ("lognormal-mean", {"mean_tokens": ("float", 0.0, None, True)}),
        "workload@trace": ("trace", {"time_scale": ("float", 0.0, None, True), "trace": ("path", None, None, False),
                                     "format": ("choice:azure,mooncake,plain", None, None, False)}),
        "workload@mooncake": ("mooncake", {"jitter_s": ("float", 0.0, None, False)}),
        "engine": (None, {"max_num_seqs": ("int", 1, None, False), "max_num_batched_tokens": ("int", 1, None, False),
                          "chunked_prefill": ("bool", None, None, False), "block_size": ("int", 1, None, False),
                          "gpu_memory_utilization": ("float", 0.0, 1.0, True), "watermark_frac": ("float", 0.0, 0.999, False),
                          "max_model_len": ("int", 1, 131072, False), "acceptance_window_steps": ("int", 1, None, False),
                          "activation_reserve_gb": ("float", 0.0, 80.0, False), "n_blocks": ("int", 1, None, False),
                          "preemption_mode": ("choice:recompute,swap", None, None, False),
                          "scheduling": ("choice:fcfs,priority", None, None, False),
                          "prefix_caching": ("bool", None, None, False), "drafter_catchup": ("bool", None, None, False)}),
        "engine@swap": ("swap", {"swap_space_gib": ("float", 0.0, None, False),
                                 "swap_bandwidth_gb_s": ("float", 0.0, None, True)}),
        "fleet": (None, {"n_replicas": ("int", 1, None, False),
                         "layout": ("choice:colocated,disaggregated", None, None, False),
                         "router": ("choice:round_robin,least_outstanding,prefix_affinity", None, None, False)}),
        "fleet@affinity": ("affinity", {"cache_threshold": ("float", 0.0, 1.0, False),
                                        "balance_abs_threshold": ("int", 0, None, False),
                                        "balance_rel_threshold": ("float", 1.0, None, False)}),
        "fleet@disagg": ("disagg", {"n_prefill": ("int", 1, 1, False), "kv_transfer_gb_s": ("float", 0.0, None, True),
                                    "kv_transfer_latency_us": ("float", 0.0, None, False),
                                    "prefill_runs_drafter": ("bool", None, None, False)}),
        "slo": (None, {"ttft_s": ("float+inf", 0.0, None, True), "tpot_s": ("float+inf", 0.0, None, True)}),
        "policies.static_k4": ("static", {"k": ("int", 0, 64, False)}),
        "policies.gate_bs16": ("disable_by_batch_size", {"threshold": ("int", 1, 64, False), "sticky": ("bool", None, None, False)}),
        "policies.off": ("acceptance_off_switch", {"min_acceptance_frac": ("float", 0.0, 1.0, False),
                                                   "min_window_tokens": ("int", 1, None, False),
                                                   "probe_every_steps": ("int", 1, None, False)}),
        "policies.gp": ("goodput_optimal", {"k_max": ("int", 0, 64, False)}),
        "sweep": (None, {"tau_k": ("int", 1, 64, False)}),
        "sweep[]": (None, {"k": ("int", 0, 64, False), "batch_size": ("int", 1, None, False),
                           "context_len": ("int", 0, 131000, False), "alpha": ("float", 0.0, 1.0, False),
                           "tree_size": ("int", 1, None, False), "tp": ("int", 1, 8, False),
                           "temperature": ("float", 0.0, None, False), "attention": ("choice:fused,naive", None, None, False),
                           "hardware": ("id", None, None, False), "target": ("id", None, None, False),
                           "method": ("choice:draft_model,prompt_lookup,medusa,eagle,lookahead,layer_skip,mtp,sparse_kv",
                                      None, None, False),
                           "plots": ("id", None, None, False)}),
        "threshold": (None, {"margin": ("float", 0.0, None, False), "k_max": ("int", 1, 64, False),
                             "batch_limit": ("int", 1, None, False), "drafter_model": ("str", None, None, False)}),
        "threshold[]": (None, {"batch_sizes": ("int", 1, None, False), "alphas": ("float", 0.0, 1.0, False)}),
        "acceptance": (None, {"context_decay_per_token": ("float", 0.0, None, False),
                              "reference_context_len": ("float", 0.0, None, False),
                              "temperature_slope": ("float", None, None, False),
                              "reference_temperature": ("float", 0.0, None, False), "n_ranks": ("int", 1, None, False),
                              "rank_decay": ("float", 0.0, 1.0, False)}),
        "acceptance@by_position[]": ("by_position", {"by_position": ("float", 0.0, 1.0, False)}),
        "drafter_options@medusa": ("medusa", {"n_heads_medusa": ("int", 1, None, False),
                                              "medusa_layers_per_head": ("int", 1, None, False)}),
        "drafter_options@layer_skip": ("layer_skip", {"skip_layers": ("int", 1, 31, False)}),
        "drafter_options@lookahead": ("lookahead", {"lookahead_window": ("int", 1, None, False),
                                                    "lookahead_ngram": ("int", 2, None, False),
                                                    "lookahead_guesses": ("int", 1, None, False)}),
        "drafter_options@sparse_kv": ("sparse_kv", {"sparse_sink": ("int", 0, 131072, False),
                                                    "sparse_window": ("int", 1, 131072, False)}),
        "drafter_options@prompt_lookup": ("prompt_lookup", {"prompt_lookup_s_per_seq_per_ktoken": ("float", 0.0, 1.0, False)}),
        "drafter_options@eagle": ("eagle", {"eagle_version": ("int", 1, 3, False)}),
    }
    # one sample per kind of fault, and an edge that is possible
    FIELD_VALUES = [("abc", "type"), (True, "type"), ([1, 2], "type"), (float("nan"), "nan"), (float("inf"), "inf"),
                    (-1, -1), (0, 0), (0.5, 0.5), (1e30, 1e30), (2 ** 63 - 1, 2 ** 63 - 1)]

    def _table_base(self, table: str, variant: str | None) -> tuple[dict, str]:
        """A scenario whose `table` the command reads, in the variant a field needs."""
        sec = table.split(".")[0]
        if sec in ("workload", "engine", "fleet", "slo", "policies"):
            scen = serving_scenario()
            if variant == "gamma":
                scen["workload"].update(kind="gamma", cv=1.0)
            elif variant == "uniform":
                scen["workload"]["prompt"] = {"kind": "uniform", "min": 1, "max": 64}
            elif variant == "lognormal":
                scen["workload"]["prompt"] = {"kind": "lognormal", "mu": 5.0, "sigma": 0.5}
            elif variant == "lognormal-mean":
                scen["workload"]["prompt"] = {"kind": "lognormal", "mean_tokens": 200.0, "sigma": 0.5}
            elif variant == "closed_loop":
                scen["workload"] = {"kind": "closed_loop", "n_requests": 30, "n_users": 4,
                                    "prompt": {"kind": "fixed", "tokens": 256}, "output": {"kind": "fixed", "tokens": 32}}
            elif variant in ("trace", "mooncake"):
                name = {"trace": "traces/azure_llm_inference_2023/AzureLLMInferenceTrace_conv.csv",
                        "mooncake": "traces/mooncake_fast25/conversation_trace.jsonl"}[variant]
                scen["workload"] = {"kind": "trace", "trace": name, "window_s": [0, 30]}
            elif variant == "swap":
                scen["engine"]["preemption_mode"] = "swap"
            elif variant == "affinity":
                scen["fleet"] = {"n_replicas": 2, "router": "prefix_affinity"}
            elif variant == "disagg":
                scen["fleet"] = {"n_replicas": 2, "layout": "disaggregated", "n_prefill": 1}
            elif variant in ("static", "disable_by_batch_size", "acceptance_off_switch", "goodput_optimal"):
                base = {"static": {"kind": "static", "k": 4}, "disable_by_batch_size": {"kind": "disable_by_batch_size",
                        "k": 4, "threshold": 16}, "acceptance_off_switch": {"kind": "acceptance_off_switch", "k": 4,
                        "min_acceptance_frac": 0.5}, "goodput_optimal": {"kind": "goodput_optimal", "k_max": 4}}[variant]
                scen["policies"] = {"never": {"kind": "never"}, table.split(".")[1]: base}
            if table == "fleet" and "fleet" not in scen:
                scen["fleet"] = {"n_replicas": 1}
            return scen, "simulate"
        if sec in ("sweep", "threshold"):
            return analysis_scenario(), sec
        scen = point_scenario()
        if variant == "by_position":
            scen.pop("alpha")
            scen["acceptance"] = {"by_position": [0.8, 0.7]}
        elif variant is not None and sec == "drafter_options":
            scen.update(method=variant, drafter_options={})
            if variant != "draft_model":
                scen.pop("drafter")
        else:
            scen["tree_size"] = 8
            scen["method"] = "eagle"
            scen.pop("drafter")
            scen["acceptance"] = {}
        return scen, "predict"

    def tables(self) -> None:
        for key, (variant, fields) in self.TABLE_FIELDS.items():
            table, _, _ = key.partition("@")
            listed = table.endswith("[]")
            table = table.rstrip("[]")
            for name, spec in fields.items():
                typ, lo, hi, lo_open = spec
                values = list(self.FIELD_VALUES)
                if typ.startswith("choice:"):
                    values = [("nope", "type"), (5, "type"), ("", "type"), (True, "type")] + \
                        [(c, "valid") for c in typ.split(":")[1].split(",")[:2]]
                elif typ in ("path", "id"):
                    values = [(5, "type"), ("", "type"), ([1], "type"), ("no/such/file-or-id", "type")]
                elif typ == "str":  # any non-empty string: a name printed as given
                    values = [(5, "type"), ("", "type"), ([1], "type"), ("meta-llama/Llama-3.2-1B", "valid")]
                for value, kind in values:
                    scen, cmd = self._table_base(table, variant)
                    v = [value] if listed else value
                    if table.startswith("drafter_options"):
                        scen["drafter_options"][name] = v
                    else:
                        set_path(scen, f"{table}.{name}", v)
                    exp = self._field_judge(spec, value, kind)
                    if table == "workload" and name == "kind" and value in ("trace", "poisson"):
                        exp = "refuse" if value == "trace" else "either"  # trace without a trace path
                    culprit = (name, name.split("_")[0] if len(name.split("_")[0]) > 3 else name, "interrupted")
                    if isinstance(value, str) and len(value) > 3:
                        culprit += (value,)
                    if table == "workload":
                        culprit += ("trace",)  # a format that is not the file's: the reader names the file
                    if table == "fleet":
                        culprit += ("n_prefill",)  # a disaggregated layout needs its prefill pool
                    c = self._scenario_case("tables", f"[{key}] {name} = {_toml_value(v)[:40]}", scen, cmd, exp,
                                            culprit, interrupt_s=60 if cmd == "simulate" else None)
                    if variant in ("trace", "mooncake"):
                        c.meta.pop("out_tokens", None)  # a trace's own lengths

    @staticmethod
    def _field_judge(spec, value, kind) -> str:
        typ, lo, hi, lo_open = spec
        if typ.startswith("choice:"):
            return "either" if kind == "valid" else "refuse"
        if typ in ("path", "id"):
            return "refuse"
        if typ == "str":
            return "either" if kind == "valid" else "refuse"
        if typ == "bool":
            return "either" if isinstance(value, bool) else "refuse"
        if kind == "type":
            return "refuse"
        if kind == "inf" and typ == "float+inf" and value > 0:
            return "either"
        if kind in ("nan", "inf"):
            return "refuse"
        v = float(kind)
        if typ == "int" and isinstance(value, float):
            return "refuse"
        if (lo is not None and (v <= lo if lo_open else v < lo)) or (hi is not None and v > hi):
            return "refuse"
        return "either"

    def cross_fields(self) -> None:
        """Rules that join fields and tables: each case breaks one."""
        def serve(**over):
            s = serving_scenario()
            for k, v in over.items():
                if isinstance(v, dict) and isinstance(s.get(k), dict) and k not in ("policies", "workload"):
                    s[k].update(v)
                else:
                    s[k] = v
            return s
        wl = copy.deepcopy(WORKLOAD)
        azure = "traces/azure_llm_inference_2023/AzureLLMInferenceTrace_conv.csv"
        cases = [
            ("a band above max_num_seqs", serve(policies={"b": {"kind": "k_by_batch_band", "bands": [[1, 4], [128, 2]]}}),
             "simulate", "refuse", ("bands", "max_num_seqs")),
            ("a band of one end", serve(policies={"b": {"kind": "k_by_batch_band", "bands": [[1], [8, 2]]}}), "simulate",
             "refuse", ("bands",)),
            ("a band of three ends", serve(policies={"b": {"kind": "k_by_batch_band", "bands": [[1, 4, 2]]}}), "simulate",
             "refuse", ("bands",)),
            ("bands with non-integer ends", serve(policies={"b": {"kind": "k_by_batch_band", "bands": [[1.5, 4]]}}),
             "simulate", "refuse", ("bands",)),
            ("bands descending", serve(policies={"b": {"kind": "k_by_batch_band", "bands": [[8, 4], [2, 1]]}}), "simulate",
             "refuse", ("bands",)),
            ("a gate above max_num_seqs", serve(policies={"g": {"kind": "disable_by_batch_size", "k": 4, "threshold": 1000}}),
             "simulate", "refuse", ("threshold", "max_num_seqs")),
            ("a policy name that is no file name", serve(policies={"a/b": {"kind": "never"}}), "simulate-out", "refuse",
             ("name", "a/b")),
            ("lognormal without parameters", serve(workload=dict(wl, prompt={"kind": "lognormal"})), "simulate", "refuse",
             ("sigma", "mu", "prompt")),
            ("lognormal with tokens", serve(workload=dict(wl, prompt={"kind": "lognormal", "mu": 5, "sigma": 1, "tokens": 3})),
             "simulate", "refuse", ("tokens",)),
            ("uniform min above max", serve(workload=dict(wl, prompt={"kind": "uniform", "min": 50, "max": 5})), "simulate",
             "refuse", ("min", "max")),
            ("fixed without tokens", serve(workload=dict(wl, prompt={"kind": "fixed"})), "simulate", "refuse", ("tokens",)),
            ("lengths_from beside prompt", serve(workload=dict(wl, lengths_from=azure)), "simulate", "refuse",
             ("lengths_from", "prompt")),
            ("a key of another kind (cv on poisson)", serve(workload=dict(wl, cv=2.0)), "simulate", "refuse", ("cv",)),
            ("more users than requests", serve(workload={"kind": "closed_loop", "n_requests": 5, "n_users": 50,
                                                         "prompt": {"kind": "fixed", "tokens": 16},
                                                         "output": {"kind": "fixed", "tokens": 4}}),
             "simulate", "refuse", ("n_users",)),
            ("rates on a closed loop", serve(workload={"kind": "closed_loop", "n_requests": 5, "n_users": 2, "rates": [1, 2],
                                                       "prompt": {"kind": "fixed", "tokens": 16},
                                                       "output": {"kind": "fixed", "tokens": 4}}),
             "simulate", "refuse", ("rates",)),
            ("jitter_s on an Azure trace", serve(workload={"kind": "trace", "trace": azure, "jitter_s": 1.0}), "simulate",
             "refuse", ("jitter_s",)),
            ("hash_block_tokens on an Azure trace", serve(workload={"kind": "trace", "trace": azure, "hash_block_tokens": 16}),
             "simulate", "refuse", ("hash_block_tokens",)),
            ("window_s reversed", serve(workload={"kind": "trace", "trace": azure, "window_s": [60, 0]}), "simulate",
             "refuse", ("window_s",)),
            ("window_s of one end", serve(workload={"kind": "trace", "trace": azure, "window_s": [60]}), "simulate",
             "refuse", ("window_s",)),
            ("a trace path as a number", serve(workload={"kind": "trace", "trace": 5}), "simulate", "refuse", ("trace",)),
            ("priority fractions not summing to 1", serve(workload=dict(wl, priority_fracs=[0.2, 0.2])), "simulate", "refuse",
             ("priority_fracs",)),
            ("swap space with recompute", serve(engine={"swap_space_gib": 8.0}), "simulate", "refuse", ("swap_space_gib",)),
            ("n_blocks above the memory", serve(engine={"n_blocks": 10 ** 8}), "simulate", "refuse", ("n_blocks",)),
            ("max_model_len above the context", serve(engine={"max_model_len": 10 ** 7}), "simulate", "refuse",
             ("max_model_len",)),
            ("prefix caching without prefixes", serve(engine={"prefix_caching": True}), "simulate", "refuse",
             ("prefix_caching",)),
            ("router keys without prefix_affinity", serve(fleet={"n_replicas": 2, "cache_threshold": 0.5}), "simulate",
             "refuse", ("cache_threshold",)),
            ("n_prefill on a colocated fleet", serve(fleet={"n_replicas": 2, "n_prefill": 1}), "simulate", "refuse",
             ("n_prefill",)),
            ("a disaggregated fleet of one", serve(fleet={"n_replicas": 1, "layout": "disaggregated", "n_prefill": 1}),
             "simulate", "refuse", ("n_replicas", "n_prefill")),
            ("every replica prefilling", serve(fleet={"n_replicas": 2, "layout": "disaggregated", "n_prefill": 2}),
             "simulate", "refuse", ("n_prefill",)),
            ("alpha and by_position", point_scenario(acceptance={"by_position": [0.8]}), "predict", "refuse",
             ("by_position", "alpha")),
            ("workload without calibrated", point_scenario(acceptance={"workload": "chat"}), "predict", "refuse",
             ("workload",)),
            ("calibrated and alpha", point_scenario(acceptance={"calibrated": "smollm2-135m/prompt-lookup/prose"}),
             "predict", "refuse", ("alpha", "calibrated")),
            ("a calibration of another target", dict({k: v for k, v in point_scenario(method="prompt_lookup").items()
                                                       if k not in ("alpha", "drafter")},
                                                      acceptance={"calibrated": "smollm2-135m/prompt-lookup/prose"}),
             "predict", "refuse", ("calibrated", "target")),
            ("a calibration of another method", dict({k: v for k, v in point_scenario(
                hardware="ddr5-5600-2ch", target="smollm2-135m-q4_1", method="layer_skip").items()
                if k not in ("alpha", "drafter")}, context_len=300, acceptance={"calibrated": "smollm2-135m/prompt-lookup/prose"}),
             "predict", "refuse", ("calibrated", "method")),
            ("a sparse window past the context", point_scenario(method="sparse_kv", drafter_options={"sparse_window": 10 ** 7}),
             "predict", "refuse", ("sparse_window",)),
            ("a sparse sink past the context", point_scenario(method="sparse_kv", drafter_options={"sparse_sink": 10 ** 30 // 10 ** 12}),
             "predict", "refuse", ("sparse_sink",)),
            ("a prompt-lookup cost of 1e30", point_scenario(method="prompt_lookup",
                                                            drafter_options={"prompt_lookup_s_per_seq_per_ktoken": 1e30}),
             "predict", "refuse", ("prompt_lookup_s_per_seq_per_ktoken",)),
            ("the drafter is the target", point_scenario(drafter="llama-3.1-8b"), "predict", "refuse", ("drafter",)),
            ("a tree of 10^5 nodes", point_scenario(method="eagle", tree_size=100000), "predict", "refuse", ("tree_size",)),
            ("a [sweep] tree of 10^5 nodes", dict(analysis_scenario(), sweep={"k": [4], "tree_size": [100000]}), "sweep",
             "refuse", ("tree_size",)),
            ("a [sweep] grid of 10^10 points", dict(analysis_scenario(), sweep={"k": list(range(1, 65)),
                                                                               "batch_size": list(range(1, 1001)),
                                                                               "context_len": list(range(0, 100000, 100)),
                                                                               "alpha": [i / 200 for i in range(200)]}),
             "sweep", "refuse", ("grid", "points", "batch_size")),
            ("alpha and tau in [sweep]", dict(analysis_scenario(), sweep={"alpha": [0.5], "tau": [2.0]}), "sweep", "refuse",
             ("tau", "alpha")),
            ("tau above tau_k + 1 in [sweep]", dict(analysis_scenario(), sweep={"tau": [9.0], "tau_k": 4}), "sweep", "refuse",
             ("tau",)),
            ("an unknown plot in [sweep]", dict(analysis_scenario(), sweep={"k": [2], "plots": ["nope"]}), "sweep", "refuse",
             ("plots", "nope")),
            ("a moved [threshold] key", dict(analysis_scenario(), threshold={"k": [1, 2]}), "threshold", "refuse",
             ("k_max", "k")),
        ]
        for key in ("engine", "fleet", "workload", "slo", "policies", "sweep", "threshold"):  # issue 27: every command
            scen = point_scenario(**{key: {"bogus_key": 1}})
            cases.append((f"a typo in [{key}] on predict", scen, "predict", "refuse", ("bogus_key",)))
        for key, value in (("engine", {"max_num_seqs": 0}), ("fleet", {"n_replicas": -1}), ("slo", {"ttft_s": -1}),
                           ("workload", {"kind": "nope"}), ("policies", {"x": {"kind": "static", "k": -1}}),
                           ("sweep", {"k": [-1]}), ("threshold", {"k_max": 0})):
            cases.append((f"an impossible [{key}] value on predict", point_scenario(**{key: value}), "predict", "refuse",
                          tuple(k for k in value) + ("k",)))
        for title, scen, cmd, exp, culprit in cases:
            if cmd == "simulate-out":
                self.add("cross-field", f"simulate: {title}", ["simulate", f"{D}/s.toml", "--quiet", "--no-plots", "--out",
                         f"{D}/out"], files={"s.toml": to_toml(scen)}, expect=exp, culprit=culprit, check="none",
                         out="out", timeout_s=180)
                continue
            self._scenario_case("cross-field", title, scen, cmd, exp, culprit)
        # a run that cannot end soon: said before it starts, and a SIGINT ends it cleanly
        big = serving_scenario({"kind": "poisson", "n_requests": 10 ** 7, "rate_per_s": 1e6,
                                "prompt": {"kind": "fixed", "tokens": 16}, "output": {"kind": "fixed", "tokens": 8}})
        self.add("cross-field", "simulate: 10^7 requests at 10^6 req/s, SIGINT after 20 s",
                 ["simulate", f"{D}/s.toml", "--quiet", "--json"], files={"s.toml": to_toml(big)}, interrupt_s=20,
                 expect="either", culprit=("interrupted",), check="simulate", timeout_s=400,
                 meta={"notice": True})
        huge = serving_scenario({"kind": "poisson", "n_requests": 10 ** 7, "rate_per_s": 1e9,
                                 "prompt": {"kind": "fixed", "tokens": 16}, "output": {"kind": "fixed", "tokens": 8}})
        self.add("cross-field", "simulate: 10^7 requests at 10^9 req/s", ["simulate", f"{D}/s.toml", "--quiet", "--json"],
                 files={"s.toml": to_toml(huge)}, interrupt_s=20, expect="either", culprit=("rate_per_s", "interrupted"),
                 check="simulate", timeout_s=400, meta={"notice": True})
        forever = serving_scenario({"kind": "poisson", "n_requests": 10 ** 7, "rate_per_s": 10.0,
                                    "prompt": {"kind": "fixed", "tokens": 16}, "output": {"kind": "fixed", "tokens": 4000}})
        self.add("cross-field", "simulate: 4 x 10^10 output tokens", ["simulate", f"{D}/s.toml", "--quiet", "--json"],
                 files={"s.toml": to_toml(forever)}, interrupt_s=20, expect="refuse", culprit=("tokens", "hours"),
                 check="simulate", timeout_s=400)

    # -- calibration files a scenario names -----------------------------------------------------------
    def calibration_files(self) -> None:
        good = {"name": "t/prompt-lookup/code-edit", "target": "llama-3.1-8b", "drafter": "prompt-lookup",
                "method": "prompt_lookup", "workload": "code-edit", "command": "fuzz", "level": 0.95,
                "reference": {"context_len": 1024.0, "temperature": 0.0, "k": 4},
                "iid": {"alpha": 0.7, "ci_low": 0.65, "ci_high": 0.75, "n_cycles": 200, "n_trials": 300},
                "conditional": {"rates": [0.7, 0.72], "ci_low": [0.6, 0.6], "ci_high": [0.8, 0.8]},
                "dependence": {"context_decay_per_token": 0.0, "context_decay_ci": [0.0, 0.0],
                               "temperature_slope": -0.1, "temperature_slope_ci": [-0.2, 0.0]},
                "coverage": {"context_len": [500.0, 1500.0], "temperatures": [0.0], "ks": [4], "workloads": ["code-edit"],
                             "drafters": ["prompt-lookup"]}}
        scen = {k: v for k, v in point_scenario(method="prompt_lookup").items() if k not in ("alpha", "drafter")}
        scen["acceptance"] = {"calibrated": f"{D}/cal.toml"}
        edits = [("valid", None, None, "either"), ("n_cycles = 0", "iid.n_cycles", 0, "refuse"),
                 ("n_cycles = -5", "iid.n_cycles", -5, "refuse"), ("ks = []", "coverage.ks", [], "refuse"),
                 ("ks = [0]", "coverage.ks", [0], "refuse"), ("ci_low above alpha", "iid.ci_low", 0.8, "refuse"),
                 ("ci_high below alpha", "iid.ci_high", 0.6, "refuse"), ("alpha = nan", "iid.alpha", float("nan"), "refuse"),
                 ("alpha = 1.5", "iid.alpha", 1.5, "refuse"),
                 ("a conditional ci_low above its rate", "conditional.ci_low", [0.75, 0.6], "refuse"),
                 ("conditional rates of another length", "conditional.ci_high", [0.8], "refuse"),
                 ("a dependence outside its interval", "dependence.temperature_slope", 0.5, "refuse"),
                 ("context coverage reversed", "coverage.context_len", [1500.0, 500.0], "refuse"),
                 ("reference k = 0", "reference.k", 0, "refuse"), ("reference context -1", "reference.context_len", -1.0, "refuse"),
                 ("level = 2", "level", 2.0, "refuse"), ("another target", "target", "qwen2.5-7b", "refuse"),
                 ("another method", "method", "eagle", "refuse"), ("an unknown target", "target", "no-such-model", "refuse"),
                 ("the same model in another format", "target", "llama-3.1-8b", "either"),
                 ("target missing", "target", None, "refuse")]
        for title, key, value, exp in edits:
            cal = copy.deepcopy(good)
            if key is not None:
                if value is None:
                    del_path(cal, key)
                else:
                    set_path(cal, key, value)
            self.add("calibration-file", title, ["predict", f"{D}/s.toml", "--json"],
                     files={"s.toml": to_toml(scen), "cal.toml": to_toml(cal)}, expect=exp,
                     culprit=(key.split(".")[-1] if key else "cal.toml", "cal.toml", "calibrated"), check="predict",
                     meta={"k": 4})

    # -- stack metrics (calibrate acceptance --import) ------------------------------------------------
    def stack_metrics(self) -> None:
        v0 = ("INFO 08-01 12:00:00 metrics.py:400] Speculative metrics: Draft acceptance rate: 0.642, System efficiency: "
              "0.598, Number of speculative tokens: {k}, Number of accepted tokens: {a}, Number of draft tokens: {d}, "
              "Number of emitted tokens: {e}.")
        v1 = ("INFO 08-01 12:00:00 [metrics.py:100] SpecDecoding metrics: Mean acceptance length: {tau}, Accepted "
              "throughput: 12.40 tokens/s, Drafted throughput: 15.10 tokens/s, Accepted: {a} tokens, Drafted: {d} tokens, "
              "Per-position acceptance rate: {rates}, Avg Draft acceptance rate: 82.1%")
        prom = ("vllm:spec_decode_num_drafts_total{{model_name=\"m\"}} {n}\n"
                "vllm:spec_decode_num_draft_tokens_total{{model_name=\"m\"}} {d}\n"
                "vllm:spec_decode_num_accepted_tokens_total{{model_name=\"m\"}} {a}\n"
                "vllm:spec_decode_num_accepted_tokens_per_pos_total{{model_name=\"m\",position=\"0\"}} {p0}\n"
                "vllm:spec_decode_num_accepted_tokens_per_pos_total{{model_name=\"m\",position=\"1\"}} {p1}\n")
        sglang = "[2025-01-01] Decode batch. #running-req: {r}, #token: 1234, token usage: 0.01, accept len: {tau}, gen throughput (token/s): 100\n"
        llama = "n_draft   = {k}\nn_predict = {p}\nn_drafted = {d}\nn_accept  = {a}\naccept    = 77.778%\n"
        files = [
            ("vLLM V0: valid", v0.format(k=3, a=8547, d=13311, e=10616), "either", ()),
            ("vLLM V0: 0 draft tokens", v0.format(k=3, a=0, d=0, e=0), "refuse", ("draft",)),
            ("vLLM V0: accepted above drafted", v0.format(k=3, a=20000, d=13311, e=10616), "refuse", ("accepted",)),
            ("vLLM V0: K = 0", v0.format(k=0, a=0, d=0, e=0), "refuse", ("k",)),
            ("vLLM V1: valid", v1.format(tau="3.26", a=226, d=300, rates="0.890, 0.760, 0.610") * 1, "either", ()),
            ("vLLM V1: 10^12 counters that disagree", v1.format(tau="2.73", a=10 ** 12, d=10 ** 12 + 7,
                                                                 rates="0.500, 0.200, 0.100"), "refuse", ("agree", "drafts")),
            ("vLLM V1: 10^12 counters that agree", v1.format(tau="2.50", a=3 * 10 ** 12 // 2, d=3 * 10 ** 12,
                                                              rates="0.700, 0.500, 0.300"), "either", ()),
            ("vLLM V1: accepted above drafted", v1.format(tau="2.73", a=500, d=151, rates="0.890, 0.760, 0.610"),
             "refuse", ("accepted",)),
            ("vLLM V1: rates growing with position", v1.format(tau="2.73", a=124, d=151, rates="0.100, 0.760, 0.910"),
             "refuse", ("rates", "position")),
            ("vLLM V1: a rate above 1", v1.format(tau="2.73", a=124, d=151, rates="1.890, 0.760, 0.610"), "refuse", ("rate",)),
            ("Prometheus: valid", prom.format(n=100, d=200, a=120, p0=70, p1=50), "either", ()),
            ("Prometheus: accepted above drafted", prom.format(n=100, d=200, a=300, p0=100, p1=200), "refuse",
             ("accepted", "drafted", "per-position")),
            ("Prometheus: accepted above drafted, per position consistent", prom.format(n=100, d=150, a=180, p0=100, p1=80),
             "refuse", ("accepted", "drafted")),
            ("Prometheus: more draft tokens than drafts x K", prom.format(n=10, d=200, a=12, p0=7, p1=5), "refuse",
             ("drafted", "drafts")),
            ("Prometheus: no drafts", prom.format(n=0, d=0, a=0, p0=0, p1=0), "refuse", ("drafts",)),
            ("Prometheus: a negative counter", prom.format(n=100, d=-200, a=120, p0=70, p1=50), "refuse", ("count",)),
            ("Prometheus: NaN", prom.format(n=100, d="NaN", a=120, p0=70, p1=50), "refuse", ("count", "finite")),
            ("SGLang: valid", sglang.format(r=4, tau="3.21") + sglang.format(r=2, tau="2.9"), "either", ()),
            ("SGLang: accept len above K + 1", sglang.format(r=4, tau="9.5"), "refuse", ("accept",)),
            ("SGLang: accept len below 1", sglang.format(r=4, tau="0.5"), "refuse", ("accept",)),
            ("llama.cpp: valid", llama.format(k=16, p=128, d=90, a=70), "either", ()),
            ("llama.cpp: more accepted than drafted", llama.format(k=16, p=128, d=50, a=70), "refuse", ("n_accept",)),
            ("llama.cpp: n_draft 0", llama.format(k=0, p=128, d=90, a=70), "refuse", ("n_draft",)),
            ("empty", "", "refuse", ()), ("binary", "\x00\x01\x02", "refuse", ()),
        ]
        for title, text, exp, culprit in files:
            argv = ["calibrate", "acceptance", "--import", f"{D}/m.log", "--json"]
            if title.startswith("SGLang"):
                argv += ["-k", "4"]
            self.add("stack-metrics", title, argv, files={"m.log": text}, expect=exp, culprit=culprit + ("m.log",),
                     check="json")
        good = v1.format(tau="3.26", a=226, d=300, rates="0.890, 0.760, 0.610")
        for flag in ("--context-len", "--temperature"):
            for v in ("-1", "nan", "inf", "1e308"):
                exp = "either" if v == "1e308" and flag == "--context-len" and False else "refuse"
                for out in (False, True):
                    argv = ["calibrate", "acceptance", "--import", f"{D}/m.log", f"{flag}={v}", "--json"]
                    if out:
                        argv += ["--out", f"{D}/cal.toml", "--name", "llama-3.1-8b/eagle/chat"]
                    self.add("stack-metrics", f"{flag} {v}" + (" with --out" if out else ""), argv,
                             files={"m.log": good}, expect=exp, culprit=(flag, flag.lstrip("-").replace("-", "_")),
                             check="json")

    # -- step-cost fits that the rows cannot determine --------------------------------------------------
    def step_fits(self) -> None:
        head = "hardware,target,tp,batch_size,q_len,context_len,logit_len,measured_time_s"
        row = lambda b, q, t: f"h100-sxm,llama-3.1-8b,1,{b},{q},1024,{q},{t:.6f}"  # noqa: E731
        cases = [("one row, five parameters", [row(1, 1, 0.0062)], "", "refuse"),
                 ("two identical rows", [row(1, 1, 0.0062)] * 2, "", "refuse"),
                 ("six identical rows, two parameters", [row(4, 1, 0.0063)] * 6, "bandwidth_frac,step_overhead_s", "refuse"),
                 ("rows of one batch and query length, both fractions", [row(4, 2, 0.0063 + 1e-5 * i) for i in range(8)],
                  "bandwidth_frac,compute_frac", "refuse"),
                 ("eight distinct rows, both fractions", [row(b, q, 0.0062 + 4e-5 * b * q) for b in (1, 4, 16, 64)
                                                          for q in (1, 5)], "bandwidth_frac,compute_frac", "either"),
                 ("three distinct rows, one parameter", [row(b, 1, 0.0062 + 4e-5 * b) for b in (1, 4, 16)],
                  "step_overhead_s", "either")]
        for title, rows, fit, exp in cases:
            argv = ["calibrate", "steps", f"{D}/rows.csv", "--json"] + (["--fit", fit] if fit else [])
            self.add("step-fit", title, argv, files={"rows.csv": "\n".join([head] + rows) + "\n"}, expect=exp,
                     culprit=("distinct", "parameters", "tokens in flight", "rows.csv"), check="json")
        split = (REPO / "data/perf/splitwise_sim/perf_model.csv").read_text().splitlines()
        sp = [split[0]] + [r for r in split[1:] if "llama2-70b,h100-80gb," in r][:40]
        cols = sp[0].split(",")
        for col, bad in (("model", "llama2-70bx"), ("hardware", "h100-80gbx"), ("model", "")):
            t = [r.split(",") for r in sp]
            t[5][cols.index(col)] = bad
            self.add("step-fit", f"splitwise: {col} = {bad!r}", ["calibrate", "steps", f"{D}/perf.csv", "--format",
                     "splitwise", "--hardware", "h100-sxm", "--json"], files={"perf.csv": "\n".join(",".join(r) for r in t) + "\n"},
                     expect="refuse", culprit=(col, "perf.csv"), check="json")

    # -- replay rows and traces that cannot mean anything -----------------------------------------------
    def more_inputs(self) -> None:
        replay = (REPO / "tests/data/published_examples.csv").read_text().splitlines()
        header = replay[0]
        row = "fz-self,h100-sxm,1,vllm,llama-3.1-8b,llama-3.1-8b,draft_model,4,,1,1024,0,0.7,,1.8,,,fuzz"
        self.add("csv-replay", "a row whose drafter is the target", ["replay", f"{D}/rows.csv", "--json"],
                 files={"rows.csv": "\n".join([header, replay[1], row]) + "\n"}, expect="refuse",
                 culprit=("drafter", "fz-self"), check="replay", meta={"bad_row": "fz-self"})
        moon = (REPO / "data/traces/mooncake_fast25/conversation_trace.jsonl").read_text().splitlines()[:40]
        plain = ["arrival_time_s,prompt_tokens,output_tokens"] + [f"{0.25 * i:.2f},{200 + 7 * i},{20 + i % 13}"
                                                                  for i in range(50)]
        for fmt, name, data, extra, exp, culprit in (
                ("mooncake", "trace.jsonl", moon, {"jitter_s": -1}, "refuse", ("jitter_s",)),
                ("mooncake", "trace.jsonl", moon, {"jitter_s": float("nan")}, "refuse", ("jitter_s",)),
                ("mooncake", "trace.jsonl", moon, {"jitter_s": "x"}, "refuse", ("jitter_s",)),
                ("mooncake", "trace.jsonl", moon, {"jitter_s": [1]}, "refuse", ("jitter_s",)),
                ("plain", "trace.csv", plain, {"jitter_s": 1.0}, "refuse", ("jitter_s",)),
                ("plain", "trace.csv", plain, {"time_scale": 1e300}, "refuse", ("time_scale",)),
                ("plain", "trace.csv", plain, {"time_scale": 0}, "refuse", ("time_scale",)),
                ("plain", "trace.csv", plain, {"time_scale": 1e-300}, "refuse", ("time_scale", "arrival")),
                ("plain", "trace.csv", plain, {"hash_block_tokens": 0}, "refuse", ("hash_block_tokens",)),
                ("plain", "trace.csv", plain, {"window_s": [0, float("inf")]}, "refuse", ("window_s",)),
                ("plain", "trace.csv", plain, {"window_s": ["a", "b"]}, "refuse", ("window_s",))):
            wl = {"kind": "trace", "trace": f"{D}/{name}", "format": fmt, **extra}
            self.add("trace", f"{fmt}: {extra}", ["simulate", f"{D}/s.toml", "--json", "--quiet", "--rates", "2",
                                                  "--policies", "never,static_k4"],
                     files={"s.toml": to_toml(serving_scenario(wl)), name: "\n".join(data) + "\n"}, expect=exp,
                     culprit=culprit, check="simulate", meta={"k": 4}, timeout_s=240)
        for title, data, exp in (("a trace of one request", plain[:2], "refuse"), ("a missing trace", None, "refuse"),
                                 ("a valid trace", plain, "either")):
            wl = dict(WORKLOAD, lengths_from=f"{D}/lt.csv")
            del wl["prompt"], wl["output"]
            files = {"s.toml": to_toml(serving_scenario(wl))}
            if data is not None:
                files["lt.csv"] = "\n".join(data) + "\n"
            self.add("trace", f"lengths_from: {title}", ["simulate", f"{D}/s.toml", "--json", "--quiet"], files=files,
                     expect=exp, culprit=("lengths_from", "lt.csv"), check="simulate", meta={"k": 4}, timeout_s=240)


def _check_for(cmd: str) -> str:
    return {"predict": "predict", "threshold": "threshold", "sweep": "sweep", "simulate": "simulate"}[cmd]


def calibrate_rows() -> bytes:
    lines = ["hardware,target,tp,batch_size,q_len,context_len,logit_len,measured_time_s"]
    for b in (1, 2, 4, 8, 16, 32):
        for q in (1, 5):
            lines.append(f"h100-sxm,llama-3.1-8b,1,{b},{q},1024,{q},{0.0062 + 0.00004 * b * q:.6f}")
    return ("\n".join(lines) + "\n").encode()


def build_cases(seed: int, catalog_ctx: dict) -> list[Case]:
    g = Gen(seed)
    g.flags()
    g.toml_scenarios(220)
    g.toml_catalog("hardware", "h100-sxm", HW_SPECS, 70, extra_keys=(("mem_bandwidth_gb_s", 5e-324, "either"),))
    g.toml_catalog("models", "llama-3.1-8b", MODEL_SPECS, 70,
                   extra_keys=(("n_kv_heads", 3, "refuse"), ("n_heads", 7, "refuse"), ("head_dim", 7, "either")))
    g.toml_catalog("stacks", "vllm", STACK_SPECS, 40)
    g.traces()
    g.csvs()
    g.hf_configs()
    g.gguf()
    g.tables()
    g.cross_fields()
    g.calibration_files()
    g.stack_metrics()
    g.step_fits()
    g.more_inputs()
    g.interrupts()
    g.outputs()
    g.valid(320, catalog_ctx)
    return g.cases


# ------------------------------------------------------------------------------------ installation

class Installation:
    def __init__(self, python: str, env: dict, work: Path):
        self.python = os.path.abspath(python)  # absolute, not resolved: a venv's python is a link
        self.env = {k: v for k, v in os.environ.items() if k not in ("SPECSIM_DEBUG", "CI")}
        self.env.update(env)
        self.env["MPLBACKEND"] = "Agg"
        self.env.setdefault("NUMBA_CACHE_DIR", str(work / "numba-cache"))
        self.env["PYTHONDONTWRITEBYTECODE"] = "1"
        self.cwd = work  # never the harness's folder: `python -c` imports from the current folder first
        out = subprocess.run([self.python, "-c", "import specsim, pathlib; print(pathlib.Path(specsim.__file__).resolve().parent)"],
                             capture_output=True, text=True, env=self.env, check=True, cwd=self.cwd)
        self.package = Path(out.stdout.strip())
        self.flags: dict[tuple, set] = {}
        self._lock = threading.Lock()
        top = self._help([])
        self.commands = set(re.findall(r"^    ([a-z][\w-]*)", top, flags=re.M))
        cal = self._help(["calibrate"]) if "calibrate" in self.commands else ""
        self.calibrate_group = bool(re.search(r"^\s+steps\s", cal, flags=re.M))

    def catalog_file(self, kind: str, ident: str) -> Path:
        for p in (self.package / "catalog" / kind / f"{ident}.toml", self.package.parent / kind / f"{ident}.toml"):
            if p.is_file():
                return p
        raise FileNotFoundError(f"{kind}/{ident}.toml in {self.package}")

    def _help(self, path: list) -> str:
        r = subprocess.run([self.python, "-c", RUNNER, *path, "--help"], capture_output=True, text=True, env=self.env,
                           timeout=120, cwd=self.cwd)
        return r.stdout if r.returncode == 0 else ""

    def supported(self, path: tuple) -> set | None:
        with self._lock:
            if path not in self.flags:
                text = self._help(list(path))
                self.flags[path] = set(re.findall(r"(?<![\w-])(--?[a-zA-Z][\w-]*)", text)) if text else None
            return self.flags[path]

    def adapt(self, argv: list) -> list | None:
        """The abstract command line in this installation's dialect, or None when it cannot say it."""
        argv = list(argv)
        if argv[:2] == ["calibrate", "steps"] and not self.calibrate_group:
            argv = ["calibrate"] + argv[2:]
            path = ("calibrate",)
        elif argv[0] == "calibrate" and not self.calibrate_group:
            return None
        elif argv[0] in ("calibrate", "decoder", "hardware", "models", "scenarios"):
            path = tuple(argv[:2])
        else:
            path = (argv[0],)
        if argv[0] not in self.commands:
            return None
        flags = self.supported(path)
        if flags is None:
            return None
        out = []
        for a in argv:
            if re.match(r"^--?[a-zA-Z]", a):
                name = a.split("=", 1)[0]
                if name not in flags:
                    if name in ("--force", "--quiet"):
                        continue  # the earlier CLI always overwrote and never drew progress bars when piped

                    return None
            out.append(a)
        return out


# ------------------------------------------------------------------------------------------ files

_SMOL = str(Path(os.environ.get("SPECSIM_CACHE") or Path.home() / ".cache" / "specsim") / "SmolLM2-135M-Instruct.Q4_1.gguf")


def materialise(value, path: Path, inst: Installation, shared: Path, case_dir: Path):
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(value, str):
        path.write_text(value.replace(D, str(case_dir)))
    elif isinstance(value, bytes):
        path.write_bytes(value)
    elif value[0] == "catalog":
        _, kind, ident, mut = value
        src = inst.catalog_file(kind, ident)
        raw = src.read_bytes()
        if mut[0] == "raw":
            path.write_bytes(mut[1])
            return
        if mut[0] == "utf16":
            path.write_bytes(raw.decode().encode("utf-16"))
            return
        if mut[0] == "truncate":
            path.write_bytes(raw[: len(raw) // 2])
            return
        table = tomllib.loads(raw.decode())
        table.pop("sources", None)
        if mut[0] == "set":
            set_path(table, mut[1], mut[2])
        elif mut[0] == "delete":
            del_path(table, mut[1])
        elif mut[0] == "rename":
            v = table
            for p in mut[1].split(".")[:-1]:
                v = v.get(p, {})
            old = v.pop(mut[1].split(".")[-1], 1)
            set_path(table, mut[2], old)
        path.write_text(to_toml(table))
    elif value[0] == "tiny_gguf":
        from specsim.decoder.testing import write_tiny_gguf

        key = hashlib.sha1(repr(sorted(value[1].items(), key=str)).encode()).hexdigest()[:12]
        cached = shared / f"tiny-{key}.gguf"
        if not cached.exists():
            write_tiny_gguf(cached, **value[1])
        shutil.copy(cached, path)
    elif value[0] == "tiny_gguf_damaged":
        from specsim.decoder.testing import write_tiny_gguf

        cached = shared / "tiny-base.gguf"
        if not cached.exists():
            write_tiny_gguf(cached)
        data = bytearray(cached.read_bytes())
        r = random.Random(value[1]["seed"])
        op = value[1]["op"]
        if op == "truncate":
            data = data[: r.randrange(1, len(data))]
        elif op == "flip":
            for _ in range(r.randint(1, 8)):
                data[r.randrange(0, min(len(data), 4096))] ^= 1 << r.randrange(8)
        elif op == "zero-run":
            i = r.randrange(0, 2048)
            data[i:i + r.randint(1, 64)] = b"\x00" * len(data[i:i + r.randint(1, 64)])
        elif op == "magic":
            data[0:4] = b"GGUX"
        elif op == "version":
            data[4:8] = (r.choice([0, 1, 99, 2**31]) & 0xFFFFFFFF).to_bytes(4, "little")
        elif op == "counts":
            off = r.choice([8, 16])
            data[off:off + 8] = r.choice([0, 2**40, 2**63 - 1, 2**64 - 1]).to_bytes(8, "little")
        path.write_bytes(bytes(data))
    elif value[0] == "smollm2_edit":
        from specsim.decoder.testing import rewrite_gguf

        key = hashlib.sha1(repr(value[1]).encode()).hexdigest()[:12]
        cached = shared / f"smol-{key}.gguf"
        if not cached.exists():
            drop = None
            if value[1]["drop"] == "blocks":
                drop = lambda name: any(name.startswith(f"blk.{b}.") for b in range(25, 30))  # noqa: E731
            rewrite_gguf(_SMOL, cached, fields=dict(value[1]["fields"]) or None, drop=drop)
        os.link(cached, path)
    else:
        raise ValueError(value)


# -------------------------------------------------------------------------------------- checking

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


def check_output(case: Case, stdout: str, case_dir: Path, meta: dict) -> None:
    kind = case.check
    if kind in ("predict", "simulate", "threshold", "replay", "json"):
        d = strict_json(stdout)
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
    if kind not in ("predict", "simulate", "threshold", "replay", "json") and TEXT_NONSENSE.search(stdout):
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


# --------------------------------------------------------------------------------------- running

@dataclass
class Outcome:
    cls: str
    reason: str = ""
    rc: int | None = None
    argv: list | None = None
    stdout: str = ""
    stderr: str = ""
    seconds: float = 0.0


def _run(inst: Installation, argv: list, cwd: Path, timeout: float, interrupt_s: float | None = None,
         group: bool = True):
    cmd = [inst.python, "-c", RUNNER, *argv]
    t0 = time.monotonic()
    # SIGINT back to its default in the child: a campaign started in the background of a shell
    # inherits SIGINT ignored, and Python would then never raise KeyboardInterrupt
    p = subprocess.Popen(cmd, cwd=cwd, env=inst.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         stdin=subprocess.DEVNULL, start_new_session=True,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    sent = False
    try:
        if interrupt_s is not None:
            try:
                out, err = p.communicate(timeout=interrupt_s)
            except subprocess.TimeoutExpired:
                if group:
                    os.killpg(p.pid, signal.SIGINT)
                else:
                    p.send_signal(signal.SIGINT)
                sent = True
                out, err = p.communicate(timeout=30)
        else:
            out, err = p.communicate(timeout=timeout)
        return p.returncode, out.decode(errors="replace"), err.decode(errors="replace"), False, sent, time.monotonic() - t0
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate()
        return None, out.decode(errors="replace"), err.decode(errors="replace"), True, sent, time.monotonic() - t0


def _stderr_lines(err: str) -> list[str]:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    # argparse prints a usage block before its one error line; progress bars are not errors
    if lines and re.match(r"^specsim[\w -]*: error:", lines[-1]) and lines[0].startswith("usage:"):
        return lines[-1:]
    return [ln for ln in lines if "it/s]" not in ln and "s/it]" not in ln and not ln.startswith("\r")
            and not ln.startswith("specsim: note:")]


def run_case(case: Case, inst: Installation, work: Path, shared: Path) -> Outcome:
    argv = inst.adapt(case.argv)
    if argv is None:
        return Outcome("n/a", "the installation has no such command or flag")
    d = work / case.id
    if d.exists():
        shutil.rmtree(d, ignore_errors=True)
    cwd = d / "cwd"
    cwd.mkdir(parents=True)
    try:
        for name, value in case.files.items():
            materialise(value, d / name, inst, shared, d)
    except Exception as exc:  # a mutation the installation's file does not allow: still a case
        return Outcome("n/a", f"could not build the inputs: {type(exc).__name__}: {exc}")
    fill = lambda a: a.replace(D, str(d))  # noqa: E731
    argv = [fill(a) for a in argv]
    for pre in case.prerun:
        pre = inst.adapt(pre)
        if pre is None:
            return Outcome("n/a", "prerun not expressible")
        _run(inst, [fill(a) for a in pre], cwd, 600)
    out_path = d / case.out if case.out else None
    if out_path is not None and case.prefill:
        out_path.mkdir(parents=True, exist_ok=True)
        for name, text in case.prefill.items():
            (out_path / name).write_text(text)
    before = snapshot(out_path) if out_path is not None else {}
    rc, out, err, hung, sent, secs = _run(inst, argv, cwd, case.timeout_s, case.interrupt_s, case.interrupt_group)
    o = Outcome("", rc=rc, argv=argv, stdout=out, stderr=err, seconds=secs)
    both = out + err
    if hung:
        o.cls, o.reason = "hang", f"no exit within {case.timeout_s if not sent else 30} s" + (" of the SIGINT" if sent else "")
        return o
    if rc is not None and rc < 0 and not (sent and rc == -signal.SIGINT):
        o.cls, o.reason = "native crash", f"killed by signal {-rc} ({signal.Signals(-rc).name})"
        return o
    after = snapshot(out_path) if out_path is not None else {}
    partial = ""
    if out_path is not None and rc != 0:
        changed = sorted(k for k, v in after.items() if before.get(k) != v)
        if changed:
            partial = f"exit {rc} left {len(changed)} new or changed file(s): {', '.join(changed[:5])}"
    if out_path is not None and rc == 0 and case.prerun and out_path.is_dir():
        rewritten = {k for k, v in after.items() if before.get(k) != v}
        stale = sorted(k for k in after if k not in rewritten and k in before)
        manifest = out_path / "manifest.json"
        listed = None
        if manifest.is_file():
            try:
                listed = set(json.loads(manifest.read_text()).get("files", []))
            except ValueError:
                listed = None
        if stale and (listed is None or any(s in listed for s in stale)):
            partial = f"a rerun left {len(stale)} file(s) of the earlier run beside its own: {', '.join(stale[:5])}"
    also = f" (also: {partial})" if partial else ""
    if "Traceback (most recent call last)" in both or rc == 70 or "internal error" in err:
        tail = [ln for ln in err.splitlines() if ln.strip()][-1:] or ["?"]
        o.cls, o.reason = "traceback", tail[0][:300] + also
        return o
    if rc is not None and rc < 0:
        o.cls, o.reason = "traceback", "died of the SIGINT without handling it" + also
        return o
    if partial:
        o.cls, o.reason = "partial output", partial
        return o
    strays = [p.name for p in cwd.iterdir()]
    if strays:
        o.cls, o.reason = "stray output", f"wrote into the current folder: {', '.join(sorted(strays)[:5])}"
        return o
    if sent and rc == 130 and case.expect == "refuse":
        o.cls, o.reason = "hang", f"ran until the SIGINT at {case.interrupt_s:g} s on an input that must be refused"
        return o
    if sent and rc == 130 and case.meta.get("notice") and "specsim: note:" not in err:
        o.cls, o.reason = "hang", f"ran past {case.interrupt_s:g} s without saying before it started that it would take long"
        return o
    if rc == 0:
        if case.interrupt_s is not None and (sent or case.group == "interrupt"):
            if sent and secs > case.interrupt_s + 10:
                o.cls, o.reason = "hang", f"ignored the SIGINT: ran to completion {secs - case.interrupt_s:.0f} s after it"
                return o
            o.cls, o.reason = "valid result", "finished before the SIGINT" if not sent else "finished just after the SIGINT"
            return o
        if case.expect == "refuse" and case.check == "replay" and case.meta.get("bad_row"):
            # replay reports a row it cannot predict, with the reason, and goes on with the others
            try:
                rows = {str(r.get("id")): r for r in strict_json(out).get("rows", [])}
            except Nonsense as exc:
                o.cls, o.reason = "silent nonsense", str(exc)
                return o
            row = rows.get(case.meta["bad_row"])
            if row is None or row.get("predicted_speedup") is not None or not row.get("reason"):
                o.cls, o.reason = "silent nonsense", (f"row {case.meta['bad_row']} predicted "
                                                      f"({None if row is None else row.get('predicted_speedup')}) "
                                                      f"from an input that must be refused")
                return o
            reason = str(row["reason"])
            if case.culprit and not any(c and c.lower() in reason.lower() for c in case.culprit):
                o.cls, o.reason = "unclear refusal", f"row refused without naming {list(case.culprit)}: {reason[:200]}"
                return o
            o.cls, o.reason = "clean refusal", f"row refused: {reason[:200]}"
            return o
        if case.expect == "refuse":
            o.cls, o.reason = "silent nonsense", "exit 0 on an input that must be refused"
            return o
        meta = dict(case.meta)
        if case.check == "predict":
            meta["max_context_of_target"] = _max_context_for(argv, inst, d)
        try:
            check_output(case, out, d, meta)
            if case.twin:
                twin = inst.adapt(case.twin)
                if twin is not None:
                    rc2, out2, err2, hung2, _, _ = _run(inst, [fill(a) for a in twin], cwd, case.timeout_s)
                    if rc2 != 0:
                        raise Nonsense(f"the twin run exited {rc2}: {err2.strip()[-200:]}")
                    if meta.get("metamorphic"):
                        a, b = strict_json(out), strict_json(out2)
                        for key in ("batch_off", "alpha_off", "alpha_off_deployed_k"):
                            if a.get(key) != b.get(key):
                                raise Nonsense(f"reordering the grid changed {key}: {a.get(key)} -> {b.get(key)}")
                    elif case.twin == case.argv and out2 != out:  # determinism
                        raise Nonsense("the same command gave a different answer the second time")
        except Nonsense as exc:
            o.cls, o.reason = "silent nonsense", str(exc)
            return o
        except Exception as exc:  # a check that could not read the output
            o.cls, o.reason = "silent nonsense", f"output unreadable: {type(exc).__name__}: {exc}"
            return o
        o.cls = "valid result"
        return o
    if rc in (2, 3, 4, 5, 6) or (sent and rc == 130):
        lines = _stderr_lines(err)
        if len(lines) != 1:
            o.cls, o.reason = "unclear refusal", f"exit {rc} with {len(lines)} lines on stderr"
            return o
        msg = lines[0].lower()
        if case.culprit and not any(c and c.lower() in msg for c in case.culprit):
            o.cls, o.reason = "unclear refusal", f"exit {rc}: does not name any of {list(case.culprit)}: {lines[0][:200]}"
            return o
        o.cls, o.reason = "clean refusal", lines[0][:200]
        return o
    o.cls, o.reason = "other exit", f"exit {rc}: {(err.strip().splitlines() or [''])[-1][:200]}"
    return o


def _max_context_for(argv: list, inst: Installation, d: Path) -> int | None:
    target = None
    if "--target" in argv:
        target = argv[argv.index("--target") + 1]
    elif len(argv) > 1 and argv[1].endswith(".toml"):
        try:
            target = tomllib.loads(Path(argv[1]).read_text()).get("target")
        except Exception:
            return None
    if target is None:
        target = "llama-3.1-8b"
    try:
        p = Path(target) if target.endswith(".toml") else inst.catalog_file("models", target)
        return int(tomllib.loads(p.read_text())["max_context"])
    except Exception:
        return None


def write_failure(root: Path, case: Case, o: Outcome, work: Path) -> None:
    f = root / "failures" / o.cls.replace(" ", "_") / case.id
    f.mkdir(parents=True, exist_ok=True)
    (f / "case.json").write_text(json.dumps({
        "id": case.id, "group": case.group, "title": case.title, "class": o.cls, "reason": o.reason, "exit": o.rc,
        "argv": o.argv, "command": " ".join(shlex.quote(a) for a in (o.argv or [])), "expect": case.expect,
        "seconds": round(o.seconds, 2)}, indent=2) + "\n")
    (f / "stdout.txt").write_text(o.stdout[-20000:])
    (f / "stderr.txt").write_text(o.stderr[-20000:])
    src = work / case.id
    for name in case.files:
        p = src / name
        if p.is_file() and p.stat().st_size < 2_000_000:
            (f / "inputs").mkdir(exist_ok=True)
            shutil.copy(p, f / "inputs" / name.replace("/", "_"))


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
