"""Acceptance calibrations: measured acceptance of one target, drafter and workload, with its
intervals and what it covered, as a scenario names it.

A calibration is a TOML file written by `specsim calibrate acceptance` (the reference decoder's runs)
or `specsim calibrate acceptance --import` (a serving stack's logs or metrics). Shipped ones live
under the data folder, `calibrations/<target>__<drafter>__<workload>.toml`, and a scenario names one
as target/drafter/workload:

    [acceptance]
    calibrated = "smollm2-135m/prompt-lookup/code-edit"

(or, at the top level, `acceptance = "calibrated:smollm2-135m/prompt-lookup/code-edit"`). A path to
a file of the same format works too. Every figure carries its interval at `level` (likelihood
ratio, see `speculation.acceptance`), and `[coverage]` says what the runs covered, so a query
outside it (another context length, temperature, drafter, workload or draft length) is flagged.

File layout (units in the key names; `command` says what made it):

    name, target, drafter (the decoder's or stack's name), method (the drafter family), workload,
    command, level
    [reference]  context_len, temperature, k              where the rates below hold
    [iid]        alpha, ci_low, ci_high, n_cycles (>= 1; absent: not counted), n_trials (optional: binomial_ci, n_prompts,
                 between_prompt_sd_logit: the interval is the wider of the binomial and between-prompt ones)
    [conditional] rates, ci_low, ci_high                   per draft position (optional)
    [rank]       rank_acceptance, ci_low, ci_high         a tree's per-rank vector (optional)
    [dependence] context_decay_per_token, context_decay_ci, temperature_slope, temperature_slope_ci
                 (applied); within_prompt_context_slope, within_prompt_context_slope_ci (reported only)
    [coverage]   context_len = [min, max], temperatures, ks, workloads, drafters
    runs = [{...}, ...]                                    one row per measured configuration
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import SpecError, field_error, reject_unknown_keys
from . import checks as C
from .catalog import read_toml
from .data import data_dir

PREFIX = "calibrated:"
FOLDER = "calibrations"
_TOP = {"name", "target", "drafter", "method", "workload", "command", "level", "notes", "reference", "iid",
        "conditional", "rank", "dependence", "coverage", "runs", "source"}


@dataclass(frozen=True, slots=True, kw_only=True)
class AcceptanceCalibration:
    """One calibration file, loaded and checked. Rates are fractions in [0, 1]; `alpha` is the
    i.i.d. per-token acceptance at the reference context and temperature, [alpha_low, alpha_high]
    its interval at `level`; `conditional` (per position) and `rank_acceptance` (a tree's per-rank
    vector) likewise, each with its own bounds; the dependence on context (1/token) and temperature
    follows `speculation.acceptance.AcceptanceModel` with their intervals."""

    name: str
    path: str
    target: str
    drafter: str
    method: str
    workload: str
    command: str
    level: float
    reference_context_len: float
    reference_temperature: float
    k: int
    alpha: float
    alpha_low: float
    alpha_high: float
    n_cycles: int
    conditional: tuple | None = None
    conditional_low: tuple | None = None
    conditional_high: tuple | None = None
    rank_acceptance: tuple | None = None
    rank_low: tuple | None = None
    rank_high: tuple | None = None
    context_decay_per_token: float = 0.0
    context_decay_ci: tuple = (0.0, 0.0)
    temperature_slope: float = 0.0
    temperature_slope_ci: tuple = (0.0, 0.0)
    # how the rate moved as each response grew (1/token): a diagnostic of the runs, not applied to
    # other context lengths (see calibration.acceptance_runs.calibration_table)
    within_prompt_context_slope: float | None = None
    within_prompt_context_slope_ci: tuple | None = None
    context_range: tuple = (0.0, math.inf)
    temperatures: tuple = ()
    ks: tuple = ()
    workloads: tuple = ()
    drafters: tuple = ()
    runs: tuple = field(default=(), repr=False)
    notes: str = ""

    def coverage_warnings(self, *, context_len=None, temperature=None, method=None, workload=None, k=None,
                          target=None) -> list[str]:
        """What in the query lies outside what the calibration's runs covered (empty: inside)."""
        out = []
        lo, hi = self.context_range
        if context_len is not None and not lo <= float(context_len) <= hi:
            out.append(f"context {float(context_len):g} tokens lies outside the calibrated {lo:g}–{hi:g}")
        if temperature is not None and self.temperatures:
            if not any(abs(float(temperature) - t) <= 1e-9 for t in self.temperatures):
                shown = ", ".join(f"{t:g}" for t in self.temperatures)
                where = ("between" if min(self.temperatures) < float(temperature) < max(self.temperatures)
                         else "outside")
                out.append(f"temperature {float(temperature):g} was not measured ({where} the calibrated {shown})")
        if method is not None and method != self.method:
            out.append(f"drafter family {method!r} is not the calibrated {self.method!r} ({self.drafter})")
        if workload is not None and self.workloads and workload not in self.workloads:
            out.append(f"workload {workload!r} is not the calibrated {', '.join(self.workloads)}")
        if k is not None and self.ks and not min(self.ks) <= int(k) <= max(self.ks):
            out.append(f"K = {int(k)} lies outside the calibrated K = {min(self.ks)}–{max(self.ks)}")
        if target is not None and target != self.target:
            out.append(f"target {target!r} is not the calibrated {self.target!r}")
        return out

    def describe(self) -> str:
        return (f"{self.name}: α = {self.alpha:.3f} [{self.alpha_low:.3f}, {self.alpha_high:.3f}] ({self.level:.0%}, "
                f"{f'{self.n_cycles} cycles' if self.n_cycles else 'cycles not counted'}) at context {self.reference_context_len:g}, temperature "
                f"{self.reference_temperature:g}; {self.drafter} on {self.workload}")


def calibrations_dir() -> Path:
    """The shipped calibrations: `calibrations/` under the data folder."""
    return data_dir() / FOLDER


def calibration_file_name(name: str) -> str:
    """`target/drafter/workload` -> the file name it is shipped under (one flat folder)."""
    return name.replace("/", "__") + ".toml"


def list_calibrations() -> list[str]:
    root = calibrations_dir()
    if not root.is_dir():
        return []
    return sorted(p.stem.replace("__", "/") for p in root.glob("*.toml"))


def calibration_path(name: str) -> Path:
    """A calibration's file from its name (`target/drafter/workload`, an optional 'calibrated:'
    prefix) or a path to a TOML file."""
    if not isinstance(name, str) or not name.strip():
        raise field_error("[acceptance]", "calibrated", name, "a calibration name such as "
                          "'smollm2-135m/prompt-lookup/code-edit', or a path to a calibration TOML file")
    text = name.strip()
    text = text[len(PREFIX):] if text.startswith(PREFIX) else text
    if text.endswith(".toml"):
        p = Path(text).expanduser()
        if not p.is_file():
            raise SpecError(f"calibration file {text!r} not found")
        return p
    p = calibrations_dir() / calibration_file_name(text)
    if not p.is_file():
        known = list_calibrations()
        raise SpecError(f"calibration {text!r} not found under {calibrations_dir()}; shipped: "
                        f"{', '.join(known) or 'none'} (or give a path to a calibration TOML file)")
    return p


def _num(where: str, key: str, v, lo: float | None = None, hi: float | None = None) -> float:
    return C.number(where, key, v, lo=lo, hi=hi)


def _rates(where: str, key: str, v, n: int | None = None) -> tuple:
    return C.floats(where, key, v, lo=0.0, hi=1.0, unit="fractions", min_len=n or 1, max_len=n or 64)


def _pair(where: str, key: str, v) -> tuple:
    a, b = C.floats(where, key, v, min_len=2, max_len=2, unit="[low, high]")
    if a > b:
        raise field_error(where, key, v, "[low, high] with low <= high")
    return a, b


def _bracketed(where: str, key: str, estimate, low, high) -> None:
    """An estimate inside its interval: low <= estimate <= high (each position of a list)."""
    for i, (e, lo, hi) in enumerate(zip(*(x if isinstance(x, tuple) else (x,) for x in (estimate, low, high)))):
        if not lo <= e <= hi:
            at = f" (position {i + 1})" if isinstance(estimate, tuple) else ""
            raise field_error(where, key, e, f"inside its interval [{lo:g}, {hi:g}]{at}: a lower bound above its "
                              f"estimate, or an upper one below it, is no interval")


def calibration_from_dict(raw: dict, *, where: str, name: str = "") -> AcceptanceCalibration:
    reject_unknown_keys(where, raw, _TOP)
    for key in ("target", "drafter", "method", "workload", "command", "reference", "iid"):
        if key not in raw:
            raise field_error(where, key, None, "a value (required key)")
    for key in ("target", "drafter", "method", "workload", "command"):
        if not isinstance(raw[key], str) or not raw[key]:
            raise field_error(where, key, raw[key], "a non-empty string")
    ref, iid = raw["reference"], raw["iid"]
    if not isinstance(ref, dict) or not isinstance(iid, dict):
        raise field_error(where, "reference", ref, "[reference] and [iid] tables")
    reject_unknown_keys(f"{where} [reference]", ref, {"context_len", "temperature", "k"})
    reject_unknown_keys(f"{where} [iid]", iid, {"alpha", "ci_low", "ci_high", "n_cycles", "n_trials", "binomial_ci",
                                                "n_prompts", "between_prompt_sd_logit"})
    level = C.fraction(where, "level", raw.get("level", 0.95), lo_open=True, hi_open=True)
    k = C.integer(f"{where} [reference]", "k", ref.get("k"), lo=1, hi=64, unit="drafts per cycle of the runs")
    alpha = _num(f"{where} [iid]", "alpha", iid.get("alpha"), 0.0, 1.0)
    lo = _num(f"{where} [iid]", "ci_low", iid.get("ci_low"), 0.0, 1.0)
    hi = _num(f"{where} [iid]", "ci_high", iid.get("ci_high"), 0.0, 1.0)
    _bracketed(f"{where} [iid]", "alpha", alpha, lo, hi)
    kw: dict = {}
    cond = raw.get("conditional")
    if cond is not None:
        w = f"{where} [conditional]"
        if not isinstance(cond, dict):
            raise field_error(where, "conditional", cond, "a [conditional] table")
        reject_unknown_keys(w, cond, {"rates", "ci_low", "ci_high"})
        rates = _rates(w, "rates", cond.get("rates"))
        kw.update(conditional=rates, conditional_low=_rates(w, "ci_low", cond.get("ci_low"), len(rates)),
                  conditional_high=_rates(w, "ci_high", cond.get("ci_high"), len(rates)))
        _bracketed(w, "rates", rates, kw["conditional_low"], kw["conditional_high"])
    rank = raw.get("rank")
    if rank is not None:
        w = f"{where} [rank]"
        if not isinstance(rank, dict):
            raise field_error(where, "rank", rank, "a [rank] table")
        reject_unknown_keys(w, rank, {"rank_acceptance", "ci_low", "ci_high"})
        p = _rates(w, "rank_acceptance", rank.get("rank_acceptance"))
        if sum(p) > 1 + 1e-9:
            raise field_error(w, "rank_acceptance", list(p), "joint per-rank probabilities (sum <= 1)")
        kw.update(rank_acceptance=p, rank_low=_rates(w, "ci_low", rank.get("ci_low"), len(p)),
                  rank_high=_rates(w, "ci_high", rank.get("ci_high"), len(p)))
        _bracketed(w, "rank_acceptance", p, kw["rank_low"], kw["rank_high"])
    dep = raw.get("dependence", {})
    if not isinstance(dep, dict):
        raise field_error(where, "dependence", dep, "a [dependence] table")
    w = f"{where} [dependence]"
    reject_unknown_keys(w, dep, {"context_decay_per_token", "context_decay_ci", "temperature_slope",
                                 "temperature_slope_ci", "within_prompt_context_slope",
                                 "within_prompt_context_slope_ci"})
    if "within_prompt_context_slope" in dep:
        kw["within_prompt_context_slope"] = _num(w, "within_prompt_context_slope", dep["within_prompt_context_slope"])
        kw["within_prompt_context_slope_ci"] = _pair(w, "within_prompt_context_slope_ci",
                                                     dep.get("within_prompt_context_slope_ci"))
        _bracketed(w, "within_prompt_context_slope", kw["within_prompt_context_slope"],
                   *kw["within_prompt_context_slope_ci"])
    if "context_decay_per_token" in dep:
        kw["context_decay_per_token"] = _num(w, "context_decay_per_token", dep["context_decay_per_token"], -1.0, 1.0)
        kw["context_decay_ci"] = _pair(w, "context_decay_ci", dep.get("context_decay_ci"))
        _bracketed(w, "context_decay_per_token", kw["context_decay_per_token"], *kw["context_decay_ci"])
    if "temperature_slope" in dep:
        kw["temperature_slope"] = _num(w, "temperature_slope", dep["temperature_slope"], -100.0, 100.0)
        kw["temperature_slope_ci"] = _pair(w, "temperature_slope_ci", dep.get("temperature_slope_ci"))
        _bracketed(w, "temperature_slope", kw["temperature_slope"], *kw["temperature_slope_ci"])
    cov = raw.get("coverage", {})
    if not isinstance(cov, dict):
        raise field_error(where, "coverage", cov, "a [coverage] table")
    w = f"{where} [coverage]"
    reject_unknown_keys(w, cov, {"context_len", "temperatures", "ks", "workloads", "drafters"})
    if "context_len" in cov:
        kw["context_range"] = _pair(w, "context_len", cov["context_len"])
        if kw["context_range"][0] < 0:
            raise field_error(w, "context_len", cov["context_len"], "[min, max] tokens, min >= 0")
    if "temperatures" in cov:
        kw["temperatures"] = C.floats(w, "temperatures", cov["temperatures"], lo=0.0, hi=100.0, unit="temperatures run")
    if "ks" in cov:
        kw["ks"] = C.integers(w, "ks", cov["ks"], lo=1, hi=64, unit="draft lengths run")
    for key in ("workloads", "drafters"):
        if key in cov:
            kw[key] = C.texts(w, key, cov[key], what=f"{key} run (names)")
    runs = raw.get("runs", [])
    if not isinstance(runs, list) or not all(isinstance(r, dict) for r in runs):
        raise field_error(where, "runs", runs, "a list of tables, one per measured configuration")
    # absent: the source counts no cycles (SGLang's log prints accept lengths only); 0 measured nothing
    n_cycles = 0 if "n_cycles" not in iid else C.integer(
        f"{where} [iid]", "n_cycles", iid["n_cycles"], lo=1,
        unit="cycles the rate was measured over: a calibration of none measured nothing (leave it out when uncounted)")
    if "n_trials" in iid:
        C.integer(f"{where} [iid]", "n_trials", iid["n_trials"], lo=1, unit="drafted positions tried")
    return AcceptanceCalibration(
        name=name or str(raw.get("name", "")), path=where, target=raw["target"], drafter=raw["drafter"],
        method=raw["method"], workload=raw["workload"], command=raw["command"], level=level,
        reference_context_len=_num(f"{where} [reference]", "context_len", ref.get("context_len"), 0.0, float(C.INT32_MAX)),
        reference_temperature=_num(f"{where} [reference]", "temperature", ref.get("temperature"), 0.0, 100.0),
        k=k, alpha=alpha, alpha_low=lo, alpha_high=hi, n_cycles=n_cycles, runs=tuple(runs),
        notes=str(raw.get("notes", "")), **kw)


def load_calibration(name: str) -> AcceptanceCalibration:
    """A calibration by name (see `calibration_path`), loaded and checked."""
    path = calibration_path(name)
    text = name.strip()
    text = text[len(PREFIX):] if text.startswith(PREFIX) else text
    raw = read_toml(path)
    return calibration_from_dict(raw, where=str(path), name=str(raw.get("name") or text))


__all__ = ["AcceptanceCalibration", "load_calibration", "calibration_from_dict", "calibration_path", "calibration_file_name",
           "calibrations_dir", "list_calibrations", "PREFIX"]
