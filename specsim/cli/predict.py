"""`specsim predict`: one operating point, from a scenario file and/or flags."""
from __future__ import annotations

import argparse

from ..specs.scenario import DEFAULTS, Scenario, load_scenario
from ..speculation.operating_point import ALL_METHODS, method_host_label, resolve
from ..speculation.predict import format_band, predict
from .common import add_cost_source_flag, print_json, table


def _d(name: str) -> str:
    """'(default: X)' from the Scenario dataclass, the one place defaults live."""
    v = DEFAULTS[name]
    return f" (default without a scenario: {v})" if v is not None else " (default: none)"


def add_point_flags(p) -> None:
    """The flags that override a scenario's top-level fields (predict, advise, report, ...)."""
    p.add_argument("scenario", nargs="?", help="scenario name (e.g. seed-70b-hbm; `specsim scenarios list`) or a TOML path")
    p.add_argument("--hardware", help="hardware id or TOML path" + _d("hardware"))
    p.add_argument("--target", help="target model id, alias or TOML path" + _d("target"))
    p.add_argument("--drafter", help="draft model id, alias or TOML path (method draft_model)" + _d("drafter"))
    p.add_argument("--method", choices=list(ALL_METHODS), help="drafter family" + _d("method"))
    p.add_argument("--stack", help="serving stack id (vllm, sglang, trtllm, gpt-fast, hf-eager, llama.cpp) or a TOML "
                   "path; 'none' for the hardware's own efficiency" + _d("stack"))
    p.add_argument("--stack-version", help="the stack's release, e.g. 0.28.0: the stack file's load regimes that "
                   "change with the release apply (async scheduling, CUDA-graph sizes, a running-batch cap); "
                   "without it only those for every release do" + _d("stack_version"))
    p.add_argument("--k", type=int, help="draft length K (tokens a cycle drafts; a tree's depth)" + _d("k"))
    p.add_argument("--tree-size", type=int, help="verify a tree of M nodes (root included) instead of a chain; 0 "
                   "for a chain" + _d("tree_size"))
    acc = p.add_mutually_exclusive_group()
    acc.add_argument("--alpha", type=float, help="i.i.d. per-token acceptance rate in [0, 1]")
    acc.add_argument("--tau", type=float, help="mean tokens per cycle, bonus token included, in [1, K+1]")
    p.add_argument("--batch", type=int, dest="batch_size", help="batch size B (sequences decoding together)"
                   + _d("batch_size"))
    p.add_argument("--context", type=int, dest="context_len", help="context length L (tokens in the KV cache)"
                   + _d("context_len"))
    p.add_argument("--tp", type=int, help="devices the target runs on (tensor-parallel degree)" + _d("tp"))
    p.add_argument("--drafter-tp", type=int, help="tensor-parallel degree of a draft model" + _d("drafter_tp"))
    p.add_argument("--attention", choices=["fused", "naive"], help="attention kernel model" + _d("attention"))
    p.add_argument("--temperature", type=float, help="sampling temperature" + _d("temperature"))
    p.add_argument("--target-dtype", help="override the target's weight format (e.g. fp8, int4-awq)")
    p.add_argument("--kv-cache-dtype", help="override the KV cache's dtype (e.g. fp8)" + _d("kv_cache_dtype"))
    add_cost_source_flag(p)
    base = p.add_mutually_exclusive_group()
    base.add_argument("--baseline-tokens-per-s", type=float, help="a measured plain decoding speed at this batch "
                      "(all sequences together): the stack's fixed costs are fitted to it")
    base.add_argument("--baseline-step-time-s", type=float, help="a measured plain decoding step at this batch, "
                      "in seconds (instead of --baseline-tokens-per-s)")
    p.add_argument("--allow-cross-tokenizer", action="store_true", default=None,
                   help="allow a drafter whose tokenizer differs from the target's")


def point_from_args(args):
    """The operating point a scenario and the override flags describe."""
    base = load_scenario(args.scenario) if args.scenario else Scenario(name="cli")
    return resolve(base, hardware=args.hardware, target=args.target, drafter=args.drafter, method=args.method,
                   stack=args.stack, stack_version=args.stack_version, k=args.k, tree_size=args.tree_size,
                   alpha=args.alpha, tau=args.tau,
                   batch_size=args.batch_size, context_len=args.context_len, tp=args.tp, drafter_tp=args.drafter_tp,
                   attention=args.attention, temperature=args.temperature, target_dtype=args.target_dtype,
                   kv_cache_dtype=args.kv_cache_dtype, cost_source=args.cost_source,
                   allow_cross_tokenizer=args.allow_cross_tokenizer, baseline_tokens_per_s=args.baseline_tokens_per_s,
                   baseline_step_time_s=args.baseline_step_time_s)


def register(sub) -> None:
    p = sub.add_parser(
        "predict",
        help="predict the speedup of speculative decoding at one operating point",
        description="Predict plain against speculative decoding at one operating point with the roofline "
        "cost model. Give a scenario (shipped name or TOML path), flags, or both (flags win). Without a "
        "scenario the defaults shown apply. Prints the step, draft, verify and cycle times, tokens per "
        "second and the speedup, with the configuration and where each value came from (--describe).",
    )
    add_point_flags(p)
    p.add_argument("--describe", action="store_true", help="print the resolved configuration and its sources first")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    p.set_defaults(func=_run)


def _run(args) -> int:
    op = point_from_args(args)
    result = predict(op).to_dict()
    if args.json:
        print_json(result)
        return 0
    if args.describe:
        print(op.describe())
        print()
    r = result
    ms = lambda s: f"{s * 1e3:.3f} ms"  # noqa: E731
    spec = op.speculative
    rows = [
        ("hardware", f"{r['hardware']} × {r['n_devices']}" + (f", stack {r['stack']}" if r["stack"] else "")),
        ("target / drafter", f"{r['target']} / {r['drafter'] or (op.method if spec else '-')}"),
        ("batch, context", f"{r['batch_size']}, {r['context_len']}"),
        ("priced by", "; ".join(f"{who}: {src}" for who, src in r["priced_by"].items())),
    ]
    over = r["host_overlaps_device"]

    def both(device_s, host_s, overlapped):
        """'device X + host Y' (in turn) or 'max(device X, host Y)' (the stack overlaps them)."""
        if device_s is None:
            return ""
        parts = f"device {ms(device_s)}, host {ms(host_s)}"
        return f" = max({parts}: overlapped)" if overlapped else f" = {parts.replace(', ', ' + ')}"

    rows.append(("plain iteration", ms(r["target_step_time_s"])
                 + both(r.get("plain_device_s"), r.get("plain_host_s"), over["plain"])))
    if spec:
        rows += [
            ("K, alpha, tau", f"{r['k']}, {'-' if r['alpha'] is None else round(r['alpha'], 4)}, "
                              f"{r['tokens_per_cycle']:.3f}"
                              + ("" if r.get("draft_frac", 1.0) == 1.0 else
                                 f" (drafting in {r['draft_frac']:.1%} of cycles: alpha describes those)")),
            ("draft pass (mean)", ms(r["draft_step_time_s"]) + " device"),
            ("drafting per cycle", ms(r["draft_time_s"]) + " device"),
            (f"verify pass ({r['verify_q_len']} tokens)" if r.get("draft_frac", 1.0) == 1.0 else
             f"verify pass ({r['verify_q_len']} tokens for {r['draft_frac']:.1%} of sequences, 1 for the rest)",
             ms(r["verify_time_s"]) + " device"),
        ]
        if r.get("cycle_device_s") is not None:
            rest = r["cycle_device_s"] - r["draft_time_s"] - r["verify_time_s"]
            rows += [("other device work", f"{ms(rest)} a cycle (extra logits read for rejection, a tree's KV "
                                           "compaction)"),
                     ("host work", f"{ms(r['cycle_host_s'])} a cycle"
                                   + (", overlapped with the device" if over["speculative"] else ", after the device")
                                   + (f" ({method_host_label(r['sources']['method host work'])})"
                                      if r["sources"].get("method host work") else ""))]
        else:
            rows += [("cycle overhead", ms(r["cycle_overhead_s"]))]
        rows += [
            ("cycle", ms(r["cycle_time_s"]) + both(r.get("cycle_device_s"), r.get("cycle_host_s"), over["speculative"])),
            ("tokens per cycle", f"{r['tokens_per_cycle']:.3f}"),
        ]
    rows += [("plain tokens/s", f"{r['baseline_tokens_per_s']:.2f}")]
    band = r if "speedup_low" in r else None
    if spec:
        tps = f"{r['tokens_per_s']:.2f}" + (f" [{r['tokens_per_s_low']:.2f}, {r['tokens_per_s_high']:.2f}]" if band else "")
        rows += [("speculative tokens/s", tps),
                 ("speedup", format_band(r["speedup"], band) + ("  (a SLOWDOWN: speculation costs more than it saves here)"
                                                             if r["speedup"] < 1 else "")),
                 ("B·q vs ops:byte", f"{r['verify_tokens_in_flight']:g} tokens vs {r['ridge_flops_per_byte']:.0f} FLOP/byte")]
    rows.append(("memory per device", ", ".join(f"{k} {v / 1e9:.2f} GB" for k, v in r["memory_per_device_bytes"].items())))
    if op.anchor is not None:
        rows.append(("anchored", f"to the measured baseline: {op.anchor['how']} (predicted "
                                 f"{op.anchor['predicted_step_time_s'] * 1e3:.3f} ms before)"))
    if band:
        rows.append(("acceptance band", f"α {r['alpha_low']:.3f}–{r['alpha_high']:.3f}: the {r['level']:.0%} interval of "
                                        f"calibration {r['calibration']}"))
    print(table(rows, title=f"specsim predict: {r['scenario']}"))
    for w in (band or {}).get("calibration_warnings", []):
        print(f"warning: outside the calibration: {w}")
    return 0
