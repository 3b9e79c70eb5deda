"""Serving metrics from one engine run: per-request latencies, percentiles, throughput, goodput,
memory, batching and the speculative-decoding counters as vLLM reports them.

Definitions (times in seconds, over requests that completed):
- TTFT = first token − arrival; TPOT = (finish − first token) / (output tokens − 1), the mean
  inter-token latency of one request (undefined for one-token outputs); E2E = finish − arrival.
- makespan = last finish (or the end of the run) − first arrival; throughput = tokens emitted /
  makespan; goodput = completed requests meeting both SLOs per second of makespan (DistServe's
  definition), and their output tokens per second.
- KV utilisation: blocks held / blocks in the cache, weighted by iteration duration.
- vLLM spec-decode counters (vLLM V1 `SpecDecodingStats` naming): num_drafts = (sequence, step)
  pairs that drafted; num_draft_tokens; num_accepted_tokens; draft_acceptance_rate = accepted /
  draft tokens; mean_acceptance_length = 1 + accepted / num_drafts (tokens per verify, bonus
  included); acceptance_rate_per_position[j] = drafts accepted at position j / num_drafts.
- wasted verify slots: draft tokens the target verified and rejected.
- prefix caching: prefix_hit_rate = prompt tokens found cached at each request's first admission /
  prompt tokens of the requests admitted (vLLM's prefix cache hit rate counts every lookup; this is
  the first one per request, what a trace's block ids imply).
- the drafter's catch-up: tokens its first passes ran over beyond the new token (accepted drafts,
  the bonus, what it missed while a gate kept it off) and their share of the busy time.
- a fleet: busy_frac is the mean over replicas; `replica_frame` gives one row per replica.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..errors import SpecError
from .record import EngineRun
from .requests import REJECT_REASONS, STATUS_DONE, STATUS_NAMES, STATUS_REJECTED

PERCENTILES = (50, 90, 99)


@dataclass(frozen=True, slots=True, kw_only=True)
class SLO:
    """Latency targets for goodput: a request meets the SLO if TTFT <= ttft_s and TPOT <= tpot_s
    (a one-token request has no TPOT and is judged on TTFT alone)."""

    ttft_s: float = float("inf")
    tpot_s: float = float("inf")

    def __post_init__(self) -> None:
        for name in ("ttft_s", "tpot_s"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
                raise SpecError(f"[slo]: field '{name}' = {v!r}: expected a positive number of seconds")


def requests_frame(run: EngineRun, slo: SLO) -> pd.DataFrame:
    """One row per request, in request order."""
    out = run.output_tokens
    with np.errstate(invalid="ignore", divide="ignore"):
        ttft = run.first_token_at_s - run.arrival_at_s
        tpot = np.where(out > 1, (run.finish_at_s - run.first_token_at_s) / (out - 1), np.nan)
        e2e = run.finish_at_s - run.arrival_at_s
    done = run.status == STATUS_DONE
    ttft = np.where(done, ttft, np.nan)
    tpot = np.where(done, tpot, np.nan)
    e2e = np.where(done, e2e, np.nan)
    meets = done & (ttft <= slo.ttft_s) & ((out == 1) | (tpot <= slo.tpot_s))
    return pd.DataFrame({
        "request": np.arange(out.size), "arrival_at_s": run.arrival_at_s, "first_token_at_s": run.first_token_at_s,
        "finish_at_s": run.finish_at_s, "prompt_tokens": run.prompt_tokens, "output_tokens": out,
        "emitted_tokens": run.emitted_tokens, "status": pd.Categorical.from_codes(run.status, STATUS_NAMES),
        "reject_reason": np.asarray(REJECT_REASONS, dtype=object)[run.reject_reason],
        "ttft_s": ttft, "tpot_s": tpot, "e2e_s": e2e, "meets_slo": meets, "n_preemptions": run.n_preemptions,
        "n_spec_steps": run.n_spec_steps, "n_draft_tokens": run.n_draft_tokens,
        "n_accepted_tokens": run.n_accepted_tokens, "replica": run.replica, "prefill_replica": run.prefill_replica,
        "prefix_hit_tokens": run.prefix_hit_tokens, "priority": run.priority, "n_swaps": run.n_swaps,
    })


def steps_frame(run: EngineRun) -> pd.DataFrame:
    """One row per engine iteration."""
    df = pd.DataFrame(run.steps)
    df["kv_used_frac"] = df["kv_used_blocks"] / run.n_blocks
    return df


def batch_size_distribution(steps: pd.DataFrame) -> pd.DataFrame:
    """Running batch size: iterations and time spent at each size."""
    g = steps.groupby("n_running").agg(n_steps=("duration_s", "size"), time_s=("duration_s", "sum")).reset_index()
    g["time_frac"] = g["time_s"] / g["time_s"].sum() if len(g) else g["time_s"]
    return g.rename(columns={"n_running": "batch_size"})


def _pct(x: np.ndarray, prefix: str, out: dict) -> None:
    x = x[np.isfinite(x)]
    out[f"{prefix}_mean_s"] = float(x.mean()) if x.size else float("nan")
    for p in PERCENTILES:
        out[f"{prefix}_p{p}_s"] = float(np.percentile(x, p)) if x.size else float("nan")


def summarize(run: EngineRun, requests: pd.DataFrame, steps: pd.DataFrame) -> dict:
    """Flat dict of the run's headline numbers (seconds, tokens, fractions)."""
    done = requests["status"].to_numpy() == "done"
    n = len(requests)
    s: dict = {"n_requests": n, "n_done": int(done.sum()),
               "n_rejected": int((run.status == STATUS_REJECTED).sum()),
               "n_unfinished": int(n - done.sum() - (run.status == STATUS_REJECTED).sum())}
    arrivals = run.arrival_at_s[np.isfinite(run.arrival_at_s)]
    start = float(arrivals.min()) if arrivals.size else 0.0
    fin = run.finish_at_s[np.isfinite(run.finish_at_s)]
    end = float(fin.max()) if fin.size and s["n_unfinished"] == 0 else run.end_at_s
    makespan = max(end - start, 0.0)
    s["makespan_s"] = makespan
    emitted = int(run.emitted_tokens.sum())
    s["output_tokens"] = emitted
    s["throughput_tokens_per_s"] = emitted / makespan if makespan > 0 else float("nan")
    s["throughput_requests_per_s"] = s["n_done"] / makespan if makespan > 0 else float("nan")
    for col in ("ttft_s", "tpot_s", "e2e_s"):
        _pct(requests[col].to_numpy(dtype=float), col[: -len("_s")], s)
    meets = requests["meets_slo"].to_numpy()
    s["slo_attainment_frac"] = float(meets.sum() / n) if n else float("nan")
    s["goodput_requests_per_s"] = float(meets.sum() / makespan) if makespan > 0 else float("nan")
    s["goodput_tokens_per_s"] = float(requests["output_tokens"].to_numpy()[meets].sum() / makespan) if makespan > 0 else float("nan")
    dur = steps["duration_s"].to_numpy()
    busy = float(dur.sum())
    n_rep = len(run.roles)
    s["n_replicas"] = n_rep
    s["n_steps"] = len(steps)
    s["busy_frac"] = busy / (makespan * n_rep) if makespan > 0 else float("nan")
    if len(steps):
        w = dur / busy
        s["kv_used_frac_mean"] = float((steps["kv_used_frac"].to_numpy() * w).sum())
        s["kv_used_frac_max"] = float(steps["kv_used_frac"].max())
        b = steps["n_running"].to_numpy()
        s["batch_size_mean"] = float((b * w).sum())
        s["batch_size_p50"] = float(np.percentile(b, 50))
        s["batch_size_p99"] = float(np.percentile(b, 99))
        s["batch_size_max"] = int(b.max())
        s["step_time_mean_s"] = float(dur.mean())
    s["n_preemptions"] = int(run.n_preemptions.sum())
    num_drafts = int(steps["n_spec"].sum()) if len(steps) else 0
    draft_tokens = int(steps["n_draft_tokens"].sum()) if len(steps) else 0
    accepted = int(steps["n_accepted_tokens"].sum()) if len(steps) else 0
    s["num_drafts"] = num_drafts
    s["num_draft_tokens"] = draft_tokens
    s["num_accepted_tokens"] = accepted
    s["draft_acceptance_rate"] = accepted / draft_tokens if draft_tokens else float("nan")
    s["mean_acceptance_length"] = 1.0 + accepted / num_drafts if num_drafts else float("nan")
    s["acceptance_rate_per_position"] = (run.accepted_per_position / num_drafts).tolist() if num_drafts else []
    s["wasted_verify_slots"] = int(steps["n_wasted_slots"].sum()) if len(steps) else 0
    decode_steps = int(steps["n_decode"].sum()) if len(steps) else 0
    decode_emitted = int(steps["n_emitted_tokens"].sum() - steps["n_prefill_done"].sum()) if len(steps) else 0
    s["tokens_per_decode_step"] = decode_emitted / decode_steps if decode_steps else float("nan")
    admitted = run.status != STATUS_REJECTED
    prompt = float(run.prompt_tokens[admitted].sum())
    s["prefix_hit_tokens"] = int(run.prefix_hit_tokens.sum())
    s["prefix_hit_rate"] = float(run.prefix_hit_tokens.sum() / prompt) if prompt else float("nan")
    s["prefix_evicted_units"] = int(run.prefix_evicted_units)
    s["drafter_catchup_tokens"] = int(steps["n_catchup_tokens"].sum()) if len(steps) else 0
    s["drafter_catchup_time_frac"] = float(steps["catchup_s"].sum() / busy) if busy > 0 else float("nan")
    s["n_swaps"] = int(run.n_swaps.sum())
    s["swap_time_s"] = float(steps["swap_s"].sum()) if len(steps) else 0.0
    s["n_swap_fallbacks"] = int(run.n_swap_fallbacks)
    if run.priority is not None and len(np.unique(run.priority)) > 1:
        done_mask = run.status == STATUS_DONE
        for p in np.unique(run.priority):
            sel = (run.priority == p)
            for col in ("ttft_s", "tpot_s"):
                x = requests[col].to_numpy(dtype=float)[sel & done_mask]
                x = x[np.isfinite(x)]
                s[f"{col[:-2]}_p50_s_priority{int(p)}"] = float(np.percentile(x, 50)) if x.size else float("nan")
                s[f"{col[:-2]}_p99_s_priority{int(p)}"] = float(np.percentile(x, 99)) if x.size else float("nan")
    return s


def replica_frame(run: EngineRun, requests: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame:
    """One row per replica: its role, requests finished there, iterations, busy time, mean batch,
    KV use, preemptions and prefix hits of the requests first admitted there."""
    rows = []
    makespan = float(np.nanmax(run.finish_at_s)) - float(np.nanmin(run.arrival_at_s)) if len(requests) else 0.0
    for rid, role in enumerate(run.roles):
        st = steps[steps["replica"] == rid]
        dur = st["duration_s"].to_numpy()
        busy = float(dur.sum())
        w = dur / busy if busy > 0 else dur
        mine = run.replica == rid
        first_here = (run.prefill_replica == rid) | ((run.prefill_replica < 0) & mine)
        prompt = float(run.prompt_tokens[first_here].sum())
        rows.append({
            "replica": rid, "role": role, "n_done": int(((run.status == STATUS_DONE) & mine).sum()),
            "n_prefilled": int(first_here.sum()), "n_steps": len(st), "busy_s": busy,
            "busy_frac": busy / makespan if makespan > 0 else float("nan"),
            "batch_size_mean": float((st["n_running"].to_numpy() * w).sum()) if busy > 0 else float("nan"),
            "kv_used_frac_mean": float((st["kv_used_blocks"].to_numpy() * w).sum() / run.n_blocks) if busy > 0 else float("nan"),
            "n_preempted": int(st["n_preempted"].sum()),
            "prefix_hit_rate": float(run.prefix_hit_tokens[first_here].sum() / prompt) if prompt else float("nan"),
            "drafter_catchup_tokens": int(st["n_catchup_tokens"].sum()),
        })
    return pd.DataFrame(rows)
