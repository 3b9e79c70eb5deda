"""Workloads for the serving simulator: who arrives when, with how long a prompt and output.

A `Workload` is three aligned arrays (arrival time, prompt tokens, output tokens), or, for a closed
loop, the lengths plus a number of users who each send their next request when the last one ends.

- Synthetic arrivals: Poisson at a rate; Gamma inter-arrivals with a coefficient of variation (CV 1
  is Poisson, above 1 bursty, below 1 smoother); a closed loop of N users with a think time.
- Lengths: fixed, uniform, or lognormal (given, or fitted by maximum likelihood to a trace's column).
- Trace replay in the traces' own formats (see traces/README.md in `specs.data.data_dir()`): the Azure LLM
  inference CSVs (`TIMESTAMP,ContextTokens,GeneratedTokens`), the Mooncake JSON lines (millisecond
  `timestamp`, `input_length`, `output_length`) and a plain `arrival_time_s,prompt_tokens,
  output_tokens` CSV. Mooncake arrivals are quantised to about 3 s; the reader spreads the requests
  of one quantum over the quantum with seeded, sorted uniform jitter (file order kept) and says so
  in `notes`. Bad input raises SpecError naming the file, the line and the value.
- Time scaling (`scaled`, `at_rate`: replay at 2× by halving every gap) and a time window.
- Prefix structure, for prefix caching: per request a chain of block hash ids, each naming a block
  of `hash_block_tokens` tokens together with everything before it (two requests whose lists start
  with the same ids share that prefix). The Mooncake trace gives them (`hash_ids`, 512 tokens a
  block); a plain CSV with a `session_id` column gives conversation structure, from which
  `conversation_hashes` derives them (turn t + 1's prompt starts with turn t's prompt and output).
- Priorities (vLLM's `priority`, lower is served first): `with_priorities` draws classes by given
  fractions from a seeded stream.
"""
from __future__ import annotations

import csv
import functools
import json
import math
import re
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path

import numpy as np

from ..errors import InputError, SpecError
from ..specs import checks as C
from ..specs.serving_tables import CV_RANGE, MAX_ARRIVAL_S, MAX_JITTER_S, TRACE_FORMATS, LengthsTable
# Mooncake FAST'25 traces: "hash_ids" name prefix blocks of 512 tokens (data/traces/README.md; on every
# row len(hash_ids) == ceil(input_length / 512))
MOONCAKE_BLOCK_TOKENS = 512


@dataclass(frozen=True, slots=True, kw_only=True)
class Workload:
    """Requests to replay. Arrays have shape (n_requests,) and are aligned by request index.

    arrival_at_s: arrival times, non-decreasing, from 0 (all NaN for a closed loop, where request
    i + n_users is sent when one of the users' previous requests finishes, after think_time_s).
    prompt_tokens, output_tokens: int64, each >= 1.
    """

    arrival_at_s: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    n_users: int = 0
    think_time_s: float = 0.0
    source: str = ""
    notes: tuple[str, ...] = ()
    priority: np.ndarray | None = None
    block_hashes: np.ndarray | None = None
    block_hash_offsets: np.ndarray | None = None
    hash_block_tokens: int = 0
    hashes_cover_output: bool = False

    def __post_init__(self) -> None:
        a = np.asarray(self.arrival_at_s, dtype=np.float64)
        p = np.asarray(self.prompt_tokens)
        o = np.asarray(self.output_tokens)
        if not (a.shape == p.shape == o.shape and a.ndim == 1):
            raise SpecError(f"workload {self.source!r}: arrival, prompt and output arrays must be 1-D and "
                            f"of one length; got {a.shape}, {p.shape}, {o.shape}")
        for name, arr in (("prompt_tokens", p), ("output_tokens", o)):
            if arr.size and (arr.dtype.kind not in "iu" or arr.min() < 1):
                raise SpecError(f"workload {self.source!r}: {name} must be integers >= 1")
        if self.n_users:
            if self.n_users < 1 or not np.all(np.isnan(a)):
                raise SpecError(f"workload {self.source!r}: a closed loop has n_users >= 1 and no arrival times")
            if not (self.think_time_s >= 0 and math.isfinite(self.think_time_s)):
                raise SpecError(f"workload {self.source!r}: think_time_s must be a finite number >= 0")
        elif a.size and (not np.all(np.isfinite(a)) or np.any(np.diff(a) < 0) or a[0] < 0):
            raise SpecError(f"workload {self.source!r}: arrival times must be finite, >= 0 and non-decreasing")
        elif a.size and a[-1] > MAX_ARRIVAL_S:
            raise SpecError(f"workload {self.source!r}: arrival times reach {a[-1]:.4g} s; expected at most "
                            f"{MAX_ARRIVAL_S:g} s (past it float seconds cannot resolve a step: every latency would "
                            f"read 0); shift the trace's times to start near 0, or choose a faster rate")
        arrays = [("arrival_at_s", a), ("prompt_tokens", p.astype(np.int64)), ("output_tokens", o.astype(np.int64))]
        if self.priority is not None:
            pr = np.asarray(self.priority)
            if pr.shape != p.shape or (pr.size and pr.dtype.kind not in "iu"):
                raise SpecError(f"workload {self.source!r}: priority must be one integer per request")
            arrays.append(("priority", pr.astype(np.int64)))
        if (self.block_hashes is None) != (self.block_hash_offsets is None):
            raise SpecError(f"workload {self.source!r}: block_hashes and block_hash_offsets go together")
        if self.block_hashes is not None:
            h = np.asarray(self.block_hashes, dtype=np.int64)
            off = np.asarray(self.block_hash_offsets, dtype=np.int64)
            if off.shape != (p.size + 1,) or off[0] != 0 or np.any(np.diff(off) < 0) or off[-1] != h.size:
                raise SpecError(f"workload {self.source!r}: block_hash_offsets must be n_requests + 1 non-decreasing "
                                f"offsets into block_hashes, from 0 to its length")
            C.integer(f"workload {self.source!r}", "hash_block_tokens", self.hash_block_tokens, lo=1,
                      unit="tokens per hashed block")
            arrays += [("block_hashes", h), ("block_hash_offsets", off)]
        for name, arr in arrays:
            arr = np.array(arr)
            arr.flags.writeable = False
            object.__setattr__(self, name, arr)

    @property
    def n_requests(self) -> int:
        return int(self.prompt_tokens.size)

    @property
    def is_closed_loop(self) -> bool:
        return self.n_users > 0

    @property
    def has_prefixes(self) -> bool:
        return self.block_hashes is not None

    def hashed_tokens(self, i: int) -> int:
        """Tokens request i's chain covers: its prompt (Mooncake: the last block may be short), or every
        full block of prompt + output (conversation chains, so later turns reuse generated blocks)."""
        n = int(self.block_hash_offsets[i + 1] - self.block_hash_offsets[i]) * self.hash_block_tokens
        return n if self.hashes_cover_output else min(n, int(self.prompt_tokens[i]))

    def hashes_of(self, i: int) -> np.ndarray:
        """Request i's block hash ids (empty without prefix structure)."""
        if self.block_hashes is None:
            return np.zeros(0, dtype=np.int64)
        return self.block_hashes[self.block_hash_offsets[i]:self.block_hash_offsets[i + 1]]

    def select(self, keep: np.ndarray, *, arrival_at_s: np.ndarray | None = None, note: str = "") -> "Workload":
        """The requests where `keep` (a boolean mask or ascending indices) holds, with their prefix
        chains and priorities; arrival times replaced when given."""
        idx = np.flatnonzero(keep) if np.asarray(keep).dtype == bool else np.asarray(keep, dtype=np.int64)
        kw: dict = {}
        if self.block_hashes is not None:
            off = self.block_hash_offsets
            lens = off[idx + 1] - off[idx]
            starts = np.repeat(off[idx], lens)
            within = np.arange(int(lens.sum())) - np.repeat(np.cumsum(lens) - lens, lens)
            kw.update(block_hashes=self.block_hashes[starts + within],
                      block_hash_offsets=np.concatenate([[0], np.cumsum(lens)]))
        if self.priority is not None:
            kw["priority"] = self.priority[idx]
        arr = self.arrival_at_s[idx] if arrival_at_s is None else arrival_at_s
        return replace(self, arrival_at_s=arr, prompt_tokens=self.prompt_tokens[idx],
                       output_tokens=self.output_tokens[idx], notes=self.notes + ((note,) if note else ()), **kw)

    def with_priorities(self, fracs, rng: np.random.Generator) -> "Workload":
        """Priority classes 0, 1, ... (0 served first) drawn i.i.d. with the given fractions."""
        f = np.asarray(fracs, dtype=float)
        if f.ndim != 1 or f.size < 1 or np.any(f < 0) or not np.isclose(f.sum(), 1.0):
            raise SpecError(f"workload {self.source!r}: priority fractions {list(fracs)!r}: expected fractions "
                            f"summing to 1, one per class (class 0 served first)")
        cls = np.searchsorted(np.cumsum(f)[:-1], rng.random(self.n_requests), side="right").astype(np.int64)
        return replace(self, priority=cls,
                       notes=self.notes + (f"priority classes drawn with fractions {', '.join(f'{x:g}' for x in f)}",))

    @property
    def duration_s(self) -> float:
        """Span from the first to the last arrival (0 for a closed loop or a single request)."""
        if self.is_closed_loop or self.n_requests < 2:
            return 0.0
        return float(self.arrival_at_s[-1] - self.arrival_at_s[0])

    @property
    def mean_rate_per_s(self) -> float:
        """Requests per second over the arrival span: (n − 1) / span."""
        d = self.duration_s
        return (self.n_requests - 1) / d if d > 0 else math.nan

    def scaled(self, speed: float) -> "Workload":
        """Replay `speed` times faster: every arrival time divided by speed (2.0 = twice the rate)."""
        if not (speed > 0 and math.isfinite(speed)):
            raise SpecError(f"workload {self.source!r}: time scale {speed!r} must be a positive number")
        if self.is_closed_loop:
            raise SpecError(f"workload {self.source!r}: a closed loop has no arrival times to scale")
        return replace(self, arrival_at_s=self.arrival_at_s / speed,
                       notes=self.notes + (f"arrival times divided by {speed:g} (replayed {speed:g}x faster)",))

    def at_rate(self, rate_per_s: float) -> "Workload":
        """Scale time so the mean arrival rate is rate_per_s."""
        native = self.mean_rate_per_s
        if not math.isfinite(native):
            raise SpecError(f"workload {self.source!r}: needs two or more distinct arrival times to set a rate")
        return self.scaled(rate_per_s / native)

    def window(self, start_s: float, end_s: float) -> "Workload":
        """Requests arriving in [start_s, end_s), shifted so the window starts at 0."""
        if self.is_closed_loop:
            raise SpecError(f"workload {self.source!r}: a closed loop has no arrival times to window")
        if not (0 <= start_s < end_s):
            raise SpecError(f"workload {self.source!r}: time window [{start_s}, {end_s}) must have 0 <= start < end")
        keep = (self.arrival_at_s >= start_s) & (self.arrival_at_s < end_s)
        return self.select(keep, arrival_at_s=self.arrival_at_s[keep] - start_s,
                           note=f"window [{start_s:g}, {end_s:g}) s of the source kept")

    def head(self, n: int) -> "Workload":
        """The first n requests."""
        return self.select(np.arange(min(n, self.n_requests)))


# ---- synthetic arrivals ---------------------------------------------------------------------------

def poisson_arrivals(rng: np.random.Generator, *, rate_per_s: float, n_requests: int) -> np.ndarray:
    """Arrival times (s) of a Poisson process: exponential gaps with mean 1 / rate; first at 0."""
    return gamma_arrivals(rng, rate_per_s=rate_per_s, cv=1.0, n_requests=n_requests)


def gamma_arrivals(rng: np.random.Generator, *, rate_per_s: float, cv: float, n_requests: int) -> np.ndarray:
    """Arrival times (s) with Gamma-distributed gaps of mean 1 / rate and coefficient of variation cv
    (shape 1 / cv², scale cv² / rate; cv = 1 is Poisson, cv > 1 bursty). First arrival at 0."""
    C.number("workload", "rate_per_s", rate_per_s, lo=0.0, lo_open=True, unit="requests/s")
    C.number("workload", "cv", cv, lo=CV_RANGE[0], hi=CV_RANGE[1], unit="coefficient of variation of the gaps")
    shape = 1.0 / cv**2
    gaps = rng.gamma(shape, 1.0 / (shape * rate_per_s), size=max(n_requests - 1, 0))
    return np.concatenate([[0.0], np.cumsum(gaps)])[:n_requests]


# ---- length distributions -------------------------------------------------------------------------

@dataclass(frozen=True, slots=True, kw_only=True)
class Lengths:
    """A token-length distribution. kind: 'fixed' (tokens), 'uniform' (min..max inclusive) or
    'lognormal' (log-space mu, sigma; draws rounded and clipped to [min, max])."""

    kind: str
    tokens: int = 0
    min: int = 1
    max: int = 1 << 30
    mu: float = 0.0
    sigma: float = 0.0

    def __post_init__(self) -> None:
        where = f"length distribution {self.kind!r}"
        C.choice(where, "kind", self.kind, ("fixed", "uniform", "lognormal"))
        if self.kind == "fixed":
            C.integer(where, "tokens", self.tokens, lo=1, unit="tokens")
        C.integer(where, "min", self.min, lo=1, unit="tokens")
        C.integer(where, "max", self.max, lo=self.min, unit="tokens, at least min")
        if self.kind == "lognormal":
            C.number(where, "mu", self.mu, unit="mean of log tokens")
            C.number(where, "sigma", self.sigma, lo=0.0, unit="standard deviation of log tokens")

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        if self.kind == "fixed":
            return np.full(n, self.tokens, dtype=np.int64)
        if self.kind == "uniform":
            return rng.integers(self.min, self.max + 1, size=n, dtype=np.int64)
        # + 0.0 turns a sigma of -0.0 (equal to 0, so accepted) into +0.0: numpy refuses a negative sign bit
        draws = np.rint(rng.lognormal(self.mu, self.sigma + 0.0, size=n))
        return np.clip(draws, self.min, self.max).astype(np.int64)


def fit_lognormal(samples, *, clip_to_range: bool = True) -> Lengths:
    """Maximum-likelihood lognormal fit (mu, sigma = mean and std of log x) to positive lengths,
    clipped to the sample's range so a draw never exceeds what the trace saw."""
    x = np.asarray(samples, dtype=np.float64)
    if x.size < 2 or np.any(x <= 0):
        raise SpecError("fit_lognormal: needs two or more positive lengths")
    logs = np.log(x)
    return Lengths(kind="lognormal", mu=float(logs.mean()), sigma=float(logs.std()),
                   min=int(x.min()) if clip_to_range else 1, max=int(x.max()) if clip_to_range else 1 << 30)


def lengths_from_table(t: LengthsTable) -> Lengths:
    """A checked `prompt = {...}` / `output = {...}` table as the distribution it describes."""
    kw: dict = {"kind": t.kind}
    if t.kind == "fixed":
        kw["tokens"] = t.tokens
    for key in ("min", "max"):
        if getattr(t, key) is not None:
            kw[key] = getattr(t, key)
    if t.kind == "lognormal":
        kw.update(mu=t.log_mean, sigma=t.sigma)
    try:
        return Lengths(**kw)
    except SpecError as exc:
        raise SpecError(f"{t.where}: {exc}") from None


def lengths_from_dict(raw, *, where: str) -> Lengths:
    """A raw `{kind = "fixed", tokens = 128}` table, checked (specs.serving_tables.LengthsTable)."""
    return lengths_from_table(LengthsTable.from_table(raw, where=where))


def synthetic(*, arrivals: np.ndarray, prompt: Lengths, output: Lengths, rng_lengths: np.random.Generator,
              source: str = "synthetic") -> Workload:
    n = len(arrivals)
    rng_p, rng_o = rng_lengths.spawn(2)  # prompt and output lengths from their own child streams
    return Workload(arrival_at_s=np.asarray(arrivals, dtype=float), prompt_tokens=prompt.sample(rng_p, n),
                    output_tokens=output.sample(rng_o, n), source=source)


def closed_loop(*, n_users: int, n_requests: int, prompt: Lengths, output: Lengths,
                rng_lengths: np.random.Generator, think_time_s: float = 0.0) -> Workload:
    """N users, each sending its next request think_time_s after its previous one completes."""
    C.integer("workload", "n_users", n_users, lo=1, unit="users")
    C.number("workload", "think_time_s", think_time_s, lo=0.0, unit="seconds")
    rng_p, rng_o = rng_lengths.spawn(2)
    return Workload(arrival_at_s=np.full(n_requests, np.nan), prompt_tokens=prompt.sample(rng_p, n_requests),
                    output_tokens=output.sample(rng_o, n_requests), n_users=int(n_users),
                    think_time_s=float(think_time_s), source=f"closed loop of {n_users} users")


# ---- trace readers --------------------------------------------------------------------------------

_INT = re.compile(r"^\s*[+-]?\d+\s*$")
_EPOCH = datetime(1970, 1, 1)  # naive: the trace gives no time zone, and only differences matter
_AZURE_TS = re.compile(r"^(\d{4})-(\d{2})-(\d{2})[ T](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?$")


def _bad(path, line: int, column: str, value, expected: str) -> SpecError:
    return SpecError(f"{path}: line {line}: column {column!r} = {value!r}: expected {expected}")


MAX_TOKENS = 2 ** 31 - 1  # a request's prompt or output longer than this is a malformed row, not a workload


def _text_input(read):
    """A trace reader whose file turns out not to be UTF-8 text (binary, UTF-16, NUL bytes) raises
    an InputError naming the file instead of the decoder's or the csv module's exception."""
    @functools.wraps(read)
    def wrapped(path, *args, **kwargs):
        try:
            return read(path, *args, **kwargs)
        except UnicodeDecodeError as exc:
            raise InputError(f"{path}: not UTF-8 text (byte {exc.start}); expected a trace (CSV or JSON lines)") from None
        except csv.Error as exc:
            raise InputError(f"{path}: not a readable CSV ({exc}); expected a trace") from None
        except IsADirectoryError:
            raise InputError(f"{path}: a folder, not a trace file") from None
        except PermissionError:
            raise InputError(f"{path}: no permission to read it") from None
    return wrapped


def _length(path, line: int, column: str, value) -> int:
    if isinstance(value, bool):
        raise _bad(path, line, column, value, "an integer number of tokens >= 1")
    if isinstance(value, int):
        n = value
    elif isinstance(value, float) and value.is_integer():
        n = int(value)
    elif isinstance(value, str) and _INT.match(value):
        n = int(value)
    else:
        raise _bad(path, line, column, value, "an integer number of tokens >= 1")
    if n < 1 or n > MAX_TOKENS:
        raise _bad(path, line, column, value, f"an integer number of tokens in [1, {MAX_TOKENS}]")
    return n


def _azure_seconds(path, line: int, text: str) -> float:
    m = _AZURE_TS.match(text.strip())
    if not m:
        raise _bad(path, line, "TIMESTAMP", text, "a time 'YYYY-MM-DD HH:MM:SS.fffffff'")
    y, mo, d, h, mi, s, frac = m.groups()
    try:
        whole = (datetime(int(y), int(mo), int(d), int(h), int(mi), int(s)) - _EPOCH).total_seconds()
    except ValueError:
        raise _bad(path, line, "TIMESTAMP", text, "a valid calendar date and time") from None
    return whole + (int(frac) / 10 ** len(frac) if frac else 0.0)


def _float_seconds(path, line: int, column: str, text) -> float:
    try:
        v = float(text)
    except (TypeError, ValueError):
        raise _bad(path, line, column, text, "a number of seconds") from None
    if not math.isfinite(v) or v < 0:
        raise _bad(path, line, column, text, "a finite number of seconds >= 0")
    return v


def _read_csv(path: Path, columns: tuple[str, str, str], parse_time):
    times, prompts, outputs = [], [], []
    try:
        f = open(path, newline="", encoding="utf-8")
    except FileNotFoundError:
        raise SpecError(f"{path}: trace file not found") from None
    with f:
        reader = csv.reader(f)
        header = next(reader, None)
        if header is None:
            raise SpecError(f"{path}: line 1: empty file; expected a header {','.join(columns)}")
        header = [h.strip() for h in header]
        idx = []
        for col in columns:
            if col not in header:
                raise SpecError(f"{path}: line 1: missing column {col!r}; header is {','.join(header)!r}, "
                                f"expected {','.join(columns)}")
            idx.append(header.index(col))
        last = -math.inf
        for row in reader:
            line = reader.line_num
            if not row or all(not c.strip() for c in row):
                continue
            if len(row) < len(header):
                raise SpecError(f"{path}: line {line}: {len(row)} fields, expected {len(header)} ({','.join(header)})")
            t = parse_time(path, line, columns[0], row[idx[0]])
            if t < last:
                raise _bad(path, line, columns[0], row[idx[0]], "a time no earlier than the previous row's")
            last = t
            times.append(t)
            prompts.append(_length(path, line, columns[1], row[idx[1]]))
            outputs.append(_length(path, line, columns[2], row[idx[2]]))
    return times, prompts, outputs


@_text_input
def read_azure(path) -> Workload:
    """Azure LLM inference trace 2023 CSV: arrival = seconds after the first row's TIMESTAMP."""
    path = Path(path)
    times, p, o = _read_csv(path, ("TIMESTAMP", "ContextTokens", "GeneratedTokens"),
                            lambda pa, line, col, text: _azure_seconds(pa, line, text))
    t = np.asarray(times, dtype=np.float64)
    return Workload(arrival_at_s=t - (t[0] if t.size else 0.0), prompt_tokens=np.asarray(p, dtype=np.int64),
                    output_tokens=np.asarray(o, dtype=np.int64), source=str(path))


@_text_input
def read_plain(path, *, hash_block_tokens: int = 16) -> Workload:
    """Plain CSV with header arrival_time_s,prompt_tokens,output_tokens (times kept as given). An
    optional `session_id` column gives conversation structure: the requests of one session are its
    turns in file order, and each turn's prompt starts with the previous turn's prompt and output
    (block hash chains from `conversation_hashes`, `hash_block_tokens` tokens a block)."""
    path = Path(path)
    times, p, o = _read_csv(path, ("arrival_time_s", "prompt_tokens", "output_tokens"), _float_seconds)
    kw: dict = {}
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.reader(f)
        header = [h.strip() for h in next(reader)]
        if "session_id" in header:
            col = header.index("session_id")
            sessions = [row[col].strip() for row in reader if row and any(c.strip() for c in row)]
            h, off = conversation_hashes(sessions, np.asarray(p, dtype=np.int64), np.asarray(o, dtype=np.int64),
                                         block_tokens=hash_block_tokens, where=str(path))
            kw = dict(block_hashes=h, block_hash_offsets=off, hash_block_tokens=hash_block_tokens,
                      hashes_cover_output=True)
    return Workload(arrival_at_s=np.asarray(times, dtype=np.float64), prompt_tokens=np.asarray(p, dtype=np.int64),
                    output_tokens=np.asarray(o, dtype=np.int64), source=str(path), **kw)


def conversation_hashes(sessions, prompt_tokens: np.ndarray, output_tokens: np.ndarray, *, block_tokens: int,
                        where: str = "workload") -> tuple[np.ndarray, np.ndarray]:
    """Block hash chains from conversation structure: request i's chain names the full blocks of its
    prompt + output (so a later turn can reuse blocks generated in decode, as vLLM caches them). Turn
    t + 1 of a session must have a prompt of at least turn t's prompt + output tokens (it carries the
    conversation so far); its blocks inside that shared context get turn t's ids, the rest new ones.
    Returns (flat ids, offsets) for Workload.block_hashes / block_hash_offsets."""
    p = np.asarray(prompt_tokens, dtype=np.int64)
    o = np.asarray(output_tokens, dtype=np.int64)
    last: dict = {}  # session -> (its latest chain, tokens of prompt + output)
    chains, next_id = [], 0
    for i, sid in enumerate(sessions):
        total = int(p[i] + o[i])
        n_blocks = total // block_tokens
        prev = last.get(sid)
        shared: list = []
        if prev is not None:
            chain, ctx = prev
            if p[i] < ctx:
                raise SpecError(f"{where}: request {i} (session {sid!r}): prompt_tokens = {int(p[i])}: expected at least "
                                f"{ctx}, the previous turn's prompt + output (a turn carries the conversation so far)")
            shared = chain[: ctx // block_tokens]
        fresh = list(range(next_id, next_id + n_blocks - len(shared)))
        next_id += len(fresh)
        chain = shared + fresh
        chains.append(chain)
        last[sid] = (chain, total)
    lens = np.asarray([len(c) for c in chains], dtype=np.int64)
    flat = np.asarray([x for c in chains for x in c], dtype=np.int64)
    return flat, np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)


@_text_input
def read_mooncake(path, *, rng: np.random.Generator | None = None, quantum_s: float = 3.0) -> Workload:
    """Mooncake JSON lines (`timestamp` ms from the trace start, `input_length`, `output_length`).

    The timestamps come in ~3 s quanta with many requests sharing one. With an rng, the requests of
    one quantum get sorted uniform offsets in [0, min(quantum_s, gap to the next quantum)), so they
    keep file order and stay before the next quantum; without one they keep their shared times."""
    path = Path(path)
    C.number(f"{path}", "jitter_s", quantum_s, lo=0.0, hi=MAX_JITTER_S, unit="seconds a quantum spans")
    times, prompts, outputs, hashes, n_hashes = [], [], [], [], []
    try:
        f = open(path, encoding="utf-8")
    except FileNotFoundError:
        raise SpecError(f"{path}: trace file not found") from None
    last = -math.inf
    with f:
        for line_no, text in enumerate(f, start=1):
            if not text.strip():
                continue
            try:
                obj = json.loads(text)
            except json.JSONDecodeError as exc:
                raise SpecError(f"{path}: line {line_no}: not valid JSON ({exc.msg}): {text.strip()[:80]!r}") from None
            if not isinstance(obj, dict):
                raise SpecError(f"{path}: line {line_no}: expected a JSON object, got {text.strip()[:80]!r}")
            for key in ("timestamp", "input_length", "output_length"):
                if key not in obj:
                    raise SpecError(f"{path}: line {line_no}: missing field {key!r}; has {', '.join(obj)}")
            ts = obj["timestamp"]
            if not C.is_number(ts) or ts < 0:
                raise _bad(path, line_no, "timestamp", ts, "a number of milliseconds >= 0")
            if ts < last:
                raise _bad(path, line_no, "timestamp", ts, "a time no earlier than the previous line's")
            last = ts
            times.append(ts / 1e3)
            prompts.append(_length(path, line_no, "input_length", obj["input_length"]))
            outputs.append(_length(path, line_no, "output_length", obj["output_length"]))
            ids = obj.get("hash_ids")
            if ids is not None:
                if not (isinstance(ids, list) and all(C.is_int(x) and x >= 0 for x in ids)):
                    raise _bad(path, line_no, "hash_ids", str(ids)[:60], "a list of block hash ids (integers >= 0)")
                if len(ids) != -(-prompts[-1] // MOONCAKE_BLOCK_TOKENS):
                    raise _bad(path, line_no, "hash_ids", f"{len(ids)} ids",
                               f"ceil(input_length / {MOONCAKE_BLOCK_TOKENS}) = "
                               f"{-(-prompts[-1] // MOONCAKE_BLOCK_TOKENS)} ids")
                hashes.extend(ids)
            n_hashes.append(-1 if ids is None else len(ids))
    t = np.asarray(times, dtype=np.float64)
    notes: tuple[str, ...] = ()
    prefix: dict = {}
    if n_hashes and min(n_hashes) >= 0:
        prefix = dict(block_hashes=np.asarray(hashes, dtype=np.int64),
                      block_hash_offsets=np.concatenate([[0], np.cumsum(n_hashes)]).astype(np.int64),
                      hash_block_tokens=MOONCAKE_BLOCK_TOKENS)
    elif n_hashes and max(n_hashes) >= 0:
        raise SpecError(f"{path}: line {n_hashes.index(-1) + 1}: field 'hash_ids' missing where other lines have it")
    if rng is not None and t.size:
        t = jitter_quantised(t, rng=rng, quantum_s=quantum_s)
        notes = (f"arrivals quantised to ~{quantum_s:g} s in the source; requests sharing a timestamp spread "
                 f"over it with seeded sorted uniform jitter, file order kept",)
    return Workload(arrival_at_s=t - (t[0] if t.size else 0.0), prompt_tokens=np.asarray(prompts, dtype=np.int64),
                    output_tokens=np.asarray(outputs, dtype=np.int64), source=str(path), notes=notes, **prefix)


def jitter_quantised(t: np.ndarray, *, rng: np.random.Generator, quantum_s: float) -> np.ndarray:
    """Spread runs of equal times over [t, t + min(quantum_s, next distinct time − t)), sorted
    within each run so order is kept. t: (n,) non-decreasing seconds."""
    values, start, counts = np.unique(t, return_index=True, return_counts=True)
    width = np.minimum(np.append(np.diff(values), quantum_s), quantum_s)
    out = t.copy()
    u = rng.random(t.size)
    for v0, s, c, w in zip(values, start, counts, width):
        out[s:s + c] = v0 + np.sort(u[s:s + c]) * w
    return out


@_text_input
def read_trace(path, *, format: str | None = None, rng: np.random.Generator | None = None) -> Workload:
    """Read a trace in one of TRACE_FORMATS; format guessed from the suffix/header when not given."""
    path = Path(path)
    if format is None:
        if path.suffix in (".jsonl", ".json"):
            format = "mooncake"
        else:
            try:
                with open(path, encoding="utf-8") as f:
                    head = f.readline()
            except FileNotFoundError:
                raise SpecError(f"{path}: trace file not found") from None
            format = "azure" if "TIMESTAMP" in head else "plain"
    if format == "azure":
        return read_azure(path)
    if format == "plain":
        return read_plain(path)
    if format == "mooncake":
        return read_mooncake(path, rng=rng)
    raise SpecError(f"{path}: trace format {format!r}: expected one of {', '.join(TRACE_FORMATS)}")
