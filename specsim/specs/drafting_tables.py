"""A scenario's drafting tables as frozen specs: `[acceptance]` and `[drafter_options]`.

`[acceptance]` is checked whole when the scenario loads, and so is the calibration it names: the
file itself (`specs.calibrations`) and that it was measured on this scenario's target (the same
model, or the same shape and tokenizer in another weight format) with this scenario's drafter
family. `speculation.operating_point.resolve` turns the table into the acceptance model.

`[drafter_options]` belongs to the drafter families (`speculation.families`, which knows each
family's knobs, their defaults and their ranges, and checks them when the scenario is resolved).
What can be said without the families is said here: every option is a boolean, a string or a finite
number, a count is at most 2^31 − 1, a host time per sequence (`*_s_per_*`) is a duration of at most
a second, and a sparse-KV draft budget (sink + window) is no larger than the context the target holds.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping

from ..errors import SpecError, field_error
from . import checks as C

ACCEPTANCE_KEYS = ("by_position", "context_decay_per_token", "reference_context_len", "temperature_slope",
                   "reference_temperature", "n_ranks", "rank_decay", "calibrated", "workload")
# what a calibration gives itself: refused beside [acceptance] calibrated
CALIBRATION_GIVES = ("by_position", "context_decay_per_token", "reference_context_len", "temperature_slope",
                     "reference_temperature")
MAX_POSITIONS = 64  # draft positions (K <= 64)
MAX_CONTEXT_DECAY_PER_TOKEN = 1.0  # e^-1 a token: a rate gone within a few tokens
MAX_TEMPERATURE_SLOPE = 100.0  # e^-100 per unit of temperature
MAX_N_RANKS = 1024  # children a tree node may rank
MAX_HOST_S = 1.0  # a second of host work per sequence per unit (the prompt-lookup estimate is 5 µs)


@dataclass(frozen=True, slots=True, kw_only=True)
class AcceptanceTable:
    """`[acceptance]` as given (None: not given; `speculation.operating_point` applies the defaults)."""

    by_position: tuple | None = None
    context_decay_per_token: float | None = None
    reference_context_len: float | None = None
    temperature_slope: float | None = None
    reference_temperature: float | None = None
    n_ranks: int | None = None
    rank_decay: float | None = None
    calibrated: str | None = None
    workload: str | None = None
    where: str = field(default="[acceptance]", repr=False, compare=False)

    def __post_init__(self) -> None:
        w = self.where
        if self.by_position is not None:
            object.__setattr__(self, "by_position", C.floats(w, "by_position", list(self.by_position), lo=0.0, hi=1.0,
                                                             max_len=MAX_POSITIONS,
                                                             unit="conditional acceptance per draft position"))
        if self.context_decay_per_token is not None:
            C.number(w, "context_decay_per_token", self.context_decay_per_token, lo=0.0, hi=MAX_CONTEXT_DECAY_PER_TOKEN,
                     unit="1/token: acceptance falls as exp(-λ(L - L_ref)); a rate that rose with context without "
                          "bound is no decay")
        if self.reference_context_len is not None:
            C.number(w, "reference_context_len", self.reference_context_len, lo=0.0, hi=float(C.INT32_MAX), unit="tokens")
        if self.temperature_slope is not None:
            C.number(w, "temperature_slope", self.temperature_slope, lo=-MAX_TEMPERATURE_SLOPE, hi=MAX_TEMPERATURE_SLOPE,
                     unit="per unit of temperature")
        if self.reference_temperature is not None:
            C.number(w, "reference_temperature", self.reference_temperature, lo=0.0, hi=100.0)
        if self.n_ranks is not None:
            C.integer(w, "n_ranks", self.n_ranks, lo=1, hi=MAX_N_RANKS, unit="ranks of a tree's per-rank vector")
        if self.rank_decay is not None:
            C.fraction(w, "rank_decay", self.rank_decay)
        if self.calibrated is not None:
            C.text(w, "calibrated", self.calibrated, what="a calibration name such as "
                   "'smollm2-135m/prompt-lookup/code-edit', or a path to a calibration TOML file")
            for key in CALIBRATION_GIVES:
                if getattr(self, key) is not None:
                    raise field_error(w, key, getattr(self, key), "absent: [acceptance] calibrated gives the "
                                      "acceptance and its dependence")
        if self.workload is not None:
            C.text(w, "workload", self.workload, what="a workload name")
            if self.calibrated is None:
                raise field_error(w, "workload", self.workload, "absent unless [acceptance] calibrated names a "
                                  "calibration")

    @classmethod
    def from_table(cls, raw, *, where: str) -> "AcceptanceTable":
        raw = C.fields(where, raw, ACCEPTANCE_KEYS)
        if "by_position" in raw and not isinstance(raw["by_position"], list):
            raise field_error(where, "by_position", raw["by_position"], "a list of conditional rates in [0, 1]")
        return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in raw.items()}, where=where)


@dataclass(frozen=True, slots=True, kw_only=True)
class DrafterOptionsTable:
    """`[drafter_options]` as given: option name -> value, each checked as the module docstring says."""

    options: Mapping = field(default_factory=dict)
    where: str = field(default="[drafter_options]", repr=False, compare=False)

    def __post_init__(self) -> None:
        w = self.where
        for key, v in self.options.items():
            if isinstance(v, (bool, str)):
                continue
            if "_s_per_" in key or key.endswith("_s"):
                C.number(w, key, v, lo=0.0, hi=MAX_HOST_S, unit="seconds")
            elif C.is_int(v):
                C.integer(w, key, v, lo=-C.INT32_MAX, unit="a count")
            elif not C.is_number(v) or abs(v) > C.INT32_MAX:
                raise field_error(w, key, v, "a boolean, a string or a finite number (the drafter family's knob)")
        object.__setattr__(self, "options", MappingProxyType(dict(self.options)))

    @property
    def sparse_budget(self) -> int | None:
        """sparse_sink + sparse_window as far as the table gives them (None when it gives neither as an
        integer; the family's defaults fill the other, and it checks the sum)."""
        given = [int(self.options[k]) for k in ("sparse_sink", "sparse_window") if C.is_int(self.options.get(k))]
        return sum(given) if given else None

    def check_budget(self, max_context: int | None, target: str) -> None:
        """A sparse-KV draft budget that fits in the context the target holds."""
        b = self.sparse_budget
        if b is not None and max_context and b > max_context:
            key = "sparse_window" if C.is_int(self.options.get("sparse_window")) else "sparse_sink"
            raise field_error(self.where, key, self.options[key],
                              f"a draft KV budget (sink + window) no larger than the context the target {target!r} "
                              f"holds ({max_context} tokens); this one is {b}")

    @classmethod
    def from_table(cls, raw, *, where: str) -> "DrafterOptionsTable":
        raw = C.table(where, "drafter_options", raw)
        return cls(options=dict(raw), where=where)


def same_model(a, b) -> bool:
    """Two ModelSpecs of one model: the same id, or the same shape and tokenizer in another weight format."""
    if a.id == b.id:
        return True
    shape = ("tokenizer", "n_layers", "hidden_size", "n_heads", "n_kv_heads", "head_dim", "ffn_size", "vocab_size")
    return all(getattr(a, s) == getattr(b, s) for s in shape)


def check_calibration_matches(table: AcceptanceTable, *, target: str, method: str, drafter: str | None) -> object:
    """Load the calibration the table names and refuse it unless it was measured with this scenario's
    drafter family on this scenario's target (see the module docstring). Returns the calibration."""
    from .calibrations import load_calibration
    from .models import load_model

    w = table.where
    cal = load_calibration(table.calibrated)
    if method != "none" and cal.method != method:
        raise field_error(w, "calibrated", table.calibrated,
                          f"a calibration of method {method!r}, this scenario's; {cal.name!r} was measured with "
                          f"{cal.method!r} ({cal.drafter})")
    if cal.target != target:
        mine = load_model(target)
        try:
            theirs = load_model(cal.target)
        except SpecError:
            theirs = None
        if theirs is None or not same_model(mine, theirs):
            raise field_error(w, "calibrated", table.calibrated,
                              f"a calibration of target {target!r} (the same model, or its shape and tokenizer in "
                              f"another weight format); {cal.name!r} was measured on {cal.target!r}")
    if method == "draft_model" and drafter is not None and cal.drafter != drafter:
        try:
            theirs = load_model(cal.drafter)
        except SpecError:
            theirs = None  # a decoder's or a stack's drafter name, not a catalog model: nothing to compare
        if theirs is not None and not same_model(load_model(drafter), theirs):
            raise field_error(w, "calibrated", table.calibrated, f"a calibration of drafter {drafter!r}; {cal.name!r} "
                              f"was measured with {cal.drafter!r}")
    return cal


__all__ = ["AcceptanceTable", "DrafterOptionsTable", "ACCEPTANCE_KEYS", "CALIBRATION_GIVES", "same_model",
           "check_calibration_matches"]
