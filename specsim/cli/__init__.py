"""Thin command line: each subcommand parses, loads, calls one library function, prints.

Subcommands live one per module in this package; each module defines `register(subparsers)`,
which adds its parser and sets `func(args) -> int` as the handler.
"""
from __future__ import annotations

import argparse
import importlib
import os
import signal
import sys

from ..errors import EXIT_INTERNAL, EXIT_INTERRUPTED, InputError, SpecError

# One module per subcommand family; each is imported lazily so `specsim predict` never pays for
# numba or simpy.
SUBCOMMAND_MODULES = ("advise", "report", "capacity", "compare", "data", "predict", "scenarios", "catalogs", "sweep",
                      "threshold",
                      "replay", "simulate", "calibrate", "validate",
                      "decoder")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="specsim",
        description="Predict when speculative decoding pays and when it hurts, for a model pair, "
        "drafter method, hardware and load.",
    )
    from .. import __version__

    parser.add_argument("--version", action="version", version=f"specsim {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in SUBCOMMAND_MODULES:
        importlib.import_module(f"{__name__}.{name}").register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one command; every expected failure is one line on stderr and a distinct exit status
    (see specsim.errors). SPECSIM_DEBUG=1 shows the traceback of an internal error."""
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        if not getattr(args, "func", None):
            parser.print_help()
            return 2
        return int(args.func(args) or 0)
    except SpecError as exc:
        print(f"specsim: error: {exc}", file=sys.stderr)
        return exc.exit_status
    except KeyboardInterrupt as exc:  # an output folder completed as it came says so (presentation.output)
        print(f"specsim: interrupted; {str(exc) or 'outputs of this run were not kept'}", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # e.g. `specsim models list | head`
        _silence_stdout()
        return 0
    except OSError as exc:  # an input or output the commands did not anticipate
        where = f"{exc.filename}: " if getattr(exc, "filename", None) else ""
        print(f"specsim: error: {where}{exc.strerror or exc}", file=sys.stderr)
        return InputError.exit_status
    except Exception as exc:  # a bug: one line, the traceback on request
        if os.environ.get("SPECSIM_DEBUG"):
            raise
        print(f"specsim: internal error: {type(exc).__name__}: {exc} (a bug; rerun with SPECSIM_DEBUG=1 for "
              f"the traceback and report it)", file=sys.stderr)
        return EXIT_INTERNAL


def _silence_stdout() -> None:
    # Python flushes stdout at exit; a closed pipe would raise again there
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except OSError:
        pass


def run() -> None:
    status = main()
    # the command is over, its outputs whole or never kept: a Ctrl-C during the interpreter's shutdown
    # (a second or so after a large sweep) would kill it by the signal, with no word, after a complete run
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    sys.exit(status)
