"""A report to hand to a design review: one self-contained HTML page, its Markdown twin, and the CSV
behind every figure, all from one run.

`build_report(op)` runs everything once — the verdict (`advise`, with the serving simulation when
the scenario has a workload), the speedup grid (the scenario's `[sweep]`, else `report_axes`: K,
tree size, batch, context, acceptance and both attention kernels around the point), the roofline
points of the target's verify pass and the drafter's step — and keeps the rows each figure draws.
`write_report(data, out)` writes, into an OutputDir:

- report.html: the page, figures embedded as PNG data URIs, CSS inline, no script and no network;
- report.md: the same text, figures referenced as the PNG files beside it;
- <figure>.png and <figure>.csv for every figure (the CSV holds exactly the rows the figure draws);
- serving_gates.csv (every candidate gate and policy at every rate, with its regret) when simulated;
- verdict.json (advise's answer as JSON).

Sections: the verdict; the configuration and its sources; the roofline of target and drafter;
speedup against K, tree size, batch (with the regression region and the switch-off) and context,
and the (B, α) heatmap; the serving comparison of gating policies (latency percentiles with the SLO
limits, throughput, goodput against rate); calibration status (what is measured, what is assumed,
and the acceptance band used). Every number in the text is read from the same objects the figures
are drawn from.
"""
from __future__ import annotations

import base64
import html
import json
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from .. import __version__
from ..analyses.advise import Advice, advise
from ..analyses.progress import ProgressSink, progress_or_null
from ..speculation.operating_point import OperatingPoint
from .figures import (BY_NAME, FIGURES, SECTION_ROOFLINE, SECTION_SERVING, SECTION_SPEEDUP, SECTION_VERDICT,
                      FigureInputs, shown_policies, slo_text)
from .text import STACK_TITLES, band_rows, format_advice, serving_lines, tidy_paths

REPORT_BATCH_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
REPORT_CONTEXTS = (256, 1024, 4096, 16384, 65536, 131072)
REPORT_ALPHAS = (0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)
REPORT_TREE_SIZES = (2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)
SECTIONS = (SECTION_VERDICT, "Configuration and sources", SECTION_ROOFLINE, SECTION_SPEEDUP, SECTION_SERVING,
            "Calibration status")


@dataclass(frozen=True, slots=True, kw_only=True)
class FigureRecord:
    """One figure: its file stem, section, title, caption, the rows it draws and its PNG."""

    name: str
    section: str
    title: str
    caption: str
    data: pd.DataFrame
    png: bytes
    csv_name: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ReportData:
    point: OperatingPoint
    advice: Advice
    sweep: pd.DataFrame
    figures: list
    calibration: list
    texts: dict
    command: str
    skipped: list = field(default_factory=list)


def report_axes(op: OperatingPoint) -> dict:
    """The speedup grid a report draws when the scenario has no [sweep]: K 1..8 and the scenario's own
    (families that use K), tree sizes where the family and stack verify trees, batch 1..512, contexts up to the longest
    the models take, α from 0.3 to 0.9 with the point's own, both attention kernels."""
    fam = op.drafter.family
    cond = op.acceptance.model.conditional if op.acceptance.model is not None else None
    k_top = min(8, len(cond)) if cond else 8  # per-position rates say nothing past their last position
    # the scenario's own K is on the grid even past 8, or the captions that quote it would have no row
    ks = sorted({*range(1, k_top + 1), int(op.k)}) if fam.uses_k else [op.k]
    q_max = max(max(REPORT_TREE_SIZES) if fam.tree else 9, int(op.verify_q_len))
    limits = [m.max_context for m in (op.target, op.drafter.drafter) if m is not None and m.max_context]
    ctx_max = (min(limits) - q_max - 1) if limits else max(REPORT_CONTEXTS)
    contexts = sorted({c for c in REPORT_CONTEXTS if c <= ctx_max} | {int(op.context_len)})
    alphas = sorted({*REPORT_ALPHAS, round(float(op.alpha), 4)})
    axes = {"k": ks, "batch_size": list(REPORT_BATCH_SIZES), "context_len": contexts, "alpha": alphas,
            "attention": ["fused", "naive"]}
    if fam.tree and op.drafter.supports_tree and op.deployment.supports_tree:
        axes["tree_size"] = list(REPORT_TREE_SIZES)
    return axes


def _status(text: str) -> str:
    t = (text or "").lower()
    if not t:
        return "no source recorded"
    if t.startswith("default"):
        return "default"
    if t.startswith("hypothetical") or t.startswith("seed article") or "seed names" in t:
        return "idealised (seed article)"
    if t.startswith("estimate") or "estimate" in t.split(":")[0]:
        return "estimate (assumed)"
    if any(w in t for w in ("fitted", "measured", "calibrat", "profil")):
        return "measured (fitted)"
    if any(w in t for w in ("datasheet", "whitepaper", "config.json", "paper", "docs", "readme")):
        return "published"
    return "given"


def calibration_rows(op: OperatingPoint, advice: Advice) -> list[dict]:
    """What the numbers rest on: each input with its value, status (measured, published, estimate,
    assumed) and source."""
    hw, dep = op.hardware, op.deployment
    src = dict(getattr(hw, "sources", {}) or {})
    rows = [
        {"input": "memory bandwidth", "value": f"{hw.mem_bandwidth_bytes_per_s / 1e9:g} GB/s",
         "source": src.get("mem_bandwidth_gb_s", "")},
        {"input": "device memory", "value": f"{hw.memory_bytes / 1e9:.1f} GB", "source": src.get("memory_gib", src.get("memory_gb", ""))},
        {"input": f"peak compute ({op.target.compute_dtype})",
         "value": f"{hw.peak_flops_per_s[hw.compute_dtype_for(op.target.compute_dtype)] / 1e12:g} TFLOP/s",
         "source": src.get(f"peak_tflops.{hw.compute_dtype_for(op.target.compute_dtype)}", "")},
    ]
    if "kernels" in src:
        rows.append({"input": "GEMM and elementwise kernel curves", "value": "[kernels] of the hardware file",
                     "source": src["kernels"]})
    if "all_reduce" in src and dep.tp > 1:
        rows.append({"input": "all-reduce latency and bus bandwidth", "value": f"tp {dep.tp}", "source": src["all_reduce"]})
    if op.stack is not None:
        ssrc = dict(getattr(op.stack, "sources", {}) or {})
        for key, label in (("bandwidth_frac", "bandwidth fraction"), ("compute_frac", "compute fraction"),
                           ("step_overhead_us", "per-step overhead"), ("cycle_overhead_us", "per-cycle overhead")):
            rows.append({"input": f"{op.stack.id}: {label}", "value": str(getattr(op.stack, key, "")),
                         "source": ssrc.get(key, "")})
    else:
        for key, label, value in (("efficiency.bandwidth_frac", "bandwidth fraction", dep.eff.bandwidth_frac),
                                  ("efficiency.compute_frac", "compute fraction", dep.eff.compute_frac),
                                  ("efficiency.step_overhead_us", "per-step overhead",
                                   f"{dep.eff.step_overhead_s * 1e6:g} µs")):
            rows.append({"input": f"no stack: {label}", "value": f"{value}", "source": src.get(key, "")})
    rows.append({"input": "target shape", "value": op.target.id, "source": op.target.sources.get("shape", "")})
    if op.drafter is not None and op.drafter.drafter is not None:
        rows.append({"input": "drafter shape", "value": op.drafter.drafter.id,
                     "source": op.drafter.drafter.sources.get("shape", "")})
    acc_src = op.acceptance.source or ""
    rows.append({"input": "acceptance", "value": f"α = {op.alpha:.4f}", "source": acc_src,
                 "status": "measured" if any(w in acc_src.lower() for w in ("measured", "calibrat")) else
                 "assumed (no measurement of this pair in this version)"})
    b = advice.band
    rows.append({"input": "acceptance band", "value": f"α ± {b.delta:g} → " + ", ".join(f"{r['alpha']:.3f}" for r in b.rows),
                 "source": "calibrated band" if b.calibrated else "no calibrated band exists: a stated ± offset",
                 "status": "calibrated" if b.calibrated else "assumed"})
    for r in rows:
        r.setdefault("status", _status(r["source"]))
    return rows


def _ref(op: OperatingPoint, df: pd.DataFrame) -> dict:
    alpha = op.alpha
    return {"hardware": op.hardware.id, "target": op.scenario.target if op.scenario.target in set(df["target"]) else op.target.id,
            "method": op.method, "stack": op.stack.id if op.stack else "", "attention": op.deployment.attention,
            "batch_size": op.batch_size, "context_len": op.context_len, "alpha": alpha}


def build_report(op: OperatingPoint, *, rates=None, n_requests: int | None = None, alpha_delta: float = 0.05,
                 simulate: bool = True, seed: int = 0, margin: float | None = None, command: str = "",
                 progress: ProgressSink | None = None) -> ReportData:
    """Everything the report shows, computed once (see the module docstring)."""
    from . import plots
    from .sweep import (drafter_roofline_points, heatmap_grid, measured_verify_points, run_sweep, sweep_axes,
                        verify_roofline_points)

    prog = progress_or_null(progress)
    advice = advise(op, rates=rates, n_requests=n_requests, alpha_delta=alpha_delta, simulate=simulate, seed=seed,
                    margin=margin, progress=prog)
    prog.add(2)
    prog.phase("speedup grid")
    grid_op = op if op.section("sweep") else op.with_overrides(sections={"sweep": report_axes(op)})
    skipped: list = []
    df = run_sweep(grid_op, skipped=skipped)
    axes = sweep_axes(grid_op)
    hm = heatmap_grid(grid_op, axes, n_batch=36, n_alpha=41)
    roof = verify_roofline_points(op, batch_sizes=(1, 4, 16, 64))
    droof = drafter_roofline_points(op, batch_sizes=(1, 4, 16, 64))
    prog.step(text="speedup grid")
    ref = _ref(op, df)
    inputs = FigureInputs(point=op, sweep=df, reference=ref, roofline=roof, drafter_roofline=droof, heatmap=hm,
                          measured_verify=measured_verify_points(op), advice=advice)
    specs = [f for f in FIGURES if f.applies(inputs)]
    prog.add(len(specs))
    figures = []
    for spec in specs:
        prog.phase(f"plot {spec.name}")
        data, title = spec.rows(inputs)
        fig = spec.draw(data, title, inputs)
        figures.append(FigureRecord(name=spec.name, section=spec.section,
                                    title=(title.split("\n")[0] if title else spec.title),
                                    caption=spec.caption(data, inputs) if spec.caption else "",
                                    data=data.reset_index(drop=True), png=plots.png_bytes(fig), csv_name=spec.csv_name))
        prog.step(text=f"plot {spec.name}")
    point_rows = df[(df["hardware"] == ref["hardware"]) & (df["attention"] == ref["attention"])
                    & (df["batch_size"] == op.batch_size) & (df["context_len"] == op.context_len) & (~df["is_tree"])]
    texts = {"advise_text": format_advice(advice), "grid_rows": len(df), "grid_points_at_op": len(point_rows)}
    prog.step(text="done")
    return ReportData(point=op, advice=advice, sweep=df, figures=figures, calibration=calibration_rows(op, advice),
                      texts=texts, command=command, skipped=skipped)


# ---- rendering -------------------------------------------------------------------------------------

_CSS = """
body{font-family:-apple-system,Segoe UI,Helvetica,Arial,sans-serif;max-width:1100px;margin:0 auto;padding:0 1.2em 3em;
color:#1b1b1b;line-height:1.45}
h1{font-size:1.6em;margin:.6em 0 .2em}h2{border-bottom:2px solid #ddd;padding-bottom:.2em;margin-top:1.6em}
h2#s0{margin-top:.6em}
.verdict{font-size:1.2em;font-weight:600;padding:.6em .9em;border-radius:6px;margin:0 0 .6em}
.lead{margin:.2em 0 .5em}h1+.lead{margin-top:0}
.hero{display:grid;grid-template-columns:minmax(0,5fr) minmax(0,7fr);gap:1.2em;align-items:start}
.hero p{margin:.45em 0}.hero-figure{margin:0}.hero-figure img{width:100%}
.on{background:#e3f4e1;border-left:6px solid #2e7d32}.off{background:#fbe4e2;border-left:6px solid #c62828}
table{border-collapse:collapse;margin:.6em 0;font-size:.88em}td,th{border:1px solid #ccc;padding:.25em .5em;
vertical-align:top;text-align:left}th{background:#f3f3f3}td.num{text-align:right;font-variant-numeric:tabular-nums}
pre{background:#f6f8fa;padding:.6em;overflow-x:auto;font-size:.82em;white-space:pre-wrap;word-break:break-all}
figure{margin:1em 0}figure img{max-width:100%;height:auto;border:1px solid #eee}figcaption{font-size:.9em;color:#444}
nav a{margin-right:1em}.small{font-size:.85em;color:#555}
"""


def _esc(x) -> str:
    return html.escape(str(x))


def _fmt(v) -> str:
    if isinstance(v, (float, np.floating)):
        return "-" if not np.isfinite(v) else f"{v:.4g}"
    return str(v)


def _table_html(rows: list[dict], cols: list[str], headers: list[str] | None = None) -> str:
    head = "".join(f"<th>{_esc(h)}</th>" for h in (headers or cols))
    body = "".join("<tr>" + "".join(
        f"<td class='num'>{_esc(_fmt(r.get(c, '')))}</td>" if isinstance(r.get(c), (int, float, np.number))
        else f"<td>{_esc(_fmt(r.get(c, '')))}</td>" for c in cols) + "</tr>" for r in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _table_md(rows: list[dict], cols: list[str], headers: list[str] | None = None) -> str:
    def cell(v):
        return _fmt(v).replace("|", "\\|").replace("\n", " ")
    lines = ["| " + " | ".join(headers or cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(cell(r.get(c, "")) for c in cols) + " |" for r in rows]
    return "\n".join(lines)


def _describe_rows(op: OperatingPoint) -> list[dict]:
    rows = []
    for line in op.describe().split("\n")[1:]:
        body = line.strip()
        src = ""
        if body.endswith("]") and "   [" in body:
            body, src = body.rsplit("   [", 1)
            src = src[:-1]
        key, _, value = body.partition("  ")
        rows.append({"key": key.strip(), "value": value.strip(), "source": src})
    return rows


def _serving_table_rows(advice: Advice) -> list[dict]:
    g = advice.gates
    t = g.table[g.table["policy"].isin(shown_policies(advice))]
    rows = []
    for _, r in t.iterrows():
        rate = r["rate_per_s"]
        rows.append({"policy": r["policy"] + (" (chosen)" if r["policy"] == g.chosen else ""),
                     "rate req/s": "as given" if rate is None or rate != rate else float(rate),
                     "TPOT p50 ms": r["tpot_p50_s"] * 1e3, "TPOT p99 ms": r["tpot_p99_s"] * 1e3,
                     "TTFT p50 ms": r["ttft_p50_s"] * 1e3, "TTFT p99 ms": r["ttft_p99_s"] * 1e3,
                     "tokens/s": r["throughput_tokens_per_s"], "goodput req/s": r["goodput_requests_per_s"],
                     "within SLO %": 100 * r["slo_attainment_frac"], "regret": r["regret"]})
    return rows


def _verdict_blocks(a: Advice) -> dict:
    """The verdict's pieces, shared by the HTML and Markdown renderers."""
    bands = [{"running batch": r, "K": k} for r, k in band_rows(a.bands)]
    configs = []
    for name, c in a.configs.items():
        title = STACK_TITLES.get(name, name)
        text = c.get("command_line") or (f"speculative_config = {json.dumps(c['config'])}" if c.get("config") is not None
                                         else c.get("note", ""))
        if c.get("warning"):
            text = f"# NOTE: {c['warning']}\n{text}"
        if c.get("caveat"):
            text = f"{text}\n# caveat: {c['caveat']}"
        configs.append((title, c["semantics"], text))
    return {"bands": bands, "configs": configs}


def render_html(d: ReportData) -> str:
    op, a = d.point, d.advice
    vb = _verdict_blocks(a)
    parts = [f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>specsim report: {_esc(op.name)}</title>"
             f"<style>{_CSS}</style></head><body>",
             f"<h1>specsim report: {_esc(op.name)}</h1>",
             f"<p class='lead'>{_esc(op.description)} <span class='small'>specsim {__version__}; "
             f"<code>{_esc(d.command)}</code></span></p>",
             "<nav>" + "".join(f"<a href='#s{i}'>{_esc(s)}</a>" for i, s in enumerate(SECTIONS)) + "</nav>"]
    # 1 verdict: the first screen is the verdict and, beside it, its curve; the paste lines start below
    parts.append(f"<h2 id='s0'>{SECTIONS[0]}</h2>")
    hero = [f"<div class='verdict {'on' if a.on else 'off'}'>{_esc(a.headline)}</div>",
            f"<p><b>Why:</b> {_esc(a.reason)}</p>", f"<p class='small'><b>Decided by:</b> {_esc(a.decided_by)}</p>",
            f"<p class='small'><b>Uncertainty:</b> {_esc(a.band.text())}"
            + ("" if a.band.verdict_holds else " <b>— the verdict flips inside this band.</b>") + "</p>"]
    if a.k_note:
        hero.append(f"<p class='small'><b>K:</b> {_esc(a.k_note)}</p>")
    curve = [_figure_html(f, css="hero-figure") for f in d.figures if f.section == SECTIONS[0]]
    parts.append("<section class='hero'><div class='hero-text'>" + "".join(hero) + "</div>" + "".join(curve)
                 + "</section>")
    parts.append("<h3 id='paste'>Paste into your serving stack</h3>")
    for title, sem, text in vb["configs"]:
        parts.append(f"<p><b>{_esc(title)}</b> <span class='small'>({_esc(sem)})</span></p><pre>{_esc(text)}</pre>")
    if a.on:
        parts.append("<p><b>K per running-batch band</b> (K re-tuned per band, TensorRT-LLM's schedule; vLLM and "
                     f"SGLang run one K = {a.k}):</p>" + _table_html(vb["bands"], ["running batch", "K"]))
    mem = a.memory
    parts.append(f"<p><b>Memory</b> a device: {mem['total_bytes'] / 1e9:.1f} of {mem['capacity_bytes'] / 1e9:.1f} GB at "
                 f"batch {op.batch_size}, context {mem['context_len']}; fits {mem['max_batch_plain']} sequences plain, "
                 f"{mem['max_batch_speculative']} speculating.</p>")
    parts.append("<h3>What would change the answer</h3><ul>" + "".join(f"<li>{_esc(x)}</li>" for x in a.assumptions)
                 + "</ul>")
    if a.notes:
        parts.append("<h3>Notes</h3><ul>" + "".join(f"<li>{_esc(x)}</li>" for x in a.notes) + "</ul>")
    # 2 configuration
    parts.append(f"<h2 id='s1'>{SECTIONS[1]}</h2>")
    parts.append(_table_html(_describe_rows(op), ["key", "value", "source"], ["", "value", "source"]))
    # figures by section
    for i, sec in ((2, SECTIONS[2]), (3, SECTIONS[3])):
        parts.append(f"<h2 id='s{i}'>{sec}</h2>")
        if i == 3:
            parts.append(f"<p>{d.texts['grid_rows']} grid points (K, tree size, batch, context, α, attention kernel); "
                         "the shaded band is the regression region (speedup &lt; 1); × marks configurations that do "
                         "not fit in memory.</p>")
        for f in (f for f in d.figures if f.section == sec):
            parts.append(_figure_html(f))
    parts.append(f"<h2 id='s4'>{SECTIONS[4]}</h2>")
    if a.gates is None:
        parts.append("<p>This scenario has no <code>[workload]</code> (or the serving simulator does not model its "
                     "method): the verdict is analytic, decode only. A scenario with a workload (e.g. "
                     "llama-70b-h100-chat) adds this section.</p>")
    else:
        g = a.gates
        parts.append(f"<p>Workload: {_esc(g.workload_source)} ({g.n_requests} requests"
                     + (f" of {g.n_requests_total}" if g.n_requests < g.n_requests_total else "")
                     + f"), SLO: {slo_text(g.slo)}. "
                     f"{g.table['policy'].nunique()} policies simulated at each rate; chosen: <b>{_esc(g.chosen)}</b> "
                     f"(worst regret {g.worst_regret:.2f}; ≤ 1 means within {100 * g.tol_attainment:.0f} points of "
                     f"the best attainment and {100 * g.tol_tpot:.0f} % of its p50 TPOT at that rate). All candidates: "
                     "<code>serving_gates.csv</code>.</p>")
        rows = _serving_table_rows(a)
        parts.append(_table_html(rows, list(rows[0].keys())))
        parts.append("<pre>" + _esc("\n".join(serving_lines(g))) + "</pre>")
        for f in (f for f in d.figures if f.section == SECTIONS[4]):
            parts.append(_figure_html(f))
    parts.append(f"<h2 id='s5'>{SECTIONS[5]}</h2>")
    parts.append(_table_html(d.calibration, ["input", "value", "status", "source"]))
    if d.skipped:
        parts.append("<p class='small'>Grid combinations skipped: " + _esc("; ".join(s["reason"] for s in d.skipped[:5]))
                     + "</p>")
    parts.append("<p class='small'>Every figure's rows are in the CSV named under it; the numbers in the text are "
                 "read from the same rows.</p></body></html>")
    return "\n".join(parts)


def _figure_html(f: FigureRecord, css: str = "") -> str:
    uri = "data:image/png;base64," + base64.b64encode(f.png).decode("ascii")
    klass = f" class='{css}'" if css else ""
    return (f"<figure id='{f.name}'{klass}><img src='{uri}' alt='{_esc(f.title)}'><figcaption><b>{_esc(f.title)}.</b> "
            f"{_esc(f.caption)} <span class='small'>Data: {_esc(f.csv_name)}</span></figcaption></figure>")


def render_markdown(d: ReportData) -> str:
    op, a = d.point, d.advice
    vb = _verdict_blocks(a)
    out = [f"# specsim report: {op.name}", "", op.description, "", f"specsim {__version__}; `{d.command}`", "",
           f"## {SECTIONS[0]}", "", f"**{a.headline}**", "", f"Why: {a.reason}", "", f"Decided by: {a.decided_by}", ""]
    for f in (f for f in d.figures if f.section == SECTIONS[0]):
        out += _figure_md(f)
    out += [f"Uncertainty: {a.band.text()}" + ("" if a.band.verdict_holds else " — the verdict flips inside this band."),
            ""]
    if a.k_note:
        out += [f"K: {a.k_note}", ""]
    out += ["### Paste into your serving stack", ""]
    for title, sem, text in vb["configs"]:
        out += [f"**{title}** ({sem})", "", "```", text, "```", ""]
    if a.on:
        out += [f"K per running-batch band (K re-tuned per band; vLLM and SGLang run one K = {a.k}):", "",
                _table_md(vb["bands"], ["running batch", "K"]), ""]
    mem = a.memory
    out += [f"Memory a device: {mem['total_bytes'] / 1e9:.1f} of {mem['capacity_bytes'] / 1e9:.1f} GB at batch "
            f"{op.batch_size}, context {mem['context_len']}; fits {mem['max_batch_plain']} sequences plain, "
            f"{mem['max_batch_speculative']} speculating.", ""]
    out += ["### What would change the answer", ""] + [f"- {x}" for x in a.assumptions] + [""]
    if a.notes:
        out += ["### Notes", ""] + [f"- {x}" for x in a.notes] + [""]
    out += [f"## {SECTIONS[1]}", "", _table_md(_describe_rows(op), ["key", "value", "source"], ["", "value", "source"]), ""]
    for sec in SECTIONS[2:4]:
        out += [f"## {sec}", ""]
        for f in (f for f in d.figures if f.section == sec):
            out += _figure_md(f)
    out += [f"## {SECTIONS[4]}", ""]
    if a.gates is None:
        out += ["No `[workload]` in this scenario (or its method is not modelled by the serving simulator): the verdict "
                "is analytic, decode only.", ""]
    else:
        g = a.gates
        out += [f"Workload: {g.workload_source} ({g.n_requests} requests"
                + (f" of {g.n_requests_total}" if g.n_requests < g.n_requests_total else "")
                + f"); SLO: {slo_text(g.slo)}; chosen: **{g.chosen}** (worst "
                f"regret {g.worst_regret:.2f}). All candidates: `serving_gates.csv`.", ""]
        rows = _serving_table_rows(a)
        out += [_table_md(rows, list(rows[0].keys())), "", "```"] + serving_lines(g) + ["```", ""]
        for f in (f for f in d.figures if f.section == SECTIONS[4]):
            out += _figure_md(f)
    out += [f"## {SECTIONS[5]}", "", _table_md(d.calibration, ["input", "value", "status", "source"]), ""]
    return "\n".join(out)


def _figure_md(f: FigureRecord) -> list[str]:
    return [f"![{f.title}]({f.name}.png)", "", f"*{f.title}.* {f.caption} Data: `{f.csv_name}`.", ""]


def write_report(d: ReportData, out) -> list:
    """report.html, report.md, each figure's PNG and CSV, serving_gates.csv and verdict.json into
    `out` (an OutputDir). Returns the names written."""
    names = []
    written_csv = set()
    for f in d.figures:
        (out.file(f"{f.name}.png")).write_bytes(f.png)
        names.append(f"{f.name}.png")
        if f.csv_name not in written_csv:
            BY_NAME[f.name].csv_rows(f.data).to_csv(out.file(f.csv_name), index=False, float_format="%.7g")
            written_csv.add(f.csv_name)
            names.append(f.csv_name)
    if d.advice.gates is not None:
        t = d.advice.gates.table
        t.to_csv(out.file("serving_gates.csv"), index=False, float_format="%.7g")
        names.append("serving_gates.csv")
    out.write_text("verdict.json", tidy_paths(json.dumps(_jsonable(d.advice.to_dict(runs=False)), indent=2, ensure_ascii=False)) + "\n")
    out.write_text("report.md", tidy_paths(render_markdown(d)))
    out.write_text("report.html", tidy_paths(render_html(d)))
    return names + ["verdict.json", "report.md", "report.html"]


def _jsonable(obj):
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return _jsonable(obj.tolist())
    if isinstance(obj, (np.floating, float)):
        v = float(obj)
        return v if np.isfinite(v) else None
    if isinstance(obj, (np.integer,)):
        return int(obj)
    if isinstance(obj, (np.bool_,)):
        return bool(obj)
    return obj


__all__ = ["ReportData", "FigureRecord", "build_report", "write_report", "render_html", "render_markdown",
           "report_axes", "calibration_rows", "SECTIONS"]
