"""Retrain every drafter from scratch: `train_all` (the CLI's `specsim decoder train`).

Reads (or builds, into `work`) the teacher's records, trains the distilled draft model, the Medusa
heads and the EAGLE head, checks that the numpy/numba inference the decoder runs agrees with the torch
modules on held-out text, and writes the shipped files: draft.gguf, medusa.npz, eagle.npz (fp16),
training.json (the recipe, the data sources, loss curves, held-out accuracy) and RECIPE.md."""
from __future__ import annotations

import json
import platform
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from .. import trained as TR
from ..model import Transformer
from . import export as EX
from . import fit as FT
from . import teacher as TE
from .nets import LayerShape


def _target_shape(target: Transformer) -> LayerShape:
    c = target.config
    return LayerShape(d_model=c.d_model, n_head=c.n_head, n_kv_head=c.n_kv_head, n_ff=c.n_ff,
                      rope_base=c.rope_base, rms_eps=c.rms_eps)


def _np(t: torch.Tensor) -> np.ndarray:
    return t.detach().float().numpy()


def _block(blk) -> dict:
    return {n: _np(getattr(blk, n).weight) for n in TR.LAYER_TENSORS + ("attn_norm", "ffn_norm")}


def export(folder_file: Callable[[str], Path], draft, medusa, eagle, vocab, vocab_hash) -> None:
    s = draft.s
    EX.write_draft_gguf(folder_file(TR.DRAFT_GGUF), blocks=[_block(b) for b in draft.blocks],
                        output_norm=_np(draft.output_norm.weight), token_embd_proj=_np(draft.token_embd_proj.weight),
                        output_proj=_np(draft.output_proj.weight), vocab=vocab, vocab_hash=vocab_hash,
                        n_head=s.n_head, n_kv_head=s.n_kv_head, rope_base=s.rope_base, rms_eps=s.rms_eps)
    EX.write_medusa(folder_file(TR.MEDUSA_NPZ), w=_np(medusa.w), b=_np(medusa.b), vocab=vocab, vocab_hash=vocab_hash)
    EX.write_eagle(folder_file(TR.EAGLE_NPZ), fc_weight=_np(eagle.fc.weight), fc_bias=_np(eagle.fc.bias),
                   output_norm=_np(eagle.output_norm.weight), block=_block(eagle.block), vocab=vocab,
                   vocab_hash=vocab_hash)


def agreement(target: Transformer, folder: Path, held: FT.Windows, draft, medusa, eagle, n_windows: int = 4) -> dict:
    """Top-1 agreement between the exported drafters run by the decoder (fp16 weights, numba kernels,
    Q8 activations in the LM head) and the torch modules that were trained, on held-out windows."""
    out = {}
    b = held.take(slice(0, n_windows))
    with torch.no_grad():
        t_draft = draft(b.tokens).argmax(-1).numpy()
        t_med = medusa(b.hidden).argmax(-1).numpy()  # (W, L, K)
        t_eag = eagle(b.hidden[:, :-1], b.tokens[:, 1:], torch.arange(1, b.tokens.shape[1]))[1].argmax(-1).numpy()
    dm, vocab = TR.load_draft_model(target, folder / TR.DRAFT_GGUF)
    same = n = 0
    for w in range(len(b)):
        lg = dm.forward(dm.new_cache(b.tokens.shape[1]), b.tokens[w].numpy(), np.arange(b.tokens.shape[1]))
        same += int((lg.argmax(-1) == t_draft[w]).sum())
        n += lg.shape[0]
    out["draft_model_top1_agreement"] = same / n
    md = TR.MedusaDrafter(target, path=folder / TR.MEDUSA_NPZ)
    same = n = 0
    for w in range(len(b)):
        for t in range(0, b.tokens.shape[1], 8):
            same += int((md.head_logits(b.hidden[w, t].numpy()).argmax(-1) == t_med[w, t]).sum())
            n += t_med.shape[-1]
    out["medusa_top1_agreement"] = same / n
    ed = TR.EagleDrafter(target, path=folder / TR.EAGLE_NPZ)
    same = n = 0
    for w in range(len(b)):
        toks, feats = b.tokens[w].numpy(), b.hidden[w].numpy()
        cache = ed.net.new_cache(toks.size)
        lg = ed.net.forward(cache, np.zeros(toks.size - 1, np.int64), np.arange(1, toks.size),
                            inputs=ed._pairs(feats[:-1], toks[1:]))
        same += int((lg.argmax(-1) == t_eag[w]).sum())
        n += lg.shape[0]
    out["eagle_top1_agreement"] = same / n
    return out


STAGES = ("draft_model", "medusa", "eagle")


def train_stage(name: str, recipe: FT.Recipe, shape, train, held, embd, head, log):
    """One drafter, from its own seeds (initialisation: torch.manual_seed(seed * 100 + stage); batch order:
    a generator seeded the same way), so that stages run in any order or in separate processes agree."""
    i = STAGES.index(name)
    torch.manual_seed(recipe.seed * 100 + i)
    gen = torch.Generator().manual_seed(recipe.seed * 100 + 10 + i)
    if name == "draft_model":
        return FT.train_draft(recipe, shape, train, held, embd, head, gen, log)
    if name == "medusa":
        return FT.train_medusa(recipe, train, held, head, gen, log)
    return FT.train_eagle(recipe, shape, train, held, embd, head, gen, log)


def save_stage(path: Path, module, curve: dict) -> None:
    torch.save(dict(state=module.state_dict(), curve=curve), path)


def load_stage(path: Path, name: str, recipe: FT.Recipe, shape, embd, head):
    """A stage trained by `run_stage` in another process: the module rebuilt and its weights loaded."""
    from dataclasses import replace

    from .nets import DraftLM, EagleHead, MedusaHeads

    blob = torch.load(path, weights_only=False)
    if name == "draft_model":
        s = replace(shape, d_model=recipe.draft_d_model, n_head=recipe.draft_n_head,
                    n_kv_head=recipe.draft_n_kv_head, n_ff=recipe.draft_n_ff)
        module = DraftLM(s, recipe.draft_layers, embd, head)
    elif name == "medusa":
        module = MedusaHeads(embd.shape[1], recipe.medusa_heads, head)
    else:
        module = EagleHead(replace(shape, n_ff=recipe.eagle_n_ff), embd, head)
    module.load_state_dict(blob["state"])
    return module.eval(), blob["curve"]


def run_stage(target: Transformer, name: str, out: Path, *, work: Path, recipe: FT.Recipe = FT.Recipe(), log=print):
    """Train one stage on existing teacher records and save it (train_all(stages_dir=...) picks it up)."""
    rec = TE.load(work)
    FT.setup(recipe)
    vocab = FT.choose_vocabulary(rec, recipe.vocab_size)
    embd = torch.from_numpy(TR.dense(target.embedding))
    head = torch.from_numpy(TR.dense(TR.head_rows(target, vocab)))
    train = FT.windows(rec, "train", vocab, recipe.window)
    held_all = FT.windows(rec, "heldout", vocab, recipe.window)
    order = torch.randperm(len(held_all), generator=torch.Generator().manual_seed(recipe.seed + 7))
    held = held_all.take(order[:recipe.n_eval_windows])
    module, curve = train_stage(name, recipe, _target_shape(target), train, held, embd, head, log)
    save_stage(Path(out) / f"{name}.pt", module, curve)


def train_all(target: Transformer, file: Callable[[str], Path], *, work: Path, recipe: FT.Recipe = FT.Recipe(),
              plan: TE.DataPlan = TE.DataPlan(), log=print, stages_dir: Path | None = None) -> dict:
    """Everything, deterministic for (recipe.seed, plan, recipe.n_threads). `file(name)` gives the path
    each output is written to; `work` holds the teacher's records (reused when its plan matches).
    stages_dir: stages already trained there by `run_stage` (in parallel processes) are loaded, not retrained."""
    t_start = time.perf_counter()
    work = Path(work)
    meta_path = work / "meta.json"
    if meta_path.is_file() and json.loads(meta_path.read_text()).get("plan") == asdict(plan):
        log(f"teacher: reusing the records in {work}")
    else:
        TE.build(target, work, plan, log=log)
    rec = TE.load(work)
    FT.setup(recipe)
    vocab = FT.choose_vocabulary(rec, recipe.vocab_size)
    vocab_hash = TR.vocabulary_hash(target.gguf.tokens)
    embd = torch.from_numpy(TR.dense(target.embedding))
    head = torch.from_numpy(TR.dense(TR.head_rows(target, vocab)))
    train = FT.windows(rec, "train", vocab, recipe.window)
    held_all = FT.windows(rec, "heldout", vocab, recipe.window)
    order = torch.randperm(len(held_all), generator=torch.Generator().manual_seed(recipe.seed + 7))
    held = held_all.take(order[:recipe.n_eval_windows])  # a seeded mix of the held-out kinds
    held_kinds = {k: FT.windows(rec, "heldout", vocab, min(recipe.window, 128), kinds=(k,))
                  for k in ("code", "prose", "chat-code", "chat-prose")}
    coverage = {k: float((w.argmax >= 0).float().mean()) for k, w in held_kinds.items()}
    log(f"data: {len(train)} training windows, {len(held)} of {len(held_all)} held-out windows of {recipe.window} tokens; "
        f"drafting vocabulary {vocab.size} ids covers the target's argmax on held-out {coverage}")
    shape = _target_shape(target)
    done = {}
    for name in STAGES:  # each stage seeded on its own: a stage run apart (run_stage) gives the same result
        if stages_dir is not None and (Path(stages_dir) / f"{name}.pt").is_file():
            done[name] = load_stage(Path(stages_dir) / f"{name}.pt", name, recipe, shape, embd, head)
            log(f"{name}: loaded from {stages_dir}")
        else:
            done[name] = train_stage(name, recipe, shape, train, held, embd, head, log)
    (draft, c_draft), (medusa, c_medusa), (eagle, c_eagle) = (done[n] for n in STAGES)
    export(file, draft, medusa, eagle, vocab, vocab_hash)
    folder = file(TR.DRAFT_GGUF).parent
    agree = agreement(target, folder, held, draft, medusa, eagle)
    log(f"exported drafters agree with the trained modules: {agree}")
    summary = dict(
        recipe=recipe.to_dict(), plan=asdict(plan), seconds=time.perf_counter() - t_start,
        environment=dict(python=sys.version.split()[0], torch=torch.__version__, numpy=np.__version__,
                         platform=platform.platform(), stdlib=str(Path(TE.C.sysconfig.get_paths()["stdlib"]))),
        target=str(target.gguf.path), vocabulary_sha256=vocab_hash, vocab_size=int(vocab.size),
        heldout_vocab_coverage=coverage, n_train_windows=len(train), n_heldout_windows=len(held), n_heldout_windows_available=len(held_all),
        data=dict(n_tokens=rec.meta["n_tokens"],
                  sequences=[dict(split=s, kind=k, source=src) for s, k, src in
                             zip(rec.meta["split"], rec.meta["kind"], rec.meta["source"])]),
        curves=dict(draft_model=c_draft, medusa=c_medusa, eagle=c_eagle), agreement=agree,
        sizes_bytes={n: file(n).stat().st_size for n in (TR.DRAFT_GGUF, TR.MEDUSA_NPZ, TR.EAGLE_NPZ)})
    file("training.json").write_text(json.dumps(summary, indent=1))
    file("RECIPE.md").write_text(recipe_markdown(summary))
    return summary


def recipe_markdown(s: dict) -> str:
    r, p = s["recipe"], s["plan"]
    last = lambda c: c["heldout"][-1] if c["heldout"] else {}  # noqa: E731
    kinds = {}
    for q in s["data"]["sequences"]:
        kinds.setdefault((q["split"], q["kind"]), 0)
        kinds[(q["split"], q["kind"])] += 1
    lines = [
        "# Trained drafters for SmolLM2-135M-Instruct (Q4_1 GGUF): recipe and data",
        "",
        "Written by `specsim decoder train` (specsim/decoder/train). Retrain everything with",
        "",
        "    pip install -e '.[train]'      # torch, CPU build (see the README)",
        f"    specsim decoder train --out specsim/decoder/weights --force --seed {r['seed']} --threads {r['n_threads']}",
        "",
        "Deterministic for a seed and a thread count on one machine (seeded torch generators,",
        "`torch.use_deterministic_algorithms`); the Python standard library read as code is this interpreter's",
        f"({s['environment']['python']}, {s['environment']['stdlib']}).",
        "",
        "## Files",
        "",
        "| file | what | bytes |",
        "| --- | --- | ---: |",
        f"| draft.gguf | distilled draft model: {r['draft_layers']} Llama blocks, width {r['draft_d_model']}, "
        f"{r['draft_n_head']} heads / {r['draft_n_kv_head']} kv heads, FFN {r['draft_n_ff']}; embedding and LM head "
        f"are the target's through two trained projections | {s['sizes_bytes']['draft.gguf']:,} |",
        f"| medusa.npz | {r['medusa_heads']} Medusa heads (residual block each) | {s['sizes_bytes']['medusa.npz']:,} |",
        f"| eagle.npz | EAGLE head: fc(2D -> D) + one decoder layer (FFN {r['eagle_n_ff']}) + norm | "
        f"{s['sizes_bytes']['eagle.npz']:,} |",
        "| training.json | this recipe in full, every sequence's source, loss curves, held-out accuracy | |",
        "| *.png | loss curves and held-out accuracy (`specsim decoder train` draws them) | |",
        "",
        "All matrices are float16. Every drafter predicts over the same drafting vocabulary of "
        f"{s['vocab_size']} ids (the target's most frequent argmax tokens on the training split; held-out "
        f"coverage of the target's argmax: " + ", ".join(f"{k} {v:.1%}" for k, v in s["heldout_vocab_coverage"].items())
        + ") through the target's own LM-head rows.",
        "",
        "## Data",
        "",
        "The teacher is the target itself run by specsim's numba decoder (the forward pass speculation",
        "verifies against): its final-norm hidden state and top-16 next-token log-probabilities at every position.",
        f"{s['data']['n_tokens']:,} tokens in all, sequences of {p['length']} tokens (chat sequences: prompt plus",
        f"the target's own greedy answer of up to {p['chat_new_tokens']} tokens):",
        "",
        "| split | kind | sequences |",
        "| --- | --- | ---: |",
    ] + [f"| {sp} | {k} | {n} |" for (sp, k), n in sorted(kinds.items())] + [
        "",
        "- code: Python standard-library modules of this interpreter (tests, idlelib, tkinter, encodings",
        "  left out). Held out: every module the code-edit workload draws from (`workloads.STDLIB_MODULES` and",
        "  their packages) and a seeded tenth of the rest.",
        "- prose: the three public-domain books of data/corpora (see its README for their sources and",
        "  licences). Held out: the last tenth of each book (`workloads.HELDOUT_FRAC`), where the prose-heldout",
        "  workload draws its prompts.",
        "- chat: prompts of the two workload kinds built from training text only (held-out chat: from",
        "  held-out text), answered by the target.",
        "",
        "## Training",
        "",
        f"Sparse distillation to the target's top-16 probabilities (restricted to the drafting vocabulary),",
        f"AdamW, warmup then cosine, gradient-norm clip 1, bfloat16 autocast; windows of {r['window']} tokens,",
        f"batches of {r['draft']['batch']} windows; held-out figures on {s['n_heldout_windows']} of the "
        f"{s.get('n_heldout_windows_available', s['n_heldout_windows'])} held-out windows (a seeded mix of the kinds).",
        "",
        f"- draft model: {r['draft']['steps']} steps, lr {r['draft']['lr']}.",
        f"- Medusa: {r['medusa']['steps']} steps, lr {r['medusa']['lr']}; head k predicts token t+1+k from",
        f"  the target's hidden state at t, loss weight {r['medusa_decay']}^(k-1); residual weights start at 0.",
        f"- EAGLE: {r['eagle']['steps']} steps, lr {r['eagle']['lr']}; loss = smooth-L1(feature) + "
        f"{r['eagle_token_weight']} x distillation; feature noise U(-{r['eagle_noise']}, {r['eagle_noise']});",
        f"  {r['eagle_unroll']} passes per step, pass j reading the features pass j-1 predicted.",
        "",
        "## Held-out results (last evaluation)",
        "",
        f"- draft model: {last(s['curves']['draft_model'])}",
        f"- Medusa (per head 1..4): {last(s['curves']['medusa'])}",
        f"- EAGLE (per unrolled depth 1..4; depth j reads j-1 predicted features everywhere, a proxy for",
        f"  tree drafting): {last(s['curves']['eagle'])}",
        f"- exported files run by the decoder vs the torch modules, top-1 agreement: {s['agreement']}",
        "",
        f"Training took {s['seconds'] / 60:.1f} minutes ({s['environment']['platform']}, torch "
        f"{s['environment']['torch']}, {r['n_threads']} threads).",
    ]
    return "\n".join(lines) + "\n"
