"""Small helpers shared by subcommands: JSON output and readable tables."""
from __future__ import annotations

import json
import math

import numpy as np


def to_jsonable(obj):
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return to_jsonable(obj.tolist())
    if isinstance(obj, (np.floating, float)):
        v = float(obj)
        return v if math.isfinite(v) else None
    if isinstance(obj, np.integer):
        return int(obj)
    return obj


def add_cost_source_flag(p) -> None:
    """--cost-source: what prices each pass (cost.pricing.source_for); absent: the scenario's (default auto)."""
    p.add_argument("--cost-source", choices=["auto", "measured", "roofline"],
                   help="what prices each pass: auto (the default: silicon-measured operator tables where the part, "
                        "stack and model are covered, the roofline with fitted kernel curves elsewhere), measured (the "
                        "tables, refused where there are none) or roofline")


def print_json(obj) -> None:
    print(json.dumps(to_jsonable(obj), indent=2, sort_keys=False))


def table(rows: list[tuple[str, str]], *, title: str = "") -> str:
    width = max(len(k) for k, _ in rows)
    lines = [title, "-" * max(len(title), 20)] if title else []
    lines += [f"{k:<{width}}  {v}" for k, v in rows]
    return "\n".join(lines)


def parse_list(text: str | None, flag: str, kind=float, *, minimum: float | None = None, exclusive: bool = False,
               maximum: float | None = None, distinct: bool = True) -> list | None:
    """A comma-separated flag value as a list (None when the flag was not given): every item of
    type `kind`, finite, above `minimum` (strictly when `exclusive`) and at most `maximum`, each once."""
    if text is None:
        return None
    from ..errors import SpecError

    items = [x.strip() for x in str(text).split(",")]
    if not text.strip() or any(not x for x in items):
        raise SpecError(f"{flag} {text!r}: expected a comma-separated list with no empty items, like 1,2,4")
    out = []
    for x in items:
        try:
            v = kind(x)
        except ValueError:
            raise SpecError(f"{flag} {text!r}: {x!r} is not {'a number' if kind in (int, float) else 'valid'}") from None
        if kind in (int, float):
            if not math.isfinite(v) or (minimum is not None and (v <= minimum if exclusive else v < minimum)) \
                    or (maximum is not None and v > maximum):
                rel = ">" if exclusive else ">="
                span = " and ".join(([f"{rel} {minimum:g}"] if minimum is not None else [])
                                    + ([f"<= {maximum:g}"] if maximum is not None else []))
                raise SpecError(f"{flag} {text!r}: {x} is out of range (expected finite values{' ' + span if span else ''})")
        out.append(v)
    if distinct and len(set(out)) != len(out):
        raise SpecError(f"{flag} {text!r}: each value once")
    return out
