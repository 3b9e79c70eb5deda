"""A scenario file as typed config: what to predict, on what, under which load.

Top-level keys describe one operating point (hardware, target, drafter, K, acceptance, batch,
context); `scenarios/README.md` documents every key with its unit and default. Tables:
`[drafter_options]` (the drafter family's knobs), `[acceptance]` (per-position rates and how
acceptance moves with context and temperature), and the tables of the analyses that read them:
`[sweep]`, `[threshold]`, `[workload]`, `[engine]`, `[policies]`, `[slo]`. Unknown keys and tables
are refused; keys that moved are refused with their new place.

A Scenario is only the file's content. `specsim.speculation.operating_point.resolve` turns it into
the operating point every analysis consumes; nothing else reads a Scenario's fields.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from types import MappingProxyType
from typing import Mapping

from ..errors import SpecError, field_error, reject_unknown_keys
from .catalog import catalog_ids, read_toml, resolve, to_toml
from .models import WEIGHT_FORMATS

SECTIONS = ("drafter_options", "acceptance", "sweep", "threshold", "workload", "engine", "policies", "slo", "fleet")
ATTENTION_KERNELS = ("fused", "naive")
# Keys that used to live elsewhere: (table, key) -> where they live now.
MOVED = {
    ("sweep", "drafter_options"): "[drafter_options]",
    ("engine", "drafter_options"): "[drafter_options]",
    ("engine", "tree_size"): "the top-level key tree_size",
    ("sweep", "n_ranks"): "[acceptance] n_ranks",
    ("sweep", "rank_decay"): "[acceptance] rank_decay",
    ("sweep", "context_decay_per_token"): "[acceptance] context_decay_per_token",
    ("sweep", "temperature_slope"): "[acceptance] temperature_slope",
    ("sweep", "reference_context_len"): "[acceptance] reference_context_len",
    ("sweep", "reference_temperature"): "[acceptance] reference_temperature",
    ("workload", "acceptance_by_position"): "[acceptance] by_position",
    ("workload", "acceptance_context_decay_per_token"): "[acceptance] context_decay_per_token",
    ("workload", "acceptance_reference_context_len"): "[acceptance] reference_context_len",
    ("workload", "acceptance_temperature_slope"): "[acceptance] temperature_slope",
    ("workload", "acceptance_reference_temperature"): "[acceptance] reference_temperature",
}


def _is_int(v) -> bool:
    return not isinstance(v, bool) and isinstance(v, int)


def _is_number(v) -> bool:
    return not isinstance(v, bool) and isinstance(v, (int, float)) and math.isfinite(v)


@dataclass(frozen=True, slots=True, kw_only=True)
class Scenario:
    """One scenario file's content. Field defaults are the defaults of every command (`--help`
    prints them from here). `given` names the top-level keys the file (or the flags) set."""

    name: str = "cli"
    description: str = ""
    hardware: str = "h100-sxm"
    target: str = "llama-3.1-8b"
    drafter: str | None = None
    method: str = "draft_model"
    k: int = 4
    tree_size: int | None = None
    alpha: float | None = None
    tau: float | None = None
    batch_size: int = 1
    context_len: int = 1024
    tp: int = 1
    drafter_tp: int = 1
    attention: str = "fused"
    allow_cross_tokenizer: bool = False
    stack: str | None = None
    stack_version: str | None = None  # the stack's release (specs.regimes: what changes with load, by version)
    target_dtype: str | None = None
    temperature: float = 0.0
    baseline_tokens_per_s: float | None = None
    baseline_step_time_s: float | None = None
    sections: Mapping[str, Mapping] = field(default_factory=dict)
    path: str = ""
    given: frozenset = frozenset()

    def __post_init__(self) -> None:
        where = f"scenario {self.path or self.name!r}"
        for name in ("name", "description", "hardware", "target", "method"):
            if not isinstance(getattr(self, name), str):
                raise field_error(where, name, getattr(self, name), "a string")
        for name in ("drafter", "stack", "target_dtype", "stack_version"):
            v = getattr(self, name)
            if v is not None and not (isinstance(v, str) and v.strip()):
                raise field_error(where, name, v, "a non-empty string (an id or a path)")
        if self.target_dtype is not None and self.target_dtype not in WEIGHT_FORMATS:
            raise field_error(where, "target_dtype", self.target_dtype,
                              f"a weight format: one of {', '.join(WEIGHT_FORMATS)}")
        if not _is_int(self.k) or not 0 <= self.k <= 64:
            raise field_error(where, "k", self.k, "an integer in 0..64 (draft tokens per cycle; a tree's depth)")
        for name in ("batch_size", "tp", "drafter_tp"):
            v = getattr(self, name)
            if not _is_int(v) or v < 1:
                raise field_error(where, name, v, "an integer >= 1")
        if not _is_int(self.context_len) or self.context_len < 0:
            raise field_error(where, "context_len", self.context_len, "an integer >= 0 (tokens in the KV cache)")
        if self.tree_size is not None and (not _is_int(self.tree_size) or self.tree_size < self.k + 1):
            raise field_error(where, "tree_size", self.tree_size,
                              f"an integer >= K + 1 = {self.k + 1} (tree nodes, root included), or absent for a chain")
        if self.alpha is not None and (not _is_number(self.alpha) or not 0.0 <= self.alpha <= 1.0):
            raise field_error(where, "alpha", self.alpha, "an acceptance rate in [0, 1]")
        # the upper bound (K + 1, or Lookahead's n-gram size) depends on the family: resolve checks it
        if self.tau is not None and (not _is_number(self.tau) or self.tau < 1.0):
            raise field_error(where, "tau", self.tau, "mean tokens per cycle >= 1 (the bonus token included)")
        if self.alpha is not None and self.tau is not None:
            raise field_error(where, "tau", self.tau, "either alpha or tau, not both")
        if not _is_number(self.temperature) or self.temperature < 0:
            raise field_error(where, "temperature", self.temperature, "a finite number >= 0")
        if self.attention not in ATTENTION_KERNELS:
            raise field_error(where, "attention", self.attention, "'fused' or 'naive'")
        for name in ("baseline_tokens_per_s", "baseline_step_time_s"):
            v = getattr(self, name)
            if v is not None and (not _is_number(v) or v <= 0):
                raise field_error(where, name, v, "a positive number (a measured plain decoding speed at this batch)")
        if self.baseline_tokens_per_s is not None and self.baseline_step_time_s is not None:
            raise field_error(where, "baseline_step_time_s", self.baseline_step_time_s,
                              "either baseline_tokens_per_s or baseline_step_time_s, not both")
        if not isinstance(self.allow_cross_tokenizer, bool):
            raise field_error(where, "allow_cross_tokenizer", self.allow_cross_tokenizer, "true or false (a boolean)")
        object.__setattr__(self, "sections", MappingProxyType({k: MappingProxyType(dict(v)) if isinstance(v, Mapping)
                                                               else v for k, v in self.sections.items()}))
        object.__setattr__(self, "given", frozenset(self.given))

    def section(self, name: str) -> Mapping:
        if name not in SECTIONS:
            raise SpecError(f"unknown scenario section {name!r}; known: {', '.join(SECTIONS)}")
        return self.sections.get(name, MappingProxyType({}))

    def with_overrides(self, **overrides) -> "Scenario":
        """Replace the fields given; None means keep the scenario's value; "" (or "none") clears an
        optional id (drafter, stack, target_dtype); tree_size = 0 makes a chain. alpha and tau are two forms of one input, so
        giving one clears the other. `sections` entries replace whole tables."""
        given = {k: v for k, v in overrides.items() if v is not None}
        sections = given.pop("sections", None)
        unknown = set(given) - set(SCALAR_KEYS)
        if unknown:
            raise SpecError(f"unknown scenario override(s) {sorted(unknown)}; known: {', '.join(SCALAR_KEYS)}")
        changes = dict(given)
        for key in ("drafter", "stack", "target_dtype"):
            if changes.get(key) in ("", "none"):
                changes[key] = None
        if changes.get("tree_size") == 0:  # 0 clears a tree: a chain
            changes["tree_size"] = None
        if "alpha" in given:
            changes["tau"] = None
        elif "tau" in given:
            changes["alpha"] = None
        new = replace(self, **changes, given=self.given | set(given))
        if sections:
            merged = {k: dict(v) for k, v in self.sections.items()}
            merged.update({k: dict(v) for k, v in sections.items()})
            new = replace(new, sections=merged)
        return new

    def default_of(self, name: str):
        return DEFAULTS[name]

    def to_dict(self) -> dict:
        """The scenario as a file's table: the keys it sets, and its tables."""
        out = {k: getattr(self, k) for k in SCALAR_KEYS if k in self.given or k == "name"}
        out.update({k: _plain(v) for k, v in self.sections.items()})
        return out

    def to_toml(self) -> str:
        return to_toml(self.to_dict())


def _plain(v):
    if isinstance(v, Mapping):
        return {k: _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    return v


SCALAR_KEYS = tuple(f.name for f in fields(Scenario) if f.name not in ("sections", "path", "given"))
DEFAULTS = {f.name: f.default for f in fields(Scenario) if f.name in SCALAR_KEYS}


def scenario_from_dict(raw: dict, *, where: str = "scenario") -> Scenario:
    if not isinstance(raw, dict):
        raise SpecError(f"{where}: expected a table of scenario keys")
    reject_unknown_keys(where, raw, set(SCALAR_KEYS) | set(SECTIONS))
    kwargs = {k: v for k, v in raw.items() if k in SCALAR_KEYS}
    sections = {}
    for name in SECTIONS:
        if name not in raw:
            continue
        value = raw[name]
        if name == "acceptance" and isinstance(value, str):
            value = {"calibrated": value}
        if not isinstance(value, dict):
            raise field_error(where, name, value, f"a [{name}] table")
        for key in value:
            if (name, key) in MOVED:
                raise SpecError(f"{where}: [{name}] {key} has moved to {MOVED[(name, key)]}")
        sections[name] = value
    return Scenario(**kwargs, sections=sections, path=where, given=frozenset(kwargs))


def load_scenario(id_or_path: str | Path) -> Scenario:
    """A shipped scenario by name (`seed-70b-hbm`) or a path to a TOML file."""
    path = resolve("scenarios", id_or_path)
    raw = read_toml(path)
    given_name = "name" in raw
    raw.setdefault("name", path.stem)
    s = scenario_from_dict(raw, where=str(path))
    return s if given_name else replace(s, given=s.given - {"name"})


def list_scenarios() -> list[Scenario]:
    """Every shipped scenario, loaded (for `specsim scenarios list`)."""
    return [load_scenario(i) for i in catalog_ids("scenarios")]


__all__ = ["Scenario", "load_scenario", "list_scenarios", "scenario_from_dict", "SECTIONS", "SCALAR_KEYS",
           "DEFAULTS", "MOVED"]
