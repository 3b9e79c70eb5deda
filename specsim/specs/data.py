"""Where the data the examples need lives: traces, text corpora and published performance profiles.

The folder `data/` at the repository root (copied unmodified from their sources, each with its
licence and a README naming the source and commit) is shipped inside the wheel as
`specsim/catalog/data/`, like the TOML catalogs. `$SPECSIM_DATA` points at another folder with the
same layout (`traces/`, `corpora/`, `perf/`) when a user has their own data.
"""
from __future__ import annotations

import os
from pathlib import Path

from ..errors import SpecError

ENV = "SPECSIM_DATA"
_PACKAGE_DIR = Path(__file__).resolve().parents[1]


def data_dir() -> Path:
    """$SPECSIM_DATA if set, else the copy shipped in the package, else the checkout's `data/`."""
    env = os.environ.get(ENV)
    if env:
        path = Path(env)
        if not path.is_dir():
            raise SpecError(f"${ENV} = {env!r}: not a folder; expected one holding traces/, corpora/ and perf/")
        return path
    shipped = _PACKAGE_DIR / "catalog" / "data"
    if shipped.is_dir():
        return shipped
    source = _PACKAGE_DIR.parent / "data"
    if source.is_dir():
        return source
    raise SpecError(f"the data folder was not found (looked in {shipped} and {source}); set ${ENV}")


def data_path(relative: str | Path, *, what: str = "data file") -> Path:
    """A file under the data folder (or an absolute path), refused with where it was looked for."""
    p = Path(relative).expanduser()
    full = p if p.is_absolute() else data_dir() / p
    if not full.exists():
        raise SpecError(f"{what} {str(relative)!r} not found at {full}: give a path relative to the data folder "
                        f"({data_dir()}), an absolute path, or set ${ENV} to a folder that holds it")
    return full


__all__ = ["data_dir", "data_path", "ENV"]
