"""Valid input must never be refused (issue 33): hypothesis draws inputs inside the documented rules
and each must load, resolve and give finite figures. A refusal here is a false refusal: the rule that
made it is either missing from the documentation or wrong.

- stack versions: the releases scenarios/README.md describes (numbers separated by dots, optional
  aN/bN/rcN, .postN, .devN, a leading v); the parsed tuple is built here from the drawn parts.
- scenarios: the top-level keys within their ranges (scenarios/README.md), on the catalogs' hardware,
  small targets and every stack, with the rules that join keys (a family the stack ships, a drafter
  that is not the target, a tree only for a family that drafts trees, one acceptance input for a
  speculative method, tp a divisor of the heads, a multi-device group only on hardware with an
  interconnect, one device for specsim-numba); resolved and predicted, every time finite.
- [[load_regime]] tables: every property with fields in their documented ranges, over version ranges
  drawn so that no two entries of one key share a release (and an optional '*' default); loaded
  through a stack file, then resolved at a drawn release, where the entry in force is the one whose
  range the release was drawn in (worked here from the drawn cut points, not by the resolver).
- load-sweep tables: the columns of specsim/calibration/load.py, one to three sweeps, written to a
  CSV and read back, row for row.

Each example is small (a few ms); the whole file runs in well under a minute on one core."""
from __future__ import annotations

import csv
import math
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specsim.calibration.load import COLUMNS, read_load_sweeps
from specsim.specs.catalog import catalog_ids, to_toml
from specsim.specs.hardware import load_hardware
from specsim.specs.models import WEIGHT_FORMATS, load_model
from specsim.specs.regimes import ATTENTION_KINDS, LOAD_KINDS, PASS_KINDS, VERIFY_PATHS, parse_version, resolve_regimes
from specsim.specs.scenario import scenario_from_dict
from specsim.specs.stacks import load_stack, stack_from_dict
from specsim.speculation.families import FAMILIES
from specsim.speculation.operating_point import resolve
from specsim.speculation.predict import predict

try:
    import tomllib
except ImportError:  # pragma: no cover
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
HF_EAGER = (ROOT / "stacks" / "hf-eager.toml").read_text(encoding="utf-8")


def fuzz(n: int) -> settings:
    return settings(max_examples=n, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


# ---- stack versions ------------------------------------------------------------------------------------

@st.composite
def releases(draw):
    """(text, the tuple parse_version must give): the release numbers, then a post-release number
    appended after padding the release to three numbers; a pre- or dev release reads as its release."""
    nums = draw(st.lists(st.integers(0, 10 ** 9 - 1), min_size=1, max_size=4))
    text = ".".join(str(n) for n in nums)
    pre = draw(st.none() | st.tuples(st.sampled_from(["a", "b", "rc"]), st.integers(0, 99)))
    post = draw(st.none() | st.integers(0, 99))
    dev = draw(st.none() | st.integers(0, 99))
    text += f"{pre[0]}{pre[1]}" if pre else ""
    text += f".post{post}" if post is not None else ""
    text += f".dev{dev}" if dev is not None else ""
    text = draw(st.sampled_from(["", "v", "V"])) + text
    if draw(st.booleans()):
        text = text.upper()
    parts = tuple(nums)
    if post is not None:
        parts = parts + (0,) * max(0, 3 - len(parts)) + (post,)
    return text, parts


@fuzz(150)
@given(releases())
def test_every_release_pep440_spells_is_read(rel):
    text, parts = rel
    assert parse_version(text) == parts


# ---- scenarios -----------------------------------------------------------------------------------------

# 'local' is left out: it describes whichever machine last ran `calibrate machine`, and another run may
# rewrite it mid-test; every other catalog device is drawn.
HARDWARE = [h for h in catalog_ids("hardware") if h != "local"]
STACKS = catalog_ids("stacks")
# small targets (weights and a 16 x 2048 cache fit on the smallest device, 24 GB) and a smaller drafter
# of the same tokenizer (None: the catalog has none, so no draft_model for that target)
DRAFTERS = {"llama-3.2-1b": None, "llama-3.2-3b": "llama-3.2-1b", "qwen2.5-1.5b": "qwen2.5-0.5b",
            "smollm2-360m": "smollm2-135m"}
FAMILIES = ("none", "draft_model", "prompt_lookup", "medusa", "eagle", "hydra", "lookahead", "layer_skip",
            "sparse_kv")  # mtp needs a target with MTP layers (DeepSeek-V3, 683 GB): left to test_operating_point
TREE_FAMILIES = ("draft_model", "medusa", "eagle", "hydra")


def _divisors(n: int, limit: int = 8) -> list[int]:
    return [d for d in range(1, limit + 1) if n % d == 0]


@st.composite
def scenarios(draw):
    d: dict = {"hardware": draw(st.sampled_from(HARDWARE)), "target": draw(st.sampled_from(sorted(DRAFTERS)))}
    stack = draw(st.none() | st.sampled_from(STACKS))
    families = FAMILIES if stack is None else ("none",) + tuple(m for m in load_stack(stack).methods if m in FAMILIES)
    if DRAFTERS[d["target"]] is None:
        families = tuple(m for m in families if m != "draft_model")
    d["method"] = method = draw(st.sampled_from(families))
    if stack is not None:
        d["stack"] = stack
        if draw(st.booleans()):
            d["stack_version"] = draw(releases())[0]
    if method == "draft_model":
        d["drafter"] = DRAFTERS[d["target"]]
    d["k"] = k = draw(st.integers(0, 16))
    if method in TREE_FAMILIES and (stack is None or load_stack(stack).supports_tree) and draw(st.booleans()):
        d["tree_size"] = draw(st.integers(k + 1, k + 16))
    if method != "none":
        if draw(st.booleans()):
            d["alpha"] = draw(st.floats(0.0, 1.0))
        elif method != "lookahead":  # Lookahead's tau is bounded by its n-gram size, not K + 1
            d["tau"] = draw(st.floats(1.0, k + 1.0))
        else:
            d["alpha"] = draw(st.floats(0.0, 1.0))
    d["batch_size"] = draw(st.integers(1, 16))
    d["context_len"] = draw(st.integers(0, 2048))
    hw = load_hardware(d["hardware"])
    single = stack == "specsim-numba" or not hw.interconnect_bandwidth_bytes_per_s > 0
    heads = load_model(d["target"]).n_heads
    d["tp"] = tp = 1 if single else draw(st.sampled_from(_divisors(heads)))
    if method == "draft_model":
        dheads = load_model(d["drafter"]).n_heads
        d["drafter_tp"] = draw(st.sampled_from([t for t in _divisors(dheads, tp)]))
    d["attention"] = draw(st.sampled_from(["fused", "naive"]))
    d["temperature"] = draw(st.floats(0.0, 100.0))
    if draw(st.booleans()):
        d["target_dtype"] = draw(st.sampled_from(sorted(WEIGHT_FORMATS)))
    return d


@fuzz(80)
@given(scenarios())
def test_a_valid_scenario_resolves_and_predicts_finite_figures(d):
    op = resolve(scenario_from_dict(d, where="fuzz"))
    out = predict(op).to_dict()
    for key in ("target_step_time_s", "verify_time_s", "cycle_time_s", "tokens_per_s", "baseline_tokens_per_s",
                "speedup"):
        assert math.isfinite(out[key]) and out[key] > 0, (key, out[key], d)


# ---- [[load_regime]] tables ------------------------------------------------------------------------------

def _fields(draw, prop: str) -> tuple[dict, tuple]:
    """(a property's fields, its key beyond the property), inside the documented ranges."""
    if prop == "cuda_graph_max":
        f = {"pass": draw(st.sampled_from(PASS_KINDS))}
        f[draw(st.sampled_from(["max_batch", "max_tokens"]))] = draw(st.integers(0, 8192))
        return f, (f["pass"], None, None, None)
    if prop == "eager_layer_us":
        return {"value": draw(st.floats(0.0, 1e4))}, (None, None, None, None)
    if prop == "overlap":
        if draw(st.booleans()):  # one drafter family's speculating iterations
            f = {"method": draw(st.sampled_from(METHOD_NAMES)), "speculative": draw(st.booleans())}
            return f, (None, None, None, f["method"])
        return {"plain": draw(st.booleans()), "speculative": draw(st.booleans())}, (None, None, None, None)
    if prop == "verify_attention":
        f = {"attention": draw(st.sampled_from(ATTENTION_KINDS)), "backend": draw(st.sampled_from(["default", "flashinfer_mla"])),
             "path": draw(st.sampled_from(VERIFY_PATHS))}
        return f, (None, f["attention"], f["backend"], None)
    if prop == "dynamic_k_tax":
        lo = draw(st.integers(1, 256))
        return {"low_batch": lo, "high_batch": draw(st.integers(lo + 1, 1024)), "low_frac": draw(st.floats(0.0, 1.0)),
                "high_frac": draw(st.floats(0.0, 1.0))}, (None, None, None, None)
    if prop == "per_token_share":
        return {"value": draw(st.floats(0.0, 1.0))}, (None, None, None, None)
    if prop == "spec_seq_host_us":
        f = {"method": draw(st.sampled_from(METHOD_NAMES)), "value": draw(st.floats(0.0, 1e6))}
        return f, (None, None, None, f["method"])
    if prop == "spec_max_running":
        f = {"method": draw(st.sampled_from(METHOD_NAMES)), "value": draw(st.integers(1, 65536))}
        return f, (None, None, None, f["method"])
    if prop == "prefill_batches":
        return {"mixed": draw(st.booleans())}, (None, None, None, None)
    lo = draw(st.floats(0.1, 1e3))
    f = {"sweep": "s", "file": "s.csv", "load_kind": draw(st.sampled_from(LOAD_KINDS)), "load_min": lo,
         "load_max": lo * draw(st.floats(1.0, 100.0)), "n_fit_rows": draw(st.integers(0, 100)),
         "fit_error_frac": draw(st.floats(0.0, 1.0)), "command": "specsim calibrate load s.csv",
         "device_scale": draw(st.floats(0.01, 100.0)), "device_per_seq_us": draw(st.floats(0.0, 1e6)),
         "device_per_token_us": draw(st.floats(0.0, 1e6))}
    if draw(st.booleans()):
        f["check_error_frac"] = draw(st.floats(0.0, 1.0))
    return f, (None, None, None, None)


STATUS = {"calibration": "fitted", "per_token_share": "fitted"}
METHOD_NAMES = sorted(FAMILIES)


@st.composite
def regime_tables(draw):
    """(entries as a stack file writes them, [(key, holds, versions text, fields)] to find the entry in
    force by hand). Each key's ranged entries cover disjoint runs of minor releases, cut at drawn minor
    numbers c1 < c2 < ...: '<0.c1' (minor below c1), 'A-B' from 0.a to 0.b inclusive as releases (so
    0.b.1 is past it), a series '0.a' (every 0.a.x), '>=0.cn'; a '*' entry may stand beside them.
    `holds(minor, patch)` says by plain comparison of (0, minor, patch) whether release 0.minor.patch is in."""
    props = draw(st.lists(st.sampled_from(["cuda_graph_max", "eager_layer_us", "overlap", "verify_attention",
                                           "dynamic_k_tax", "per_token_share", "spec_seq_host_us",
                                           "spec_max_running", "prefill_batches", "calibration"]),
                          min_size=1, max_size=3, unique=True))
    entries, plan = [], []
    for prop in props:
        f0, key = _fields(draw, prop)
        cuts = sorted(draw(st.lists(st.integers(0, 40), min_size=1, max_size=4, unique=True)))
        segments = []  # (holds, versions text)
        if draw(st.booleans()):
            segments.append((lambda m, p, c=cuts[0]: m < c, f"<0.{cuts[0]}"))
        for a, b in zip(cuts, cuts[1:]):
            hi = b - 1
            form = draw(st.sampled_from(["range", "series", "v"]))
            if form == "series" and a == hi:
                segments.append((lambda m, p, a=a: m == a, f"0.{a}"))
            else:
                text = f"v0.{a}-v0.{hi}" if form == "v" else f"0.{a}-0.{hi}"
                segments.append((lambda m, p, a=a, hi=hi: (0, a, 0) <= (0, m, p) <= (0, hi, 0), text))
        if draw(st.booleans()):
            segments.append((lambda m, p, c=cuts[-1]: m >= c, f">=0.{cuts[-1]}"))
        star = draw(st.booleans()) or not segments
        for holds, text in segments + ([(None, "*")] if star else []):
            f, _ = _fields(draw, prop)  # each entry its own value, on the one key f0 drew
            if prop == "cuda_graph_max":
                f["pass"] = f0["pass"]
            if prop == "verify_attention":
                f.update(attention=f0["attention"], backend=f0["backend"])
            if prop in ("spec_seq_host_us", "spec_max_running"):
                f["method"] = f0["method"]
            if prop == "overlap" and "method" in f0:
                f = {"method": f0["method"], "speculative": f.get("speculative", False)}
            elif prop == "overlap":
                f = {"plain": f.get("plain", False), "speculative": f.get("speculative", False)}
            entries.append({"property": prop, "versions": text, "status": STATUS.get(prop, "code"),
                            "source": "fuzz", **f})
            plan.append(((prop,) + key, holds, text, f))
    return entries, plan


def _in_force(plan, minor: int | None, patch: int) -> dict:
    """The fields in force per key at release 0.minor.patch (minor None: no version): the ranged entry
    whose run holds it, else the '*' entry."""
    out = {}
    for key, holds, text, f in plan:
        if text == "*":
            out.setdefault(key, f)
    for key, holds, text, f in plan:
        if holds is not None and minor is not None and holds(minor, patch):
            out[key] = f
    return out


@fuzz(60)
@given(regime_tables(), st.none() | st.integers(0, 45), st.integers(0, 9))
def test_valid_regime_tables_load_and_resolve_to_the_entry_of_their_range(tmp_path, table, minor, patch):
    entries, plan = table
    base = tomllib.loads(HF_EAGER)  # a stack without regimes of its own
    base["load_regime"] = entries
    path = tmp_path / "stack.toml"
    path.write_text(to_toml(base), encoding="utf-8")
    stack = load_stack(str(path))
    assert stack_from_dict(base, where="fuzz").regimes == stack.regimes
    version = None if minor is None else f"0.{minor}.{patch}"
    rg = resolve_regimes(stack.regimes, version=version)
    got = {e.key: {k: v for k, v in e.fields.items()} for e in rg.applied}
    want = _in_force(plan, minor, patch)
    assert set(got) == set(want)
    for key, f in want.items():
        for k, v in f.items():
            assert got[key][k] == pytest.approx(v), (key, k)
    assert all(math.isfinite(x) for x in (rg.device_scale, rg.device_per_seq_s, rg.device_per_token_s,
                                          rg.eager_layer_s, rg.dynamic_k_frac(64)))


# ---- load-sweep tables -------------------------------------------------------------------------------------

SWEEP_DRAFTERS = {"llama-3.2-3b": "llama-3.2-1b", "qwen2.5-1.5b": "qwen2.5-0.5b"}


@st.composite
def sweep_tables(draw):
    """Rows (dicts of the CSV's cells) of one to three sweeps and, per sweep, its row count."""
    rows, counts = [], {}
    for s in range(draw(st.integers(1, 3))):
        name = f"sweep-{s}"
        kind = draw(st.sampled_from(LOAD_KINDS))
        target = draw(st.sampled_from(sorted(SWEEP_DRAFTERS)))
        version = draw(st.none() | releases())
        cfg = {"sweep": name, "stack": draw(st.sampled_from(["vllm", "sglang", "trtllm"])),
               "stack_version": version[0] if version else "", "hardware": draw(st.sampled_from(["h100-sxm", "a100-sxm-80gb"])),
               "n_devices": 1, "target": target, "target_dtype": "", "load_kind": kind, "source": "fuzz",
               "drafter_options": "", "tree_size": ""}
        loads = draw(st.lists(st.integers(1, 64), min_size=1, max_size=4, unique=True))
        if kind == "rate":
            loads = [x / 4 for x in loads]
        method = draw(st.sampled_from(["prompt_lookup", "draft_model"]))
        k = draw(st.integers(1, 8))
        drafter = SWEEP_DRAFTERS[target] if method == "draft_model" else ""
        lengths = {"prompt_tokens": draw(st.integers(1, 4096)), "output_tokens": draw(st.integers(2, 2048))}  # one output token runs no decode step
        n = 0
        for load in loads:
            for spec in ([0, 1] if draw(st.booleans()) else [0]):
                r = dict(cfg, load=load, speculative=spec, role=draw(st.sampled_from(["fit", "check"])),
                         method=method if spec else "none", drafter=drafter if spec else "", k=k if spec else "",
                         tpot_s="", e2e_latency_s="", output_tokens_per_s="", measured_speedup="", tau="", alpha="",
                         context_len="", prompt_tokens="", output_tokens="",
                         max_num_seqs=draw(st.sampled_from(["", 1, 48, 65536]) | st.integers(1, 65536)))
                if kind == "batch":
                    r["context_len"] = draw(st.integers(0, 8192))
                else:
                    r.update(lengths)
                if not spec:
                    metric = draw(st.sampled_from(["tpot_s", "e2e_latency_s", "output_tokens_per_s"]))
                    plain = {"tpot_s": draw(st.floats(1e-3, 1.0)), "e2e_latency_s": draw(st.floats(1e-2, 100.0)),
                             "output_tokens_per_s": draw(st.floats(1.0, 1e5))}[metric]
                    r[metric] = plain
                else:  # the same metric at a speedup a cycle can give: at most K + 1 over the plain row
                    x = draw(st.floats(0.1, k + 0.999))  # clear of K + 1, where rounding could tip it over
                    r[metric] = plain * x if metric == "output_tokens_per_s" else plain / x
                if spec:
                    acc = draw(st.sampled_from(["tau", "alpha", None]))
                    if acc == "tau":
                        r["tau"] = draw(st.floats(1.0, k + 1.0))
                    elif acc == "alpha":
                        r["alpha"] = draw(st.floats(0.0, 1.0))
                    if draw(st.booleans()):
                        r["measured_speedup"] = draw(st.floats(0.1, k + 1.0))
                # a prompt-lookup row's share of steps that drafted (concurrency and rate rows only)
                r["draft_frac"] = (draw(st.sampled_from(["", 1.0]) | st.floats(1e-6, 1.0))
                                   if spec and method == "prompt_lookup" and kind != "batch" else "")
                rows.append(r)
                n += 1
        counts[name] = n
    return rows, counts


@fuzz(40)
@given(sweep_tables())
def test_a_valid_load_sweep_table_reads_row_for_row(tmp_path, table):
    rows, counts = table
    path = tmp_path / "sweeps.csv"
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=list(COLUMNS) + ["stack_version", "max_num_seqs", "draft_frac"])
        w.writeheader()
        for r in rows:
            w.writerow({c: (repr(v) if isinstance(v, float) else v) for c, v in r.items()})
    sweeps = read_load_sweeps(path)
    assert {s.name: len(s.rows) for s in sweeps} == counts
    limits = {(r["sweep"], float(r["load"]), bool(r["speculative"])): r["max_num_seqs"] for r in rows}
    shares = {(r["sweep"], float(r["load"]), bool(r["speculative"])): r["draft_frac"] for r in rows}
    for s in sweeps:
        for r in s.rows:  # the launch's running limit, read as written (blank: the engine's default)
            assert r.max_num_seqs == (limits[(s.name, r.load, r.speculative)] or None)
            want = shares[(s.name, r.load, r.speculative)]
            assert r.draft_frac == (None if want == "" else pytest.approx(want))
        for r in s.speculative():
            sp, _ = s.measured_speedup(r)
            assert sp is None or (math.isfinite(sp) and sp > 0)
