"""`specsim predict`: one operating point, from a scenario file and/or flags."""
from __future__ import annotations

import argparse

from ..speculation.predict import predict
from ..specs.scenario import METHODS, Scenario, load_scenario
from .common import print_json, table


def register(sub) -> None:
    p = sub.add_parser(
        "predict",
        help="predict speedup of linear speculation at one operating point",
        description="Predict plain vs speculative decoding at one operating point with the roofline "
        "cost model. Give a scenario (shipped name or TOML path), flags, or both (flags win).",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("scenario", nargs="?", help="scenario name (e.g. seed-70b-hbm) or path to a TOML file")
    p.add_argument("--hardware", help="hardware id or TOML path (e.g. h100-sxm)")
    p.add_argument("--target", help="target model id, alias or TOML path")
    p.add_argument("--drafter", help="drafter model id, alias or TOML path")
    p.add_argument("--method", choices=list(METHODS), help="drafting method")
    p.add_argument("--k", type=int, help="draft length K (tokens per cycle proposed)")
    acc = p.add_mutually_exclusive_group()
    acc.add_argument("--alpha", type=float, help="i.i.d. per-token acceptance rate in [0, 1]")
    acc.add_argument("--tau", type=float, help="mean tokens per cycle, bonus token included, in [1, K+1]")
    p.add_argument("--batch", type=int, dest="batch_size", help="batch size B (sequences decoding together)")
    p.add_argument("--context", type=int, dest="context_len", help="context length L (tokens in the KV cache)")
    p.add_argument("--tp", type=int, help="tensor-parallel degree of the target")
    p.add_argument("--drafter-tp", type=int, help="tensor-parallel degree of the drafter")
    p.add_argument("--attention", choices=["fused", "naive"], help="attention kernel model")
    p.add_argument("--target-dtype", help="override the target's weight format (e.g. fp8, int4-awq)")
    p.add_argument("--allow-cross-tokenizer", action="store_true", default=None,
                   help="allow a drafter whose tokenizer differs from the target's")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    p.set_defaults(func=_run)


def _run(args) -> int:
    base = load_scenario(args.scenario) if args.scenario else Scenario(name="cli")
    scenario = base.with_overrides(
        hardware=args.hardware, target=args.target, drafter=args.drafter, method=args.method, k=args.k,
        alpha=args.alpha, tau=args.tau, batch_size=args.batch_size, context_len=args.context_len, tp=args.tp,
        drafter_tp=args.drafter_tp, attention=args.attention, target_dtype=args.target_dtype,
        allow_cross_tokenizer=args.allow_cross_tokenizer,
    )
    result = predict(scenario).to_dict()
    if args.json:
        print_json(result)
        return 0
    r = result
    ms = lambda s: f"{s * 1e3:.3f} ms"  # noqa: E731
    rows = [
        ("hardware", f"{r['hardware']} × {r['tp']}"),
        ("target / drafter", f"{r['target']} / {r['drafter']}"),
        ("K, alpha, tau", f"{r['k']}, {r['alpha'] if r['alpha'] is None else round(r['alpha'], 4)}, {r['tokens_per_cycle']:.3f}"),
        ("batch, context", f"{r['batch_size']}, {r['context_len']}"),
        ("target step (plain)", ms(r["target_step_time_s"])),
        ("draft step", ms(r["draft_step_time_s"])),
        ("verify pass (K+1 tokens)", ms(r["verify_time_s"])),
        ("cycle", ms(r["cycle_time_s"])),
        ("tokens per cycle", f"{r['tokens_per_cycle']:.3f}"),
        ("plain tokens/s", f"{r['baseline_tokens_per_s']:.2f}"),
        ("speculative tokens/s", f"{r['tokens_per_s']:.2f}"),
        ("speedup", f"{r['speedup']:.3f}×"),
        ("B·(K+1) vs ops:byte", f"{r['verify_tokens_in_flight']} vs {r['ridge_flops_per_byte']:.0f} FLOP/byte"),
        ("memory per device", ", ".join(f"{k} {v / 1e9:.2f} GB" for k, v in r["memory_per_device_bytes"].items())),
    ]
    print(table(rows, title=f"specsim predict: {r['scenario']}"))
    return 0
