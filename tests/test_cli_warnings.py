"""Warnings are handled where they arise (issue 37): the command line installs no process-wide filter
that would hide a numpy RuntimeWarning from every library call after it; a known 0/0 is silenced
where it happens (np.errstate beside a comment saying why), so a new one shows."""
from __future__ import annotations

import warnings

from specsim.cli import main


def test_main_adds_no_runtime_warning_filter():
    # by reading the filters: a command may add none that ignores every RuntimeWarning (the filters numpy
    # and scipy add on import match one message each, and stay)
    with warnings.catch_warnings():
        before = list(warnings.filters)
        assert main(["predict", "seed-70b-hbm", "--json"]) == 0
        added = [f for f in warnings.filters if f not in before]
    assert not [f for f in added if f[0] == "ignore" and f[1] is None and issubclass(RuntimeWarning, f[2])], added


def test_a_runtime_warning_in_a_command_is_not_swallowed(monkeypatch, capsys):
    # a RuntimeWarning raised inside a command reaches the caller's filters (here: an error, as in CI's
    # `-W error::RuntimeWarning` runs), and the CLI boundary reports it in one line as an internal error
    import specsim.cli.predict as predict

    def warns(args):
        warnings.warn("overflow encountered in multiply", RuntimeWarning)
        return 0

    monkeypatch.setattr(predict, "_run", warns)  # register() reads it when the parser is built
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        rc = main(["predict", "seed-70b-hbm"])
    err = capsys.readouterr().err
    assert rc == 70 and "RuntimeWarning: overflow encountered in multiply" in err and err.count("\n") == 1, err
