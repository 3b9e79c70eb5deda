"""A scenario file as typed config: what to predict, on what, under which load.

Top-level keys describe one operating point (hardware, target, drafter, K, acceptance, batch,
context). Sub-tables belong to the layers that read them and are validated there: `[sweep]` (grids
for `specsim sweep`), `[threshold]`, `[workload]`, `[engine]`, `[policies]`, `[slo]` (the serving
simulator). Unknown top-level keys and unknown sub-tables are refused.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from types import MappingProxyType
from typing import Mapping

from .catalog import catalog_ids, read_toml, resolve
from ..errors import SpecError, field_error, reject_unknown_keys

SECTIONS = ("sweep", "threshold", "workload", "engine", "policies", "slo")
METHODS = ("draft_model", "prompt_lookup", "medusa", "eagle", "lookahead", "layer_skip", "mtp", "sparse_kv", "none")


@dataclass(frozen=True, slots=True, kw_only=True)
class Scenario:
    name: str = "cli"
    description: str = ""
    hardware: str = "h100-sxm"
    target: str = "llama-3.1-8b"
    drafter: str | None = None
    method: str = "draft_model"
    k: int = 4
    alpha: float | None = None
    tau: float | None = None
    batch_size: int = 1
    context_len: int = 1024
    tp: int = 1
    drafter_tp: int = 1
    attention: str = "fused"
    allow_cross_tokenizer: bool = False
    stack: str | None = None
    target_dtype: str | None = None
    temperature: float = 0.0
    sections: Mapping[str, Mapping] = field(default_factory=dict)
    path: str = ""

    def __post_init__(self) -> None:
        where = f"scenario {self.path or self.name!r}"
        for name in ("k",):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise field_error(where, name, v, "an integer >= 0")
        for name in ("batch_size", "tp", "drafter_tp"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise field_error(where, name, v, "an integer >= 1")
        if isinstance(self.context_len, bool) or not isinstance(self.context_len, int) or self.context_len < 0:
            raise field_error(where, "context_len", self.context_len, "an integer >= 0")
        if self.method not in METHODS:
            raise field_error(where, "method", self.method, f"one of {', '.join(METHODS)}")
        if self.alpha is not None:
            if isinstance(self.alpha, bool) or not isinstance(self.alpha, (int, float)) or not (0.0 <= self.alpha <= 1.0):
                raise field_error(where, "alpha", self.alpha, "an acceptance rate in [0, 1]")
        if self.tau is not None:
            if isinstance(self.tau, bool) or not isinstance(self.tau, (int, float)) or not (1.0 <= self.tau <= self.k + 1):
                raise field_error(where, "tau", self.tau, f"mean tokens per cycle in [1, K + 1] = [1, {self.k + 1}]")
        if self.alpha is not None and self.tau is not None:
            raise field_error(where, "tau", self.tau, "either alpha or tau, not both")
        if not (isinstance(self.temperature, (int, float)) and math.isfinite(self.temperature) and self.temperature >= 0):
            raise field_error(where, "temperature", self.temperature, "a number >= 0")
        if self.attention not in ("fused", "naive"):
            raise field_error(where, "attention", self.attention, "'fused' or 'naive'")
        object.__setattr__(self, "sections", MappingProxyType({k: MappingProxyType(dict(v)) for k, v in self.sections.items()}))

    def section(self, name: str) -> Mapping:
        if name not in SECTIONS:
            raise SpecError(f"unknown scenario section {name!r}; known: {', '.join(SECTIONS)}")
        return self.sections.get(name, MappingProxyType({}))

    def with_overrides(self, **overrides) -> "Scenario":
        """Replace the fields given; None means keep the scenario's value. alpha and tau are two
        forms of one input, so giving one clears the other."""
        given = {k: v for k, v in overrides.items() if v is not None}
        if "alpha" in given:
            given["tau"] = None
        elif "tau" in given:
            given["alpha"] = None
        return replace(self, **given)


SCALAR_KEYS = tuple(f.name for f in fields(Scenario) if f.name not in ("sections", "path"))


def scenario_from_dict(raw: dict, *, where: str = "scenario") -> Scenario:
    reject_unknown_keys(where, raw, set(SCALAR_KEYS) | set(SECTIONS))
    kwargs = {k: v for k, v in raw.items() if k in SCALAR_KEYS}
    sections = {}
    for name in SECTIONS:
        if name in raw:
            if not isinstance(raw[name], dict):
                raise field_error(where, name, raw[name], f"a [{name}] table")
            sections[name] = raw[name]
    try:
        return Scenario(**kwargs, sections=sections, path=where)
    except SpecError as exc:
        raise SpecError(f"{exc}") from None


def load_scenario(id_or_path: str | Path) -> Scenario:
    """A shipped scenario by name (`seed-70b-hbm`) or a path to a TOML file."""
    path = resolve("scenarios", id_or_path)
    raw = read_toml(path)
    raw.setdefault("name", path.stem)
    return scenario_from_dict(raw, where=str(path))


def list_scenarios() -> list[str]:
    return catalog_ids("scenarios")
