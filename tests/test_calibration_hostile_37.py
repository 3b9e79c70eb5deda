"""Issue 37's hostile input to calibration and replay: each case ends in a one-line refusal naming the
field (or flag, or row and column), the value and the rule, or is handled correctly, within 10 s.

The cases: `calibrate load --write-scenario DIR --force` and a symlink in DIR (the target outside DIR
must stay as it was), the written files' mode and the command they record; a fit row whose
measured_speedup is blank or 0 under `replay --leave-source-out` and `calibrate stack-term`; runs
without end (every source blank, sources alternating, a 100 kB citation, 1,000 candidate shares);
`--token-share-loo` on sweeps with no check rows; `--target-dtype ''`.
Expected values come from the rule each case states (written next to each assertion), from a second
implementation (the previous, quadratic source pattern on short texts) or from the library's
single-row path (`predict_row_cycle` at a figure fitted by `fit_stack_term`), never from the output
under test.
"""
from __future__ import annotations

import re
import time

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specsim.cli import main


def run(argv, capsys, *, limit_s: float):
    """main(argv) -> (exit status, stdout, stderr), within limit_s seconds."""
    t0 = time.monotonic()
    try:
        rc = main([str(a) for a in argv])
    except SystemExit as exc:  # argparse's own refusals
        rc = exc.code
    took = time.monotonic() - t0
    out, err = capsys.readouterr()
    assert took < limit_s, f"took {took:.1f} s, more than {limit_s} s"
    return rc, out, err


def refused(rc, err, status, *needles):
    lines = [ln for ln in err.strip().splitlines() if not ln.startswith("specsim: note:")]
    assert rc == status, err
    assert len(lines) == 1 and lines[0].startswith("specsim: error: "), err
    for n in needles:
        assert n in lines[0], (n, lines[0])
    assert "Traceback" not in err and "internal error" not in err


def shipped_replay_set() -> pd.DataFrame:
    from specsim.specs.data import data_path

    return pd.read_csv(data_path("published/speculative_decoding.csv"), dtype={"id": str})


VLLM_FIT = tuple(f"vllm-issue20780-llama3.1-8b-eagle1-k{k}-b1" for k in range(2, 8))  # REPLAY_FITS' vllm rows


# ---- a fit row whose measured_speedup is blank or 0 ------------------------------------------------

@pytest.mark.parametrize("value, shown", [("", "= ''"), ("0", "= 0")])
def test_stack_term_on_a_fit_row_without_a_measured_speedup_is_refused_naming_it(tmp_path, capsys, value, shown):
    t = shipped_replay_set()
    t = t[t["stack"] == "vllm"].copy()
    t["measured_speedup"] = t["measured_speedup"].astype(object)
    t.loc[t["id"] == VLLM_FIT[0], "measured_speedup"] = value
    f = tmp_path / "t.csv"
    t.to_csv(f, index=False)
    rc, _, err = run(["calibrate", "stack-term", f, "--stack", "vllm", "--term", "cycle_overhead_us",
                      "--rows", ",".join(VLLM_FIT[:2])], capsys, limit_s=10)
    # the rule: a figure is fitted to a row's measured speedup, which must be a number > 0
    refused(rc, err, 2, VLLM_FIT[0], "measured_speedup", shown, "> 0")


def test_stack_term_shows_a_blank_measured_speedup_of_a_row_it_does_not_fit_on(tmp_path, capsys):
    t = shipped_replay_set()
    t = t[t["stack"] == "vllm"].copy()
    blank = "vllm-issue20780-llama3.1-8b-eagle1-k4-b1"
    t["measured_speedup"] = t["measured_speedup"].astype(object)
    t.loc[t["id"] == blank, "measured_speedup"] = ""
    f = tmp_path / "t.csv"
    t.to_csv(f, index=False)
    rc, out, err = run(["calibrate", "stack-term", f, "--stack", "vllm", "--term", "cycle_overhead_us",
                        "--rows", ",".join(VLLM_FIT[:2])], capsys, limit_s=10)
    assert rc == 0, err
    [line] = [ln for ln in out.splitlines() if blank in ln]
    assert "nan" not in line and "not measured" in line  # no figure compares with a blank


@pytest.mark.parametrize("value, shown", [("", "= ''"), ("0", "= 0")])
def test_leave_source_out_on_a_fit_row_without_a_measured_speedup_is_refused_naming_it(tmp_path, capsys, value, shown):
    t = shipped_replay_set()
    t["measured_speedup"] = t["measured_speedup"].astype(object)
    t.loc[t["id"] == VLLM_FIT[0], "measured_speedup"] = value
    t.loc[t["id"] == VLLM_FIT[0], "source"] = "someone/else"  # its figure is then refitted on the others
    f = tmp_path / "t.csv"
    t.to_csv(f, index=False)
    rc, _, err = run(["replay", f, "--leave-source-out"], capsys, limit_s=10)
    refused(rc, err, 2, VLLM_FIT[0], "measured_speedup", shown, "> 0", "vllm cycle_overhead_us")


# ---- leave one source out: blank and alternating sources finish in seconds --------------------------

def loo_set() -> pd.DataFrame:
    """The shipped set's rows of the three stacks REPLAY_FITS fits (every fit row among them): small
    enough for a test, with every figure and its fit rows."""
    t = shipped_replay_set()
    return t[t["stack"].isin(["vllm", "sglang-specforge"]) | (t["role"] == "fit")].reset_index(drop=True)


def test_leave_source_out_with_every_source_blank_finishes_and_refits_each_fit_row_alone():
    """Every source blank: each row is its own source, so each fit row's figure is refitted on the
    other fit rows of that figure (the rule in `leave_one_source_out`'s docstring). Expected: the
    row as `fit_stack_term` predicts it after fitting on the other rows (its own, unshared path)."""
    from specsim.calibration.replay import REPLAY_FITS, fit_stack_term, leave_one_source_out

    t = loo_set()
    t["source"] = ""
    t0 = time.process_time()  # CPU time: the wall clock of a shared 2-core machine varies with other jobs
    r = leave_one_source_out(t).table.set_index("id")
    took = time.process_time() - t0
    assert took < 10, f"{took:.1f} s of CPU"
    vllm = next(f for f in REPLAY_FITS if f.stack == "vllm")
    row = VLLM_FIT[2]
    others = [i for i in vllm.fit_ids if i != row]
    alone = fit_stack_term(t, stack_id="vllm", term="cycle_overhead_us", fit_ids=others).table.set_index("id")
    assert r.loc[row, "predicted_speedup"] == pytest.approx(alone.loc[row, "predicted_after"], rel=1e-9)
    assert "refitted on the 5 fit row(s) of other sources" in r.loc[row, "left_out"]
    plain = str(t.loc[t["role"] != "fit", "id"].iloc[0])  # a fit row of no figure: every figure at its catalog
    assert r.loc[plain, "left_out"] == ""                 # value, nothing said


def test_leave_source_out_with_alternating_sources_finishes_and_uses_the_other_half():
    """Rows alternate between two sources A and B: each figure is refitted twice, on the fit rows of
    the other source (expected: the row as `fit_stack_term` predicts it after fitting on those rows)."""
    from specsim.calibration.replay import fit_stack_term, leave_one_source_out

    t = loo_set()
    t["source"] = [("alpha/one" if i % 2 else "beta/two") for i in range(len(t))]
    t0 = time.process_time()
    r = leave_one_source_out(t).table.set_index("id")
    took = time.process_time() - t0
    assert took < 10, f"{took:.1f} s of CPU"
    key = dict(zip(t["id"], ("alpha/one" if i % 2 else "beta/two" for i in range(len(t)))))
    row = VLLM_FIT[0]
    others = [i for i in VLLM_FIT if key[i] != key[row]]
    assert 0 < len(others) < len(VLLM_FIT)
    alone = fit_stack_term(t, stack_id="vllm", term="cycle_overhead_us", fit_ids=others).table.set_index("id")
    assert r.loc[row, "predicted_speedup"] == pytest.approx(alone.loc[row, "predicted_after"], rel=1e-9)


# ---- a long citation: the source key is linear in the text's length --------------------------------

# The previous pattern (sources.py before issue 37), kept here as the slow, obviously correct twin: the
# scanner must find the same `owner/name` matches, in the same order, on every short text.
_OLD_REPO = re.compile(r"(?:https?://)?(?:www\.)?(?:github\.com/)?\b([A-Za-z0-9][A-Za-z0-9_.-]*)/"
                       r"([A-Za-z0-9_.-]*[A-Za-z0-9_-])")


@pytest.mark.parametrize("unit", ["a.", "a-", "a._", "x" * 7 + ".", "tok/s ", "https://github.com/a.", "é."])
def test_a_100_kb_citation_is_keyed_in_under_a_second(unit):
    """A 100 kB citation (the issue's 60-100 kB) of runs that made the previous pattern rescan each run
    from every start (20 kB of 'a.' took 1.9 s, so 100 kB about 46 s: quadratic)."""
    from specsim.calibration.sources import source_key

    text = unit * (100_000 // len(unit))
    t0 = time.process_time()
    key = source_key(text + " foo/bar, more", fallback="row")
    took = time.process_time() - t0
    assert took < 1.0, f"{took:.2f} s of CPU for {len(text)} characters"
    # the rule: the first repository named. No unit names one: a run without '/' names none, 'tok/s' is a
    # rate, 'github.com/a.https' is the host, not an owner; so the key is the repository after them
    assert key == "foo/bar"


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(["a", "B", "7", ".", "-", "_", "/", " ", ",", "#", "(", "é", "tok", "s",
                                 "https://", "http://", "www.", "github.com/", "issue #1", "/issues/2", "foo"]),
                max_size=14).map("".join))
def test_the_scanner_finds_what_the_previous_pattern_found(text):
    from specsim.calibration.sources import _repository_matches

    old = [(m.group(1), m.group(2), m.end()) for m in _OLD_REPO.finditer(text)]
    new = [(m.owner, m.name, m.end) for m in _repository_matches(text)]
    assert new == old
