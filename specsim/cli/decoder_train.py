"""`specsim decoder train`: retrain every drafter (distilled draft model, Medusa heads, EAGLE head) on
the target and write the files the decoder ships (needs the optional torch extra: pip install -e '.[train]')."""
from __future__ import annotations

from pathlib import Path

from ..errors import SpecError


def register_train(sub) -> None:
    t = sub.add_parser("train", help="retrain the trained drafters (draft model, Medusa, EAGLE) on the target; "
                                     "needs torch (pip install -e '.[train]')")
    t.add_argument("--model", type=Path, default=None, help="target GGUF (default: the fetched SmolLM2-135M)")
    t.add_argument("--out", type=Path, required=True,
                   help="folder for draft.gguf, medusa.npz, eagle.npz, training.json, RECIPE.md and the plots "
                        "(specsim/decoder/weights to replace the shipped ones, with --force)")
    t.add_argument("--force", action="store_true", help="replace the files of an earlier run in --out")
    t.add_argument("--seed", type=int, default=0, help="seed of the data choice, initialisation and batch order")
    t.add_argument("--threads", type=int, default=2, help="torch threads (results depend on it; default 2)")
    t.add_argument("--work", type=Path, default=None,
                   help="folder for the teacher's records (default: $SPECSIM_CACHE/train-teacher-seed<seed>); "
                        "reused when its data plan matches")
    t.add_argument("--quick", action="store_true", help="a tiny data plan and a few steps: checks the pipeline "
                                                        "in a minute or two (not for shipping)")
    t.set_defaults(func=_train)


def _train(args) -> int:
    import importlib.util

    if importlib.util.find_spec("torch") is None:  # looked up, not imported: torch stays in decoder/train/
        raise SpecError("specsim decoder train needs PyTorch: pip install -e '.[train]' (the CPU build is "
                        "enough; see the README's decoder section)")
    from ..decoder.fetch import cache_dir, default_model_path
    from ..decoder.gguf_model import load_gguf
    from ..decoder.model import Transformer
    from ..decoder.train import fit as FT
    from ..decoder.train import run as R
    from ..decoder.train import teacher as TE
    from ..presentation.output import OutputDir
    from ..presentation.training_plots import training_figures

    if args.seed < 0:
        raise SpecError(f"--seed {args.seed}: expected an integer >= 0")
    if args.threads < 1:
        raise SpecError(f"--threads {args.threads}: expected an integer >= 1")
    plan, recipe = TE.DataPlan(seed=args.seed), FT.Recipe(seed=args.seed, n_threads=args.threads)
    if args.quick:
        plan = TE.DataPlan(seed=args.seed, n_code_train=4, n_prose_train=4, n_chat_code_train=1, n_chat_prose_train=1,
                           n_code_heldout=2, n_prose_heldout=2, n_chat_heldout=2, chat_new_tokens=16)
        few = FT.Schedule(steps=4, batch=2, eval_every=2)
        recipe = FT.Recipe(seed=args.seed, n_threads=args.threads, window=128, draft=few, medusa=few, eagle=few)
    work = args.work or cache_dir() / f"train-teacher-seed{args.seed}{'-quick' if args.quick else ''}"
    target = Transformer(load_gguf(args.model or default_model_path()))
    with OutputDir(args.out, force=args.force) as out:
        summary = R.train_all(target, out.file, work=work, recipe=recipe, plan=plan,
                              log=lambda s: print(s, flush=True))
        training_figures(summary, out.file)
    print(f"wrote {args.out}: " + ", ".join(f"{n} {b / 1e6:.1f} MB" for n, b in summary["sizes_bytes"].items()))
    return 0
