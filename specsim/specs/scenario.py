"""A scenario file as typed config: what to predict, on what, under which load.

Top-level keys describe one operating point (hardware, target, drafter, K, acceptance, batch,
context); `scenarios/README.md` documents every key with its unit and default. Tables:
`[drafter_options]` (the drafter family's knobs), `[acceptance]` (per-position rates and how
acceptance moves with context and temperature), and the tables of the analyses that read them:
`[sweep]`, `[threshold]`, `[workload]`, `[engine]`, `[fleet]`, `[policies]`, `[slo]`. Unknown keys
and tables are refused; keys that moved are refused with their new place.

Every table is checked when the scenario is made (a file loaded, a dict, a replace or an override),
whatever command then reads it, and kept as a frozen spec in `Scenario.tables` (`ScenarioTables`:
specs.serving_tables, specs.analysis_tables, specs.drafting_tables), with the rules that join
tables and top-level keys (a band inside the batch limit, a calibration of this target and method,
one acceptance input). `Scenario.sections` keeps the tables as written.

A Scenario is only the file's content. `specsim.speculation.operating_point.resolve` turns it into
the operating point every analysis consumes; nothing else reads a Scenario's fields.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from types import MappingProxyType
from typing import Mapping

from ..errors import SpecError, field_error, reject_unknown_keys
from . import checks as C
from .analysis_tables import ATTENTION_KERNELS, MAX_BATCH, MAX_TEMPERATURE, MAX_TREE_NODES, SweepTable, ThresholdTable
from .catalog import catalog_ids, read_toml, resolve, to_toml
from .drafting_tables import AcceptanceTable, DrafterOptionsTable, check_calibration_matches
from .models import KV_DTYPES, WEIGHT_FORMATS
from .regimes import check_version
from .serving_tables import EngineTable, FleetTable, PolicyTable, SloTable, WorkloadTable, policies_from_table

SECTIONS = ("drafter_options", "acceptance", "sweep", "threshold", "workload", "engine", "policies", "slo", "fleet")
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
    ("threshold", "alpha"): "the top-level key alpha (the acceptance grid is [threshold] alphas)",
    ("threshold", "context_len"): "the top-level key context_len",
    ("threshold", "k"): "the top-level key k (and [threshold] k_max for the K candidates)",
}
MAX_TP = 4096  # devices in one group


# what prices a pass (cost.pricing.source_for): measured operator tables where they cover the part, stack and
# model (auto), the tables or a refusal (measured), or the roofline with the part's fitted curves (roofline)
COST_SOURCES = ("auto", "measured", "roofline")


@dataclass(frozen=True, slots=True, kw_only=True)
class ScenarioTables:
    """A scenario's tables as checked specs (a table the file does not have: its defaults, or None
    where its absence means something: no [workload], no [sweep], no [policies])."""

    drafter_options: DrafterOptionsTable = field(default_factory=DrafterOptionsTable)
    acceptance: AcceptanceTable = field(default_factory=AcceptanceTable)
    sweep: SweepTable | None = None
    threshold: ThresholdTable = field(default_factory=ThresholdTable)
    workload: WorkloadTable | None = None
    engine: EngineTable = field(default_factory=EngineTable)
    fleet: FleetTable = field(default_factory=FleetTable)
    policies: tuple[PolicyTable, ...] | None = None
    slo: SloTable = field(default_factory=SloTable)


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
    kv_cache_dtype: str | None = None  # the KV cache's dtype when not the target file's (bf16, fp8, ...)
    cost_source: str = "auto"  # what prices passes: auto (measured tables where they cover it), measured, roofline
    temperature: float = 0.0
    baseline_tokens_per_s: float | None = None
    baseline_step_time_s: float | None = None
    sections: Mapping[str, Mapping] = field(default_factory=dict)
    path: str = ""
    given: frozenset = frozenset()
    tables: ScenarioTables = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        where = f"scenario {self.path or self.name!r}"
        for name in ("name", "description"):
            if not isinstance(getattr(self, name), str):
                raise field_error(where, name, getattr(self, name), "a string")
        for name in ("hardware", "target", "method"):
            C.text(where, name, getattr(self, name), what="a non-empty string (an id or a path)")
        for name in ("drafter", "stack", "target_dtype"):
            if getattr(self, name) is not None:
                C.text(where, name, getattr(self, name), what="a non-empty string (an id or a path)")
        if self.stack_version is not None:  # a release of the stack, read by its load regimes (specs.regimes)
            if self.stack is None:
                raise field_error(where, "stack_version", self.stack_version, "a stack to be the version of: set "
                                  "`stack` too, or leave stack_version out")
            check_version(where, "stack_version", self.stack_version)
        if self.target_dtype is not None and self.target_dtype not in WEIGHT_FORMATS:
            raise field_error(where, "target_dtype", self.target_dtype,
                              f"a weight format: one of {', '.join(WEIGHT_FORMATS)}")
        if self.kv_cache_dtype is not None and self.kv_cache_dtype not in KV_DTYPES:
            raise field_error(where, "kv_cache_dtype", self.kv_cache_dtype,
                              f"a KV-cache dtype: one of {', '.join(sorted(KV_DTYPES))}")
        C.choice(where, "cost_source", self.cost_source, COST_SOURCES)
        C.integer(where, "k", self.k, lo=0, hi=64, unit="draft tokens per cycle; a tree's depth")
        C.integer(where, "batch_size", self.batch_size, lo=1, hi=MAX_BATCH, unit="sequences")
        for name in ("tp", "drafter_tp"):
            C.integer(where, name, getattr(self, name), lo=1, hi=MAX_TP, unit="devices")
        C.integer(where, "context_len", self.context_len, lo=0, unit="tokens in the KV cache")
        if self.tree_size is not None:
            if not C.is_int(self.tree_size) or self.tree_size < self.k + 1:
                raise field_error(where, "tree_size", self.tree_size, f"an integer >= K + 1 = {self.k + 1} (tree nodes, "
                                  f"root included), or absent for a chain")
            C.integer(where, "tree_size", self.tree_size, hi=MAX_TREE_NODES, unit="tree nodes: a tree's expected "
                      "accepted length takes time growing as the square of its nodes")
        if self.alpha is not None:
            C.fraction(where, "alpha", self.alpha, unit="an acceptance rate")
        # the upper bound (K + 1, or Lookahead's n-gram size) depends on the family: resolve checks it
        if self.tau is not None:
            C.number(where, "tau", self.tau, lo=1.0, unit="mean tokens per cycle, the bonus token included")
        if self.alpha is not None and self.tau is not None:
            raise field_error(where, "tau", self.tau, "either alpha or tau, not both")
        C.number(where, "temperature", self.temperature, lo=0.0, hi=MAX_TEMPERATURE)
        C.choice(where, "attention", self.attention, ATTENTION_KERNELS)
        for name in ("baseline_tokens_per_s", "baseline_step_time_s"):
            if getattr(self, name) is not None:
                C.number(where, name, getattr(self, name), lo=0.0, lo_open=True,
                         unit="a measured plain decoding speed at this batch")
        if self.baseline_tokens_per_s is not None and self.baseline_step_time_s is not None:
            raise field_error(where, "baseline_step_time_s", self.baseline_step_time_s,
                              "either baseline_tokens_per_s or baseline_step_time_s, not both")
        C.boolean(where, "allow_cross_tokenizer", self.allow_cross_tokenizer)
        sections = {}
        for name, v in self.sections.items():
            if name not in SECTIONS:
                raise SpecError(f"{where}: unknown table [{name}]; known: {', '.join(SECTIONS)}")
            if name == "acceptance" and isinstance(v, str):
                v = {"calibrated": v}  # acceptance = "calibrated:NAME" at the top level
            if not isinstance(v, Mapping):
                raise field_error(where, name, v, f"a [{name}] table")
            for key in v:
                if (name, key) in MOVED:
                    raise SpecError(f"{where}: [{name}] {key} has moved to {MOVED[(name, key)]}")
            sections[name] = v
        object.__setattr__(self, "sections", MappingProxyType({k: MappingProxyType(dict(v)) for k, v in sections.items()}))
        object.__setattr__(self, "given", frozenset(self.given))
        object.__setattr__(self, "tables", _tables(self, where))

    def section(self, name: str) -> Mapping:
        if name not in SECTIONS:
            raise SpecError(f"unknown scenario section {name!r}; known: {', '.join(SECTIONS)}")
        return self.sections.get(name, MappingProxyType({}))

    def with_overrides(self, **overrides) -> "Scenario":
        """Replace the fields given; None means keep the scenario's value; "" (or "none") clears an
        optional id (drafter, stack, target_dtype, stack_version); tree_size = 0 makes a chain. alpha and tau are two forms of one input, so
        giving one clears the other. `sections` entries replace whole tables."""
        given = {k: v for k, v in overrides.items() if v is not None}
        sections = given.pop("sections", None)
        unknown = set(given) - set(SCALAR_KEYS)
        if unknown:
            raise SpecError(f"unknown scenario override(s) {sorted(unknown)}; known: {', '.join(SCALAR_KEYS)}")
        changes = dict(given)
        for key in ("drafter", "stack", "target_dtype", "kv_cache_dtype", "stack_version"):
            if changes.get(key) in ("", "none"):
                changes[key] = None
        if changes.get("tree_size") == 0:  # 0 clears a tree: a chain
            changes["tree_size"] = None
        if "alpha" in given:
            changes["tau"] = None
        elif "tau" in given:
            changes["alpha"] = None
        if sections:
            merged = {k: dict(v) for k, v in self.sections.items()}
            merged.update({k: v if isinstance(v, str) else dict(v) for k, v in sections.items()})
            changes["sections"] = merged
        return replace(self, **changes, given=self.given | set(given))

    def to_dict(self) -> dict:
        """The scenario as a file's table: the keys it sets, and its tables."""
        out = {k: getattr(self, k) for k in SCALAR_KEYS if k in self.given or k == "name"}
        out.update({k: _plain(v) for k, v in self.sections.items()})
        return out

    def to_toml(self) -> str:
        return to_toml(self.to_dict())


def _tables(s: Scenario, where: str) -> ScenarioTables:
    """Each table as its spec, then the rules that join tables and top-level keys."""
    sec = s.sections
    kw: dict = {}
    makers = {"drafter_options": DrafterOptionsTable, "acceptance": AcceptanceTable, "sweep": SweepTable,
              "threshold": ThresholdTable, "workload": WorkloadTable, "engine": EngineTable, "fleet": FleetTable,
              "slo": SloTable}
    for name, maker in makers.items():
        if name in sec:
            kw[name] = maker.from_table(sec[name], where=f"{where} [{name}]")
    if "policies" in sec:
        kw["policies"] = policies_from_table(sec["policies"], where=f"{where} [policies]")
    t = ScenarioTables(**kw)
    acc = t.acceptance
    if acc.by_position is not None and (s.alpha is not None or s.tau is not None):
        raise field_error(acc.where, "by_position", list(acc.by_position),
                          "one acceptance input: alpha, tau or [acceptance] by_position")
    if acc.calibrated is not None:
        for key in ("alpha", "tau"):
            if getattr(s, key) is not None:
                raise field_error(acc.where, key, getattr(s, key),
                                  "absent: [acceptance] calibrated gives the acceptance and its dependence")
        check_calibration_matches(acc, target=s.target, method=s.method, drafter=s.drafter)
    if t.drafter_options.sparse_budget is not None:
        from .models import load_model

        t.drafter_options.check_budget(load_model(s.target).max_context, s.target)
    if s.method == "draft_model" and s.drafter is not None and s.drafter == s.target:
        raise field_error(where, "drafter", s.drafter, "a draft model other than the target itself (drafting with "
                          "the target costs a target step per draft token: method = 'none' is the same tokens sooner)")
    if t.policies:
        limit = t.engine.max_num_seqs
        for p in t.policies:
            pw = f"{p.where} {p.name}"
            if p.kind == "k_by_batch_band" and p.params["bands"][-1][0] > limit:
                bad = next(b for b in p.params["bands"] if b[0] > limit)
                raise field_error(pw, "bands", list(bad), f"bands inside the batch limit: min_batch <= [engine] "
                                  f"max_num_seqs = {limit} (a band above it never applies)")
            if p.kind == "disable_by_batch_size" and p.params["threshold"] > limit:
                raise field_error(pw, "threshold", p.params["threshold"], f"at most [engine] max_num_seqs = {limit} "
                                  f"(the running batch never reaches a larger threshold: the gate would never trip)")
    return t


def _plain(v):
    if isinstance(v, Mapping):
        return {k: _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    return v


SCALAR_KEYS = tuple(f.name for f in fields(Scenario) if f.name not in ("sections", "path", "given", "tables"))
DEFAULTS = {f.name: f.default for f in fields(Scenario) if f.name in SCALAR_KEYS}


def scenario_from_dict(raw: dict, *, where: str = "scenario") -> Scenario:
    if not isinstance(raw, dict):
        raise SpecError(f"{where}: expected a table of scenario keys")
    reject_unknown_keys(where, raw, set(SCALAR_KEYS) | set(SECTIONS))
    kwargs = {k: v for k, v in raw.items() if k in SCALAR_KEYS}
    sections = {name: raw[name] for name in SECTIONS if name in raw}
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
