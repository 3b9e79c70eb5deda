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


def print_json(obj) -> None:
    print(json.dumps(to_jsonable(obj), indent=2, sort_keys=False))


def table(rows: list[tuple[str, str]], *, title: str = "") -> str:
    width = max(len(k) for k, _ in rows)
    lines = [title, "-" * max(len(title), 20)] if title else []
    lines += [f"{k:<{width}}  {v}" for k, v in rows]
    return "\n".join(lines)
