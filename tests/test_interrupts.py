"""Ctrl-C (issue 37): an interrupted run exits 130 with one line on stderr and leaves no output that
looks complete; the commit of an output folder is never cut in half; a run that completed is not
turned into a death by signal during the interpreter's shutdown.

Expected values come from the contract in specsim/errors.py (130: interrupted) and
presentation/output.py (files appear only with their manifest, when the run completes)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from specsim.presentation.output import MANIFEST, OutputDir

SPECSIM = [sys.executable, "-c", "from specsim.cli import run; run()"]


def _visible(folder: Path) -> list[str]:
    """What a reader of the folder sees as output (the staging and resume folders are hidden)."""
    return sorted(p.name for p in folder.iterdir() if not p.name.startswith(".")) if folder.is_dir() else []


@pytest.mark.parametrize("workers", ["1", "2"])
def test_a_sweep_interrupted_exits_130_with_one_line_and_nothing_complete(tmp_path, workers):
    out = tmp_path / "out"
    proc = subprocess.Popen([*SPECSIM, "sweep", "seed-70b-hbm", "--out", str(out), "--quiet", "--workers", workers],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    started = time.monotonic()
    # the run has begun its work once its staging folder exists (OutputDir.__enter__): interrupt it then,
    # within 10 s of the start; the whole sweep takes tens of seconds on two cores
    while not (out.is_dir() and any(out.iterdir())) and proc.poll() is None and time.monotonic() - started < 10:
        time.sleep(0.02)
    time.sleep(0.5)
    assert proc.poll() is None, f"the sweep ended before it could be interrupted: {proc.communicate()}"
    assert time.monotonic() - started < 10.6
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, (proc.returncode, stderr[-2000:])
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("specsim: interrupted"), stderr[-2000:]
    assert "Traceback" not in stderr
    assert _visible(out) == [], _visible(out)  # no sweep.csv, no figure, no manifest


def test_an_interrupt_during_the_commit_waits_for_the_folder_to_be_whole(tmp_path, monkeypatch):
    # SIGINT sent to this process at the first rename of the commit: the commit finishes (every file and
    # the manifest in place), then the interrupt is raised saying the folder is whole
    real_replace = os.replace
    sent = []

    def replace_and_interrupt(a, b):
        if not sent:
            sent.append(True)
            os.kill(os.getpid(), signal.SIGINT)
        return real_replace(a, b)

    out = OutputDir(tmp_path / "out", command="test")
    with pytest.raises(KeyboardInterrupt, match="whole"):
        with out:
            for name in ("a.csv", "b.csv", "c.png"):
                out.write_text(name, name)
            monkeypatch.setattr(os, "replace", replace_and_interrupt)
    monkeypatch.setattr(os, "replace", real_replace)
    assert sent
    assert _visible(tmp_path / "out") == ["a.csv", "b.csv", "c.png", MANIFEST]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # the handler is given back


def test_an_interrupt_before_the_commit_leaves_the_folder_as_it_was(tmp_path):
    out = OutputDir(tmp_path / "out", command="test")
    with pytest.raises(KeyboardInterrupt):
        with out:
            out.write_text("a.csv", "x")
            raise KeyboardInterrupt
    assert _visible(tmp_path / "out") == []
    assert list((tmp_path / "out").iterdir()) == []  # the staging folder is gone too


def test_the_cli_says_what_an_interrupt_left(monkeypatch, capsys):
    import specsim.cli as cli

    def interrupted(argv=None):
        raise KeyboardInterrupt

    def interrupted_after(argv=None):
        raise KeyboardInterrupt("the interrupt came as out was being completed: it is whole (3 files and manifest.json)")

    for fn, said in ((interrupted, "outputs of this run were not kept"), (interrupted_after, "it is whole")):
        monkeypatch.setattr(cli, "build_parser", lambda fn=fn: type("P", (), {"parse_args": lambda self, a: fn()})())
        assert cli.main([]) == 130
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("specsim: interrupted; ") and said in err, err


def test_a_completed_run_ignores_a_late_interrupt(monkeypatch):
    # after main returns, the process only shuts down: the entry point ignores SIGINT from then on
    import specsim.cli as cli

    monkeypatch.setattr(cli, "main", lambda argv=None: 0)
    try:
        with pytest.raises(SystemExit) as done:
            cli.run()
        assert done.value.code == 0
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
