"""Issue 14's fuzz suite: malformed flags, TOML, traces, CSVs and GGUF headers, interrupts and reused
output folders. Every case must end in a clean refusal (exit 2-6 and one error line on stderr that
names what was wrong) or a valid result (exit 0, strict JSON, times positive and finite, a chain's
speedup at most K + 1, requests and tokens conserved) - never a traceback or exit 70, never exit 0
on an input a second statement of the rules here calls impossible, never an output that looks
complete when it is not.

The commands run in process through `specsim.cli.main` (argparse's own exit is caught), except the
interrupts, which need a real SIGINT in a subprocess. The expectations are stated here from the
documented rules (flags' --help, scenarios/README.md, the catalogs), not read from the code.
`benchmarks/fuzz_campaign.py` runs the same classes of input at scale against an installation and
counts outcomes; this file keeps them from coming back. Every field of every scenario table, the
rules that join them, and every input file kind (traces, step-cost rows, replay tables, calibration
files, stack metrics) are fuzzed through the library (load, resolve, then the table's own consumer:
the serving setup, the sweep's axes, the threshold settings, the importers), a sample per field, so
the whole file stays under a few minutes. Under CI the hypothesis profile is
derandomised (tests/conftest.py)."""
from __future__ import annotations

import contextlib
import io
import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specsim.cli import main

try:
    import tomllib
except ImportError:  # pragma: no cover
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
def fuzz(n: int) -> settings:
    """n examples; tmp_path is shared by a test's examples (each writes its files afresh)."""
    return settings(max_examples=n, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
                    deadline=None)


# ---- running a command and judging its outcome ------------------------------------------------------------

def cli(argv) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main([str(a) for a in argv])
        except SystemExit as exc:  # argparse's usage errors
            rc = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    return rc, out.getvalue(), err.getvalue()


def error_line(err: str) -> list[str]:
    """The error lines of stderr: argparse's usage block and a run's notes ("specsim: note: ...",
    said before a long run starts) are not errors."""
    lines = [ln for ln in err.splitlines() if ln.strip() and not ln.startswith("specsim: note:")]
    if lines and lines[0].startswith("usage:"):  # argparse: a usage block, then its one error line
        lines = lines[-1:]
    return lines


def assert_clean(rc: int, out: str, err: str, *, refuse: bool = False, names=()) -> None:
    """A clean refusal or a result; `refuse`: the input is impossible, so exit 0 is wrong; `names`:
    a refusal must mention one of these (the flag, key, column or file)."""
    text = out + err
    assert "Traceback" not in text, text[-2000:]
    assert rc != 70 and "internal error" not in err, err
    assert rc in (0, 2, 3, 4, 5, 6), (rc, err[-500:])
    if rc == 0:
        assert not refuse, f"exit 0 on an input that must be refused; stdout: {out[:400]}"
        return
    lines = error_line(err)
    assert len(lines) == 1, f"expected one error line, got {len(lines)}: {err[-1000:]}"
    assert lines[0].startswith("specsim") and "error:" in lines[0], lines[0]
    if names:
        assert any(str(n).lower() in lines[0].lower() for n in names), (names, lines[0])


def strict_json(text: str):
    def bad(c):
        raise AssertionError(f"{c} in JSON output (strict JSON has no NaN or Infinity)")
    return json.loads(text, parse_constant=bad)


def positive(d: dict, key: str) -> float:
    v = d[key]
    assert isinstance(v, (int, float)) and not isinstance(v, bool), f"{key} = {v!r} where a number is due"
    assert math.isfinite(v) and v > 0, f"{key} = {v!r}"
    return float(v)


def model_max_context(model_id: str) -> int:
    return int(tomllib.loads((ROOT / "models" / f"{model_id}.toml").read_text())["max_context"])


def check_prediction(d: dict, *, max_context: int | None = None) -> None:
    """What a prediction must satisfy whatever its inputs (from the definitions, not the code)."""
    positive(d, "target_step_time_s")
    positive(d, "baseline_tokens_per_s")
    if d.get("method") in (None, "none"):
        return
    for key in ("cycle_time_s", "verify_time_s", "tokens_per_s", "speedup", "tokens_per_cycle"):
        positive(d, key)
    k, tpc = d["k"], d["tokens_per_cycle"]
    chain = not d.get("tree_size")
    if chain and d["method"] != "lookahead":
        assert 1 - 1e-9 <= tpc <= k + 1 + 1e-9, f"tokens per cycle {tpc} outside [1, K + 1 = {k + 1}]"
        assert d["speedup"] <= k + 1 + 1e-9, f"speedup {d['speedup']} > K + 1 = {k + 1} on a chain"
    # tokens conserved: B sequences each emit tokens_per_cycle tokens every cycle
    assert d["tokens_per_s"] == pytest.approx(tpc * d["batch_size"] / d["cycle_time_s"], rel=1e-9)
    assert d["speedup"] == pytest.approx(d["tokens_per_s"] / d["baseline_tokens_per_s"], rel=1e-9)
    if max_context is not None:
        q = d["tree_size"] if d.get("tree_size") else k + 1
        assert d["context_len"] + q <= max_context, "a step past the model's maximum context was predicted"


def nonhidden_files(folder: Path) -> dict:
    if not folder.is_dir():
        return {}
    return {str(p.relative_to(folder)): (p.stat().st_mtime_ns, p.read_bytes()) for p in folder.rglob("*")
            if p.is_file() and not any(part.startswith(".") for part in p.relative_to(folder).parts)}


def toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return "nan" if math.isnan(v) else ("inf" if v == math.inf else "-inf" if v == -math.inf else repr(v))
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, list):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{json.dumps(k)} = {toml_value(x)}" for k, x in v.items()) + " }"
    raise TypeError(v)


def toml_text(table: dict) -> str:
    lines = [f"{json.dumps(k)} = {toml_value(v)}" for k, v in table.items() if not isinstance(v, dict)]
    for k, v in table.items():
        if isinstance(v, dict):
            lines += [f"[{json.dumps(k)}]"] + [f"{json.dumps(kk)} = {toml_value(vv)}" for kk, vv in v.items()]
    return "\n".join(lines) + "\n"


# values of every type a TOML field can be given, NaN and infinities included
ANY_VALUE = st.one_of(
    st.integers(min_value=-(2 ** 63), max_value=2 ** 63 - 1),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0, -1, 1, 2, 5e-324, 1e308, 10 ** 7, 0.5, 1.5, -0.0]),
    st.text(max_size=8), st.booleans(), st.lists(st.integers(-5, 5), max_size=3),
    st.dictionaries(st.sampled_from(["a", "kind"]), st.integers(0, 3), max_size=2),
)


def judge(value, kind: str, lo=None, hi=None, *, lo_open=False) -> bool:
    """True when `value` is impossible for a field of `kind` ('int', 'float', 'bool', 'str') in [lo, hi]."""
    if kind == "bool":
        return not isinstance(value, bool)
    if kind == "str":
        return not isinstance(value, str) or not value.strip()
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return True
    if kind == "int" and not isinstance(value, int):
        return True
    if not math.isfinite(value):
        return True
    return (lo is not None and (value <= lo if lo_open else value < lo)) or (hi is not None and value > hi)


# ---- bad CLI flags -------------------------------------------------------------------------------------

PREDICT = ["predict", "--hardware", "h100-sxm", "--target", "llama-3.1-8b", "--drafter", "llama-3.2-1b", "--json"]
# flag -> (type argparse converts with, lowest, highest, exclusive lowest): the ranges --help documents
PREDICT_FLAGS = {
    "--k": (int, 0, 64, False), "--alpha": (float, 0.0, 1.0, False), "--tau": (float, 1.0, None, False),
    "--batch": (int, 1, None, False), "--context": (int, 0, None, False), "--tp": (int, 1, None, False),
    "--drafter-tp": (int, 1, None, False), "--temperature": (float, 0.0, None, False),
    "--tree-size": (int, 0, None, False), "--baseline-tokens-per-s": (float, 0.0, None, True),
    "--baseline-step-time-s": (float, 0.0, None, True),
}
FLAG_TEXT = st.one_of(
    st.integers(-10 ** 12, 10 ** 12).map(str), st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.sampled_from(["", " ", "abc", "1e400", "0x10", "4,4", "NaN", "-0", "1_000", "1e-300", "5e-324", "65", "0",
                     "-1", "inf", "-inf", "3", "0.7", "1e308", "10000000"]),
    st.text(max_size=6),
)


def flag_impossible(flag: str, text: str, k: int) -> bool:
    kind, lo, hi, lo_open = PREDICT_FLAGS[flag]
    try:
        v = kind(text)
    except (ValueError, OverflowError):
        return True
    if flag == "--tau":
        hi = k + 1
    if flag == "--tree-size" and isinstance(v, int) and 0 < v < k + 1:
        return True  # a tree holds the root and K levels below it: M >= K + 1 (0 asks for a chain)
    if flag == "--drafter-tp":
        hi = 1  # at most the target's tp, 1 here unless --tp is given (then it is not judged)
    return judge(v, "int" if kind is int else "float", lo, hi, lo_open=lo_open)


@fuzz(120)
@given(st.lists(st.tuples(st.sampled_from(sorted(PREDICT_FLAGS)), FLAG_TEXT), min_size=1, max_size=3,
                unique_by=lambda t: t[0]))
def test_predict_flags(flags):
    given_flags = dict(flags)
    argv = PREDICT + [f"{f}={v}" for f, v in flags]
    if "--alpha" not in given_flags and "--tau" not in given_flags:
        argv += ["--alpha", "0.7"]
    try:
        k = int(given_flags.get("--k", "4"))
    except ValueError:
        k = 4
    impossible = any(flag_impossible(f, v, k) for f, v in flags if not (f == "--drafter-tp" and "--tp" in given_flags)) \
        or {"--alpha", "--tau"} <= set(given_flags) \
        or {"--baseline-tokens-per-s", "--baseline-step-time-s"} <= set(given_flags)
    rc, out, err = cli(argv)
    names = [f for f, _ in flags] + [f.lstrip("-").replace("-", "_") for f, _ in flags] + \
        ["batch", "context", "tree", "memory", "fit", "tp", "head", "drafter", "tau", "alpha", "baseline"]
    assert_clean(rc, out, err, refuse=impossible, names=names)
    if rc == 0:
        check_prediction(strict_json(out), max_context=model_max_context("llama-3.1-8b"))


@pytest.mark.parametrize("context", [131068, 131072, 200000, 10 ** 9])
def test_a_context_past_the_models_maximum_is_refused(context):
    rc, out, err = cli(PREDICT + ["--alpha", "0.7", "--k", "4", "--context", context])
    assert_clean(rc, out, err, refuse=True, names=["context_len"])


@pytest.mark.parametrize("tau", ["100", "5.01", "0.99", "-1", "nan"])
def test_tau_outside_one_to_k_plus_one_is_refused(tau):
    rc, out, err = cli(PREDICT + ["--k", "4", "--tau", tau])
    assert_clean(rc, out, err, refuse=True, names=["tau"])


@pytest.mark.parametrize("argv, names", [
    (["threshold", "seed-70b-hbm", "--margin=nan"], ["--margin", "margin"]),
    (["threshold", "seed-70b-hbm", "--margin=-1"], ["--margin", "margin"]),
    (["threshold", "seed-70b-hbm", "--margin=inf"], ["--margin", "margin"]),
    (["calibrate", "steps", "{rows}", "--fit="], ["--fit"]),
    (["calibrate", "steps", "{rows}", "--fit=bandwidth_frac,bandwidth_frac"], ["--fit"]),
    (["calibrate", "steps", "{rows}", "--fit=bandwidth_frac,,compute_frac"], ["--fit"]),
    (["calibrate", "steps", "{rows}", "--fit=nope"], ["--fit", "nope"]),
    (["calibrate", "steps", "{rows}", "--hardware="], ["--hardware"]),
    (["calibrate", "steps", "{rows}", "--hardware=a100-sxm-80gb"], ["--hardware"]),
    (["simulate", "{serve}", "--rates=1,1"], ["--rates"]),
    (["simulate", "{serve}", "--rates=0"], ["--rates"]),
    (["simulate", "{serve}", "--rates=1e-300"], ["--rates"]),
    (["simulate", "{serve}", "--rates=nan"], ["--rates"]),
    (["simulate", "{serve}", "--rates=1,,2"], ["--rates"]),
    (["simulate", "{serve}", "--policies=never,never"], ["--policies"]),
    (["simulate", "{serve}", "--policies=nope"], ["--policies", "nope"]),
    (["simulate", "{serve}", "--seed=-1"], ["--seed"]),
    (["hardware", "show", ""], ["hardware"]),
    (["models", "show", "/dev/null"], ["/dev/null", "model"]),
    (["scenarios", "show", "/"], ["/", "scenario"]),
])
def test_bad_flags_of_each_command_are_refused(tmp_path, argv, names):
    files = {"{rows}": calibration_rows(tmp_path), "{serve}": serving_scenario_file(tmp_path)}
    rc, out, err = cli([files.get(a, a) for a in argv] + ["--json"])
    assert_clean(rc, out, err, refuse=True, names=names)


# ---- malformed TOML: scenario, hardware, model and stack files -----------------------------------------

POINT = {"name": "fz", "hardware": "h100-sxm", "target": "llama-3.1-8b", "drafter": "llama-3.2-1b",
         "method": "draft_model", "k": 4, "alpha": 0.7, "batch_size": 4, "context_len": 1024, "tp": 1}
# scenarios/README.md: the top-level keys' types and ranges
TOP = {"k": ("int", 0, 64), "alpha": ("float", 0.0, 1.0), "batch_size": ("int", 1, None),
       "context_len": ("int", 0, 131072 - 5), "tp": ("int", 1, None), "drafter_tp": ("int", 1, 1),
       "temperature": ("float", 0.0, None), "allow_cross_tokenizer": ("bool", None, None),
       "attention": ("str", None, None), "hardware": ("str", None, None), "target": ("str", None, None),
       "drafter": ("str", None, None), "method": ("str", None, None)}
THRESHOLD = {"margin": ("float", 0.0, None), "k_max": ("int", 1, 64), "batch_limit": ("int", 1, None)}


def write(tmp_path: Path, name: str, text) -> Path:
    p = tmp_path / name
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(text if isinstance(text, bytes) else text.encode())
    return p


@fuzz(100)
@given(key=st.sampled_from(sorted(TOP)), value=ANY_VALUE)
def test_scenario_top_level_values(tmp_path, key, value):
    kind, lo, hi = TOP[key]
    scen = dict(POINT, **{key: value})
    impossible = judge(value, kind, lo, hi)
    if kind == "str" and isinstance(value, str):
        impossible = impossible or key in ("attention", "method") and value not in ("fused", "naive", "draft_model")
    path = write(tmp_path, "s.toml", toml_text(scen))
    rc, out, err = cli(["predict", path, "--json"])
    assert_clean(rc, out, err, refuse=impossible, names=[key, key.split("_")[0], "model", "s.toml", "batch"])
    if rc == 0:
        check_prediction(strict_json(out), max_context=model_max_context("llama-3.1-8b"))


@fuzz(25)
@given(key=st.sampled_from(sorted(THRESHOLD)), value=ANY_VALUE)
def test_scenario_threshold_values(tmp_path, key, value):
    kind, lo, hi = THRESHOLD[key]
    scen = dict(POINT, threshold={"margin": 0.05, "batch_sizes": [1, 4, 16, 64], key: value})
    path = write(tmp_path, "s.toml", toml_text(scen))
    rc, out, err = cli(["threshold", path, "--json"])
    assert_clean(rc, out, err, refuse=judge(value, kind, lo, hi), names=[key, "s.toml"])
    if rc == 0:
        d = strict_json(out)
        assert d["batch_off"] is None or (isinstance(d["batch_off"], int) and d["batch_off"] >= 1)


@fuzz(30)
@given(section=st.sampled_from(["", "threshold", "sweep", "workload", "engine", "slo", "policies"]),
       key=st.sampled_from(["k", "alpha", "margin", "n_requests", "max_num_seqs", "ttft_s", "batch_size", "kind"]))
def test_misspelt_keys_are_refused_with_the_key(tmp_path, section, key):
    typo = key[:-1] + key[-1] * 2 + "x"
    if section in ("workload", "engine", "slo", "policies"):
        scen = tomllib.loads(serving_scenario_file(tmp_path).read_text())
        scen[section][typo] = 1
        argv = ["simulate", write(tmp_path, "s.toml", toml_text(scen)), "--json", "--quiet"]
    else:
        scen = dict(POINT)
        if section:
            scen[section] = {typo: 1}
        else:
            scen[typo] = 1
        path = write(tmp_path, "s.toml", toml_text(scen))
        argv = {"": ["predict", path, "--json"], "threshold": ["threshold", path, "--json"],
                "sweep": ["sweep", path, "--out", tmp_path / "out", "--quiet"]}[section]
    rc, out, err = cli(argv)
    assert_clean(rc, out, err, refuse=True, names=[typo])


@pytest.mark.parametrize("content", [b"", b"\x00\x01\x02binary\xff\xfe", "k = 4\nk = 5\n".encode(),
                                     "[threshold\nmargin = 1\n".encode(), 'k = 4\n'.encode("utf-16"),
                                     b"name = \"x\"\n\xff\xfe = 1\n"])
@pytest.mark.parametrize("cmd", ["predict", "threshold", "sweep"])
def test_damaged_scenario_files(tmp_path, content, cmd):
    path = write(tmp_path, "s.toml", content)
    argv = [cmd, path, "--json"] if cmd != "sweep" else [cmd, path, "--out", tmp_path / "out", "--quiet"]
    rc, out, err = cli(argv)
    assert_clean(rc, out, err, refuse=bool(content), names=["s.toml", "drafter"])
    assert not nonhidden_files(tmp_path / "out")


# the catalogs' documented numeric fields (hardware/README, models, stacks): positive where a zero
# would divide, fractions in (0, 1]
HARDWARE = {"memory_gib": (0.0, None, True), "mem_bandwidth_gb_s": (0.0, None, True),
            "interconnect_gb_s": (0.0, None, False), "peak_tflops.bf16": (0.0, None, True),
            "efficiency.bandwidth_frac": (0.0, 1.0, True), "efficiency.compute_frac": (0.0, 1.0, True),
            "efficiency.step_overhead_us": (0.0, None, False)}
MODEL = {"n_layers": (1, None), "hidden_size": (1, None), "n_heads": (1, None), "n_kv_heads": (1, None),
         "head_dim": (1, None), "ffn_size": (1, None), "vocab_size": (1, None), "max_context": (1, None)}
STACK = {"bandwidth_frac": (0.0, 1.0, True), "compute_frac": (0.0, 1.0, True), "step_overhead_us": (0.0, None, False),
         "cycle_overhead_us": (0.0, None, False)}


def catalog_table(kind: str, ident: str) -> dict:
    t = tomllib.loads((ROOT / kind / f"{ident}.toml").read_text())
    t.pop("sources", None)
    return t


def set_dotted(table: dict, dotted: str, value) -> None:
    *parents, last = dotted.split(".")
    for p in parents:
        table = table.setdefault(p, {})
    table[last] = value


@fuzz(40)
@given(key=st.sampled_from(sorted(HARDWARE)), value=ANY_VALUE)
def test_hardware_file_values(tmp_path, key, value):
    lo, hi, lo_open = HARDWARE[key]
    t = catalog_table("hardware", "h100-sxm")
    set_dotted(t, key, value)
    path = write(tmp_path, "hw.toml", toml_text(t))
    rc, out, err = cli(PREDICT[:1] + ["--hardware", path] + PREDICT[3:] + ["--alpha", "0.7"])
    assert_clean(rc, out, err, refuse=judge(value, "float", lo, hi, lo_open=lo_open),
                 names=[key.split(".")[-1], "hw.toml", "h100-sxm"])
    if rc == 0:
        check_prediction(strict_json(out))


@fuzz(40)
@given(key=st.sampled_from(sorted(MODEL)), value=ANY_VALUE)
def test_model_file_values(tmp_path, key, value):
    lo, hi = MODEL[key]
    t = catalog_table("models", "llama-3.1-8b")
    t[key] = value
    ints = isinstance(value, int) and not isinstance(value, bool) and value >= 1
    divides = {"n_heads": lambda v: v % 8 == 0, "n_kv_heads": lambda v: 32 % v == 0}.get(key, lambda v: True)
    path = write(tmp_path, "m.toml", toml_text(t))
    rc, out, err = cli(["predict", "--target", path, "--drafter", "llama-3.2-1b", "--alpha", "0.7", "--context", "16",
                        "--json"])
    impossible = judge(value, "int", lo, hi) or (ints and not divides(value))  # grouped-query heads share kv heads
    assert_clean(rc, out, err, refuse=impossible, names=[key, "m.toml", "llama-3.1-8b", "context"])
    if rc == 0:
        check_prediction(strict_json(out))


@fuzz(25)
@given(key=st.sampled_from(sorted(STACK)), value=ANY_VALUE)
def test_stack_file_values(tmp_path, key, value):
    lo, hi, lo_open = STACK[key]
    t = catalog_table("stacks", "vllm")
    t[key] = value
    stack = write(tmp_path, "stack.toml", toml_text(t))
    scen = write(tmp_path, "s.toml", toml_text(dict(POINT, stack=str(stack))))
    rc, out, err = cli(["predict", scen, "--json"])
    assert_clean(rc, out, err, refuse=judge(value, "float", lo, hi, lo_open=lo_open), names=[key, "stack.toml"])
    if rc == 0:
        check_prediction(strict_json(out))


# ---- malformed traces ------------------------------------------------------------------------------------

def serving_scenario_file(tmp_path: Path, workload: dict | None = None) -> Path:
    scen = dict(POINT, workload=workload or {"kind": "poisson", "n_requests": 12, "rate_per_s": 4.0,
                                             "prompt": {"kind": "fixed", "tokens": 64},
                                             "output": {"kind": "fixed", "tokens": 8}},
                engine={"max_num_seqs": 8, "max_num_batched_tokens": 512},
                policies={"never": {"kind": "never"}, "static": {"kind": "static", "k": 3}},
                slo={"ttft_s": 1.0, "tpot_s": 0.05})
    return write(tmp_path, "serve.toml", toml_text(scen))


def simulate_json(d: dict, *, outputs: list[int] | None = None) -> None:
    for r in d["runs"]:
        n = r["n_requests"]
        assert n >= 1, "exit 0 for an empty workload"
        assert r["n_done"] + r["n_rejected"] + r["n_unfinished"] == n, "requests not conserved"
        assert r["n_done"] >= 1, "exit 0 with no request finished"
        positive(r, "makespan_s")
        positive(r, "throughput_tokens_per_s")
        positive(r, "ttft_p50_s")
        if outputs is not None and r["n_done"] == n:
            assert r["output_tokens"] == sum(outputs), "output tokens not conserved"
        assert (r["num_accepted_tokens"] or 0) <= (r["num_draft_tokens"] or 0)


TIME = st.one_of(st.floats(min_value=0, max_value=100, allow_nan=False), st.floats(allow_nan=True, allow_infinity=True),
                 st.sampled_from(["", "abc", "-1", "1e400"]))
TOKENS = st.one_of(st.integers(1, 400), st.integers(-(2 ** 70), 2 ** 70), st.sampled_from(["", "abc", "3.5", "0", "1e3"]))


@fuzz(25)
@given(rows=st.lists(st.tuples(TIME, TOKENS, TOKENS), min_size=0, max_size=8), shape=st.sampled_from(["as is", "sorted"]))
def test_plain_trace_rows(tmp_path, rows, shape):
    if shape == "sorted":
        rows = sorted(rows, key=lambda r: r[0] if isinstance(r[0], float) and not math.isnan(r[0]) else 0.0)
    text = "arrival_time_s,prompt_tokens,output_tokens\n" + "".join(f"{a},{b},{c}\n" for a, b, c in rows)
    trace = write(tmp_path, "t.csv", text)
    scen = serving_scenario_file(tmp_path, {"kind": "trace", "trace": str(trace), "format": "plain"})

    def bad_time(v):
        return not isinstance(v, float) or not math.isfinite(v) or v < 0

    def bad_tokens(v):
        return not isinstance(v, int) or not 1 <= v < 2 ** 31

    times = [r[0] for r in rows]
    impossible = not rows or any(bad_time(r[0]) or bad_tokens(r[1]) or bad_tokens(r[2]) for r in rows) or \
        any(b < a for a, b in zip(times, times[1:]) if isinstance(a, float) and isinstance(b, float))
    rc, out, err = cli(["simulate", scen, "--json", "--quiet", "--policies", "never"])
    assert_clean(rc, out, err, refuse=impossible, names=["t.csv"])
    if rc == 0:
        simulate_json(strict_json(out), outputs=[r[2] for r in rows])


@pytest.mark.parametrize("content", [b"", b"arrival_time_s,prompt_tokens,output_tokens\n",
                                     b"\x89PNG\r\n\x1a\n\x00\x00binary", "a,b\n1,2\n".encode("utf-16"),
                                     b"arrival_time_s,prompt_tokens,output_tokens\n0,\xff\xfe,4\n",
                                     b"arrival_time_s,prompt_tokens\n0,5\n",
                                     b"arrival_time_s,prompt_tokens,output_tokens\n0,99999999999999999999,4\n"])
def test_damaged_trace_files(tmp_path, content):
    trace = write(tmp_path, "t.csv", content)
    scen = serving_scenario_file(tmp_path, {"kind": "trace", "trace": str(trace), "format": "plain"})
    rc, out, err = cli(["simulate", scen, "--json", "--quiet"])
    assert_clean(rc, out, err, refuse=True, names=["t.csv"])


@pytest.mark.parametrize("workload, names", [
    ({"kind": "trace", "trace": "{trace}", "window_s": [1e6, 2e6]}, ["window", "no requests"]),
    ({"kind": "poisson", "n_requests": 5, "rate_per_s": 2.0, "prompt": {"kind": "fixed", "tokens": 400000},
      "output": {"kind": "fixed", "tokens": 4}}, ["request", "reject"]),
    ({"kind": "poisson", "n_requests": 5, "rate_per_s": 2.0, "cv": -1, "prompt": {"kind": "fixed", "tokens": 4},
      "output": {"kind": "fixed", "tokens": 4}}, ["cv"]),
    ({"kind": "poisson", "n_requests": 2 ** 62, "rate_per_s": 2.0, "prompt": {"kind": "fixed", "tokens": 4},
      "output": {"kind": "fixed", "tokens": 4}}, ["n_requests"]),
    ({"kind": "poisson", "n_requests": 5, "rate_per_s": 1e-300, "prompt": {"kind": "fixed", "tokens": 4},
      "output": {"kind": "fixed", "tokens": 4}}, ["rate_per_s"]),
])
def test_empty_or_absurd_workloads_exit_non_zero(tmp_path, workload, names):
    trace = write(tmp_path, "t.csv", "arrival_time_s,prompt_tokens,output_tokens\n0,16,4\n1,16,4\n")
    workload = {k: (str(trace) if v == "{trace}" else v) for k, v in workload.items()}
    if workload["kind"] == "trace":
        workload["format"] = "plain"
    rc, out, err = cli(["simulate", serving_scenario_file(tmp_path, workload), "--json", "--quiet"])
    assert_clean(rc, out, err, refuse=True, names=names)


# ---- malformed CSVs: replay tables and calibration rows --------------------------------------------------

REPLAY_HEADER = ("id,hardware,n_devices,stack,target,drafter,method,k,tree_size,batch_size,context_len,temperature,"
                 "alpha,tau,measured_speedup")
REPLAY_ROW = {"id": "r1", "hardware": "h100-sxm", "n_devices": "1", "stack": "vllm", "target": "llama-3.1-8b",
              "drafter": "llama-3.2-1b", "method": "draft_model", "k": "4", "tree_size": "", "batch_size": "1",
              "context_len": "1024", "temperature": "0", "alpha": "0.7", "tau": "", "measured_speedup": "1.8"}
# a row's documented ranges: (kind, lowest, highest, blank allowed)
REPLAY_COLUMNS = {"n_devices": ("int", 1, None, True), "k": ("int", 1, 64, False), "batch_size": ("int", 1, None, False),
                  "context_len": ("int", 0, 131072 - 5, True), "temperature": ("float", 0.0, None, True),
                  "alpha": ("float", 0.0, 1.0, False), "measured_speedup": ("float", 0.01, None, True)}
CELL = st.one_of(st.integers(-10 ** 9, 10 ** 9).map(str), st.floats(allow_nan=True, allow_infinity=True).map(repr),
                 st.sampled_from(["", "abc", "1e400", "0", "-1", "1.5", "10000000", "nan"]),
                 st.text(alphabet="0123456789.-e", max_size=5))


def replay_file(tmp_path: Path, rows: list[dict], header: str = REPLAY_HEADER, name: str = "rows.csv") -> Path:
    cols = header.split(",")
    return write(tmp_path, name, header + "\n" + "".join(",".join(r.get(c, "") for c in cols) + "\n" for r in rows))


def cell_impossible(text: str, kind: str, lo, hi, blank_ok: bool, *, lo_open=False) -> bool:
    if not text.strip():
        return not blank_ok
    try:
        v = float(text)
    except ValueError:
        return True
    if kind == "int" and math.isfinite(v) and v != int(v):
        return True
    return judge(int(v) if kind == "int" and math.isfinite(v) else v, kind, lo, hi, lo_open=lo_open)


@fuzz(60)
@given(column=st.sampled_from(sorted(REPLAY_COLUMNS) + ["tau"]), text=CELL)
def test_replay_rows(tmp_path, column, text):
    row = dict(REPLAY_ROW, **{column: text})
    if column == "tau":
        row["alpha"] = ""
        impossible = cell_impossible(text, "float", 1.0, 5.0, False)
    else:
        kind, lo, hi, blank = REPLAY_COLUMNS[column]
        impossible = cell_impossible(text, kind, lo, hi, blank)
    rc, out, err = cli(["replay", replay_file(tmp_path, [row, dict(REPLAY_ROW, id="r2")]), "--json"])
    assert_clean(rc, out, err, names=[column, "rows.csv"])
    if rc:
        return
    rows = {r["id"]: r for r in strict_json(out)["rows"]}
    assert rows["r2"]["predicted_speedup"] is not None  # a bad row does not take the others with it
    r1 = rows["r1"]
    if impossible:
        assert r1["predicted_speedup"] is None and r1["reason"], f"an impossible row was predicted: {r1}"
        assert column in r1["reason"] or column.split("_")[0] in r1["reason"], r1["reason"]
    for r in rows.values():
        if r["predicted_speedup"] is not None:
            assert math.isfinite(r["predicted_speedup"]) and 0 < r["predicted_speedup"] <= int(float(r["k"])) + 1


@pytest.mark.parametrize("content, names", [
    (b"", ["rows.csv", "empty"]), (REPLAY_HEADER.encode() + b"\n", ["rows.csv", "no rows"]),
    (b"\x00\x01binary\xff", ["rows.csv"]), (REPLAY_HEADER.encode("utf-16"), ["rows.csv"]),
    ((REPLAY_HEADER.replace(",k,", ",kk,") + "\n").encode() + b"r,h100-sxm,1,,llama-3.1-8b,,none,4,,1,1,0,0.5,,1\n",
     ["rows.csv", "k"]),
    ((REPLAY_HEADER + ",target_dtyp\n").encode() + b"r,h100-sxm,1,,llama-3.1-8b,,none,4,,1,1,0,0.5,,1,fp8\n",
     ["target_dtyp"]),
])
def test_damaged_replay_tables(tmp_path, content, names):
    path = write(tmp_path, "rows.csv", content)
    rc, out, err = cli(["replay", path, "--json"])
    assert_clean(rc, out, err, refuse=True, names=names)


CAL_HEADER = "hardware,target,tp,batch_size,q_len,context_len,logit_len,measured_time_s"


def calibration_rows(tmp_path: Path, bad: tuple | None = None) -> Path:
    rows = [["h100-sxm", "llama-3.1-8b", "1", str(b), str(q), "1024", str(q), f"{0.0062 + 0.00004 * b * q:.6f}"]
            for b in (1, 4, 16) for q in (1, 5)]  # six distinct passes: more than the five parameters
    if bad is not None:
        col, text = bad
        rows[2][CAL_HEADER.split(",").index(col)] = text
    return write(tmp_path, "rows.csv", CAL_HEADER + "\n" + "".join(",".join(r) + "\n" for r in rows))


CAL_COLUMNS = {"tp": ("int", 1, 8), "batch_size": ("int", 1, None), "q_len": ("int", 1, None),
               "context_len": ("int", 0, 131072 - 5), "logit_len": ("int", 0, None),
               "measured_time_s": ("float", 0.0, None)}


@fuzz(20)
@given(column=st.sampled_from(sorted(CAL_COLUMNS)), text=CELL)
def test_calibration_rows(tmp_path, column, text):
    kind, lo, hi = CAL_COLUMNS[column]
    impossible = cell_impossible(text, kind, lo, hi, False, lo_open=column == "measured_time_s")
    if column == "tp" and not impossible:
        impossible = 32 % int(float(text)) != 0  # tensor parallelism divides the heads
    rc, out, err = cli(["calibrate", "steps", calibration_rows(tmp_path, (column, text)), "--json",
                        "--fit", "step_overhead_s"])
    assert_clean(rc, out, err, refuse=impossible, names=[column, "rows.csv", "tp"])
    if rc == 0:
        d = strict_json(out)["summary"]
        assert 0 < d["bandwidth_frac"] <= 1 and d["step_overhead_s"] >= 0


@pytest.mark.parametrize("content", [b"", CAL_HEADER.encode() + b"\n", b"\x00\x00\x01", CAL_HEADER.encode("utf-16"),
                                     b"hardware,target\nh100-sxm,llama-3.1-8b\n"])
def test_damaged_calibration_files(tmp_path, content):
    path = write(tmp_path, "rows.csv", content)
    rc, out, err = cli(["calibrate", "steps", path, "--json"])
    assert_clean(rc, out, err, refuse=True, names=["rows.csv"])


@pytest.mark.parametrize("edit", ["empty", "header only", "nul", "text in a time", "negative time"])
def test_damaged_cpu_overheads_for_calibrate_host(tmp_path, edit):
    lines = (ROOT / "data/perf/vidur/cpu_overheads/a100.csv").read_text().splitlines()[:40]
    if edit == "empty":
        text = ""
    elif edit == "header only":
        text = lines[0] + "\n"
    elif edit == "nul":
        text = "\n".join(lines) + "\n\x00\n"
    else:
        cells = lines[3].split(",")
        cells[lines[0].split(",").index("schedule_median")] = "abc" if edit == "text in a time" else "-4"
        text = "\n".join(lines[:3] + [",".join(cells)] + lines[4:]) + "\n"
    path = write(tmp_path, "cpu.csv", text)
    rc, out, err = cli(["calibrate", "host", "--file", path, "--json"])
    assert_clean(rc, out, err, refuse=True, names=["cpu.csv"])


# ---- Hugging Face config.json (models import) -----------------------------------------------------------

HF = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336,
      "num_attention_heads": 32, "num_key_value_heads": 8, "num_hidden_layers": 32, "vocab_size": 128256,
      "max_position_embeddings": 131072, "torch_dtype": "bfloat16"}


@fuzz(40)
@given(key=st.sampled_from(["hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads",
                            "num_hidden_layers", "vocab_size"]), value=ANY_VALUE)
def test_models_import_config_values(tmp_path, key, value):
    cfg = dict(HF, **{key: value})
    path = write(tmp_path, "config.json", json.dumps(cfg))
    rc, out, err = cli(["models", "import", path, "--id", "fz", "--tokenizer", "llama3"])
    divides = key not in ("hidden_size", "num_attention_heads", "num_key_value_heads") or (
        isinstance(value, int) and not isinstance(value, bool) and value >= 1
        and (4096 if key != "hidden_size" else value) % (32 if key != "num_attention_heads" else value) == 0
        and (32 if key != "num_attention_heads" else value) % (8 if key != "num_key_value_heads" else value) == 0)
    impossible = judge(value, "int", 1, None) or not divides
    assert_clean(rc, out, err, refuse=impossible, names=[key, "config.json", "head", "hidden", "n_", "ffn", "vocab",
                                                         "layers"])
    if rc == 0:
        tomllib.loads(out)  # the TOML it prints reads back


@pytest.mark.parametrize("content", [b"", b"\xff\xfe\x00binary", b"[1, 2]", b'"text"', b"{not json",
                                     json.dumps(HF).replace("4096", "NaN").encode()])
def test_damaged_config_json(tmp_path, content):
    path = write(tmp_path, "config.json", content)
    rc, out, err = cli(["models", "import", path, "--id", "fz", "--tokenizer", "llama3"])
    assert_clean(rc, out, err, refuse=True, names=["config.json"])


# ---- GGUF headers ---------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory):
    pytest.importorskip("gguf")
    from specsim.decoder.testing import write_tiny_gguf

    return write_tiny_gguf(tmp_path_factory.mktemp("gguf") / "tiny.gguf").read_bytes()


@fuzz(60)
@given(op=st.sampled_from(["truncate", "flip", "zero", "counts", "version"]), where=st.integers(0, 4095),
       size=st.integers(1, 64), word=st.sampled_from([0, 1, 2 ** 31, 2 ** 40, 2 ** 63 - 1, 2 ** 64 - 1]))
def test_damaged_gguf_header_is_refused_or_loads(tmp_path, tiny_gguf, op, where, size, word):
    """Bytes of a tiny GGUF's header damaged: load_gguf and the model's shape checks either refuse it
    with an InputError (a SpecError) or give a model whose shapes agree; no other exception, and no
    kernel runs here (the decoder's own tests run the refused cases under bounds checking)."""
    from specsim.decoder.gguf_model import load_gguf
    from specsim.decoder.model import Transformer
    from specsim.errors import SpecError

    data = bytearray(tiny_gguf)
    if op == "truncate":
        data = data[:where]
    elif op == "flip":
        data[where] ^= 1 << (size % 8)
    elif op == "zero":
        data[where:where + size] = bytes(len(data[where:where + size]))
    elif op == "counts":
        data[8 + 8 * (where % 2):16 + 8 * (where % 2)] = word.to_bytes(8, "little")
    else:
        data[4:8] = (word & 0xFFFFFFFF).to_bytes(4, "little")
    path = write(tmp_path, "m.gguf", bytes(data))
    try:
        Transformer(load_gguf(path))
    except SpecError as exc:
        assert "m.gguf" in str(exc) or "tensor" in str(exc) or "llama." in str(exc), str(exc)


# ---- output folders: refused, replaced only with --force, never partial ----------------------------------

SWEEP = dict(POINT, sweep={"k": [2, 4], "batch_size": [1, 16], "alpha": [0.7], "context_len": [512]})


def out_commands(tmp_path: Path) -> dict:
    scen = write(tmp_path, "s.toml", toml_text(SWEEP))
    return {
        "sweep": (["sweep", scen, "--quiet", "--no-plots", "--out"], "folder"),
        "simulate": (["simulate", serving_scenario_file(tmp_path), "--quiet", "--no-plots", "--out"], "folder"),
        "replay": (["replay", replay_file(tmp_path, [REPLAY_ROW], name="measured.csv"), "--out"], "file"),
        "calibrate steps": (["calibrate", "steps", calibration_rows(tmp_path), "--out"], "file"),
        "models import": (["models", "import", write(tmp_path, "config.json", json.dumps(HF)), "--id", "fz",
                           "--tokenizer", "llama3", "--out"], "file"),
    }


@pytest.mark.parametrize("command", ["sweep", "simulate", "replay", "calibrate steps", "models import"])
@pytest.mark.parametrize("target", ["''", "a file", "below a file", "/proc", "trailing slash"])
def test_bad_out_paths_are_refused(tmp_path, monkeypatch, command, target):
    monkeypatch.chdir(tmp_path)
    argv, kind = out_commands(tmp_path)[command]
    write(tmp_path, "afile", "mine")
    path = {"''": "", "a file": str(tmp_path / "afile"), "below a file": str(tmp_path / "afile" / "sub"),
            "/proc": "/proc/specsim-fuzz", "trailing slash": str(tmp_path / "new") + "/"}[target]
    before = set(os.listdir(tmp_path))
    rc, out, err = cli(argv + [path])
    if target == "trailing slash" and kind == "folder" or target == "a file" and kind == "file":
        assert_clean(rc, out, err)  # a folder path with a slash is a folder; a file may be replaced
        return
    assert_clean(rc, out, err, refuse=True, names=["--out", "out"])
    assert rc == 5, err
    assert set(os.listdir(tmp_path)) == before, "a refused run wrote into the current folder"
    assert (tmp_path / "afile").read_text() == "mine"


def test_non_empty_out_is_refused_and_force_replaces_only_specsims_files(tmp_path):
    argv, _ = out_commands(tmp_path)["sweep"]
    out = tmp_path / "out"
    write(out, "notes.txt", "mine")
    rc, _, err = cli(argv + [out])
    assert rc == 5 and "--force" in err
    assert sorted(os.listdir(out)) == ["notes.txt"]
    assert cli(argv[:-1] + ["--out", out, "--force"])[0] == 0  # plots off; then a run with plots
    first = set(nonhidden_files(out))
    assert {"sweep.csv", "manifest.json", "notes.txt"} <= first
    assert cli([a for a in argv if a != "--no-plots"][:-1] + ["--out", out, "--force"])[0] == 0
    assert cli(argv[:-1] + ["--out", out, "--force"])[0] == 0  # plots off again: the plots must go
    files = set(nonhidden_files(out))
    manifest = json.loads((out / "manifest.json").read_text())["files"]
    assert files == set(manifest) | {"manifest.json", "notes.txt"}, (files, manifest)
    assert (out / "notes.txt").read_text() == "mine"


def test_a_rerun_of_simulate_with_fewer_policies_leaves_no_stale_csvs(tmp_path):
    argv, _ = out_commands(tmp_path)["simulate"]
    out = tmp_path / "out"
    assert cli(argv + [out])[0] == 0
    first = set(nonhidden_files(out))
    assert any("static" in f for f in first)
    assert cli(argv + [out, "--force", "--policies", "never"])[0] == 0
    files = set(nonhidden_files(out))
    assert not any("static" in f for f in files), files
    assert files == set(json.loads((out / "manifest.json").read_text())["files"]) | {"manifest.json"}


def test_a_refused_run_leaves_out_as_it_was(tmp_path):
    bad = dict(SWEEP, sweep={"k": [2], "batch_size": [1, -4], "alpha": [0.7]})
    scen = write(tmp_path, "bad.toml", toml_text(bad))
    rc, out, err = cli(["sweep", scen, "--out", tmp_path / "out", "--quiet"])
    assert_clean(rc, out, err, refuse=True, names=["batch_size"])
    assert not nonhidden_files(tmp_path / "out")
    empty = dict(SWEEP, sweep={"k": [2], "batch_size": [], "alpha": [0.7]})
    rc, out, err = cli(["sweep", write(tmp_path, "empty.toml", toml_text(empty)), "--out", tmp_path / "out2", "--quiet"])
    assert_clean(rc, out, err, refuse=True, names=["sweep", "empty"])
    assert not nonhidden_files(tmp_path / "out2")


# ---- interrupts: a real SIGINT in a subprocess -----------------------------------------------------------

def interrupt(argv, cwd: Path, *, when) -> tuple[int, str]:
    """Start `specsim argv`, send SIGINT once `when()` is true (or after 20 s), return (exit, stderr)."""
    env = {k: v for k, v in os.environ.items() if k != "SPECSIM_DEBUG"}
    p = subprocess.Popen([sys.executable, "-c", "import sys; from specsim.cli import run; run()", *map(str, argv)],
                         cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 20
    while p.poll() is None and not when() and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.3)
    if p.poll() is None:
        p.send_signal(signal.SIGINT)
    try:
        _, err = p.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        p.kill()
        raise AssertionError("no exit within 30 s of the SIGINT")
    return p.returncode, err.decode()


def staging(out: Path):
    return lambda: out.is_dir() and any(p.name.startswith(".specsim-partial-") for p in out.iterdir())


@pytest.mark.parametrize("rerun", [False, True])
def test_sigint_during_a_sweep_leaves_no_output_that_looks_complete(tmp_path, rerun):
    out = tmp_path / "out"
    argv = ["sweep", "seed-70b-hbm", "--out", out, "--quiet"]
    if rerun:  # an earlier, finished run's files must survive an interrupted --force rerun unchanged
        assert cli(["sweep", write(tmp_path, "s.toml", toml_text(SWEEP)), "--out", out, "--quiet", "--no-plots"])[0] == 0
        argv.append("--force")
    before = nonhidden_files(out)
    rc, err = interrupt(argv, tmp_path, when=staging(out))
    assert "Traceback" not in err, err
    if rc == 0:  # finished before the signal: then it is complete, with its manifest
        assert "manifest.json" in nonhidden_files(out)
        return
    assert rc == 130 and len(error_line(err)) == 1 and "interrupted" in err, (rc, err)
    assert nonhidden_files(out) == before


def test_sigint_during_simulate_leaves_no_output_that_looks_complete(tmp_path):
    scen = serving_scenario_file(tmp_path, {"kind": "poisson", "n_requests": 3000, "rate_per_s": 20.0,
                                            "prompt": {"kind": "fixed", "tokens": 512},
                                            "output": {"kind": "fixed", "tokens": 256}})
    out = tmp_path / "out"
    started = time.monotonic()
    # SIGINT to the command alone (as `kill -INT` sends it; a terminal's Ctrl-C reaches its workers too)
    rc, err = interrupt(["simulate", scen, "--out", out, "--quiet", "--rates", "5,10,20"], tmp_path,
                        when=lambda: time.monotonic() - started > 3)
    assert "Traceback" not in err, err
    if rc != 0:
        assert rc == 130 and len(error_line(err)) == 1, (rc, err)
        assert not nonhidden_files(out)


# ---- every scenario table and field, through the library ---------------------------------------------------

def _serve(**over) -> dict:
    s = dict(POINT, workload={"kind": "poisson", "n_requests": 12, "rate_per_s": 4.0, "prompt": {"kind": "fixed", "tokens": 64},
                              "output": {"kind": "fixed", "tokens": 8}},
             engine={"max_num_seqs": 64, "max_num_batched_tokens": 512},
             policies={"never": {"kind": "never"}, "static": {"kind": "static", "k": 3}}, slo={"ttft_s": 1.0, "tpot_s": 0.05})
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(s.get(key), dict) and key not in ("policies",):
            s[key] = {**s[key], **value}
        else:
            s[key] = value
    return s


AZURE = "traces/azure_llm_inference_2023/AzureLLMInferenceTrace_conv.csv"
MOONCAKE = "traces/mooncake_fast25/conversation_trace.jsonl"
_NO_ALPHA = {k: v for k, v in POINT.items() if k not in ("alpha", "drafter")}
# (table, field) -> (kind, lowest possible, highest possible, lowest open, the scenario it is set in): what
# scenarios/README.md and the system being modelled allow; outside, a value is impossible and must be refused
# (a bound None: nothing in the system sets one, so the simulator may refuse or accept)
TABLE_FIELDS = {
    ("workload", "n_requests"): ("int", 1, None, False, _serve),
    ("workload", "rate_per_s"): ("float", 0.0, None, True, _serve),
    ("workload", "cv"): ("float", 0.0, None, True, lambda: _serve(workload={"kind": "gamma"})),
    ("workload", "n_users"): ("int", 1, 12, False,
                              lambda: _serve(workload={"kind": "closed_loop", "rate_per_s": None})),
    ("workload", "think_time_s"): ("float", 0.0, None, False,
                                   lambda: _serve(workload={"kind": "closed_loop", "rate_per_s": None})),
    ("workload", "time_scale"): ("float", 0.0, None, True,
                                 lambda: _serve(workload={"kind": "trace", "trace": AZURE, "window_s": [0, 20]})),
    ("workload", "jitter_s"): ("float", 0.0, None, False,
                               lambda: _serve(workload={"kind": "trace", "trace": MOONCAKE, "window_s": [0, 20]})),
    ("workload", "trace"): ("str", None, None, False, lambda: _serve(workload={"kind": "trace", "trace": AZURE,
                                                                              "window_s": [0, 20]})),
    ("workload.prompt", "tokens"): ("int", 1, None, False, _serve),
    ("workload.output", "tokens"): ("int", 1, None, False, _serve),
    ("workload.prompt", "sigma"): ("float", 0.0, None, False,
                                   lambda: _serve(workload={"prompt": {"kind": "lognormal", "mu": 4.0, "sigma": 0.5}})),
    ("workload.prompt", "mean_tokens"): ("float", 0.0, None, True,
                                         lambda: _serve(workload={"prompt": {"kind": "lognormal", "mean_tokens": 60.0,
                                                                             "sigma": 0.5}})),
    ("workload.prompt", "max"): ("int", 10, None, False,
                                 lambda: _serve(workload={"prompt": {"kind": "uniform", "min": 10, "max": 60}})),
    ("engine", "max_num_seqs"): ("int", 1, None, False, _serve),
    ("engine", "max_num_batched_tokens"): ("int", 1, None, False, _serve),
    ("engine", "block_size"): ("int", 1, None, False, _serve),
    ("engine", "gpu_memory_utilization"): ("float", 0.0, 1.0, True, _serve),
    ("engine", "watermark_frac"): ("float", 0.0, 0.999, False, _serve),
    ("engine", "max_model_len"): ("int", 1, 131072, False, _serve),
    ("engine", "acceptance_window_steps"): ("int", 1, None, False, _serve),
    ("engine", "activation_reserve_gb"): ("float", 0.0, 80.0, False, _serve),
    ("engine", "n_blocks"): ("int", 1, None, False, _serve),
    ("engine", "chunked_prefill"): ("bool", None, None, False, _serve),
    ("engine", "drafter_catchup"): ("bool", None, None, False, _serve),
    ("engine", "scheduling"): ("str", None, None, False, _serve),
    ("engine", "swap_space_gib"): ("float", 0.0, None, False, lambda: _serve(engine={"preemption_mode": "swap"})),
    ("engine", "swap_bandwidth_gb_s"): ("float", 0.0, None, True, lambda: _serve(engine={"preemption_mode": "swap"})),
    ("fleet", "n_replicas"): ("int", 1, None, False, lambda: _serve(fleet={"n_replicas": 2})),
    ("fleet", "cache_threshold"): ("float", 0.0, 1.0, False,
                                   lambda: _serve(fleet={"n_replicas": 2, "router": "prefix_affinity"})),
    ("fleet", "balance_rel_threshold"): ("float", 1.0, None, False,
                                         lambda: _serve(fleet={"n_replicas": 2, "router": "prefix_affinity"})),
    ("fleet", "kv_transfer_gb_s"): ("float", 0.0, None, True,
                                    lambda: _serve(fleet={"n_replicas": 2, "layout": "disaggregated", "n_prefill": 1})),
    ("fleet", "kv_transfer_latency_us"): ("float", 0.0, None, False,
                                          lambda: _serve(fleet={"n_replicas": 2, "layout": "disaggregated", "n_prefill": 1})),
    ("fleet", "n_prefill"): ("int", 1, 1, False,
                             lambda: _serve(fleet={"n_replicas": 2, "layout": "disaggregated", "n_prefill": 1})),
    ("slo", "ttft_s"): ("float+inf", 0.0, None, True, _serve),
    ("slo", "tpot_s"): ("float+inf", 0.0, None, True, _serve),
    ("policies.static", "k"): ("int", 0, 64, False, _serve),
    ("policies.gate", "threshold"): ("int", 1, 64, False,
                                     lambda: _serve(policies={"gate": {"kind": "disable_by_batch_size", "k": 3,
                                                                       "threshold": 8}})),
    ("policies.off", "min_acceptance_frac"): ("float", 0.0, 1.0, False,
                                              lambda: _serve(policies={"off": {"kind": "acceptance_off_switch", "k": 3,
                                                                               "min_acceptance_frac": 0.5}})),
    ("policies.off", "probe_every_steps"): ("int", 1, None, False,
                                            lambda: _serve(policies={"off": {"kind": "acceptance_off_switch", "k": 3,
                                                                             "min_acceptance_frac": 0.5}})),
    ("policies.gp", "k_max"): ("int", 0, 64, False, lambda: _serve(policies={"gp": {"kind": "goodput_optimal", "k_max": 3}})),
    ("sweep", "tau_k"): ("int", 1, 64, False, lambda: dict(POINT, sweep={"tau": [2.0]})),
    ("threshold", "margin"): ("float", 0.0, None, False, lambda: dict(POINT, threshold={})),
    ("threshold", "k_max"): ("int", 1, 64, False, lambda: dict(POINT, threshold={})),
    ("threshold", "batch_limit"): ("int", 1, None, False, lambda: dict(POINT, threshold={})),
    ("acceptance", "context_decay_per_token"): ("float", 0.0, None, False, lambda: dict(POINT, acceptance={})),
    ("acceptance", "reference_context_len"): ("float", 0.0, None, False, lambda: dict(POINT, acceptance={})),
    ("acceptance", "reference_temperature"): ("float", 0.0, None, False, lambda: dict(POINT, acceptance={})),
    ("acceptance", "temperature_slope"): ("float", None, None, False, lambda: dict(POINT, acceptance={})),
    ("acceptance", "rank_decay"): ("float", 0.0, 1.0, False, lambda: dict(POINT, acceptance={})),
    ("acceptance", "n_ranks"): ("int", 1, None, False,
                                lambda: dict(_NO_ALPHA, method="eagle", alpha=0.7, tree_size=8, acceptance={})),
    ("drafter_options", "n_heads_medusa"): ("int", 1, None, False,
                                            lambda: dict(_NO_ALPHA, method="medusa", alpha=0.7, drafter_options={})),
    ("drafter_options", "lookahead_ngram"): ("int", 2, None, False,
                                             lambda: dict(_NO_ALPHA, method="lookahead", drafter_options={})),
    ("drafter_options", "sparse_window"): ("int", 1, 131072, False,
                                           lambda: dict(_NO_ALPHA, method="sparse_kv", alpha=0.7, drafter_options={})),
    ("drafter_options", "sparse_sink"): ("int", 0, 131072, False,
                                         lambda: dict(_NO_ALPHA, method="sparse_kv", alpha=0.7, drafter_options={})),
    ("drafter_options", "prompt_lookup_s_per_seq_per_ktoken"): (
        "float", 0.0, 1.0, False, lambda: dict(_NO_ALPHA, method="prompt_lookup", alpha=0.7, drafter_options={})),
}
# list-valued fields: each item judged like a field of that kind. The sweep's contexts are counts up to int32 at
# parse; one past a target's maximum is skipped at evaluation naming its bound (test_sweep tests that), since
# the bound depends on the target axis
LIST_FIELDS = {
    ("sweep", "k"): ("int", 0, 64), ("sweep", "batch_size"): ("int", 1, None), ("sweep", "context_len"): ("int", 0, 2 ** 31 - 1),
    ("sweep", "alpha"): ("float", 0.0, 1.0), ("sweep", "tree_size"): ("int", 1, None), ("sweep", "temperature"): ("float", 0.0, None),
    ("threshold", "batch_sizes"): ("int", 1, None), ("workload", "rates"): ("float", 0.0, None),
    ("workload", "priority_fracs"): ("float", 0.0, 1.0),
}


def use_scenario(raw: dict) -> None:
    """Load the scenario, resolve it and hand each table to the code that reads it (the serving setup,
    the sweep's axes, the threshold settings): a SpecError is a refusal; anything else is a bug."""
    from specsim.analyses.threshold import threshold_settings
    from specsim.presentation.sweep import sweep_axes
    from specsim.serving.setup import build_serving
    from specsim.specs.scenario import scenario_from_dict
    from specsim.speculation.operating_point import resolve

    raw = {k: v for k, v in raw.items() if v is not None}
    if isinstance(raw.get("workload"), dict):
        raw["workload"] = {k: v for k, v in raw["workload"].items() if v is not None}
        if raw["workload"].get("kind") in ("trace", "closed_loop"):
            for key in ("rate_per_s", "n_requests", "prompt", "output") if raw["workload"]["kind"] == "trace" else ():
                raw["workload"].pop(key, None)
    op = resolve(scenario_from_dict(raw, where="fz.toml"))
    if "workload" in raw:
        build_serving(op)
    if "sweep" in raw:
        sweep_axes(op)
    if "threshold" in raw:
        threshold_settings(op)


def outcome(raw: dict) -> str | None:
    """None when the scenario was taken, else the refusal's message."""
    from specsim.errors import SpecError

    try:
        use_scenario(raw)
    except SpecError as exc:
        return str(exc)
    return None


def set_field(scen: dict, table: str, key: str, value) -> dict:
    parts = table.split(".")
    node = scen
    for p in parts:
        node = node.setdefault(p, {})
    node[key] = value
    return scen


def field_impossible(spec, value) -> bool:
    kind, lo, hi, lo_open = spec[:4]
    if kind == "float+inf":
        if not isinstance(value, bool) and isinstance(value, (int, float)) and value == math.inf:
            return False
        kind = "float"
    if kind == "str":
        return not isinstance(value, str) or not value.strip() or value not in ("fcfs", "priority", AZURE)
    return judge(value, kind, lo, hi, lo_open=lo_open)


@fuzz(250)
@given(field=st.sampled_from(sorted(TABLE_FIELDS, key=str)), value=ANY_VALUE)
def test_every_table_field(field, value):
    table, key = field
    spec = TABLE_FIELDS[field]
    message = outcome(set_field(spec[4](), table, key, value))
    if field_impossible(spec, value):
        assert message is not None, f"[{table}] {key} = {value!r} was taken"
    if message is not None and field_impossible(spec, value):
        assert key in message or key.split("_")[0] in message, message


# the faults of one kind each field must refuse: a string, a boolean, NaN, infinity (except where
# inf means no limit), a negative and an overflowing integer
FIELD_FAULTS = ["x", True, float("nan"), -1, 2 ** 63 - 1, 1e30]


@pytest.mark.parametrize("field", sorted(TABLE_FIELDS, key=str), ids=lambda f: f"{f[0]}.{f[1]}")
def test_a_sample_of_faults_per_field(field):
    table, key = field
    spec = TABLE_FIELDS[field]
    for value in FIELD_FAULTS:
        if not field_impossible(spec, value):
            continue
        message = outcome(set_field(spec[4](), table, key, value))
        assert message is not None and key in message, (value, message)


@fuzz(80)
@given(field=st.sampled_from(sorted(LIST_FIELDS)), items=st.lists(ANY_VALUE, min_size=1, max_size=3))
def test_every_list_field(field, items):
    table, key = field
    kind, lo, hi = LIST_FIELDS[field]
    base = _serve() if table == "workload" else dict(POINT, **{table: {}})
    impossible = any(judge(v, kind, lo, hi) for v in items)
    if key == "priority_fracs" and not impossible:
        impossible = abs(sum(items) - 1.0) > 1e-6
    if key == "rates" and not impossible:
        impossible = any(v <= 0 for v in items)
    message = outcome(set_field(base, table, key, items))
    if impossible:
        assert message is not None and key in message, (items, message)


# ---- rules that join fields and tables ------------------------------------------------------------------

CAL = {"name": "t/prompt-lookup/chat", "target": "llama-3.1-8b", "drafter": "prompt-lookup", "method": "prompt_lookup",
       "workload": "chat", "command": "test", "level": 0.95, "reference": {"context_len": 1024.0, "temperature": 0.0, "k": 4},
       "iid": {"alpha": 0.7, "ci_low": 0.65, "ci_high": 0.75, "n_cycles": 200, "n_trials": 300},
       "conditional": {"rates": [0.7, 0.72], "ci_low": [0.6, 0.6], "ci_high": [0.8, 0.8]},
       "coverage": {"context_len": [500.0, 1500.0], "temperatures": [0.0], "ks": [4], "workloads": ["chat"]}}


def _calibrated(tmp_path, **cal_over) -> dict:
    cal = json.loads(json.dumps(CAL))
    for dotted, v in cal_over.items():
        node = cal
        *parents, last = dotted.split("__")
        for p in parents:
            node = node[p]
        node[last] = v
    path = tmp_path / "cal.toml"
    path.write_text(toml_text({k: v for k, v in cal.items() if not isinstance(v, dict)})
                    + "".join(f"[{t}]\n" + "".join(f"{k} = {toml_value(v)}\n" for k, v in cal[t].items())
                              for t in cal if isinstance(cal[t], dict)))
    return dict(_NO_ALPHA, method="prompt_lookup", acceptance={"calibrated": str(path)})


CROSS = [  # (what breaks, scenario, a word the refusal names)
    ("a band above max_num_seqs", lambda: _serve(policies={"b": {"kind": "k_by_batch_band", "bands": [[1, 4], [100, 2]]}}),
     "max_num_seqs"),
    ("a band with one end", lambda: _serve(policies={"b": {"kind": "k_by_batch_band", "bands": [[1], [8, 2]]}}), "bands"),
    ("a band with three ends", lambda: _serve(policies={"b": {"kind": "k_by_batch_band", "bands": [[1, 4, 2]]}}), "bands"),
    ("a band with a non-integer end", lambda: _serve(policies={"b": {"kind": "k_by_batch_band", "bands": [[1.5, 4]]}}),
     "bands"),
    ("a gate above max_num_seqs", lambda: _serve(policies={"g": {"kind": "disable_by_batch_size", "k": 3,
                                                                "threshold": 500}}), "threshold"),
    ("a policy name that is not a file name", lambda: _serve(policies={"../x": {"kind": "never"}}), "name"),
    ("lognormal without parameters", lambda: _serve(workload={"prompt": {"kind": "lognormal"}}), "sigma"),
    ("lognormal given tokens", lambda: _serve(workload={"prompt": {"kind": "lognormal", "mu": 4, "sigma": 1,
                                                                    "tokens": 5}}), "tokens"),
    ("tokens = true", lambda: _serve(workload={"prompt": {"kind": "fixed", "tokens": True}}), "tokens"),
    ("lengths_from beside prompt", lambda: _serve(workload={"lengths_from": AZURE}), "lengths_from"),
    ("more users than requests", lambda: _serve(workload={"kind": "closed_loop", "rate_per_s": None, "n_users": 50}),
     "n_users"),
    ("jitter_s on an Azure trace", lambda: _serve(workload={"kind": "trace", "trace": AZURE, "jitter_s": 1.0}), "jitter_s"),
    ("a trace path given as a number", lambda: _serve(workload={"kind": "trace", "trace": 5}), "trace"),
    ("a window of one end", lambda: _serve(workload={"kind": "trace", "trace": AZURE, "window_s": [5]}), "window_s"),
    ("swap space with recompute", lambda: _serve(engine={"swap_space_gib": 8.0}), "swap_space_gib"),
    ("n_blocks above what the memory holds", lambda: _serve(engine={"n_blocks": 10 ** 9}), "n_blocks"),
    ("max_model_len above the target's context", lambda: _serve(engine={"max_model_len": 10 ** 6}), "max_model_len"),
    ("prefix affinity's keys on another router", lambda: _serve(fleet={"n_replicas": 2, "cache_threshold": 0.5}),
     "cache_threshold"),
    ("n_prefill in a colocated fleet", lambda: _serve(fleet={"n_replicas": 2, "n_prefill": 1}), "n_prefill"),
    ("alpha and by_position", lambda: dict(POINT, acceptance={"by_position": [0.8, 0.7]}), "by_position"),
    ("a calibration's workload without a calibration", lambda: dict(POINT, acceptance={"workload": "chat"}), "workload"),
    ("a sparse window past the target's context", lambda: dict(_NO_ALPHA, method="sparse_kv", alpha=0.7,
                                                               drafter_options={"sparse_window": 10 ** 7}), "sparse_window"),
    ("a prompt-lookup cost of 1e30", lambda: dict(_NO_ALPHA, method="prompt_lookup", alpha=0.7,
                                                 drafter_options={"prompt_lookup_s_per_seq_per_ktoken": 1e30}),
     "prompt_lookup_s_per_seq_per_ktoken"),
    ("the drafter is the target", lambda: dict(POINT, drafter="llama-3.1-8b"), "drafter"),
    ("a tree of 10^5 nodes", lambda: dict(_NO_ALPHA, method="eagle", alpha=0.7, tree_size=100_000), "tree_size"),
    ("a [sweep] tree of 10^5 nodes", lambda: dict(POINT, sweep={"tree_size": [100_000]}), "tree_size"),
    ("a [sweep] of 10^10 points", lambda: dict(POINT, sweep={"k": list(range(1, 65)), "batch_size": list(range(1, 1001)),
                                                             "context_len": list(range(0, 100_000, 100)),
                                                             "alpha": [i / 200 for i in range(200)]}), "points"),
    ("an unknown plot name", lambda: dict(POINT, sweep={"plots": ["nope"]}), "plots"),
    ("tau above tau_k + 1", lambda: dict(POINT, sweep={"tau": [9.0], "tau_k": 4}), "tau"),
]


@pytest.mark.parametrize("title, make, word", CROSS, ids=[c[0] for c in CROSS])
def test_cross_field_rules(title, make, word):
    message = outcome(make())
    assert message is not None, f"{title}: taken"
    assert word in message, message


@pytest.mark.parametrize("edit, word", [
    ({}, None), ({"iid__n_cycles": 0}, "n_cycles"), ({"coverage__ks": []}, "ks"), ({"iid__ci_low": 0.72}, "alpha"),
    ({"conditional__ci_low": [0.75, 0.6]}, "rates"), ({"target": "qwen2.5-7b"}, "target"),
    ({"target": "no-such-model"}, "target"), ({"method": "eagle"}, "method"), ({"level": 1.5}, "level"),
    ({"reference__k": 0}, "k"), ({"coverage__context_len": [1500.0, 500.0]}, "context_len"),
])
def test_calibration_files_are_checked_when_the_scenario_loads(tmp_path, edit, word):
    from specsim.specs.scenario import scenario_from_dict

    raw = _calibrated(tmp_path, **edit)
    if word is None:
        assert outcome(raw) is None
        return
    from specsim.errors import SpecError

    with pytest.raises(SpecError, match=word):
        scenario_from_dict(raw, where="fz.toml")  # on load, before any analysis


@pytest.mark.parametrize("table, body", [("engine", {"max_num_seq": 4}), ("fleet", {"n_replica": 2}),
                                         ("slo", {"ttft": 1}), ("workload", {"rate": 2}),
                                         ("policies", {"p": {"kind": "static", "kk": 2}}), ("sweep", {"kk": [1]}),
                                         ("threshold", {"marginn": 1})])
def test_a_typo_in_any_table_is_refused_by_predict(tmp_path, table, body):
    """Issue 27: a table is checked when the scenario loads, not only by the command that reads it."""
    path = write(tmp_path, "s.toml", toml_text(dict(POINT, **{table: body})))
    rc, out, err = cli(["predict", path, "--json"])
    assert_clean(rc, out, err, refuse=True, names=[next(iter(body)) if table != "policies" else "kk"])


def test_a_run_too_long_to_end_is_refused_before_it_starts(tmp_path):
    # 10^7 requests of 1000 output tokens: 10^10 tokens, about 18 hours at the simulator's speed
    path = serving_scenario_file(tmp_path, {"kind": "poisson", "n_requests": 10 ** 7, "rate_per_s": 100.0,
                                            "prompt": {"kind": "fixed", "tokens": 16},
                                            "output": {"kind": "fixed", "tokens": 1000}})
    started = time.monotonic()
    rc, out, err = cli(["simulate", path, "--json", "--quiet", "--workers", "1"])
    assert_clean(rc, out, err, refuse=True, names=["tokens"])
    assert time.monotonic() - started < 60


# ---- input files: stack metrics, step-cost fits ---------------------------------------------------------

V0 = ("Speculative metrics: Draft acceptance rate: 0.642, System efficiency: 0.598, Number of speculative tokens: {k}, "
      "Number of accepted tokens: {a}, Number of draft tokens: {d}, Number of emitted tokens: {e}.")
V1 = ("SpecDecoding metrics: Mean acceptance length: {tau}, Accepted: {a} tokens, Drafted: {d} tokens, "
      "Per-position acceptance rate: {rates}, Avg Draft acceptance rate: 82.1%")
PROM = ("vllm:spec_decode_num_drafts_total {n}\nvllm:spec_decode_num_draft_tokens_total {d}\n"
        "vllm:spec_decode_num_accepted_tokens_total {a}\n"
        'vllm:spec_decode_num_accepted_tokens_per_pos_total{{position="0"}} {p0}\n'
        'vllm:spec_decode_num_accepted_tokens_per_pos_total{{position="1"}} {p1}\n')


@pytest.mark.parametrize("text, ok", [
    (V0.format(k=3, a=8547, d=13311, e=10616), True),
    (V0.format(k=3, a=0, d=0, e=0), False),  # nothing drafted: no division by zero, a refusal
    (V1.format(tau="3.26", a=226, d=300, rates="0.890, 0.760, 0.610"), True),
    (V1.format(tau="2.73", a=10 ** 12, d=10 ** 12 + 7, rates="0.500, 0.200, 0.100"), False),  # disagree: ends, refused
    (V1.format(tau="2.50", a=3 * 10 ** 12 // 2, d=3 * 10 ** 12, rates="0.700, 0.500, 0.300"), True),
    (V1.format(tau="2.73", a=500, d=151, rates="0.890, 0.760, 0.610"), False),
    (PROM.format(n=100, d=200, a=120, p0=70, p1=50), True),
    (PROM.format(n=100, d=150, a=180, p0=100, p1=80), False),  # more accepted than drafted
    (PROM.format(n=10, d=200, a=12, p0=7, p1=5), False),  # more draft tokens than drafts x K
    (PROM.format(n=100, d=200, a=120, p0=50, p1=70), False),  # position 1 accepted more often than 0
])
def test_stack_metrics_are_consistent_or_refused(tmp_path, text, ok):
    from specsim.calibration.imports import import_acceptance
    from specsim.errors import SpecError

    path = write(tmp_path, "m.log", text)
    started = time.monotonic()
    if ok:
        imp = import_acceptance(path)
        assert imp.n_accepted <= imp.n_draft_tokens and 1 <= imp.tau <= imp.k + 1
    else:
        with pytest.raises(SpecError, match="m.log"):
            import_acceptance(path)
    assert time.monotonic() - started < 10


@pytest.mark.parametrize("flag, value", [("--context-len", "-1"), ("--context-len", "nan"), ("--context-len", "inf"),
                                         ("--temperature", "-1"), ("--temperature", "nan"), ("--temperature", "inf")])
def test_import_traffic_flags_are_checked(tmp_path, flag, value):
    path = write(tmp_path, "m.log", V1.format(tau="3.26", a=226, d=300, rates="0.890, 0.760, 0.610"))
    for extra in ([], ["--out", str(tmp_path / "cal.toml"), "--name", "llama-3.1-8b/eagle/chat"]):
        rc, out, err = cli(["calibrate", "acceptance", "--import", path, f"{flag}={value}", "--json", *extra])
        assert_clean(rc, out, err, refuse=True, names=[flag])
        assert not (tmp_path / "cal.toml").exists()


@pytest.mark.parametrize("rows, fit, ok", [
    ([(1, 1)], (), False),  # one row, five parameters
    ([(1, 1), (1, 1)], (), False),  # two identical rows
    ([(4, 2)] * 8, ("bandwidth_frac", "compute_frac"), False),  # one batch and query length: the fractions trade
    ([(b, q) for b in (1, 4, 16, 64) for q in (1, 5)], ("bandwidth_frac", "compute_frac"), True),
    ([(1, 1), (4, 1), (16, 1)], ("step_overhead_s",), True),
])
def test_a_step_cost_fit_needs_more_distinct_points_than_parameters(rows, fit, ok):
    import pandas as pd

    from specsim.calibration.fit import PARAMETERS, fit_efficiency
    from specsim.errors import SpecError

    table = pd.DataFrame([{"hardware": "h100-sxm", "target": "llama-3.1-8b", "tp": 1, "batch_size": b, "q_len": q,
                           "context_len": 1024, "logit_len": q, "measured_time_s": 0.0062 + 4e-5 * b * q + 1e-6 * i}
                          for i, (b, q) in enumerate(rows)])
    if ok:
        assert fit_efficiency(table, fit=fit or PARAMETERS).n_rows == len(rows)
    else:
        with pytest.raises(SpecError, match="distinct|tokens in flight"):
            fit_efficiency(table, fit=fit or PARAMETERS)
