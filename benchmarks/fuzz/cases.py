"""The fuzz campaign's vocabulary: a case, the TOML writer, the valid scenarios every group mutates, the
specs of each field (type and bounds) and the case builder `Gen` whose `add` numbers each group's
cases. Every group module (`fuzz/<group>.py`) adds its cases through a `Gen`."""
from __future__ import annotations

import copy
import json
import math
import random
import re
from dataclasses import dataclass, field
from pathlib import Path


RUNNER = "import sys; from specsim.cli import main; sys.exit(main(sys.argv[1:]))"

REPO = Path(__file__).resolve().parents[2]

FAILURE_CLASSES = ("traceback", "silent nonsense", "native crash", "hang", "partial output", "stray output",
                   "unclear refusal", "other exit")

CLASS_ORDER = ("clean refusal", "valid result", "unclear refusal", "traceback", "silent nonsense",
               "native crash", "hang", "partial output", "stray output", "other exit", "n/a", "harness error")

D = "{d}"  # replaced by the case's folder


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
    """Builds the case list from one seed: each group module's `add_cases(g, ...)` adds its cases in
    turn, drawing from the one `rng`, so the order the groups are called in fixes every case."""

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


def _check_for(cmd: str) -> str:
    return {"predict": "predict", "threshold": "threshold", "sweep": "sweep", "simulate": "simulate"}[cmd]


def calibrate_rows() -> bytes:
    lines = ["hardware,target,tp,batch_size,q_len,context_len,logit_len,measured_time_s"]
    for b in (1, 2, 4, 8, 16, 32):
        for q in (1, 5):
            lines.append(f"h100-sxm,llama-3.1-8b,1,{b},{q},1024,{q},{0.0062 + 0.00004 * b * q:.6f}")
    return ("\n".join(lines) + "\n").encode()
