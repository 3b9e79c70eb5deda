"""Is the machine quiet enough for a timing to mean something? The checks every timing command
(`calibrate machine`, `decoder bench`, `calibrate steps`, `validate`) runs on its own figures before it
writes anything, and the bounded retry around them.

A command's figures can be wrong without being noisy: on a 2-core machine with another job on one core,
`calibrate machine` once fitted a negative attention cost per cached token and `decoder bench` timed a
one-token pass at 5x a two-token one, each figure the median of tight repeats. So each command checks
what it measured against what must hold physically (a cost that grows with M and context, nothing
negative, kernels of one kind within a plausible ratio, a fitted overhead no larger than the steps it
explains) as well as the spread of its repeats, and this module adds one check all share: whether the
numba threads had the CPUs to themselves. Other processes' CPU time while the command measured is read
from /proc/stat (every CPU's busy time, the hypervisor's steal included) less this process's own
(getrusage): a direct reading, where the load average is a one-minute exponential average that lags.

`measure_checked` runs a measurement and its check, measures again while they fail (bounded), and then
refuses in one line naming what disagreed and how busy the machine was (DisturbedError, exit status 7),
or with `force` returns the figures with the problems, for the caller to mark in the file it writes.
"""
from __future__ import annotations

import os
import resource
import time
from dataclasses import dataclass

from ..errors import DisturbedError

# the largest (max - min) / median of one figure's repeats that is still a measurement: a figure whose
# repeats range over more than its own median had a repeat at least doubled by something else
SPREAD_LIMIT_FRAC = 1.0
# the share of a table's figures allowed past that spread: one preempted repeat in a large table is
# weather, a quarter of the table is climate
SPREAD_SHARE_LIMIT_FRAC = 0.25
# a figure that must grow (with M, with context) may still dip by this much between neighbours: the
# decoder's row tiles make M = 4 cheaper than M = 3 by about 10 %, and repeats on a shared machine move
# by a few percent
DIP_TOLERANCE_FRAC = 0.25
# CPUs' worth of other processes' work beside the numba threads before they count as oversubscribed
# (interrupts, this shell, the editor: a few percent of a CPU is always there)
OTHERS_SLACK_CPUS = 0.3


def n_cpus() -> int:
    """CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def load_1min() -> float | None:
    try:
        return float(os.getloadavg()[0])
    except (AttributeError, OSError):
        return None


@dataclass(frozen=True, slots=True)
class CpuSnapshot:
    wall_s: float
    busy_s: float | None  # every CPU's busy time since boot (/proc/stat), None where unreadable
    own_s: float  # this process's user + system time, all its threads


def _busy_s() -> float | None:
    try:
        with open("/proc/stat", encoding="ascii") as f:
            fields = f.readline().split()
    except OSError:
        return None
    if not fields or fields[0] != "cpu" or len(fields) < 5:
        return None
    # user nice system idle iowait irq softirq steal ...: everything but idle and iowait is a CPU taken
    ticks = [int(x) for x in fields[1:]]
    busy = sum(ticks) - ticks[3] - (ticks[4] if len(ticks) > 4 else 0)
    # guest time is already counted in user on Linux; leave guest and guest_nice out to avoid counting twice
    if len(ticks) > 8:
        busy -= sum(ticks[8:10])
    return busy / float(os.sysconf("SC_CLK_TCK"))


def snapshot() -> CpuSnapshot:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return CpuSnapshot(wall_s=time.perf_counter(), busy_s=_busy_s(), own_s=r.ru_utime + r.ru_stime)


def others_cpus(start: CpuSnapshot, end: CpuSnapshot) -> float | None:
    """CPUs' worth of other processes' work (and the hypervisor's steal) between two snapshots; None when
    /proc/stat cannot be read or the span is too short for its 10 ms ticks."""
    wall = end.wall_s - start.wall_s
    if start.busy_s is None or end.busy_s is None or wall < 0.5:
        return None
    return max((end.busy_s - start.busy_s) - (end.own_s - start.own_s), 0.0) / wall


def oversubscription(threads: int, others: float | None, *, clock: str = "wall") -> list[str]:
    """The problem, if any, of `threads` numba threads beside `others` CPUs of other work. More threads
    than CPUs always; with the wall clock, other work past the CPUs the threads leave free (the threads
    then wait for a CPU, and wall time counts the wait). The thread clock (one thread, its own CPU time)
    leaves the waits out, and what sharing a CPU still costs (caches, memory) shows in the figures' own
    checks: on a 2-core AMD EPYC with other processes using 1.6-1.8 CPUs throughout (1-minute load 6-8),
    a thread-clock calibration, bench and fit predicted validate's 30 verify passes within 3.5 % at the
    median, the reference step within -5..+2 % of its calibrated time."""
    cpus = n_cpus()
    if threads > cpus:
        return [f"numba runs {threads} threads on {cpus} CPUs (oversubscribed)"]
    if others is None or clock == "thread":
        return []
    free = cpus - threads
    if others > free + OTHERS_SLACK_CPUS:
        return [f"other processes used {others:.1f} of {cpus} CPUs while it measured, beside numba's {threads} "
                f"thread{'s' * (threads > 1)} ({clock} clock): oversubscribed"]
    return []


def busy_text(others: float | None) -> str:
    load = load_1min()
    parts = []
    if others is not None:
        parts.append(f"other processes used {others:.1f} of {n_cpus()} CPUs while it measured")
    if load is not None:
        parts.append(f"1-minute load {load:.2f} on {n_cpus()} CPUs")
    return "; ".join(parts) if parts else "its load could not be read"


def spread_problems(rows, *, what: str, label, time_key: str = "time_s", min_key: str = "time_min_s",
                    max_key: str = "time_max_s") -> list[str]:
    """One problem when more than SPREAD_SHARE_LIMIT_FRAC of `rows` (dicts) have repeats ranging over
    more than SPREAD_LIMIT_FRAC of their median, naming the worst; label(row) names a figure."""
    spread = []
    for r in rows:
        med, lo, hi = float(r[time_key]), float(r[min_key]), float(r[max_key])
        if med > 0:
            spread.append(((hi - lo) / med, r))
    wide = [s for s in spread if s[0] > SPREAD_LIMIT_FRAC]
    if not spread or len(wide) <= SPREAD_SHARE_LIMIT_FRAC * len(spread):
        return []
    worst, row = max(wide, key=lambda s: s[0])
    return [f"{len(wide)} of {len(spread)} {what} spread over more than {SPREAD_LIMIT_FRAC:.0%} of their median "
            f"between repeats (worst {label(row)}: {worst:.0%})"]


def must_grow(points, *, what: str, along: str, unit: str = "ms", scale: float = 1e3) -> list[str]:
    """The first place where a cost that must grow along a sorted axis falls by more than
    DIP_TOLERANCE_FRAC below an earlier point: `points` is [(x, seconds)] sorted by x. A cost that grows
    by less than the noise (a tiny model's pass over 16 or 64 cached tokens) may tie; only a fall past
    what the tiles and the repeats explain is a contradiction."""
    for i, (x1, t1) in enumerate(points[1:], start=1):
        x0, t0 = max(points[:i], key=lambda p: p[1])
        if t1 < (1.0 - DIP_TOLERANCE_FRAC) * t0:
            return [f"{what} at {along} {x1} takes {t1 * scale:.3g} {unit}, {1 - t1 / t0:.0%} less than at {along} "
                    f"{x0} ({t0 * scale:.3g} {unit}); a cost that must grow with {along}"]
    return []


def refusal(what: str, problems: list[str], others: float | None, attempts: int | None,
            remedy: str = "measure again when it is quieter") -> DisturbedError:
    """The one-line refusal: what disagreed (the first problem, and the next two), how busy the machine
    was, and what to do. attempts None: the figures were read, not measured, by this command."""
    more = f" (and {len(problems) - 1} more: {'; '.join(problems[1:3])})" if len(problems) > 1 else ""
    after = f" after {attempts} measurement{'s' * (attempts > 1)}" if attempts else ""
    return DisturbedError(
        f"{what}: nothing written: its figures disagree{after}: {problems[0]}{more}; the machine looks busy "
        f"({busy_text(others)}): {remedy}, or pass --force to write the figures anyway, marked as disturbed")


def measure_checked(measure, check, *, what: str, threads, clock: str = "wall", attempts: int = 2,
                    force: bool = False, say=None):
    """(result, problems): measure() checked by check(result) -> [problems] and by the numba threads'
    share of the CPUs (threads: their count, or a function of the result that reads it); measured again
    while problems remain, `attempts` times in all; then refused (DisturbedError) unless `force`, which
    returns the last result with its problems."""
    if isinstance(attempts, bool) or not isinstance(attempts, int) or attempts < 1:
        raise ValueError(f"attempts {attempts!r}: expected an integer >= 1")
    say = say or (lambda msg: None)
    for i in range(attempts):
        start = snapshot()
        result = measure()
        others = others_cpus(start, snapshot())
        n = threads(result) if callable(threads) else threads
        problems = list(check(result)) + oversubscription(n, others, clock=clock)
        if not problems:
            return result, []
        if i + 1 < attempts:
            say(f"{what}: {problems[0]}; measuring again ({i + 2} of {attempts})")
    if force:
        return result, problems
    raise refusal(what, problems, others, attempts)


def disturbed_note(problems: list[str]) -> str:
    """The mark a file written with --force carries."""
    return ("DISTURBED: written with --force although its figures disagree (the machine looked busy): "
            + "; ".join(problems))


__all__ = ["measure_checked", "must_grow", "spread_problems", "oversubscription", "others_cpus", "snapshot",
           "refusal", "disturbed_note", "busy_text", "n_cpus", "SPREAD_LIMIT_FRAC", "DIP_TOLERANCE_FRAC"]
