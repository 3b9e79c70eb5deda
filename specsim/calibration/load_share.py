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
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import SpecError
from .load_fit import LoadCalibration, assign_roles, calibrate_load
from .sources import source_groups, source_key

DEFAULT_SHARES = (0.0, 0.25, 0.5, 0.75, 1.0)
# Each candidate calibrates every sweep once (the shipped ten sweeps take minutes a share on a laptop
# core), so the scan is bounded: a 0.05 grid over [0, 1] at most.
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

    shares: the candidates; by_share: share -> the calibration of every sweep at it; chosen: sweep name
    -> the share the sweeps of other sources chose for it, None where they have no predicted check row
    to choose on (the sweep is then predicted at its stack's own share, `calibrate_load`'s default);
    loo: the calibration whose fits are each sweep's at its chosen share (its summary: the figures on
    rows no choice saw); overall: the share over all sweeps (None: no predicted check row at all);
    sources: sweep name -> its source (the keys of its rows, joined by ' + '); groups: sweep name -> the
    number of the group it is left out with."""

    shares: tuple
    by_share: dict
    chosen: dict
    loo: LoadCalibration
    overall: float
    sources: dict
    groups: dict

    def grid(self) -> list[dict]:
        """Per sweep and share, the median |error| over the sweep's check rows."""
        out = []
        for s in self.shares:
            for f in self.by_share[s].fits:
                out.append({"sweep": f.sweep.name, "source": self.sources[f.sweep.name], "share": s,
                            "median_abs_error": _median_check_error([f])})
        return out

    def to_dict(self) -> dict:
        return {"shares": list(self.shares), "chosen": dict(self.chosen), "overall_share": self.overall,
                "sources": dict(self.sources), "groups": dict(self.groups), "grid": self.grid(),
                **{f"loo_{k}": v for k, v in self.loo.summary().items()}}


def sweep_sources(sweep) -> set:
    """The sources a sweep's rows cite (`sources.source_key`; the sweep's name for a row citing none)."""
    return {source_key(r.source, fallback=sweep.name) for r in sweep.rows}


def leave_one_source_out(sweeps, *, shares=DEFAULT_SHARES, roles: str = "plain+lowest", seed: int = 0,
                         progress=None, cost_source: str | None = None,
                         where: str = "leave one source out") -> ShareFit:
    """See the module docstring. Ties go to the smaller share (the one that changes less). cost_source:
    what prices the passes (None: the default, auto); where: what the refusals name (a flag)."""
    shares = tuple(sorted({float(s) for s in shares}))
    if len(shares) > MAX_SHARES:
        raise SpecError(f"{where}: {len(shares)} shares; at most {MAX_SHARES} (each calibrates every sweep once)")
    if not shares or any(not (0.0 <= s <= 1.0) for s in shares):
        raise SpecError(f"token shares {list(shares)}: expected shares in [0, 1]")
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
    by_share = {}
    for s in shares:
        if progress is not None:
            progress(f"token share {s:g}")
        by_share[s] = calibrate_load(sweeps, roles=roles, seed=seed, token_share=s, cost_source=cost_source)
    names = [f.sweep.name for f in by_share[shares[0]].fits]

    def best(exclude: int | None) -> float | None:
        scores = []
        for s in shares:
            e = _median_check_error([f for i, f in enumerate(by_share[s].fits) if group_of[i] != exclude])
            scores.append(np.inf if e is None else e)
        if not np.isfinite(min(scores)):
            return None  # no predicted check row to choose on: argmin would name the first share
        return shares[int(np.argmin(scores))]

    by_group = {g: best(g) for g in sorted(set(group_of))}
    chosen = {n: by_group[group_of[i]] for i, n in enumerate(names)}
    unchosen = [i for i, n in enumerate(names) if chosen[n] is None]
    own = {}
    if unchosen:  # at the stack's own share, as a calibration without a share predicts them
        if progress is not None:
            progress("the stack's own share, for sweeps with no share chosen")
        alone = calibrate_load([sweeps[i] for i in unchosen], roles=roles, seed=seed, cost_source=cost_source)
        own = dict(zip(unchosen, alone.fits))
    fits = tuple(own[i] if chosen[n] is None else by_share[chosen[n]].fits[i] for i, n in enumerate(names))
    return ShareFit(shares=shares, by_share=by_share, chosen=chosen, loo=LoadCalibration(fits=fits, roles=roles),
                    overall=best(None), sources={n: " + ".join(sorted(keys[i])) for i, n in enumerate(names)},
                    groups={n: group_of[i] for i, n in enumerate(names)})


__all__ = ["ShareFit", "leave_one_source_out", "sweep_sources", "DEFAULT_SHARES", "MAX_SHARES"]
