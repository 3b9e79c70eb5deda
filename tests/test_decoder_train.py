"""The training pipeline (needs torch: skipped without it) on the tiny random-weight target: one call
trains all three drafters, writes the files the decoder loads, and is deterministic for a seed; the
held-out split never overlaps the training split."""
from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("numba")

from specsim.decoder.train import corpus as C  # noqa: E402
from specsim.decoder.workloads import HELDOUT_FRAC, STDLIB_MODULES, prose  # noqa: E402


def test_heldout_code_excludes_the_workload_modules_from_training():
    train, held = C.split_code(0)
    names = {C._module_name(p) for p in train}
    for mod in STDLIB_MODULES:
        assert mod not in names and mod.split(".")[0] not in {n.split(".")[0] for n in names}
    assert not set(train) & set(held)
    assert len(held) >= len(STDLIB_MODULES)


def test_heldout_prose_is_the_last_tenth_and_the_workload_draws_from_it():
    train, held = C.split_prose()
    for tr, ho, (path, text) in zip(train, held, C.book_texts()):
        assert len(tr.text) <= int(len(text) * (1 - HELDOUT_FRAC))  # training stops before the held-out part
        assert text.endswith(ho.text)
    for src in prose(6, seed=3, split="heldout").sources:
        path, at = src.rsplit(":char ", 1)
        text = dict((str(p), t) for p, t in C.book_texts())[path]
        assert int(at) >= int(len(text) * (1 - HELDOUT_FRAC))


def _tiny_plan():
    from specsim.decoder.train import teacher as TE

    return TE.DataPlan(length=64, n_code_train=6, n_prose_train=6, n_chat_code_train=1, n_chat_prose_train=1,
                       n_code_heldout=2, n_prose_heldout=2, n_chat_heldout=2, chat_new_tokens=8,
                       chat_code_chars=120, chat_prose_chars=120)


def _tiny_recipe():
    from specsim.decoder.train import fit as FT

    few = FT.Schedule(steps=3, batch=2, eval_every=3)
    return FT.Recipe(window=64, vocab_size=128, draft_d_model=32, draft_n_head=2, draft_n_kv_head=1, draft_n_ff=64,
                     draft_layers=2, eagle_n_ff=64, n_threads=1, draft=few, medusa=few, eagle=few)


def _train_tiny(tmp_path, name):
    pytest.importorskip("torch")
    from specsim.decoder.gguf_model import load_gguf
    from specsim.decoder.model import Transformer
    from specsim.decoder.testing import write_tiny_gguf
    from specsim.decoder.train import run as R

    path = tmp_path / "t.gguf"
    if not path.is_file():
        write_tiny_gguf(path, seed=4, n_layer=2)
    target = Transformer(load_gguf(path))
    out = tmp_path / name
    out.mkdir()
    summary = R.train_all(target, lambda n: out / n, work=tmp_path / "teacher", recipe=_tiny_recipe(),
                          plan=_tiny_plan(), log=lambda s: None)
    return target, out, summary


def test_one_call_trains_everything_deterministically(tmp_path):
    target, a, sa = _train_tiny(tmp_path, "a")
    _, b, _ = _train_tiny(tmp_path, "b")  # the teacher's records are reused; training runs again
    for name in ("draft.gguf", "medusa.npz", "eagle.npz"):
        assert (a / name).read_bytes() == (b / name).read_bytes(), name
    curves = [{k: {f: v for f, v in c.items() if f != "seconds"} for k, c in json.loads((x / "training.json").read_text())
               ["curves"].items()} for x in (a, b)]
    assert curves[0] == curves[1]  # every loss and held-out figure, bit for bit (timings aside)
    assert "Held-out results" in (a / "RECIPE.md").read_text()
    assert set(sa["agreement"]) == {"draft_model_top1_agreement", "medusa_top1_agreement", "eagle_top1_agreement"}
    # what was written loads in the decoder and drafts
    from specsim.decoder import drafters as D
    from specsim.decoder import generate as G
    from specsim.decoder import trained as TR

    prompt = np.array(target.tokenizer.encode("the cat and the dog and the cat").ids)
    plain = G.generate_plain(target, prompt, 10)
    for drafter in (D.distilled(target, k=2, path=a / TR.DRAFT_GGUF), TR.MedusaDrafter(target, path=a / TR.MEDUSA_NPZ),
                    TR.EagleDrafter(target, path=a / TR.EAGLE_NPZ, depth=2, top_k=2, n_nodes=4)):
        np.testing.assert_array_equal(G.generate_speculative(target, drafter, prompt, 10).tokens, plain.tokens)


def test_stages_trained_apart_give_the_same_files(tmp_path):
    """The three drafters are seeded independently: trained one by one in separate calls (as parallel
    processes would) and assembled, they equal one sequential train_all."""
    pytest.importorskip("torch")
    from specsim.decoder.train import run as R

    target, a, _ = _train_tiny(tmp_path, "a")
    recipe = _tiny_recipe()
    stages = tmp_path / "stages"
    stages.mkdir()
    for name in R.STAGES:
        R.run_stage(target, name, stages, work=tmp_path / "teacher", recipe=recipe, log=lambda s: None)
    b = tmp_path / "b"
    b.mkdir()
    R.train_all(target, lambda n: b / n, work=tmp_path / "teacher", recipe=recipe, plan=_tiny_plan(),
                log=lambda s: None, stages_dir=stages)
    for name in ("draft.gguf", "medusa.npz", "eagle.npz"):
        assert (a / name).read_bytes() == (b / name).read_bytes(), name
