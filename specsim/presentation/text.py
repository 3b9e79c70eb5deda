"""The decisions as text for a person: the verdict (`format_advice`), the threshold policy
(`format_policy`), a capacity plan (`format_capacity`), two scenarios side by side
(`format_comparison`), and the pieces the report shares with them (the gate table, the K-per-band
rows, stack titles, catalog paths as the repository names them). Each reads a frozen result of
`specsim.analyses` and computes nothing."""
from __future__ import annotations

import textwrap

import numpy as np

from ..analyses.advise import Advice
from ..analyses.capacity import CapacityPlan
from ..analyses.compare import Comparison
from ..analyses.gates import GateEvaluation
from ..analyses.threshold import ThresholdPolicy
from ..errors import SpecError



def _paste_lines(c: dict) -> list[str]:
    """One stack's paste lines, indented under its title: a warning, the command line or config (or
    why there is none), a caveat."""
    out = [f"    NOTE: {c['warning']}"] if c.get("warning") else []
    if c.get("command_line"):
        out.append(f"    {c['command_line']}")
    elif c.get("config") is not None:
        out.append(f"    speculative_config = {c['config']!r}")
    else:
        out.append(f"    {c.get('note', '')}")
    if c.get("caveat"):
        out.append(f"    caveat: {c['caveat']}")
    return out

def band_rows(bands: list) -> list[tuple[str, str]]:
    """(running-batch range, K) rows, ranges contiguous: a band starts after the previous one ends."""
    rows, prev = [], 0
    for b in bands:
        lo = prev + 1 if prev else b["batch_min"]
        hi = b["batch_max"]
        k = "off" if b["k"] == 0 else f"K = {b['k']}" + (" (extrapolated)" if b.get("extrapolated") else "")
        rows.append((f"{lo}–{hi}" if lo != hi else f"{lo}", k))
        prev = hi
    if rows and bands[-1]["k"] == 0:
        rows[-1] = (rows[-1][0].split("–")[0] + " and above", rows[-1][1])
    return rows


STACK_TITLES = {"vllm": "vLLM", "vllm-v0": "vLLM V0", "sglang": "SGLang", "trtllm": "TensorRT-LLM"}


def tidy_paths(text: str) -> str:
    """Catalog paths as the repository names them (scenarios/x.toml), not where this copy is installed."""
    from ..specs.catalog import KINDS, catalog_dir

    for kind in KINDS:
        try:
            root = str(catalog_dir(kind))
        except SpecError:
            continue
        text = text.replace(root + "/", f"{kind}/")
    return text


def _pct(x) -> str:
    return "-" if x is None or not np.isfinite(x) else f"{100 * x:.0f}%"


def _ms(x) -> str:
    return "-" if x is None or not np.isfinite(x) else f"{x * 1e3:.1f}"


def serving_lines(g: GateEvaluation, *, max_policies: int = 12) -> list[str]:
    """The gate evaluation as a table: p50 TPOT (ms) / SLO attainment per policy and rate."""
    t = g.table
    names = list(dict.fromkeys(t["policy"]))[:max_policies]
    rates = list(dict.fromkeys(t["rate_per_s"]))
    head = ["rate/s"] + [n + ("*" if n == g.chosen else "") for n in names] + ["best"]
    rows = []
    best = g.best_by_rate().set_index("rate_per_s")["policy"] if len(t) else {}
    for r in rates:
        sub = t[t["rate_per_s"].astype(float).fillna(-1) == (-1 if r is None or r != r else float(r))]
        row = ["as given" if r is None or r != r else f"{r:g}"]
        for n in names:
            x = sub[sub["policy"] == n]
            row.append("-" if x.empty else f"{_ms(x['tpot_p50_s'].iloc[0])}/{_pct(x['slo_attainment_frac'].iloc[0])}")
        row.append(str(best.get(r, "")) if hasattr(best, "get") else "")
        rows.append(row)
    widths = [max(len(h), *(len(x[i]) for x in rows)) for i, h in enumerate(head)]
    fmt = "  ".join(f"{{:>{w}}}" for w in widths)
    return [fmt.format(*head)] + [fmt.format(*r) for r in rows]


def format_advice(a: Advice) -> str:
    op = a.point
    lines = [f"specsim advise: {op.name}" + (f" — {op.description}" if op.description else ""), "",
             f"VERDICT: {a.headline}", f"  why: {a.reason}", f"  decided by: {a.decided_by}"]
    if a.on:
        lines.append("  K per running-batch band (K re-tuned per band, for a stack with a schedule; vLLM and SGLang run "
                     f"one K = {a.k}): " + ", ".join(f"{r}: {k}" for r, k in band_rows(a.bands)))
        if a.k_note:
            lines.append(f"  K: {a.k_note}")
    mem = a.memory
    lines.append(f"  memory a device: {mem['total_bytes'] / 1e9:.1f} of {mem['capacity_bytes'] / 1e9:.1f} GB at batch "
                 f"{op.batch_size}, context {mem['context_len']}; fits {mem['max_batch_plain']} sequences plain, "
                 f"{mem['max_batch_speculative']} speculating")
    lines.append(f"  uncertainty: {a.band.text()}" + ("" if a.band.verdict_holds else " — THE VERDICT FLIPS IN THIS BAND"))
    lines += ["", "Paste into your serving stack:"]
    for name, c in a.configs.items():
        title = STACK_TITLES.get(name, name)
        version = c["semantics"].replace(";", ":").split(":")[0]
        lines.append(f"  {title} — {version}:")
        lines += _paste_lines(c)
    if a.gates is not None:
        g = a.gates
        lines += ["", f"Serving check — p50 TPOT (ms) / share of requests within the SLO (TTFT ≤ {g.slo.ttft_s:g} s, "
                      f"TPOT ≤ {g.slo.tpot_s * 1e3:g} ms); * = chosen; best = lowest regret at that rate:"]
        lines += ["  " + x for x in serving_lines(g)]
        lines.append(f"  the chosen policy's worst regret over the rates is {g.worst_regret:.2f} (≤ 1: within "
                     f"{100 * g.tol_attainment:.0f} points of the best attainment and {100 * g.tol_tpot:.0f} % of "
                     f"its p50 TPOT at every rate)")
    lines += ["", "What would change the answer:"]
    lines += [f"  - {x}" for x in a.assumptions]
    if a.notes:
        lines += ["", "Notes:"] + [f"  - {n}" for n in a.notes]
    return tidy_paths("\n".join(lines))


def format_policy(p: ThresholdPolicy) -> str:
    lines = [f"specsim threshold: {p.scenario}",
             f"  {p.method} on {p.target} / {p.hardware}" + (f", drafter {p.drafter}" if p.drafter else ""),
             f"  operating acceptance α = {p.alpha:.3f}, context {p.context_len}, deployed K = {p.deployed_k}, "
             f"safety margin {p.margin:.2f} (speculate only where speedup ≥ {1 + p.margin:.2f}×)", ""]
    r = p.recommended
    lines.append("  RECOMMENDED: " + ("keep speculation off" if r.batch_off is not None and r.batch_off <= 1 else
                                      f"switch OFF at batch size ≥ {r.batch_off}" if r.batch_off is not None else
                                      f"keep it on: it pays at every batch to {r.batch_limit}"))
    lines.append(f"    assumes {r.assumptions}")
    if p.band is not None:
        b = p.band
        show = lambda x: "never pays" if x is not None and x <= 1 else (f"≥ {x}" if x is not None else "none")  # noqa: E731
        lines.append(f"    across the calibration's α {b['alpha_low']:.3f}–{b['alpha_high']:.3f} ({b['level']:.0%} interval of "
                     f"{b['calibration']}): switch-off at α low {show(b['batch_off_low'])}, at α high "
                     f"{show(b['batch_off_high'])}; speedup at the scenario's batch {b['speedup_low']:.2f}–"
                     f"{b['speedup_high']:.2f}×")
        for w in b["calibration_warnings"]:
            lines.append(f"    warning: outside the calibration: {w}")
    lines += ["", "  switch-off by assumption:"]
    for name, a in p.answers.items():
        mark = "*" if a is r else " "
        off = "never pays" if a.batch_off is not None and a.batch_off <= 1 else (
            f"off at batch ≥ {a.batch_off}" + (" (memory)" if a.memory_limited else "") if a.batch_off is not None
            else f"pays to batch {a.batch_limit}")
        lines.append(f"   {mark} {name:<26} {off}")
    for n in p.notes:
        lines.append(f"  note: {n}")
    lines.append("")
    if p.alpha_off is None:
        lines.append("  never pays at the smallest batch size on the acceptance grid: keep it off")
    else:
        lines.append(f"  with K re-tuned to the acceptance: off when α < {p.alpha_off:.3f}")
    if p.alpha_off_deployed_k is not None:
        ratio = f" (accepted/drafted < {p.alpha_off_ratio:.2f})" if p.alpha_off_ratio is not None else ""
        lines.append(f"  with the deployed K = {p.deployed_k}: switch OFF when α < {p.alpha_off_deployed_k:.3f}{ratio}")
    lines += ["", "  batch band      best K   worst speedup in band (K re-tuned)"]
    for b in p.bands:
        band = f"{b['batch_min']}-{b['batch_max']}"
        ext = f"   K above {p.k_observed}: extrapolated ({p.evidence})" if b.get("extrapolated") else ""
        lines.append(f"  {band:<14}  {('off' if b['k'] == 0 else b['k']):>6}   {b['speedup_min']:.2f}×{ext}")
    lines += ["", "  acceptance threshold by batch size (decode only, K re-tuned):"]
    for row in p.per_batch:
        a = ("does not fit" if not row["fits"] else "never pays" if row["alpha_off"] is None
             else f"α ≥ {row['alpha_off']:.3f}")
        lines.append(f"    B = {row['batch_size']:<5} {a}")
    for name, c in p.configs.items():
        lines += ["", f"  [{name}] ({c['semantics']})"]
        lines += _paste_lines(c)
    return "\n".join(lines)


def format_capacity(p: CapacityPlan) -> str:
    op = p.point
    lines = [f"specsim capacity: {op.name} at {p.rate_per_s:g} req/s",
             f"  SLO: TTFT ≤ {p.slo.ttft_s:g} s and TPOT ≤ {p.slo.tpot_s * 1e3:g} ms for at least "
             f"{100 * p.attainment:g} % of requests; a replica = {op.deployment.n_devices}× {op.hardware.id} "
             f"({op.target.id}); requests round-robin over the replicas", ""]
    head = ("", "replicas", "GPUs", "$/M output tokens", "within SLO at N", "at N − 1")
    rows = []
    for a in (p.without, p.with_speculation):
        if a is None:
            continue
        name = "without speculation" if not a.speculative else f"with speculation ({a.policy})"
        run = a.runs.get(a.replicas) if a.replicas else None
        below = a.below
        rows.append((name, "not met" if a.replicas is None else str(a.replicas), "-" if a.gpus is None else str(a.gpus),
                     "-" if a.cost_per_million_usd is None else f"{a.cost_per_million_usd:.3f}",
                     "-" if run is None else f"{100 * run.attainment:.1f} %",
                     "-" if below is None else f"{100 * below.attainment:.1f} %"))
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(head)]
    fmt = "  ".join(f"{{:<{w}}}" if i == 0 else f"{{:>{w}}}" for i, w in enumerate(widths))
    lines += ["  " + fmt.format(*head)] + ["  " + fmt.format(*r) for r in rows]
    if p.with_speculation is not None and p.with_speculation.replicas and p.without.replicas:
        saved = p.without.replicas - p.with_speculation.replicas
        lines.append("")
        lines.append("  speculation does not change the replica count at this rate" if saved == 0 else
                     f"  speculation {'saves' if saved > 0 else 'costs'} {abs(saved)} "
                     f"replica{'s' if abs(saved) != 1 else ''} at this rate")
    price = ("-" if p.price_usd_per_device_hour is None else f"${p.price_usd_per_device_hour:.2f} per GPU-hour")
    lines += ["", f"  price: {price} ({p.price_source})",
              f"  tokens: {p.rate_per_s:g} req/s × {p.mean_output_tokens:.0f} output tokens a request = "
              f"{p.offered_tokens_per_s:.0f} tokens/s billed per hour"]
    if p.gate is not None and p.with_speculation is not None:
        lines.append(f"  with speculation: K = {op.k}, off at running batch ≥ {p.gate} (the analytic switch-off under "
                     f"the workload, specsim threshold)")
    for n in p.notes:
        lines.append(f"  note: {n}")
    lines.append("  fleets simulated: " + "; ".join(
        f"{'with' if a.speculative else 'without'} {k} → {100 * r.attainment:.1f} %"
        for a in (p.without, p.with_speculation) if a is not None for k, r in sorted(a.runs.items())))
    return "\n".join(lines)


def format_comparison(c: Comparison) -> str:
    w0 = max(len(r[0]) for r in c.rows)
    col = 44
    lines = [f"specsim compare: {c.points[0].name} (A) vs {c.points[1].name} (B)", ""]
    lines.append(f"{'':<{w0}}  {'A':<{col}}  B")
    for label, va, vb in c.rows:
        wa = textwrap.wrap(str(va), col) or [""]
        wb = textwrap.wrap(str(vb), col) or [""]
        for j in range(max(len(wa), len(wb))):
            lines.append(f"{label if j == 0 else '':<{w0}}  {wa[j] if j < len(wa) else '':<{col}}  "
                         f"{wb[j] if j < len(wb) else ''}")
    return "\n".join(lines)


__all__ = ["format_advice", "format_policy", "format_capacity", "format_comparison", "serving_lines", "band_rows",
           "tidy_paths", "STACK_TITLES"]
