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

import csv
import re
import time

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cli_refusals import refused, run


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
    refused(rc, err, 2, VLLM_FIT[0], "measured_speedup", shown, ">= 0.01")


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
    refused(rc, err, 2, VLLM_FIT[0], "measured_speedup", shown, ">= 0.01", "vllm cycle_overhead_us")


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


def test_the_context_a_fit_works_out_once_changes_no_prediction():
    """A term fit fills replay's default context in once per row (`_prepared`) instead of at every value it
    tries; predicted with it filled in, every row must be predicted exactly as without (the default
    depends on the models and the verify width only)."""
    from specsim.calibration.replay import _prepared, predict_row_cycle
    from specsim.errors import SpecError
    from specsim.specs.stacks import load_stack

    n = 0
    for row in loo_set().to_dict(orient="records"):
        stack = load_stack(row["stack"])
        try:
            plain = predict_row_cycle(row, stack_profile=stack)[0].cycle.speedup
        except SpecError:
            continue
        filled = _prepared(row, stack, None)
        n += filled is not row
        assert predict_row_cycle(filled, stack_profile=stack)[0].cycle.speedup == plain, row["id"]
    assert n > 10  # rows without a context were among them


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


# ---- calibrate load: a small load sweep, as tests/test_calibration_load_hostile.py writes them -------

LOAD_BASE = dict(stack="vllm", hardware="h100-sxm", n_devices=1, target="llama-3.2-1b", target_dtype="", method="none",
                 drafter="", k="", tree_size="", drafter_options="", load_kind="concurrency", prompt_tokens=16,
                 output_tokens=16, context_len="", tpot_s="", e2e_latency_s="", output_tokens_per_s="",
                 measured_speedup="", tau="", alpha="", source="by hand")


def write_sweeps(path, rows):
    from specsim.calibration.load import COLUMNS

    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(COLUMNS))
        w.writeheader()
        for r in rows:
            w.writerow({**LOAD_BASE, **r})
    return path


def sweep_rows(name="s", *, check=True, **over):
    """Two plain loads and two speculative (prompt lookup, K = 3); the last a check row unless check=False."""
    rows = [dict(sweep=name, load=1, speculative=0, output_tokens_per_s=100.0, role="fit"),
            dict(sweep=name, load=4, speculative=0, output_tokens_per_s=360.0, role="fit"),
            dict(sweep=name, method="prompt_lookup", k=3, load=1, speculative=1, output_tokens_per_s=200.0, tau=2.5,
                 role="fit"),
            dict(sweep=name, method="prompt_lookup", k=3, load=4, speculative=1, output_tokens_per_s=500.0, tau=2.5,
                 role="check" if check else "fit")]
    for r in rows:
        r.update(over)
    return rows


# ---- --token-share-loo: 1,000 candidates; sweeps without check rows ---------------------------------

def test_a_thousand_candidate_shares_are_refused_with_their_count(tmp_path, capsys):
    """Each candidate share calibrates every sweep once (the shipped ten sweeps take minutes a share), so
    1,000 of them would run for days: refused before any calibration, naming the count and the bound."""
    from specsim.calibration.load_share import MAX_SHARES

    f = write_sweeps(tmp_path / "t.csv", sweep_rows("a", source="one/x") + sweep_rows("b", source="two/y"))
    shares = ",".join(f"{i / 999:.6f}" for i in range(1000))
    rc, _, err = run(["calibrate", "load", f, "--token-share-loo", shares], capsys, limit_s=10)
    refused(rc, err, 2, "--token-share-loo", "1000 shares", f"at most {MAX_SHARES}")
    assert len(err) < 400  # the count, not the list


def test_token_share_loo_on_sweeps_without_check_rows_says_no_share_can_be_chosen(tmp_path, capsys):
    """A share is chosen on the other sources' check rows; with none anywhere there is nothing to choose
    on (the rule in load_share's docstring): refused in one line saying so, not 'chosen 0'."""
    f = write_sweeps(tmp_path / "t.csv", sweep_rows("a", check=False, source="one/x")
                     + sweep_rows("b", check=False, source="two/y"))
    rc, out, err = run(["calibrate", "load", f, "--token-share-loo", "0,1"], capsys, limit_s=10)
    refused(rc, err, 2, "--token-share-loo", "no check row", "2 sweeps")
    assert "chosen" not in out


def test_a_sweep_whose_other_sources_have_no_check_row_has_no_chosen_share(tmp_path, capsys):
    """Sweep a has a check row, b none. b's share is chosen on a's check row; a's could only be chosen on
    b's, which has none: a is 'none' (JSON null), said with the reason, and predicted at the stack's own
    share, as `calibrate_load` without a share predicts it (expected from that call, run alone)."""
    import json

    from specsim.calibration.load import read_load_sweeps
    from specsim.calibration.load_fit import calibrate_load

    f = write_sweeps(tmp_path / "t.csv", sweep_rows("a", source="one/x") + sweep_rows("b", check=False, source="two/y"))
    rc, out, err = run(["calibrate", "load", f, "--roles", "table", "--token-share-loo", "0,1", "--json"], capsys,
                       limit_s=20)
    assert rc == 0, err
    d = json.loads(out)
    loo = d["token_share_loo"]
    assert loo["chosen"]["a"] is None and loo["chosen"]["b"] in (0.0, 1.0)
    alone = calibrate_load([s for s in read_load_sweeps(f) if s.name == "a"], roles="table")
    [fa] = [s for s in d["sweeps"] if s["sweep"] == "a"]
    assert fa["token_share"] == pytest.approx(alone.fits[0].token_share, abs=0)
    rc, out, err = run(["calibrate", "load", f, "--roles", "table", "--token-share-loo", "0,1"], capsys, limit_s=20)
    assert rc == 0, err
    [line] = [ln for ln in out.splitlines() if ln.strip().startswith("a ")]
    assert "none" in line and "no check row" in line


# ---- --target-dtype '' ------------------------------------------------------------------------------

@pytest.mark.parametrize("flag", ["--target-dtype", "--stack", "--target", "--drafter", "--stack-version"])
def test_an_empty_import_flag_is_refused_not_read_as_absent(tmp_path, capsys, flag):
    """'' given for an override is not 'no override': refused naming the flag (the files are never read)."""
    f = tmp_path / "base-c1.json"
    f.write_text("{}")
    rc, _, err = run(["calibrate", "load", f, "--format", "vllm", "--stack", "vllm", "--hardware", "h100-sxm",
                      "--n-devices", "1", "--target", "llama-3.2-1b", "--method", "none", flag, ""], capsys, limit_s=10)
    refused(rc, err, 2, f"{flag} ''")


# ---- --write-scenario DIR: links, modes, the recorded command ---------------------------------------

@pytest.mark.parametrize("force", [False, True])
def test_a_link_in_the_folder_to_a_file_outside_is_refused_and_the_file_kept(tmp_path, capsys, force):
    """specsim writes only inside DIR: a link there is refused naming it and where it points (chosen over
    replacing the link: the user put it there, and --force promises to replace files, not redirect
    links), with or without --force; the file it points to is untouched and nothing is written."""
    out = tmp_path / "out"
    out.mkdir()
    victim = tmp_path / "victim.toml"
    victim.write_text("my stack\n")
    (out / "s.stack.toml").symlink_to(victim)
    f = write_sweeps(tmp_path / "t.csv", sweep_rows())
    rc, _, err = run(["calibrate", "load", f, "--write-scenario", out] + (["--force"] if force else []), capsys,
                     limit_s=10)
    refused(rc, err, 5, "s.stack.toml", "symbolic link", str(victim))
    assert victim.read_text() == "my stack\n"
    assert sorted(p.name for p in out.iterdir()) == ["s.stack.toml"]


def test_a_dangling_link_in_the_folder_creates_nothing_outside(tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    target = tmp_path / "elsewhere" / "s.toml"
    (out / "s.toml").symlink_to(target)
    f = write_sweeps(tmp_path / "t.csv", sweep_rows())
    for extra in ([], ["--force"]):
        rc, _, err = run(["calibrate", "load", f, "--write-scenario", out, *extra], capsys, limit_s=10)
        refused(rc, err, 5, "s.toml", "symbolic link")
        assert not target.exists() and not target.parent.exists()


def test_written_files_have_the_usual_mode(tmp_path, capsys):
    """Written as any file the user creates: 0666 less the umask (0644 under umask 022), as
    write_file_atomically's --out is, not a temporary file's 0600."""
    import os
    import stat

    old = os.umask(0o022)
    try:
        f = write_sweeps(tmp_path / "t.csv", sweep_rows())
        rc, _, err = run(["calibrate", "load", f, "--write-scenario", tmp_path / "w", "--out", tmp_path / "rows.csv"],
                         capsys, limit_s=20)
    finally:
        os.umask(old)
    assert rc == 0, err
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in (tmp_path / "w").iterdir()}
    assert modes == {"s.stack.toml": 0o644, "s.toml": 0o644}
    assert stat.S_IMODE((tmp_path / "rows.csv").stat().st_mode) == 0o644


def test_the_recorded_command_reproduces_the_written_figures(tmp_path, capsys):
    """The written stack records the command that made it; run again as recorded, it writes the same
    figures. The run uses every flag that moves them: --token-share-loo (shares 0 and 0.5, neither the
    stack's own 1), --seed 3, --roles, --cost-source."""
    import shlex
    import tomllib

    f = write_sweeps(tmp_path / "t.csv", sweep_rows("a", source="one/x") + sweep_rows("b", source="two/y"))
    w = tmp_path / "w"
    argv = ["calibrate", "load", str(f), "--token-share-loo", "0,0.5", "--seed", "3", "--roles", "table",
            "--cost-source", "roofline", "--write-scenario", str(w)]
    rc, _, err = run(argv, capsys, limit_s=30)
    assert rc == 0, err

    def figures():
        out = {}
        for name in ("a", "b"):
            raw = tomllib.loads((w / f"{name}.stack.toml").read_text())
            [cal] = [r for r in raw["load_regime"] if r["property"] == "calibration"]
            out[name] = {k: cal[k] for k in ("device_scale", "device_per_seq_us", "device_per_token_us",
                                             "fit_error_frac", "command")}
        return out

    first = figures()
    command = first["a"]["command"]
    assert command == first["b"]["command"]
    words = shlex.split(command)
    assert words[:3] == ["specsim", "calibrate", "load"]
    for flag in ("--token-share-loo", "--seed", "--cost-source", "--write-scenario"):
        assert flag in words, (flag, command)
    rc, _, err = run(words[1:], capsys, limit_s=30)
    assert rc == 0, err
    assert figures() == first
