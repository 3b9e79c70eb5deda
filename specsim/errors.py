"""Errors that name the file, the field, the value and what was expected."""
from __future__ import annotations

import difflib
from collections.abc import Iterable


class SpecError(ValueError):
    """Bad input: a catalog entry, a scenario, a flag or a trace that cannot be used as given."""


class DoesNotFitError(SpecError):
    """Weights plus KV cache exceed the memory of the device group."""


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
