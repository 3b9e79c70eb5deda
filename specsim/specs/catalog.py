"""Where the TOML catalogs live, and reading one entry by id or by path.

The catalogs sit at the repository root (`hardware/`, `models/`, `scenarios/`) and are copied into
the wheel as `specsim/catalog/<kind>/`; an installed package reads its own copy, a source checkout
or editable install reads the root folders.
"""
from __future__ import annotations

import copy
import os
import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised only on Python 3.10
    import tomli as tomllib

from ..errors import InputError, SpecError, unknown_id_error

KINDS = ("hardware", "models", "scenarios", "stacks")
_PACKAGE_DIR = Path(__file__).resolve().parents[1]


def catalog_dir(kind: str) -> Path:
    if kind not in KINDS:
        raise SpecError(f"unknown catalog kind {kind!r}; expected one of {', '.join(KINDS)}")
    shipped = _PACKAGE_DIR / "catalog" / kind
    if shipped.is_dir():
        return shipped
    source = _PACKAGE_DIR.parent / kind
    if source.is_dir():
        return source
    raise SpecError(f"catalog folder for {kind!r} not found (looked in {shipped} and {source})")


def catalog_ids(kind: str) -> list[str]:
    # one listing, not pathlib's glob: resolving an operating point asks this a dozen times
    # a name's stem by slicing (as Path.stem reads it: '.toml' alone keeps its name)
    return sorted(n[:-5] if len(n) > 5 else n for n in os.listdir(catalog_dir(kind)) if n.endswith(".toml"))


# The catalogs' own files, parsed once, keyed by path, size and modification time; a copy is handed
# out, so a caller that edits its dict (a calibration writing a stack) never changes what the next
# reader gets. Resolving one operating point reads a dozen catalog files, and replay and calibration
# resolve one per row and fitting step (issue 37: a leave-one-source-out replay spent a third of its
# minutes parsing TOML). A user's file is read afresh every time: a file rewritten at the same size
# within the file system's timestamp tick (a few ms) would otherwise read as the old one.
_PARSED: dict = {}
_CATALOG_ROOTS = (str(_PACKAGE_DIR / "catalog"), str(_PACKAGE_DIR.parent))


def _in_catalog(path: str) -> bool:
    folder, _ = os.path.split(path)
    root, kind = os.path.split(folder)
    return kind in KINDS and root in _CATALOG_ROOTS


def read_toml(path: Path) -> dict:
    try:
        full = os.path.abspath(path)
        if not _in_catalog(full):
            with open(path, "rb") as f:
                return tomllib.load(f)
        st = os.stat(full)
        key = (full, st.st_size, st.st_mtime_ns)
        hit = _PARSED.get(key)
        if hit is None:
            with open(full, "rb") as f:
                hit = _PARSED[key] = tomllib.load(f)
        return copy.deepcopy(hit)
    except FileNotFoundError:
        raise InputError(f"{path}: file not found") from None
    except IsADirectoryError:
        raise InputError(f"{path}: a folder, not a TOML file") from None
    except PermissionError:
        raise InputError(f"{path}: no permission to read it") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    except UnicodeDecodeError:
        raise InputError(f"{path}: not a text file (TOML must be UTF-8 text)") from None
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"{path}: not valid TOML: {exc}") from None


def resolve(kind: str, id_or_path: str | Path) -> Path:
    """A catalog id (`h100-sxm`) or a path to a user's TOML file."""
    text = str(id_or_path)
    if text.endswith(".toml") or "/" in text or "\\" in text:
        path = Path(text)
        if not path.is_file():
            raise SpecError(f"{kind} file {text!r} not found")
        return path
    path = catalog_dir(kind) / f"{text}.toml"
    if not path.is_file():
        raise unknown_id_error(kind, text, catalog_ids(kind))
    return path


def _toml_value(v) -> str:
    import json
    import math

    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)  # a TOML basic string is a JSON string
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{_toml_key(k)} = {_toml_value(x)}" for k, x in v.items()) + " }"
    raise SpecError(f"cannot write {v!r} ({type(v).__name__}) as TOML")


def _toml_key(k: str) -> str:
    import re

    return k if re.fullmatch(r"[A-Za-z0-9_-]+", k) else _toml_value(k)


def to_toml(table: dict) -> str:
    """TOML text for a table of scalars, lists and one level of sub-tables (what catalog and
    scenario files hold); nested tables below that are written inline. tomllib reads it back equal."""
    lines = [f"{_toml_key(k)} = {_toml_value(v)}" for k, v in table.items() if not isinstance(v, dict)]
    for k, v in table.items():
        if isinstance(v, dict):
            lines += ["", f"[{_toml_key(k)}]"]
            lines += [f"{_toml_key(kk)} = {_toml_value(vv)}" for kk, vv in v.items()]
    return "\n".join(lines) + "\n"
