"""Errors that name the file, the field, the value and what was expected, and the exit status each
kind of failure gets at the command line.

Exit statuses (`specsim ...; echo $?`):
  0  success
  2  bad input value: a flag, a scenario or catalog field, a trace row (SpecError); also argparse's
     usage errors
  3  an input file that cannot be read or parsed (InputError)
  4  the configuration does not fit in memory (DoesNotFitError)
  5  an output that cannot be written, or a non-empty --out without --force (OutputError)
  6  nothing to report: an empty workload, every request rejected (EmptyResultError)
  7  a timing command's own figures disagree (a busy machine): nothing written (DisturbedError)
  70 an internal error (a bug: please report it with SPECSIM_DEBUG=1 for the traceback)
  130 interrupted (Ctrl-C); no partial output is left looking complete
"""
from __future__ import annotations

import difflib
from collections.abc import Iterable

EXIT_OK = 0
EXIT_INTERNAL = 70
EXIT_INTERRUPTED = 130


class SpecError(ValueError):
    """Bad input: a catalog entry, a scenario, a flag or a trace that cannot be used as given."""

    exit_status = 2


class InputError(SpecError):
    """An input file that cannot be read (missing, unreadable, binary) or parsed."""

    exit_status = 3


class DoesNotFitError(SpecError):
    """Weights plus KV cache exceed the memory of the device group."""

    exit_status = 4


class OutputError(SpecError):
    """An output that cannot be written (a file where a folder is expected, no permission, ...)."""

    exit_status = 5


class EmptyResultError(SpecError):
    """A run with nothing to report: no requests in the workload or window, all of them rejected."""

    exit_status = 6


class DisturbedError(SpecError):
    """A timing command's figures contradict each other or spread too far after its bounded retries (the
    machine looked busy): nothing was written; --force writes them anyway, marked."""

    exit_status = 7


def field_error(where: str, field: str, value: object, expected: str) -> SpecError:
    """One message shape for every validation failure: where, which field, what, what was expected."""
    prefix = f"{where}: " if where else ""
    return SpecError(f"{prefix}field '{field}' = {value!r}: expected {expected}")


def unknown_id_error(kind: str, wanted: str, known: Iterable[str]) -> SpecError:
    known = sorted(known)
    close = difflib.get_close_matches(wanted, known, n=5, cutoff=0.5)
    hint = f" Did you mean: {', '.join(close)}?" if close else ""
    return SpecError(
        f"unknown {kind} id {wanted!r}.{hint} Known {kind} ids: {', '.join(known)}. "
        f"A path to a TOML file is accepted too."
    )


def reject_unknown_keys(where: str, table: dict, allowed: Iterable[str]) -> None:
    """Loaders refuse keys they do not know, so a typo is never silently ignored."""
    allowed = set(allowed)
    for key in table:
        if key not in allowed:
            close = difflib.get_close_matches(key, sorted(allowed), n=3, cutoff=0.6)
            hint = f" (did you mean {', '.join(repr(c) for c in close)}?)" if close else ""
            raise SpecError(
                f"{where}: unknown key {key!r}{hint}; allowed keys: {', '.join(sorted(allowed))}"
            )
