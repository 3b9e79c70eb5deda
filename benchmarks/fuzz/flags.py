"""Malformed flags of `predict`: every numeric flag set to values a number parser may trip on."""
from __future__ import annotations

import math
import re
from pathlib import Path

from .cases import calibrate_rows, D, serving_scenario, to_toml


def add_cases(g) -> None:
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
            g.add("flags", f"predict {flag}={v!r}", argv, expect=exp, culprit=culprit, check="predict",
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
            g.add("flags", f"predict {flag}={v!r}", base + ["--alpha", "0.7", f"{flag}={v}"], expect=exp,
                     culprit=culprit, check="predict", meta={"k": 4})
    # the model's maximum context: llama-3.1-8b holds 131072 tokens
    for ctx in (131068, 131072, 131100, 200000, 10**9):
        g.add("flags", f"predict --context {ctx} past the model's maximum", base + ["--alpha", "0.7", "--context", ctx],
                 expect="refuse", culprit=("context",), check="predict", meta={"k": 4})
    for ctx in (1024, 100000, 131067):
        g.add("flags", f"predict --context {ctx} within the maximum", base + ["--alpha", "0.7", "--context", ctx],
                 expect="either", check="predict", meta={"k": 4, "context": ctx})
    for tau in ("100", "5.01", "0.99", "-1"):
        g.add("flags", f"predict --tau {tau} at K = 4", base + ["--k", "4", "--tau", tau], expect="refuse",
                 culprit=("--tau", "tau"), check="predict", meta={"k": 4})
    for combo in (["--alpha", "0.7", "--tau", "3"], ["--method", "prompt_lookup", "--alpha", "0.7"],
                  ["--alpha", "0.7", "--method", "medusa"], ["--alpha", "0.7", "--drafter", "llama-3.1-8b"],
                  ["--alpha", "0.7", "--drafter", "qwen2.5-0.5b"], ["--alpha", "0.7", "--tp", "3"],
                  ["--alpha", "0.7", "--tp", "1024"], ["--alpha", "0.7", "--batch", "100000000"],
                  ["--alpha", "0.7", "--k", "1", "--tree-size", "1000000"]):
        names = [a for a in combo if a.startswith("--")]
        culprit = tuple(names) + tuple(f"'{n.lstrip('-').replace('-', '_')}'" for n in names) + \
            ("tokenizer", "batch", "drafter", "tau", "alpha", "tree_size", "prompt_lookup", "medusa")
        g.add("flags", "predict " + " ".join(combo), base + combo, expect="either", check="predict",
                 meta={"k": 4}, culprit=culprit)
    # threshold
    for v in ("nan", "inf", "-1", "-0.5", "abc", "", "1e308", "0", "0.1", "10", "-inf"):
        exp = "either" if v in ("0", "0.1", "10") else "refuse"
        g.add("flags", f"threshold --margin={v!r}", ["threshold", "seed-70b-hbm", f"--margin={v}", "--json"],
                 expect=exp, culprit=("--margin", "margin"), check="threshold")
    # simulate
    serve = to_toml(serving_scenario())
    for v in ("1,1", "0", "-1", "nan", "inf", "", ",", "1,,2", "a", "1e-300", "2,1", "1e9", "4", "0.5,2",
              "1 2", "-inf", "1e400"):
        exp = "either" if v in ("2,1", "4", "0.5,2", "1e9", "1e-300") else "refuse"
        g.add("flags", f"simulate --rates={v!r}", ["simulate", f"{D}/s.toml", f"--rates={v}", "--json"],
                 files={"s.toml": serve}, expect=exp, culprit=("--rates",), check="simulate",
                 meta={"k": 4, "out_tokens": 32}, timeout_s=180)
    for v in ("never,never", "", "nope", "never,nope", ",", "never", "static_k4,never"):
        exp = "either" if v in ("never", "static_k4,never") else "refuse"
        g.add("flags", f"simulate --policies={v!r}", ["simulate", f"{D}/s.toml", f"--policies={v}", "--json"],
                 files={"s.toml": serve}, expect=exp, culprit=("--policies", "nope"), check="simulate",
                 meta={"k": 4, "out_tokens": 32}, timeout_s=180)
    for v in ("-1", "abc", "", "1.5", str(2**64), "0", "7"):
        exp = "either" if v in ("0", "7", str(2**64)) else "refuse"
        g.add("flags", f"simulate --seed={v!r}", ["simulate", f"{D}/s.toml", f"--seed={v}", "--json"],
                 files={"s.toml": serve}, expect=exp, culprit=("--seed",), check="simulate",
                 meta={"k": 4, "out_tokens": 32}, timeout_s=180)
    # calibrate steps
    rows = calibrate_rows()
    for v in ("", "nope", "bandwidth_frac,bandwidth_frac", "bandwidth_frac,,compute_frac", ",", "compute_frac"):
        exp = "either" if v == "compute_frac" else "refuse"
        g.add("flags", f"calibrate steps --fit={v!r}", ["calibrate", "steps", f"{D}/rows.csv", f"--fit={v}", "--json"],
                 files={"rows.csv": rows}, expect=exp, culprit=("--fit", "nope"), check="json")
    for v in ("", "nope", "a100-sxm-80gb"):
        g.add("flags", f"calibrate steps --hardware={v!r}", ["calibrate", "steps", f"{D}/rows.csv",
                 f"--hardware={v}", "--json"], files={"rows.csv": rows}, expect="refuse",
                 culprit=("--hardware", "hardware", "nope"), check="json")
    # catalog look-ups
    for cmd in (["hardware", "show"], ["models", "show"], ["scenarios", "show"]):
        for v in ("", "nope", "/dev/null", "/", "../../etc/passwd", "x" * 500):
            g.add("flags", f"{' '.join(cmd)} {v[:20]!r}", cmd + [v, "--json"], expect="refuse",
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
            g.add("flags", f"decoder run {flag}={v!r}", argv, files=dfiles, expect="refuse",
                     culprit=(flag, flag.lstrip("-")), check="none", timeout_s=240)
    for flag, v in (("--prompt-file", f"{D}/missing.txt"), ("--prompt-file", f"{D}/bin.txt"),
                    ("--prompt-file", f"{D}/empty.txt"), ("--model", f"{D}/missing.gguf"), ("--model", "/")):
        argv = ["decoder", "run", "--model", f"{D}/tiny.gguf", "--prompt-file", f"{D}/p.txt", "--raw", "--tokens",
                "4"]
        argv[argv.index(flag) + 1] = v
        g.add("flags", f"decoder run {flag} {Path(v).name}", argv,
                 files={**dfiles, "bin.txt": bytes(range(256)) * 4, "empty.txt": ""}, expect="refuse",
                 culprit=(flag, Path(v).name or v), check="none", timeout_s=240)
    for flag, vals in {"--m": ["", "0", "-1", "1,1", "a", "100000"], "--contexts": ["", "-1", "1,1", "x", "10000000"],
                       "--repeats": ["0", "-1"]}.items():
        for v in vals:
            g.add("flags", f"decoder bench {flag}={v!r}", ["decoder", "bench", "--model", f"{D}/tiny.gguf",
                     f"{flag}={v}"], files=dfiles, expect="refuse", culprit=(flag, flag.lstrip("-")),
                     check="none", timeout_s=240)
    del model
