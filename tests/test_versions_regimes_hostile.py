"""Issue 33's hostile stack versions and load regimes: each is refused in one line naming the field,
the value (and the row or entries) and what was expected, within 10 s, at the command line as in the
library.

The rules are stated here from scenarios/README.md and specs/regimes.py's docstring (a stack_version
is one release, digits separated by dots with optional aN/bN/rcN, .postN, .devN as PEP 440 spells
them; it needs a stack; two entries may not give one property two values for a release both hold; a
calibration's device terms are finite, >= 0 and at most a second an iteration), never read from the
code's output. The overlaps in the messages are worked by hand from the two ranges."""
from __future__ import annotations

import contextlib
import io
import math
import time
from pathlib import Path

import pytest

from specsim.calibration.load import read_load_sweeps
from specsim.cli import main
from specsim.errors import SpecError
from specsim.specs.regimes import VersionRange, entry_from_dict, parse_entries, parse_version, resolve_regimes
from specsim.specs.scenario import Scenario, load_scenario
from specsim.specs.stacks import load_stack

ROOT = Path(__file__).resolve().parents[1]
HOSTILE_VERSIONS = ["latest", "ünï", "0.5-0.3", ">=0.10"]
LIMIT_S = 10.0


def cli(argv) -> tuple[int, str, str, float]:
    out, err = io.StringIO(), io.StringIO()
    t0 = time.monotonic()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main([str(a) for a in argv])
        except SystemExit as exc:
            rc = exc.code if isinstance(exc.code, int) else 2
    return rc, out.getvalue(), err.getvalue(), time.monotonic() - t0


def refused(argv, *needles) -> str:
    """The command exits 2 within LIMIT_S with one error line holding every needle; that line."""
    rc, out, err, wall_s = cli(argv)
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    assert rc == 2, (rc, out[-500:], err[-2000:])
    assert wall_s < LIMIT_S
    assert len(lines) == 1 and "Traceback" not in err, err
    for n in needles:
        assert n in lines[0], (n, lines[0])
    return lines[0]


# ---- stack_version: one release --------------------------------------------------------------------

@pytest.mark.parametrize("text", HOSTILE_VERSIONS + [
    "", " ", "v", "0.10.", ".1", "0..1", "1.0+local", "1.0-1", "1!2.0", "1.0rc", "1.0.post", "1.0 rc1", "vv1.0",
    "\u0663.\u0664",  # Arabic-Indic digits: \d would take them, a release does not
    "9" * 5000,  # int() refuses past 4,300 digits; no release has them
    "1.2.3.4.5.6.7.8.9",  # nine numbers
])
def test_parse_version_refuses_what_is_not_one_release(text):
    t0 = time.monotonic()
    with pytest.raises(SpecError, match="expected a release such as"):
        parse_version(text)
    assert time.monotonic() - t0 < LIMIT_S


@pytest.mark.parametrize("value", [0.1, 10, None, True])
def test_parse_version_refuses_a_non_string(value):
    """A TOML number 0.10 arrives as 0.1: refused, never read as release 0.1."""
    with pytest.raises(SpecError, match="expected a release"):
        parse_version(value)


@pytest.mark.parametrize("text, parts", [
    ("0.4.6", (0, 4, 6)), ("v0.10.1rc2", (0, 10, 1)), ("0.4.6.post5", (0, 4, 6, 5)), ("1.post2", (1, 0, 0, 2)),
    ("0.11.0rc2.post1.dev3", (0, 11, 0, 1)), ("2024.12", (2024, 12)), ("V1.2", (1, 2)), ("1.0a1", (1, 0)),
    ("0.6.0b3", (0, 6, 0)), ("0.7.0.dev20", (0, 7, 0)),
])
def test_parse_version_reads_the_releases_pep440_spells(text, parts):
    assert parse_version(text) == parts


def test_a_backwards_range_is_refused_and_a_series_holds_its_zero_release():
    with pytest.raises(SpecError, match="'0.5-0.3': the range runs backwards"):
        VersionRange("0.5-0.3")
    assert VersionRange("0.4-0.4").holds(parse_version("0.4.0"))
    # 0.5 is 0.5.0: the series "0.5.0" holds release "0.5" (0.5 and 0.5.0 are one release in PEP 440)
    assert VersionRange("0.5.0").holds(parse_version("0.5"))
    assert not VersionRange("0.5.0").holds(parse_version("0.5.1"))


@pytest.mark.parametrize("text", HOSTILE_VERSIONS)
def test_a_scenario_refuses_a_stack_version_that_is_no_release(tmp_path, text):
    p = tmp_path / "s.toml"
    p.write_text(f'stack = "vllm"\nstack_version = "{text}"\n', encoding="utf-8")
    with pytest.raises(SpecError, match="field 'stack_version' = .*expected a release such as"):
        load_scenario(str(p))
    refused(["predict", p, "--alpha", "0.7"], "'stack_version'", repr(text), "expected a release such as")


def test_a_stack_version_needs_a_stack(tmp_path):
    with pytest.raises(SpecError, match="field 'stack_version' = '0.10.1': expected a stack"):
        Scenario(stack_version="0.10.1")
    p = tmp_path / "s.toml"
    p.write_text('stack_version = "0.10.1"\n', encoding="utf-8")
    refused(["predict", p, "--alpha", "0.7"], "'stack_version'", "'0.10.1'", "expected a stack")
    # clearing both with overrides is allowed; clearing the stack alone leaves a version of nothing
    s = Scenario(stack="vllm", stack_version="0.10.1")
    assert s.with_overrides(stack="", stack_version="").stack_version is None
    with pytest.raises(SpecError, match="expected a stack"):
        s.with_overrides(stack="")


def test_a_toml_number_as_stack_version_is_refused_not_read_as_its_float(tmp_path):
    p = tmp_path / "s.toml"
    p.write_text('stack = "vllm"\nstack_version = 0.10\n', encoding="utf-8")
    refused(["predict", p, "--alpha", "0.7"], "'stack_version' = 0.1", "expected a release such as")


def _sweep_csv(tmp_path: Path, version: str) -> Path:
    header = ("sweep,stack,stack_version,hardware,n_devices,target,target_dtype,method,drafter,k,tree_size,"
              "drafter_options,load_kind,load,prompt_tokens,output_tokens,context_len,speculative,tpot_s,"
              "e2e_latency_s,output_tokens_per_s,measured_speedup,tau,alpha,role,source")
    rows = [f"s,vllm,{version},h100-sxm,1,llama-3.2-1b,,none,,,,,concurrency,{c},16,16,,0,,,{tps},,,,fit,by hand"
            for c, tps in ((1, 100.0), (4, 360.0))]
    p = tmp_path / "sweep.csv"
    p.write_text("\n".join([header] + rows) + "\n", encoding="utf-8")
    return p


@pytest.mark.parametrize("text", HOSTILE_VERSIONS)
def test_a_load_sweep_row_refuses_a_stack_version_that_is_no_release(tmp_path, text):
    p = _sweep_csv(tmp_path, f'"{text}"')
    with pytest.raises(SpecError, match=r"line 2: field 'stack_version' = .*expected a release such as"):
        read_load_sweeps(p)
    refused(["calibrate", "load", p], "line 2", "'stack_version'", repr(text))


def test_a_load_sweep_row_takes_a_release(tmp_path):
    [sw] = read_load_sweeps(_sweep_csv(tmp_path, "v0.10.1rc2"))
    assert sw.stack_version == "v0.10.1rc2"


@pytest.mark.parametrize("text", HOSTILE_VERSIONS)
def test_a_written_calibrated_scenario_refuses_a_stack_version_that_is_no_release(tmp_path, text):
    """A scenario as `calibrate load --write-scenario` writes it (its stack a file beside it), edited."""
    (tmp_path / "stack.toml").write_text((ROOT / "stacks" / "vllm.toml").read_text(encoding="utf-8"), encoding="utf-8")
    p = tmp_path / "s-calibrated.toml"
    p.write_text(f'name = "s-calibrated"\nhardware = "h100-sxm"\ntarget = "llama-3.2-1b"\nstack = "{tmp_path / "stack.toml"}"\n'
                 f'method = "prompt_lookup"\nk = 3\nalpha = 0.6\nstack_version = "{text}"\n', encoding="utf-8")
    refused(["predict", p], "'stack_version'", repr(text), "expected a release such as")


# ---- [[load_regime]]: no two values for one release -----------------------------------------------------

def _raw(**kw) -> dict:
    base = {"property": "cuda_graph_max", "pass": "verify", "versions": "*", "status": "code", "source": "a test"}
    base.update(kw)
    return base


@pytest.mark.parametrize("a, b, overlap", [
    # lower bound max(0.4.7, 0.4.8) = 0.4.8, upper min(none, 0.5) = 0.5, both inclusive: by hand
    ({"versions": ">=0.4.7", "max_batch": 160}, {"versions": "0.4.8-0.5", "max_batch": 80}, "for 0.4.8 to 0.5 "),
    ({"max_batch": 160}, {"max_batch": 80}, "for every release "),  # two '*'
    ({"versions": "<0.5", "max_batch": 160}, {"versions": "0.4", "max_batch": 80}, "for >=0.4 and <0.5 "),
    ({"versions": "<=0.5", "max_batch": 160}, {"versions": ">=0.5", "max_batch": 80}, "for 0.5 "),  # one release
    ({"versions": ">=0.8.0", "max_tokens": 512}, {"versions": ">0.9", "max_batch": 64}, "for >0.9 "),  # one is lost
    ({"versions": "<0.11.1", "max_batch": 8, "min_tp": 2}, {"versions": "0.10", "max_batch": 4, "max_tp": 4},
     "for >=0.10 and <0.11 "),  # filters share tp 2..4
])
def test_two_entries_that_contradict_each_other_are_refused_naming_both_and_the_overlap(a, b, overlap):
    t0 = time.monotonic()
    with pytest.raises(SpecError) as exc:
        parse_entries([_raw(**a), _raw(**b)], where="stack 't'")
    msg = str(exc.value)
    assert "#1 and #2 contradict" in msg and "cuda_graph_max [verify]" in msg and overlap in msg, msg
    assert repr(a.get("versions", "*")) in msg and repr(b.get("versions", "*")) in msg
    assert "\n" not in msg and time.monotonic() - t0 < LIMIT_S


@pytest.mark.parametrize("a, b", [
    ({"versions": "<0.5", "max_batch": 160}, {"versions": ">=0.5", "max_batch": 80}),  # they meet, share nothing
    ({"versions": "<0.5", "max_batch": 160}, {"versions": ">0.5", "max_batch": 80}),
    ({"versions": "0.4", "max_batch": 160}, {"versions": "0.5", "max_batch": 80}),  # two series
    ({"versions": "0.4.0-0.4.6", "max_batch": 160}, {"versions": "0.4.7-0.4.99", "max_batch": 80}),
    ({"versions": "*", "max_batch": 160}, {"versions": ">=0.5", "max_batch": 80}),  # the exception to a default
    ({"versions": ">=0.4", "max_batch": 160}, {"versions": ">=0.5", "max_batch": 160}),  # the same value
    ({"versions": "*", "max_batch": 160}, {"versions": "*", "max_batch": 80, "pass": "draft"}),  # another pass
    ({"max_batch": 160, "max_tp": 1}, {"max_batch": 80, "min_tp": 2}),  # no deployment meets both
    ({"max_batch": 160, "max_memory_gb": 80}, {"max_batch": 80, "min_memory_gb": 80}),  # memory [0, 80), [80, ∞)
])
def test_entries_that_do_not_contradict_load(a, b):
    es = parse_entries([_raw(**a), _raw(**b)], where="stack 't'")
    assert len(es) == 2


def test_meeting_ranges_resolve_each_release_to_its_own_entry():
    es = parse_entries([_raw(versions="<0.5", max_batch=160), _raw(versions=">=0.5", max_batch=80)])
    assert resolve_regimes(es, version="0.4.9").graph_max_batch["verify"] == 160
    assert resolve_regimes(es, version="0.5").graph_max_batch["verify"] == 80


def test_a_stack_file_with_contradicting_entries_is_refused_at_the_command_line(tmp_path):
    text = (ROOT / "stacks" / "vllm.toml").read_text(encoding="utf-8")
    # vllm.toml says 512 tokens for verify from 0.8.0; a second entry says 256 for 0.10.x
    text += ('\n[[load_regime]]\nproperty = "cuda_graph_max"\npass = "verify"\nmax_tokens = 256\nversions = "0.10"\n'
             'status = "code"\nsource = "a contradiction"\n')
    p = tmp_path / "stack.toml"
    p.write_text(text, encoding="utf-8")
    with pytest.raises(SpecError, match="contradict"):
        load_stack(str(p))
    refused(["predict", "--stack", p, "--alpha", "0.7"], "contradict", "'>=0.8.0'", "'0.10'", ">=0.10 and <0.11")


# ---- a calibration's figures: finite, >= 0, plausible ----------------------------------------------

def _calibration(**kw) -> dict:
    base = {"property": "calibration", "versions": "*", "status": "fitted", "source": "a test", "sweep": "s",
            "file": "f.csv", "load_kind": "concurrency", "load_min": 1.0, "load_max": 8.0, "n_fit_rows": 3,
            "fit_error_frac": 0.05, "command": "specsim calibrate load f.csv", "device_scale": 1.0,
            "device_per_seq_us": 10.0, "device_per_token_us": 5.0}
    base.update(kw)
    return base


@pytest.mark.parametrize("key, value, expected", [
    ("device_per_seq_us", 1e300, "<= 1e+06 (microseconds an iteration"),
    ("device_per_seq_us", 2e6, "<= 1e+06"),
    ("device_per_seq_us", math.inf, "a finite number >= 0"),
    ("device_per_seq_us", math.nan, "a finite number >= 0"),
    ("device_per_seq_us", -1.0, "a finite number >= 0"),
    ("device_per_token_us", 1e300, "<= 1e+06"),
    ("device_scale", 1e300, "<= 100"),
    ("device_scale", 1e-3, ">= 0.01"),
    ("device_scale", 0.0, ">= 0.01"),
    ("load_max", math.inf, "a finite number"),
    ("fit_error_frac", math.nan, "a finite number"),
])
def test_a_calibration_with_an_impossible_figure_is_refused(key, value, expected):
    with pytest.raises(SpecError, match=f"field '{key}' = ") as exc:
        entry_from_dict(_calibration(**{key: value}), where="stack 't' [[load_regime]] #1")
    assert expected in str(exc.value), str(exc.value)


@pytest.mark.parametrize("raw, key", [
    ({"property": "eager_layer_us", "value": 1e300}, "value"),
    ({"property": "dynamic_k_tax", "low_batch": 2, "low_frac": 6.56, "high_batch": 189, "high_frac": 21.58}, "low_frac"),
])
def test_other_cost_figures_past_their_bound_are_refused(raw, key):
    with pytest.raises(SpecError, match=f"field '{key}' = .*<= "):
        entry_from_dict({"versions": "*", "status": "measured", "source": "a test", **raw}, where="t")


def test_a_calibration_at_its_bounds_loads():
    e = entry_from_dict(_calibration(device_per_seq_us=1e6, device_per_token_us=0.0, device_scale=100.0), where="t")
    assert (e.fields["device_per_seq_us"], e.fields["device_scale"]) == (1e6, 100.0)
    assert entry_from_dict(_calibration(device_scale=0.01), where="t").fields["device_scale"] == 0.01


@pytest.mark.parametrize("figure", ["1e300", "inf", "nan"])
def test_a_calibrated_stack_file_with_an_impossible_device_term_is_refused_at_the_command_line(tmp_path, figure):
    text = (ROOT / "stacks" / "vllm.toml").read_text(encoding="utf-8")
    n = text.count("\n[[load_regime]]\n") + 1  # the appended entry's number in the file
    text += ('\n[[load_regime]]\nproperty = "calibration"\nversions = "*"\nstatus = "fitted"\nsource = "edited"\n'
             'sweep = "s"\nfile = "f.csv"\nload_kind = "concurrency"\nload_min = 1.0\nload_max = 8.0\nn_fit_rows = 3\n'
             f'fit_error_frac = 0.05\ncommand = "specsim calibrate load f.csv"\ndevice_scale = 1.0\n'
             f'device_per_seq_us = {figure}\ndevice_per_token_us = 0.0\n')
    p = tmp_path / "stack.toml"
    p.write_text(text, encoding="utf-8")
    refused(["predict", "--stack", p, "--alpha", "0.7"], "'device_per_seq_us'", f"[[load_regime]] #{n}")
