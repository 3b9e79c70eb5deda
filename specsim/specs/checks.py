"""One way to check a field of a table: its type, its range, and one message when it is wrong.

Every check takes `where` (the file and table, e.g. "scenario 's.toml' [engine]"), the field's name
and its value, and returns the value converted (an int, a float, a tuple) or raises a SpecError
from `errors.field_error`: "<where>: field 'name' = <value>: expected <what>". A value of the wrong
type is told the whole rule ("an integer in 1..4096 (tokens a KV block holds)"); a value of the
right type outside the range is told the bound it crossed ("at most 4096 (tokens a KV block
holds)"). Booleans are never numbers here (TOML's `true` is not 1), NaN and infinities are never
finite numbers, and numpy scalars count as the numbers they are.

    integer(where, "max_num_seqs", v, lo=1, hi=65536, unit="sequences")
    number(where, "rate_per_s", v, lo=1e-6, hi=1e6, unit="requests/s")
    fraction(where, "watermark_frac", v, hi_open=True)
    boolean(where, "chunked_prefill", v)
    choice(where, "layout", v, ("colocated", "disaggregated"))
    text(where, "trace", v, what="a trace path")
    integers(where, "batch_sizes", v, lo=1, distinct=True)

`fields(where, raw, allowed)` refuses unknown keys (with the closest known name) before any value
is read.
"""
from __future__ import annotations

import math
import numbers
import re
from collections.abc import Iterable, Mapping

from ..errors import SpecError, field_error, reject_unknown_keys

INT32_MAX = 2 ** 31 - 1  # the largest count any table takes: lengths, blocks, budgets (int32 indices)
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


def is_int(value) -> bool:
    """An integer (Python or numpy), not a boolean."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def is_number(value) -> bool:
    """A finite real number (int, float or numpy scalar), not a boolean."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:  # an int too large for a float
        return False


def _unit(unit: str) -> str:
    return f" ({unit})" if unit else ""


def _span(lo, hi, lo_open: bool, hi_open: bool, *, integer: bool) -> str:
    if integer and lo is not None and hi is not None:
        return f" in {lo}..{hi}"
    if lo is not None and hi is not None:
        return f" in {'(' if lo_open else '['}{lo:g}, {hi:g}{')' if hi_open else ']'}"
    if lo is not None:
        return f" {'>' if lo_open else '>='} {lo:g}" if not integer else f" >= {lo}"
    if hi is not None:
        return f" {'<' if hi_open else '<='} {hi:g}" if not integer else f" <= {hi}"
    return ""


def integer(where: str, name: str, value, *, lo: int | None = None, hi: int | None = INT32_MAX,
            unit: str = "") -> int:
    """An integer in lo..hi (either end None: open on that side)."""
    if not is_int(value):
        raise field_error(where, name, value, f"an integer{_span(lo, hi, False, False, integer=True)}{_unit(unit)}")
    v = int(value)
    if lo is not None and v < lo:
        raise field_error(where, name, value, f"at least {lo}{_unit(unit)}")
    if hi is not None and v > hi:
        raise field_error(where, name, value, f"at most {hi}{_unit(unit)}")
    return v


def number(where: str, name: str, value, *, lo: float | None = None, hi: float | None = None, lo_open: bool = False,
           hi_open: bool = False, unit: str = "", infinite: bool = False) -> float:
    """A finite number in [lo, hi] (open ends as asked); `infinite`: +inf is allowed too (no limit)."""
    if infinite and not isinstance(value, bool) and isinstance(value, numbers.Real) and value == math.inf:
        return math.inf
    what = f"a finite number{_span(lo, hi, lo_open, hi_open, integer=False)}{_unit(unit)}" + \
        (" or inf (no limit)" if infinite else "")
    if not is_number(value):
        raise field_error(where, name, value, what)
    v = float(value)
    if lo is not None and (v <= lo if lo_open else v < lo):
        raise field_error(where, name, value, f"{'more than' if lo_open else 'at least'} {lo:g}{_unit(unit)}")
    if hi is not None and (v >= hi if hi_open else v > hi):
        raise field_error(where, name, value, f"{'less than' if hi_open else 'at most'} {hi:g}{_unit(unit)}")
    return v


def fraction(where: str, name: str, value, *, lo_open: bool = False, hi_open: bool = False, unit: str = "") -> float:
    """A fraction in [0, 1] (open ends as asked)."""
    if not is_number(value) or not ((0.0 < value) if lo_open else (0.0 <= value)) \
            or not ((value < 1.0) if hi_open else (value <= 1.0)):
        raise field_error(where, name, value, f"a fraction in {'(' if lo_open else '['}0, 1{')' if hi_open else ']'}"
                          f"{_unit(unit)}")
    return float(value)


def boolean(where: str, name: str, value) -> bool:
    if not isinstance(value, bool):
        raise field_error(where, name, value, "true or false (a boolean, not a string or a number)")
    return value


def choice(where: str, name: str, value, options: Iterable[str]) -> str:
    options = tuple(options)
    if not isinstance(value, str) or value not in options:
        raise field_error(where, name, value, "one of " + ", ".join(repr(o) for o in options))
    return value


def text(where: str, name: str, value, *, what: str = "a non-empty string") -> str:
    """A non-empty string without NUL characters (a name, an id or a path)."""
    if not isinstance(value, str) or not value.strip() or "\x00" in value or len(value) > 4096:
        raise field_error(where, name, value, what)
    return value


def file_name(where: str, name: str, value, *, what: str = "a name") -> str:
    """A name that is also a plain file name: letters, digits, '_', '.', '-', at most 64, not starting with
    '.' (output files are named after it)."""
    if not isinstance(value, str) or not _NAME.match(value):
        raise field_error(where, name, value, f"{what} of letters, digits, '_', '.' and '-' (at most 64, the first a "
                          f"letter or digit): it names output files")
    return value


def table(where: str, name: str, value) -> Mapping:
    if not isinstance(value, Mapping):
        raise field_error(where, name, value, f"a table ({name} = {{ ... }})")
    return value


def _items(where: str, name: str, value, *, what: str, min_len: int, max_len: int | None, scalar_ok: bool) -> list:
    if scalar_ok and not isinstance(value, (list, tuple)):
        value = [value]
    if not isinstance(value, (list, tuple)) or len(value) < min_len or (max_len is not None and len(value) > max_len):
        n = f"{min_len} or more" if max_len is None else (f"{min_len} to {max_len}" if max_len != min_len else str(min_len))
        raise field_error(where, name, value, f"a list of {n} {what}")
    return list(value)


def _listed(where: str, name: str, value, out: list, *, distinct: bool, increasing: bool, what: str) -> tuple:
    if distinct and len(set(out)) != len(out):
        raise field_error(where, name, value, f"distinct {what} (each value once)")
    if increasing and any(b <= a for a, b in zip(out, out[1:])):
        raise field_error(where, name, value, f"{what} in increasing order")
    return tuple(out)


def integers(where: str, name: str, value, *, lo: int | None = None, hi: int | None = INT32_MAX, unit: str = "",
             min_len: int = 1, max_len: int | None = None, distinct: bool = False, increasing: bool = False,
             scalar_ok: bool = False) -> tuple:
    """A list of integers in lo..hi (`scalar_ok`: one integer stands for a list of one)."""
    what = f"integers{_span(lo, hi, False, False, integer=True)}{_unit(unit)}"
    items = _items(where, name, value, what=what, min_len=min_len, max_len=max_len, scalar_ok=scalar_ok)
    out = []
    for v in items:
        if not is_int(v) or (lo is not None and v < lo) or (hi is not None and v > hi):
            raise field_error(where, name, v if len(items) > 1 else value, what)
        out.append(int(v))
    return _listed(where, name, value, out, distinct=distinct, increasing=increasing, what=what)


def floats(where: str, name: str, value, *, lo: float | None = None, hi: float | None = None, lo_open: bool = False,
             hi_open: bool = False, unit: str = "", min_len: int = 1, max_len: int | None = None, distinct: bool = False,
             increasing: bool = False, scalar_ok: bool = False) -> tuple:
    """A list of finite numbers in [lo, hi] (`scalar_ok`: one number stands for a list of one)."""
    what = f"finite numbers{_span(lo, hi, lo_open, hi_open, integer=False)}{_unit(unit)}"
    items = _items(where, name, value, what=what, min_len=min_len, max_len=max_len, scalar_ok=scalar_ok)
    out = []
    for v in items:
        if not is_number(v) or (lo is not None and (v <= lo if lo_open else v < lo)) \
                or (hi is not None and (v >= hi if hi_open else v > hi)):
            raise field_error(where, name, v if len(items) > 1 else value, what)
        out.append(float(v))
    return _listed(where, name, value, out, distinct=distinct, increasing=increasing, what=what)


def texts(where: str, name: str, value, *, what: str = "non-empty strings", empty_ok: bool = False,
          min_len: int = 1, distinct: bool = True, scalar_ok: bool = False) -> tuple:
    """A list of strings (`empty_ok`: "" allowed, e.g. a stack of none)."""
    items = _items(where, name, value, what=what, min_len=min_len, max_len=None, scalar_ok=scalar_ok)
    for v in items:
        if not isinstance(v, str) or (not empty_ok and not v.strip()) or "\x00" in v:
            raise field_error(where, name, v if len(items) > 1 else value, what)
    return _listed(where, name, value, list(items), distinct=distinct, increasing=False, what=what)


def fields(where: str, raw, allowed: Iterable[str], *, what: str = "table") -> dict:
    """`raw` as a dict after refusing a value that is not a table and any key not in `allowed`."""
    if not isinstance(raw, Mapping):
        raise SpecError(f"{where}: expected a {what} of keys, got {raw!r}")
    raw = dict(raw)
    reject_unknown_keys(where, raw, allowed)
    return raw


def absent_unless(where: str, spec, keys: Iterable[str], given: Iterable[str], condition: str) -> None:
    """Refuse any of `keys` that was given although `condition` (a sentence: when the key applies, and
    why) does not hold: a key that cannot apply would otherwise be silently ignored."""
    for key in keys:
        if key in given:
            raise field_error(where, key, getattr(spec, key), f"absent unless {condition}")


__all__ = ["INT32_MAX", "is_int", "is_number", "integer", "number", "fraction", "boolean", "choice", "text",
           "file_name", "table", "integers", "floats", "texts", "fields", "absent_unless"]
