"""`specsim validate`: predict what the reference decoder measures on this machine, measure it, and
print prediction against measurement (see specsim.calibration.validate)."""
from __future__ import annotations

import argparse
import sys

from .common import parse_list, print_json


def register(sub) -> None:
    from ..calibration.validate import PARTS, ValidateConfig

    d = ValidateConfig.__dataclass_fields__
    p = sub.add_parser(
        "validate", help="check the calibrated model against the reference decoder on this machine",
        description="Predict, from the local hardware profile (specsim calibrate machine), the decoder's stack "
        "(specsim calibrate steps --format bench --write-stack) and the shipped acceptance calibrations (specsim "
        "calibrate acceptance), the decoder's verify step time for each M and context, its plain and speculative "
        "tokens per second and speedup for each drafter and K, and where speculation stops paying; then run the "
        "decoder (median of --repeats, with the range: this machine is shared) and print prediction against "
        "measurement with relative errors, naming the cost-model term behind a large error.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--hardware", default=d["hardware"].default,
                   help="hardware id or TOML; pass the file `calibrate machine --out` wrote by path (an id reads the "
                        "catalog's copy, which an installed package ships inside itself)")
    p.add_argument("--stack", default=d["stack"].default,
                   help="the decoder's stack id or TOML; pass the file `calibrate steps --write-stack` wrote by path")
    p.add_argument("--target", default=d["target"].default, help="the catalog model of the GGUF")
    p.add_argument("--model", help="target GGUF (default: the fetched SmolLM2-135M)")
    p.add_argument("--m", dest="m_values", default=",".join(map(str, d["m_values"].default)), help="verify pass sizes M")
    p.add_argument("--contexts", default=",".join(map(str, d["contexts"].default)), help="context lengths L")
    p.add_argument("--repeats", type=int, default=d["repeats"].default, help="timed repeats of every figure")
    p.add_argument("--drafters", default=",".join(d["drafters"].default), help="decoder drafters")
    p.add_argument("--ks", default=",".join(map(str, d["ks"].default)), help="draft lengths K")
    p.add_argument("--workloads", default=",".join(d["workloads"].default),
                   help="workloads of the speculative runs (each drafter's calibration on that workload predicts it; "
                        "break-even points come from their spread)")
    p.add_argument("--calibration-workload",
                   help="predict every run from the calibration of this workload instead of the run's own (a held-out "
                        "check: e.g. --workloads prose-heldout --calibration-workload prose)")
    p.add_argument("--layers", type=int, help="layers of the layer-skip drafter (default: 4/5 of the target's)")
    p.add_argument("--n-prompts", type=int, default=d["n_prompts"].default, help="prompts per workload")
    p.add_argument("--tokens", type=int, default=d["tokens"].default, help="new tokens per prompt")
    p.add_argument("--seed", type=int, default=d["seed"].default, help="workload and sampling seed")
    p.add_argument("--threads", type=int, help="numba threads (default: all)")
    p.add_argument("--parts", default=",".join(PARTS), help="what to validate: verify, spec")
    p.add_argument("--no-split", action="store_true", help="do not time each pass's kernels apart")
    p.add_argument("--clock", choices=("wall", "thread"), default="wall",
                   help="what the timings read: wall time, or this thread's CPU time (a machine shared with other work; "
                        "needs --threads 1)")
    p.add_argument("--other-machine", action="store_true",
                   help="run even when the hardware profile's [machine] names another CPU, kernel paths, thread count "
                        "or clock than this run (refused otherwise: its errors would measure the other machine)")
    p.add_argument("--out", help="folder for validate.json, verify.csv, spec.csv, break_even.csv, report.txt and "
                                 "validate.png")
    p.add_argument("--force", action="store_true",
                   help="replace an earlier run's files in --out; and report figures that contradict themselves (a "
                        "busy machine: refused otherwise, after --attempts measurements of the verify passes), marked "
                        "as disturbed")
    p.add_argument("--attempts", type=int, default=d["attempts"].default,
                   help="measurements of the verify passes before figures that disagree are refused")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of the report")
    p.set_defaults(func=_run)


def _run(args) -> int:
    import json

    from ..calibration.validate import ValidateConfig, format_report, validate
    from ..presentation.output import OutputDir
    from .common import to_jsonable

    out = OutputDir(args.out, force=args.force) if args.out else None
    cfg = ValidateConfig(
        model=args.model, hardware=args.hardware, stack=args.stack, target=args.target,
        m_values=tuple(parse_list(args.m_values, "--m", int, minimum=1)),
        contexts=tuple(parse_list(args.contexts, "--contexts", int, minimum=1)), repeats=args.repeats,
        drafters=tuple(parse_list(args.drafters, "--drafters", str)), ks=tuple(parse_list(args.ks, "--ks", int, minimum=1)),
        workloads=tuple(parse_list(args.workloads, "--workloads", str)),
        calibration_workload=args.calibration_workload, layers=args.layers, n_prompts=args.n_prompts,
        tokens=args.tokens, seed=args.seed, threads=args.threads, parts=tuple(parse_list(args.parts, "--parts", str)),
        split=not args.no_split, clock=args.clock, other_machine=args.other_machine, attempts=args.attempts,
        force=args.force)
    res = validate(cfg, progress=None if args.json else (lambda m: print(f"  {m}", file=sys.stderr)))
    report = format_report(res)
    if out is not None:
        from ..presentation.validate_plots import close, validate_figure

        with out:
            out.write_text("validate.json", json.dumps(to_jsonable(res.to_dict()), indent=2) + "\n")
            out.write_text("verify.csv", res.verify.to_csv(index=False))
            out.write_text("spec.csv", res.spec.to_csv(index=False))
            out.write_text("break_even.csv", res.break_even.to_csv(index=False))
            out.write_text("report.txt", report + "\n")
            fig = validate_figure(res.verify, res.spec)
            fig.savefig(out.file("validate.png"), dpi=120, bbox_inches="tight")
            close(fig)
    if args.json:
        print_json(res.to_dict())
        return 0
    print(report)
    if out is not None:
        print(f"wrote {out.path}/ (validate.png: prediction against measurement)")
    return 0
