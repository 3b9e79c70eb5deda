"""CSV inputs read with one-line errors: the file, the line, the column, the value, what was expected.

`read_csv_table(path, what=...)` refuses a path that is missing, a folder, unreadable, binary (NUL
bytes), not UTF-8, empty, or a header without rows, with an InputError naming the path; a byte-order
mark is tolerated. `numeric_column(table, column, ...)` converts one column to numbers and refuses
the first cell that is not a finite number, not whole where an integer is due, or out of range,
naming the file, its line (the header is line 1) and the value as written. Lines count physical
rows of a plain CSV (a quoted field spanning lines shifts the count; the column and value still
identify the cell).
"""
from __future__ import annotations

import io
import math
from pathlib import Path

import numpy as np
import pandas as pd

from ..errors import InputError, SpecError


def read_text_file(path, *, what: str) -> str:
    """The text of the file at `path` (UTF-8, a byte-order mark tolerated), refused with an InputError
    naming the path when it is missing, a folder, unreadable, binary (NUL bytes) or not UTF-8; `what`:
    the kind of file expected, for the message."""
    p = Path(path)
    if str(path).strip() == "":
        raise InputError(f"'': expected the path of a {what}")
    try:
        raw = p.read_bytes()
    except FileNotFoundError:
        raise InputError(f"{path}: file not found; expected a {what}") from None
    except IsADirectoryError:
        raise InputError(f"{path}: a folder, not a {what}") from None
    except PermissionError:
        raise InputError(f"{path}: no permission to read it") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    if b"\x00" in raw:
        raise InputError(f"{path}: not a text file (it holds NUL bytes); expected a {what}")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputError(f"{path}: not UTF-8 text (byte {exc.start} = 0x{raw[exc.start]:02x}); expected a {what}") from None
    return text


def read_csv_table(path, *, what: str = "CSV file", dtype=None, infer: bool = False) -> pd.DataFrame:
    """The CSV at `path` as a DataFrame, with every cell kept as written (strings) unless `dtype` says
    otherwise for a column, or, with `infer`, pandas' own column types and NaN for blank cells (only);
    refused with an InputError naming the path when it cannot be one."""
    text = read_text_file(path, what=what)
    if not text.strip():
        raise InputError(f"{path}: empty; expected a {what} with a header row and data rows")
    try:
        if infer:  # only a blank cell is missing: "nan" or "NA" written in a cell stays text, to be refused
            table = pd.read_csv(io.StringIO(text), dtype=dtype, skip_blank_lines=True, keep_default_na=False,
                                na_values=[""])
        else:
            table = pd.read_csv(io.StringIO(text), dtype=dtype if dtype is not None else str, keep_default_na=False,
                                skip_blank_lines=True)
    except pd.errors.EmptyDataError:
        raise InputError(f"{path}: empty; expected a {what} with a header row and data rows") from None
    except pd.errors.ParserError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else "unreadable"
        raise InputError(f"{path}: not a valid CSV ({first}); expected a {what}") from None
    table.columns = [str(c).strip() for c in table.columns]
    if table.empty:
        raise InputError(f"{path}: a header ({', '.join(table.columns)}) but no rows; expected a {what} with data rows")
    return table


def require_columns(table: pd.DataFrame, columns, *, where: str, what: str = "") -> None:
    missing = [c for c in columns if c not in table.columns]
    if missing:
        header = ",".join(table.columns)
        raise InputError(f"{where}: line 1: missing column {missing[0]!r}" + (f" (and {len(missing) - 1} more)"
                                                                             if len(missing) > 1 else "")
                         + f"; the header is {header!r}, expected " + ", ".join(columns) + (f" ({what})" if what else ""))


def _blank(v) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v)) or (isinstance(v, str) and not v.strip())


def cell_number(value, *, integer: bool = False) -> float | None:
    """A cell as a finite number (None when blank or not a finite number, or not whole when `integer`)."""
    if _blank(value):
        return None
    if isinstance(value, bool):
        return None
    try:
        v = float(str(value).strip()) if not isinstance(value, (int, float, np.number)) else float(value)
    except (TypeError, ValueError, OverflowError):
        return None
    if not math.isfinite(v) or (integer and v != math.floor(v)):
        return None
    return v


def numeric_column(table: pd.DataFrame, column: str, *, where: str, integer: bool = False, minimum: float | None = None,
                   maximum: float | None = None, exclusive_minimum: bool = False, blank: bool = False,
                   expected: str | None = None, error=SpecError) -> pd.Series:
    """`table[column]` as numbers (floats, or int64 when `integer`; NaN for allowed blanks). The first
    cell that is not a finite number in range is refused: "<where>: line N: column 'c' = 'v':
    expected ..."."""
    kind = "an integer" if integer else "a finite number"
    rng = []
    if minimum is not None:
        rng.append(f"{'>' if exclusive_minimum else '>='} {minimum:g}")
    if maximum is not None:
        rng.append(f"<= {maximum:g}")
    want = expected or (kind + (" " + " and ".join(rng) if rng else ""))
    values = []
    for i, cell in enumerate(table[column].tolist()):
        if _blank(cell) and blank:
            values.append(math.nan)
            continue
        v = cell_number(cell, integer=integer)
        if v is None or (minimum is not None and (v <= minimum if exclusive_minimum else v < minimum)) \
                or (maximum is not None and v > maximum) or (integer and abs(v) >= 2 ** 53):
            raise error(f"{where}: line {i + 2}: column {column!r} = {cell!r}: expected {want}")
        values.append(v)
    s = pd.Series(values, index=table.index, dtype=float)
    if integer and not blank:
        return s.astype(np.int64)
    return s


def text_column(table: pd.DataFrame, column: str, *, where: str, error=SpecError) -> pd.Series:
    """`table[column]` stripped; a blank cell is refused naming its line."""
    out = []
    for i, cell in enumerate(table[column].tolist()):
        if _blank(cell):
            raise error(f"{where}: line {i + 2}: column {column!r} is empty: expected a value")
        out.append(str(cell).strip())
    return pd.Series(out, index=table.index, dtype=object)


__all__ = ["read_text_file", "read_csv_table", "require_columns", "numeric_column", "text_column", "cell_number"]
