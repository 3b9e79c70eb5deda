"""Thin command line: each subcommand parses, loads, calls one library function, prints.

Subcommands live one per module in this package; each module defines `register(subparsers)`,
which adds its parser and sets `func(args) -> int` as the handler.
"""
from __future__ import annotations

import argparse
import importlib
import sys

from ..errors import SpecError

# One module per subcommand family; each is imported lazily so `specsim predict` never pays for
# numba or simpy.
SUBCOMMAND_MODULES = ("predict", "catalogs", "sweep", "threshold", "replay", "simulate", "calibrate", "decoder")


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
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except SpecError as exc:
        print(f"specsim: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # e.g. `specsim models list | head`
        return 0


def run() -> None:
    sys.exit(main())
