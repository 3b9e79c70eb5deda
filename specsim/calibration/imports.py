"""Acceptance from what operators already have: serving stacks' log lines and metrics, turned into
counts and fitted with `speculation.acceptance`'s estimators (nothing is re-fitted here).

Formats (each read from the stack's own source, at the commits named; numbers are per line):

- vLLM V0 (`vllm/spec_decode/metrics.py`, `vllm/engine/metrics.py`), cumulative since start:
  "Speculative metrics: Draft acceptance rate: 0.642, System efficiency: 0.598, Number of speculative
  tokens: 3, Number of accepted tokens: 8547, Number of draft tokens: 13311, Number of emitted tokens:
  10616." Drafts n = draft tokens / K. V0 counts every drafted position the rejection sampler accepts,
  whether or not the positions before it were (its own NOTE says so), so under the i.i.d. model each
  drafted position is one Bernoulli(α) trial and α̂ = accepted / draft tokens; the emitted tokens are
  Σ (A + 1) over drafts, so τ = emitted / n, the check of that assumption. A log holding several runs
  (a counter that falls starts a new one) adds each run's last line.
- vLLM V1 (`vllm/v1/spec_decode/metrics.py`, `SpecDecodingLogging.log`), one interval per line:
  "SpecDecoding metrics: Mean acceptance length: 2.73, Accepted throughput: 12.40 tokens/s, Drafted
  throughput: 15.10 tokens/s, Accepted: 124 tokens, Drafted: 151 tokens, Per-position acceptance rate:
  0.890, 0.760, 0.610, Avg Draft acceptance rate: 82.1%" (older versions put "Draft acceptance rate"
  first and leave out the throughputs). The drafts of an interval are not printed: n is the one whole
  number every printed figure agrees with (τ = 1 + accepted / n to two decimals, each rate·n a whole
  count to three decimals, the counts summing to accepted); rate i is num_accepted_tokens_per_pos[i]
  / n, the unconditional P(A > i). Intervals add up.
- vLLM Prometheus exposition (`SpecDecodingProm`): counters `vllm:spec_decode_num_drafts_total`,
  `vllm:spec_decode_num_draft_tokens_total`, `vllm:spec_decode_num_accepted_tokens_total` and
  `vllm:spec_decode_num_accepted_tokens_per_pos_total{position="i"}`, summed over engines (other
  label sets); `_created` samples are skipped.
- SGLang (`python/sglang/srt/managers/scheduler.py`, `log_decode_stats`): "Decode batch. #running-req:
  4, #token: 1234, token usage: 0.01, accept len: 3.21, [accept rate: 0.55, ]gen throughput (token/s):
  ..." — accept len is accepted tokens (bonus included) per request-cycle over the interval, weighted
  here by #running-req. K is not printed: give it.
- llama.cpp (`examples/speculative*/speculative*.cpp`, the end-of-run summary): "n_draft = 16",
  "n_predict = 128", "n_drafted = 90", "n_accept = 70", "accept = 77.778%". Cycles ≈ n_predict −
  n_accept (each cycle emits its accepted drafts and one token of the target's own).

A line that carries a format's marker but does not parse, or whose figures disagree, is an
InputError naming the file and the line.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..errors import InputError, SpecError, field_error
from ..speculation.acceptance import (AcceptanceFit, _lr_interval, alpha_from_tau, fit_vllm_counters,
                                      tokens_per_cycle_iid)

FORMATS = ("vllm-v0-log", "vllm-v1-log", "vllm-prometheus", "sglang-log", "llama.cpp")


@dataclass(frozen=True, slots=True, kw_only=True)
class ImportedAcceptance:
    """What a stack's output says about acceptance, and the fits.

    n_drafts: cycles that drafted; n_draft_tokens: drafted tokens; n_accepted: accepted drafts on the
    accepted prefix (τ − 1 per cycle); per_position: drafts whose position i was accepted (prefix),
    when the format gives it; tau: mean tokens per cycle, bonus included. iid: the i.i.d. α with its
    interval (nan where the format cannot give one); conditional: the per-position rates (vLLM V1 and
    Prometheus only)."""

    format: str
    k: int
    n_drafts: float
    n_draft_tokens: float
    n_accepted: float
    tau: float
    iid: AcceptanceFit
    conditional: AcceptanceFit | None = None
    per_position: tuple | None = None
    n_lines: int = 0
    notes: tuple = field(default=())

    def to_dict(self) -> dict:
        def fit(f):
            if f is None:
                return None
            val = lambda x: [float(v) for v in np.atleast_1d(x)] if np.ndim(x) else float(x)  # noqa: E731
            return {"parameter": f.parameter, "estimate": val(f.estimate), "ci_low": val(f.ci_low),
                    "ci_high": val(f.ci_high), "level": f.level, "n_obs": f.n_obs, "method": f.method}
        return {"format": self.format, "k": self.k, "n_drafts": self.n_drafts, "n_draft_tokens": self.n_draft_tokens,
                "n_accepted": self.n_accepted, "tau": self.tau, "per_position": list(self.per_position or []) or None,
                "iid": fit(self.iid), "conditional": fit(self.conditional), "n_lines": self.n_lines,
                "notes": list(self.notes)}


def _bad(where: str, lineno: int, line: str, expected: str) -> InputError:
    shown = line.strip()
    shown = shown if len(shown) <= 160 else shown[:157] + "..."
    return InputError(f"{where}:{lineno}: {shown!r}: expected {expected}")


_NUM = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?"


def _field(text: str, label: str, pattern: str = _NUM) -> str | None:
    m = re.search(re.escape(label) + r"\s*:\s*(" + pattern + r")", text)
    return m.group(1) if m else None


# ---- vLLM V0 ------------------------------------------------------------------------------------

V0_MARK = "Speculative metrics:"


def read_vllm_v0_log(text: str, *, where: str = "log") -> ImportedAcceptance:
    rows = []  # (k, accepted, draft, emitted)
    for i, line in enumerate(text.splitlines(), 1):
        if V0_MARK not in line:
            continue
        body = line[line.index(V0_MARK):]
        vals = [_field(body, lab, r"\S+?(?=[.,]?(?:\s|$))") for lab in ("Number of speculative tokens", "Number of "
                "accepted tokens", "Number of draft tokens", "Number of emitted tokens")]
        if any(v is None for v in vals):
            raise _bad(where, i, line, "vLLM V0's 'Speculative metrics: Draft acceptance rate: ..., Number of "
                       "speculative tokens: K, Number of accepted tokens: A, Number of draft tokens: D, Number of "
                       "emitted tokens: E.'")
        try:
            k, acc, draft, emit = (int(v) for v in vals)
        except ValueError:
            raise _bad(where, i, line, "whole numbers of tokens") from None
        if k < 1 or draft % k or not 0 <= acc <= draft:
            raise _bad(where, i, line, "K >= 1, draft tokens a multiple of K and 0 <= accepted <= draft tokens")
        n = draft // k
        if not n <= emit <= n * (k + 1):
            raise _bad(where, i, line, f"emitted tokens between the drafts ({n}) and drafts x (K + 1) ({n * (k + 1)})")
        rows.append((i, k, acc, draft, emit))
    if not rows:
        raise InputError(f"{where}: no vLLM V0 '{V0_MARK}' line")
    if len({r[1] for r in rows}) > 1:
        raise InputError(f"{where}: lines with different K ({sorted({r[1] for r in rows})}); import one K at a time")
    k = rows[0][1]
    runs, last = [], None  # the counters are cumulative: a fall starts a new run; add each run's last line
    for r in rows:
        if last is not None and (r[3] < last[3] or r[2] < last[2] or r[4] < last[4]):
            runs.append(last)
        last = r
    runs.append(last)
    acc = sum(r[2] for r in runs)
    draft = sum(r[3] for r in runs)
    emit = sum(r[4] for r in runs)
    n = draft // k
    if n == 0:
        raise InputError(f"{where}: vLLM V0 counters with 0 draft tokens on every run's last line: nothing was "
                         f"drafted, so there is no acceptance to fit")
    # each drafted position one Bernoulli(α) trial: accepted successes, draft − accepted failures; the
    # truncated geometric's likelihood α^S (1 − α)^F with S = accepted, F = draft − accepted
    est, lo, hi, ll = _lr_interval(float(acc), float(draft - acc), 0.95)
    iid = AcceptanceFit(parameter="alpha", estimate=est, ci_low=lo, ci_high=hi, level=0.95, n_obs=n,
                        log_likelihood=ll, k=k, method="binomial MLE over every drafted position (V0 counts each "
                        "accepted position); likelihood-ratio interval, chi-square(1)")
    tau = emit / n
    notes = [f"{len(runs)} run(s) of cumulative counters; τ = emitted / drafts = {tau:.3f}, the i.i.d. α gives "
             f"{float(tokens_per_cycle_iid(iid.estimate, k)):.3f}"]
    return ImportedAcceptance(format="vllm-v0-log", k=k, n_drafts=float(n), n_draft_tokens=float(draft),
                              n_accepted=float(emit - n), tau=tau, iid=iid, n_lines=len(rows), notes=tuple(notes))


# ---- vLLM V1 ------------------------------------------------------------------------------------

V1_MARK = "SpecDecoding metrics:"


_MAX_DRAFT_CANDIDATES = 100_000


def _v1_drafts(acc: int, draft: int, k: int, tau: float, rates: list[float]) -> list[int]:
    """Whole draft counts n consistent with every printed figure of one V1 line."""
    lo = math.ceil(draft / k - 1e-9)  # a draft holds at most K tokens
    hi = draft  # and at least one
    if acc > 0:
        top, bottom = tau - 1.0 - 0.005, tau - 1.0 + 0.005
        hi = min(hi, math.floor(acc / top + 1e-9)) if top > 0 else hi
        lo = max(lo, math.ceil(acc / bottom - 1e-9))
    lo = max(lo, 1)
    if hi - lo > _MAX_DRAFT_CANDIDATES:
        # counts too large to try one by one: the printed figures (τ to 2 decimals, rates to 3) agree with
        # a range of draft counts; take the one nearest drafted / K in it, if the rates agree with it
        n = min(max(round(draft / k), lo), hi)
        ok = abs(sum(rates) * n - acc) <= 0.0005 * len(rates) * n + 1 and abs(1.0 + acc / n - tau) <= 0.005 + 1e-9
        return [n] if ok else []
    out = []
    for n in range(lo, hi + 1):
        if round(1.0 + acc / n, 2) != round(tau, 2) and abs(1.0 + acc / n - tau) > 0.005 + 1e-9:
            continue
        counts = [round(r * n) for r in rates]
        if all(abs(r * n - c) <= 0.0005 * n + 1e-9 for r, c in zip(rates, counts)) and sum(counts) == acc:
            out.append(n)
        if len(out) > 50:
            break
    return out


def read_vllm_v1_log(text: str, *, where: str = "log") -> ImportedAcceptance:
    total_n, total_draft, total_acc, per_pos, lines, notes = 0, 0, 0, None, 0, []
    k = None
    for i, line in enumerate(text.splitlines(), 1):
        if V1_MARK not in line:
            continue
        body = line[line.index(V1_MARK):]
        tau, acc, draft = (_field(body, "Mean acceptance length"), _field(body, "Accepted", r"\d+(?= tokens)"),
                           _field(body, "Drafted", r"\d+(?= tokens)"))
        m = re.search(r"Per-position acceptance rate\s*:\s*\[?((?:" + _NUM + r")(?:\s*,\s*" + _NUM + r")*)\]?", body)
        if tau is None or acc is None or draft is None or m is None:
            raise _bad(where, i, line, "vLLM V1's 'SpecDecoding metrics: Mean acceptance length: τ, ..., Accepted: A "
                       "tokens, Drafted: D tokens, Per-position acceptance rate: r1, r2, ...'")
        rates = [float(x) for x in re.split(r"\s*,\s*", m.group(1).strip())]
        acc, draft, tau = int(acc), int(draft), float(tau)
        if any(not 0 <= r <= 1 for r in rates) or any(b > a + 1e-9 for a, b in zip(rates, rates[1:])):
            raise _bad(where, i, line, "per-position rates in [0, 1] that do not grow with the position")
        if k is None:
            k = len(rates)
        elif len(rates) != k:
            raise _bad(where, i, line, f"{k} per-position rates, as on the lines before (one K per import)")
        if not 0 <= acc <= draft or tau < 1:
            raise _bad(where, i, line, "0 <= accepted <= drafted tokens and a mean acceptance length >= 1")
        if draft == 0:
            continue
        ns = _v1_drafts(acc, draft, k, tau, rates)
        if not ns:
            raise _bad(where, i, line, "figures that agree with one whole number of drafts (τ = 1 + accepted / "
                       "drafts, rate i x drafts a whole count, the counts summing to the accepted tokens)")
        n = min(ns, key=lambda x: abs(x - draft / k))
        if len(ns) > 1:
            notes.append(f"line {i}: {len(ns)} draft counts fit ({ns[0]}–{ns[-1]}); took {n}, the nearest to "
                         f"drafted / K")
        counts = np.array([round(r * n) for r in rates], dtype=float)
        per_pos = counts if per_pos is None else per_pos + counts
        total_n, total_draft, total_acc, lines = total_n + n, total_draft + draft, total_acc + acc, lines + 1
    if not lines:
        raise InputError(f"{where}: no vLLM V1 '{V1_MARK}' line with drafts")
    counters = {"num_drafts": total_n, "num_draft_tokens": total_draft, "num_accepted_tokens": total_acc,
                "num_accepted_tokens_per_pos": per_pos.tolist()}
    return _from_counters("vllm-v1-log", counters, lines, notes, where)


def check_counters(counters: dict, *, where: str) -> None:
    """vLLM's counters agree with each other: drafts >= 1, each draft of 1..K tokens (K = the per-position
    counters), accepted <= drafted tokens, per-position counts non-increasing, at most the drafts, and
    summing to the accepted tokens."""
    n, draft, acc = (float(counters[k]) for k in ("num_drafts", "num_draft_tokens", "num_accepted_tokens"))
    per_pos = [float(x) for x in counters["num_accepted_tokens_per_pos"]]
    k = len(per_pos)
    bad = None
    if not all(math.isfinite(x) and x >= 0 for x in (n, draft, acc, *per_pos)):
        bad = "finite counts >= 0"
    elif n < 1:
        bad = "at least one draft (num_drafts >= 1)"
    elif not n <= draft <= n * k:
        bad = f"drafted tokens between num_drafts ({n:g}) and num_drafts x K ({n * k:g}, K = {k} positions)"
    elif acc > draft:
        bad = f"accepted tokens ({acc:g}) at most the drafted tokens ({draft:g})"
    elif per_pos[0] > n or any(b > a for a, b in zip(per_pos, per_pos[1:])):
        bad = "per-position accepted counts non-increasing, the first at most num_drafts"
    elif abs(sum(per_pos) - acc) > max(0.5, 1e-9 * acc):
        bad = f"per-position accepted counts summing to the accepted tokens ({sum(per_pos):g} != {acc:g})"
    if bad is not None:
        shown = ", ".join(f"{key} = {counters[key]:g}" for key in ("num_drafts", "num_draft_tokens", "num_accepted_tokens"))
        raise InputError(f"{where}: counters {shown}, per position {[f'{x:g}' for x in per_pos]}: expected {bad}")


def _from_counters(fmt: str, counters: dict, lines: int, notes: list, where: str) -> ImportedAcceptance:
    check_counters(counters, where=where)
    try:
        cond = fit_vllm_counters(counters, model="conditional")
        iid = fit_vllm_counters(counters, model="iid")
    except SpecError as exc:
        raise InputError(f"{where}: {exc}") from None
    n = float(counters["num_drafts"])
    acc = float(counters["num_accepted_tokens"])
    return ImportedAcceptance(format=fmt, k=int(cond.k), n_drafts=n, n_draft_tokens=float(counters["num_draft_tokens"]),
                              n_accepted=acc, tau=1.0 + acc / n, iid=iid, conditional=cond,
                              per_position=tuple(float(x) for x in counters["num_accepted_tokens_per_pos"]),
                              n_lines=lines, notes=tuple(notes))


# ---- vLLM Prometheus ----------------------------------------------------------------------------

_PROM_NAMES = {"vllm:spec_decode_num_drafts_total": "num_drafts", "vllm:spec_decode_num_draft_tokens_total": "num_draft_tokens",
               "vllm:spec_decode_num_accepted_tokens_total": "num_accepted_tokens",
               "vllm:spec_decode_num_accepted_tokens_per_pos_total": "per_pos"}
_SAMPLE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(\{(.*)\})?\s+(\S+)(\s+\S+)?\s*$")
_LABEL = re.compile(r'\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*(,|$)')


def _labels(text: str) -> dict | None:
    out, pos = {}, 0
    text = text.strip()
    while pos < len(text):
        m = _LABEL.match(text, pos)
        if not m:
            return None
        out[m.group(1)] = m.group(2)
        pos = m.end()
    return out


def read_vllm_prometheus(text: str, *, where: str = "metrics", model_name: str | None = None) -> ImportedAcceptance:
    sums = {"num_drafts": 0.0, "num_draft_tokens": 0.0, "num_accepted_tokens": 0.0}
    per_pos: dict[int, float] = {}
    models, seen = set(), 0
    for i, line in enumerate(text.splitlines(), 1):
        s = line.strip()
        if not s or s.startswith("#") or not s.startswith("vllm:spec_decode_"):
            continue
        m = _SAMPLE.match(s)
        if not m:
            raise _bad(where, i, line, "a Prometheus sample 'name{label=\"value\",...} number'")
        name, labels = m.group(1), _labels(m.group(3) or "")
        if name.endswith("_created"):
            continue
        if labels is None:
            raise _bad(where, i, line, 'labels written as name="value", separated by commas')
        try:
            value = float(m.group(4))
        except ValueError:
            raise _bad(where, i, line, "a number after the labels") from None
        if name not in _PROM_NAMES:
            continue
        if not (math.isfinite(value) and value >= 0):
            raise _bad(where, i, line, "a finite count >= 0 (a counter)")
        if "model_name" in labels:
            if model_name is not None and labels["model_name"] != model_name:
                continue
            models.add(labels["model_name"])
        key = _PROM_NAMES[name]
        if key == "per_pos":
            try:
                pos = int(labels["position"])
            except (KeyError, ValueError):
                raise _bad(where, i, line, 'a label position="i" (a whole number) on the per-position counter') from None
            per_pos[pos] = per_pos.get(pos, 0.0) + value
        else:
            sums[key] += value
        seen += 1
    if len(models) > 1:
        raise SpecError(f"{where}: counters of {len(models)} models ({', '.join(sorted(models))}); name one "
                        f"(--model-name)")
    if not seen or sums["num_drafts"] <= 0:
        raise InputError(f"{where}: no vllm:spec_decode_num_drafts_total sample with drafts > 0"
                         + (f" for model {model_name!r}" if model_name else ""))
    if not per_pos:
        raise InputError(f"{where}: no vllm:spec_decode_num_accepted_tokens_per_pos_total samples")
    if sorted(per_pos) != list(range(len(per_pos))):
        raise InputError(f"{where}: per-position counters for positions {sorted(per_pos)}; expected 0..K-1")
    counters = dict(sums, num_accepted_tokens_per_pos=[per_pos[p] for p in range(len(per_pos))])
    return _from_counters("vllm-prometheus", counters, seen, [], where)


# ---- SGLang -------------------------------------------------------------------------------------

SGLANG_MARK = "accept len:"


def read_sglang_log(text: str, *, k: int | None, where: str = "log", level: float = 0.95) -> ImportedAcceptance:
    from ..specs import checks as C

    if k is None:
        raise field_error(where, "k", k, "the draft length SGLang ran with (--speculative-num-steps), an integer >= 1 "
                          "(SGLang does not print it)")
    C.integer(where, "k", k, lo=1, hi=64, unit="the draft length SGLang ran with (--speculative-num-steps)")
    taus, weights = [], []
    for i, line in enumerate(text.splitlines(), 1):
        if SGLANG_MARK not in line or "Decode batch" not in line:
            continue
        tau = _field(line, "accept len")
        run = _field(line, "#running-req", r"\d+")
        if tau is None or run is None:
            raise _bad(where, i, line, "SGLang's 'Decode batch. #running-req: N, ..., accept len: τ, ...'")
        tau, run = float(tau), int(run)
        if not 1.0 <= tau <= k + 1 + 0.005:
            raise _bad(where, i, line, f"an accept length in [1, K + 1] = [1, {k + 1}] (is K = {k} right?)")
        if run > 0:
            taus.append(min(tau, k + 1.0))
            weights.append(run)
    if not taus:
        raise InputError(f"{where}: no SGLang 'Decode batch ... accept len:' line with running requests")
    t, w = np.array(taus), np.array(weights, dtype=float)
    tau = float(np.average(t, weights=w))
    alpha = alpha_from_tau(tau, k)
    lo = hi = float("nan")
    notes = ["α by matching τ (method of moments): SGLang prints no counts"]
    if len(t) >= 2:  # the logged intervals' spread: a weighted mean's normal interval, mapped through τ(α)
        from scipy.stats import t as student

        var = float(np.average((t - tau) ** 2, weights=w)) * len(t) / (len(t) - 1)
        half = student.ppf(0.5 + level / 2, len(t) - 1) * math.sqrt(var / len(t))
        lo = alpha_from_tau(min(max(tau - half, 1.0), k + 1.0), k)
        hi = alpha_from_tau(min(max(tau + half, 1.0), k + 1.0), k)
        notes.append(f"interval from the spread of the {len(t)} logged intervals' accept lengths (t interval of their "
                     f"mean, mapped through τ(α))")
    iid = AcceptanceFit(parameter="alpha", estimate=alpha, ci_low=lo, ci_high=hi, level=level, n_obs=len(t),
                        log_likelihood=float("nan"), k=k, method="method of moments on SGLang's accept length")
    return ImportedAcceptance(format="sglang-log", k=k, n_drafts=float("nan"), n_draft_tokens=float("nan"),
                              n_accepted=float("nan"), tau=tau, iid=iid, n_lines=len(t), notes=tuple(notes))


# ---- llama.cpp ----------------------------------------------------------------------------------

def read_llama_cpp(text: str, *, where: str = "log", level: float = 0.95) -> ImportedAcceptance:
    found: dict[str, tuple[int, int]] = {}
    for i, line in enumerate(text.splitlines(), 1):
        m = re.search(r"\b(n_draft|n_predict|n_drafted|n_accept)\s*=\s*(\S+)", line)
        if not m:
            continue
        try:
            found[m.group(1)] = (int(m.group(2)), i)
        except ValueError:
            raise _bad(where, i, line, f"'{m.group(1)} = <whole number>'") from None
    missing = [k for k in ("n_draft", "n_predict", "n_drafted", "n_accept") if k not in found]
    if missing:
        raise InputError(f"{where}: no llama.cpp '{missing[0]} = N' line (the speculative example's summary: n_draft, "
                         f"n_predict, n_drafted, n_accept)")
    k, predict, drafted, accept = (found[x][0] for x in ("n_draft", "n_predict", "n_drafted", "n_accept"))
    cycles = predict - accept
    if k < 1 or not 0 <= accept <= drafted or cycles < 1 or drafted > cycles * k:
        line = found["n_accept"][1]
        raise InputError(f"{where}:{line}: n_draft = {k}, n_predict = {predict}, n_drafted = {drafted}, n_accept = "
                         f"{accept}: expected n_draft >= 1, 0 <= n_accept <= n_drafted <= n_draft x (n_predict − n_accept)")
    tau = predict / cycles
    notes = [f"cycles ≈ n_predict − n_accept = {cycles}; {drafted / cycles:.2f} of K = {k} drafted per cycle"]
    alpha = alpha_from_tau(min(max(tau, 1.0), k + 1.0), k)
    # plug-in interval: S = accepted drafts, F ≈ cycles that ended in a rejection, n·(1 − α̂^K)
    _, lo, hi, _ = _lr_interval(float(accept), cycles * (1.0 - alpha ** k), level)
    notes.append("α by matching τ; interval plug-in (cycles ending in a rejection taken as n·(1 − α^K))")
    iid = AcceptanceFit(parameter="alpha", estimate=alpha, ci_low=lo, ci_high=hi, level=level, n_obs=cycles,
                        log_likelihood=float("nan"), k=k, method="method of moments on llama.cpp's summary")
    return ImportedAcceptance(format="llama.cpp", k=k, n_drafts=float(cycles), n_draft_tokens=float(drafted),
                              n_accepted=float(accept), tau=tau, iid=iid, n_lines=4, notes=tuple(notes))


# ---- any of them --------------------------------------------------------------------------------

def detect_format(text: str) -> str | None:
    if V1_MARK in text:
        return "vllm-v1-log"
    if V0_MARK in text:
        return "vllm-v0-log"
    if "vllm:spec_decode_" in text:
        return "vllm-prometheus"
    if SGLANG_MARK in text and "Decode batch" in text:
        return "sglang-log"
    if re.search(r"\bn_drafted\s*=", text):
        return "llama.cpp"
    return None


def import_acceptance(path, *, fmt: str | None = None, k: int | None = None,
                      model_name: str | None = None) -> ImportedAcceptance:
    """Read a file of `fmt` (one of FORMATS; None: recognised from its content) and fit acceptance."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8", errors="strict")
    except FileNotFoundError:
        raise InputError(f"{p}: no such file") from None
    except IsADirectoryError:
        raise InputError(f"{p}: a folder; expected a log or metrics file") from None
    except UnicodeDecodeError as exc:
        raise InputError(f"{p}: not UTF-8 text (byte at offset {exc.start})") from None
    except OSError as exc:
        raise InputError(f"{p}: cannot be read ({exc.strerror or exc})") from None
    where = str(p)
    if fmt is None:
        fmt = detect_format(text)
        if fmt is None:
            raise InputError(f"{p}: no speculative-decoding metrics recognised (vLLM 'Speculative metrics:' or "
                             "'SpecDecoding metrics:' lines, vllm:spec_decode_* samples, SGLang 'accept len:', llama.cpp "
                             "'n_drafted ='); name the format with --format")
    if fmt not in FORMATS:
        raise field_error("--format", "format", fmt, f"one of {', '.join(FORMATS)}")
    if k is not None and fmt != "sglang-log":
        raise SpecError(f"-k {k}: only SGLang's log needs K (the other formats carry it)")
    if model_name is not None and fmt != "vllm-prometheus":
        raise SpecError(f"--model-name {model_name!r}: applies to vllm-prometheus only")
    if fmt == "vllm-v0-log":
        return read_vllm_v0_log(text, where=where)
    if fmt == "vllm-v1-log":
        return read_vllm_v1_log(text, where=where)
    if fmt == "vllm-prometheus":
        return read_vllm_prometheus(text, where=where, model_name=model_name)
    if fmt == "sglang-log":
        return read_sglang_log(text, k=k, where=where)
    return read_llama_cpp(text, where=where)


def check_traffic(context_len: float | None, temperature: float | None) -> tuple:
    """The traffic an import describes (--context-len, --temperature): finite, >= 0, in range."""
    from ..specs import checks as C

    if context_len is not None:
        context_len = C.number("--context-len", "context_len", context_len, lo=0.0, hi=float(C.INT32_MAX),
                               unit="tokens in the traffic's context")
    if temperature is not None:
        temperature = C.number("--temperature", "temperature", temperature, lo=0.0, hi=100.0,
                               unit="the traffic's sampling temperature")
    return context_len, temperature


def calibration_table(imp: ImportedAcceptance, *, name: str, target: str, drafter: str, workload: str, command: str,
                      context_len: float | None = None, temperature: float | None = None) -> dict:
    """An import as a calibration file (`specs.calibrations`): the i.i.d. α and, where the format gives
    them, the per-position rates; no dependence on context or temperature (one operating point), the
    traffic's context and temperature as the reference when given."""
    from ..speculation.families import FAMILIES

    context_len, temperature = check_traffic(context_len, temperature)
    f = imp.iid
    if not (f.ci_low == f.ci_low and f.ci_high == f.ci_high):
        raise SpecError(f"{imp.format}: no interval for α (the format gives too little); a calibration needs one")
    method = {"prompt-lookup": "prompt_lookup", "ngram": "prompt_lookup", "draft-model": "draft_model",
              "layer-skip": "layer_skip"}.get(drafter, drafter.replace("-", "_"))
    if method not in FAMILIES:
        raise SpecError(f"--name {name!r}: the drafter part {drafter!r} is not a drafter family "
                        f"({', '.join(sorted(FAMILIES))}, or prompt-lookup, draft-model, layer-skip)")
    t = {"name": name, "target": target, "drafter": drafter, "method": method, "workload": workload,
         "command": command, "level": f.level, "notes": "; ".join((f"imported from {imp.format}", *imp.notes)),
         "reference": {"context_len": float(context_len or 0.0), "temperature": float(temperature or 0.0), "k": imp.k},
         "iid": {"alpha": float(f.estimate), "ci_low": float(f.ci_low), "ci_high": float(f.ci_high),
                 "n_trials": int(f.n_obs)}}
    if imp.n_drafts == imp.n_drafts:  # SGLang's log counts no cycles: then the key is left out
        t["iid"]["n_cycles"] = int(imp.n_drafts)
    if imp.conditional is not None:
        c = imp.conditional
        t["conditional"] = {"rates": [float(x) for x in c.estimate], "ci_low": [float(x) for x in c.ci_low],
                            "ci_high": [float(x) for x in c.ci_high]}
    cov = {"ks": [imp.k], "workloads": [workload], "drafters": [drafter]}
    if context_len is not None:
        cov["context_len"] = [float(context_len), float(context_len)]
    if temperature is not None:
        cov["temperatures"] = [float(temperature)]
    t["coverage"] = cov
    return t


__all__ = ["ImportedAcceptance", "calibration_table", "check_counters", "check_traffic", "import_acceptance", "read_vllm_v0_log", "read_vllm_v1_log", "read_vllm_prometheus",
           "read_sglang_log", "read_llama_cpp", "detect_format", "FORMATS"]
