"""How much of a plain curve's per-sequence cost a stack pays per emitted token, fitted across sweeps
and checked leave one source out.

A load calibration (`load_fit`) fixes from the plain curve the seconds an iteration spends per
sequence beyond the roofline (`device_per_seq_us`). A plain sequence emits one token an iteration,
so the plain curve cannot tell work done per sequence from work done per emitted token; a
speculating sequence emits τ tokens a cycle, and the two readings part there. The stacks' code
does output work per token (vLLM V1 `Scheduler._update_request_with_output`: each new token appended
and `check_stop`ped in turn; the output processor detokenizing it; SGLang's
`process_batch_result_decode` extending `output_ids` by the accepted tokens and checking them), so
the share paid per token is a property of the stack (`specs.regimes` property `per_token_share`).
Its size is not in the code: it is fitted here on published sweeps, and every figure it yields is
reported on sweeps whose source it never saw.

`leave_one_source_out(sweeps, shares=...)`: every sweep calibrated at each candidate share; the
sweeps grouped by source (`sources.source_key` of their rows' `source` text; sweeps whose rows share
a source go together: the two SpecForge #339 sweeps share one plain table, the four W1 M3 sweeps of
yuqiz7/llm-inference-bench one benchmark); for each group, the share whose median |error| over the
*other* groups' check rows is least, and the group's rows predicted with it — the figures a planner
would get on a deployment none of the fit's sources measured. The share over all sweeps (the one a
stack file ships) is reported beside them.

`extras_us` scans a second figure the same way, jointly with the share: the host microseconds a
speculating sequence costs a cycle beyond its stack's `spec_per_seq_us` (`load_fit.fit_sweep`). A
calibration with one speculative fit load puts everything the lowest load shows into a fixed cost a
cycle and keeps the stack's per-sequence figure, which is an estimate in the Python engines (SGLang's
`NGRAMWorker._prepare_draft_tokens` and EAGLE's verify bookkeeping walk the batch's requests in Python
a cycle); the scan chooses that figure on the other sources' higher loads, so a sweep's own rows never
set it. Each (share, extra) point calibrates every sweep once.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import SpecError
from .load_fit import LoadCalibration, assign_roles, calibrate_load
from .sources import source_groups, source_key

DEFAULT_SHARES = (0.0, 0.25, 0.5, 0.75, 1.0)
# Each candidate calibrates every sweep once (the shipped ten sweeps take minutes a share on a laptop
# core), so the scan is bounded: a 0.05 grid over [0, 1] at most, and as many (share, extra) points.
MAX_SHARES = 21


def _median_check_error(fits) -> float | None:
    errs = []
    for f in fits:
        t = f.rows
        e = t.loc[(t["role"] == "check") & t["relative_error"].notna(), "relative_error"].astype(float).abs()
        errs += e.tolist()
    return float(np.median(errs)) if errs else None


@dataclass(frozen=True, slots=True, kw_only=True)
class ShareFit:
    """The scan and the leave-one-source-out choice.

    shares, extras_us: the candidates (every pair is a point); by_point: (share, extra) -> the
    calibration of every sweep at it; chosen: sweep name -> the share the sweeps of other sources chose
    for it, None where they have no predicted check row to choose on (the sweep is then predicted at its
    stack's own share and figures, `calibrate_load`'s default); chosen_extra: sweep name -> the extra
    microseconds chosen with it (None likewise); loo: the calibration whose fits are each sweep's at its
    chosen point (its summary: the figures on rows no choice saw); overall, overall_extra: the point over
    all sweeps (None: no predicted check row at all); sources: sweep name -> its source (the keys of its
    rows, joined by ' + '); groups: sweep name -> the number of the group it is left out with."""

    shares: tuple
    by_point: dict
    chosen: dict
    loo: LoadCalibration
    overall: float
    sources: dict
    groups: dict
    extras_us: tuple = (0.0,)
    chosen_extra: dict | None = None
    overall_extra: float | None = 0.0

    @property
    def points(self) -> list[tuple]:
        return [(s, e) for s in self.shares for e in self.extras_us]

    @property
    def by_share(self) -> dict:
        """share -> the calibration at it (a scan of shares alone: one extra)."""
        if len(self.extras_us) != 1:
            raise SpecError("by_share: the scan has several extras; read by_point[(share, extra)]")
        return {s: self.by_point[(s, self.extras_us[0])] for s in self.shares}

    def grid(self) -> list[dict]:
        """Per sweep and point, the median |error| over the sweep's check rows."""
        out = []
        for s, e in self.points:
            for f in self.by_point[(s, e)].fits:
                out.append({"sweep": f.sweep.name, "source": self.sources[f.sweep.name], "share": s,
                            "spec_seq_extra_us": e, "median_abs_error": _median_check_error([f])})
        return out

    def to_dict(self) -> dict:
        return {"shares": list(self.shares), "extras_us": list(self.extras_us), "chosen": dict(self.chosen),
                "chosen_spec_seq_extra_us": dict(self.chosen_extra or {}), "overall_share": self.overall,
                "overall_spec_seq_extra_us": self.overall_extra,
                "sources": dict(self.sources), "groups": dict(self.groups), "grid": self.grid(),
                **{f"loo_{k}": v for k, v in self.loo.summary().items()}}


def sweep_sources(sweep) -> set:
    """The sources a sweep's rows cite (`sources.source_key`; the sweep's name for a row citing none)."""
    return {source_key(r.source, fallback=sweep.name) for r in sweep.rows}


def leave_one_source_out(sweeps, *, shares=DEFAULT_SHARES, extras_us=(0.0,), roles: str = "plain+lowest",
                         seed: int = 0, progress=None, cost_source: str | None = None,
                         where: str = "leave one source out") -> ShareFit:
    """See the module docstring. Ties go to the smaller share, then the smaller extra (the point that
    changes less). cost_source: what prices the passes (None: the default, auto); where: what the
    refusals name (a flag)."""
    shares = tuple(sorted({float(s) for s in shares}))
    extras_us = tuple(sorted({float(e) for e in extras_us}))
    n_points = len(shares) * len(extras_us)
    if n_points > MAX_SHARES:
        what = (f"{len(shares)} shares" if len(extras_us) == 1 else
                f"{len(shares)} shares x {len(extras_us)} extras = {n_points} points")
        raise SpecError(f"{where}: {what}; at most {MAX_SHARES} (each calibrates every sweep once)")
    if not shares or any(not (0.0 <= s <= 1.0) for s in shares):
        raise SpecError(f"token shares {list(shares)}: expected shares in [0, 1]")
    if not extras_us or any(not (np.isfinite(e) and 0.0 <= e <= 1e6) for e in extras_us):
        raise SpecError(f"extra host cost a speculating sequence {list(extras_us)} us: expected finite figures in "
                        f"[0, 1e6] us")
    sweeps = list(sweeps)
    if len(sweeps) < 2:
        raise SpecError(f"{where}: {len(sweeps)} sweep given, at least 2 needed")
    if not any(r.role == "check" for sw in sweeps for r in assign_roles(sw, roles).rows):
        raise SpecError(f"{where}: no check row in the {len(sweeps)} sweeps (roles {roles!r}), so no "
                        f"share can be chosen: each sweep's share is chosen on the other sources' check rows; mark "
                        f"rows role=check or use --roles plain+lowest")
    keys = [sweep_sources(sw) for sw in sweeps]
    group_of = source_groups(keys)
    if len(set(group_of)) < 2:
        raise SpecError(f"{where}: the {len(sweeps)} sweeps all share one source "
                        f"({' + '.join(sorted(set().union(*keys)))}); sweeps of at least 2 sources needed")
    points = [(s, e) for s in shares for e in extras_us]
    by_point = {}
    for s, e in points:
        if progress is not None:
            progress(f"token share {s:g}" + (f", {e:g} us more a speculating sequence" if len(extras_us) > 1 else ""))
        by_point[(s, e)] = calibrate_load(sweeps, roles=roles, seed=seed, token_share=s, cost_source=cost_source,
                                          spec_seq_extra_us=e)
    names = [f.sweep.name for f in by_point[points[0]].fits]

    def best(exclude: int | None) -> tuple | None:
        scores = []
        for p in points:
            e = _median_check_error([f for i, f in enumerate(by_point[p].fits) if group_of[i] != exclude])
            scores.append(np.inf if e is None else e)
        if not np.isfinite(min(scores)):
            return None  # no predicted check row to choose on: argmin would name the first point
        return points[int(np.argmin(scores))]

    by_group = {g: best(g) for g in sorted(set(group_of))}
    chosen_point = {n: by_group[group_of[i]] for i, n in enumerate(names)}
    chosen = {n: (p[0] if p is not None else None) for n, p in chosen_point.items()}
    chosen_extra = {n: (p[1] if p is not None else None) for n, p in chosen_point.items()}
    unchosen = [i for i, n in enumerate(names) if chosen[n] is None]
    own = {}
    if unchosen:  # at the stack's own share, as a calibration without a share predicts them
        if progress is not None:
            progress("the stack's own share, for sweeps with no share chosen")
        alone = calibrate_load([sweeps[i] for i in unchosen], roles=roles, seed=seed, cost_source=cost_source)
        own = dict(zip(unchosen, alone.fits))
    fits = tuple(own[i] if chosen_point[n] is None else by_point[chosen_point[n]].fits[i]
                 for i, n in enumerate(names))
    overall = best(None)
    return ShareFit(shares=shares, by_point=by_point, chosen=chosen, loo=LoadCalibration(fits=fits, roles=roles),
                    overall=overall[0] if overall is not None else None,
                    sources={n: " + ".join(sorted(keys[i])) for i, n in enumerate(names)},
                    groups={n: group_of[i] for i, n in enumerate(names)}, extras_us=extras_us,
                    chosen_extra=chosen_extra, overall_extra=overall[1] if overall is not None else None)


__all__ = ["ShareFit", "leave_one_source_out", "sweep_sources", "DEFAULT_SHARES", "MAX_SHARES"]
