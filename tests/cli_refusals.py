"""Shared by the hostile-input tests: run the CLI in process within a time limit, and check a refusal is one
line naming what it must (no traceback, no internal error)."""
from __future__ import annotations

import time

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
