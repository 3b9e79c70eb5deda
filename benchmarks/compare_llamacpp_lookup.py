"""specsim's prompt-lookup drafters against llama.cpp's `llama-lookup`, side by side on the same GGUF,
the same prompt tokens and the same greedy token path.

  python benchmarks/compare_llamacpp_lookup.py --llama-cpp BUILD_DIR [--model GGUF] [--tokens 128]
      [--k 4] [--repeats 3] [--threads 1] [--n-code-edit 2] [--keep DIR] [--json out.json]

What it measures, per prompt and pooled over the code-writing prompts:
  llama-lookup                 llama.cpp's n-gram cache lookup (context cache only: no static or
                               dynamic cache file), --spec-draft-n-max K; its plain decode is the same
                               binary with --spec-draft-n-max 0 (no draft: one token per pass);
  specsim earliest K           `specsim decoder run --drafter prompt-lookup-earliest -k K`;
  specsim n-gram default       `specsim decoder run --drafter prompt-lookup` (its --max-draft default);
  specsim n-gram max-draft K   `specsim decoder run --drafter prompt-lookup --max-draft K`.
For each: drafted tokens, accepted tokens, accepted / drafted, tokens per verify pass (accepted + 1,
the target's own token), plain and speculative tokens per second and the speedup. Greedy (temperature
0) throughout, on one thread (llama.cpp `-t 1 -tb 1`; specsim `--threads 1 --clock thread`).

The prompts: three ordinary "write new Python" requests (the model writes code, it does not copy a
block), and --n-code-edit prompts of specsim's code-edit workload (the model copies a code block with
one rename). Each is put in the ChatML turns as specsim's `chat_prompt` does (no system turn; the
code-edit answer primed with its code fence) and written out as raw text, fed to both tools with the
special tokens parsed (specsim `--prompt-file F --raw`; llama.cpp `-f F`, which parses them). specsim
strips a prompt file's surrounding whitespace, so the text given to both ends without the template's
final newline. When `llama-tokenize` is in BUILD_DIR the prompt tokens of the two tools are compared.

Timings: llama.cpp's own "decoded N tokens in S seconds" line (decoding after the prompt; the
n-gram drafting is inside it), the median of --repeats runs; specsim's `--repeats` medians (thread
CPU time). Acceptance counts: llama.cpp prints n_drafted and n_accept; specsim's JSON has the accepted
length per cycle but not the drafted length, so the drafts are counted once more in this process with
the same drafter built the same way (every request starts the drafter afresh), and checked against the
CLI's cycles. Greedy outputs are compared as text:
llama.cpp's generated text against specsim's plain output decoded; the first differing position is
given in specsim's tokens. The load average is recorded before every timed run.

Building llama.cpp for it (CPU only; llama-tokenize is optional):

  cmake -S llama.cpp -B llama.cpp/build -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF -DGGML_NATIVE=ON
  cmake --build llama.cpp/build -j2 --target llama-lookup llama-tokenize

and pass --llama-cpp llama.cpp/build (the binaries are looked for in BUILD_DIR/bin, then BUILD_DIR).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

CODE_PROMPTS = (
    "Write a Python function that parses an INI file into a dict of dicts, with tests.",
    "Write a Python class that implements a least-recently-used (LRU) cache with get and put methods, "
    "with tests.",
    "Write a Python function that reads a CSV file and returns the average of every numeric column, "
    "with tests.",
)
LLAMA_LOOKUP = "llama-lookup"
LLAMA_TOKENIZE = "llama-tokenize"
LLAMA_CTX = 2048


class Refused(Exception):
    """A one-line reason this comparison cannot run."""


# -- prompts --------------------------------------------------------------------------------------------
def chat_text(*, text: str, response_prefix: str = "") -> str:
    """The raw text specsim's `chat_prompt` encodes, stripped as `read_prompt_file` strips a prompt."""
    return f"<|im_start|>user\n{text}<|im_end|>\n<|im_start|>assistant\n{response_prefix}".strip()


def make_prompts(*, n_code_edit: int, seed: int) -> list[dict]:
    from specsim.decoder.workloads import load_workload

    prompts = [dict(name=f"write-{i + 1}", kind="code-writing", text=chat_text(text=t))
               for i, t in enumerate(CODE_PROMPTS)]
    if n_code_edit:
        work = load_workload("code-edit", n_code_edit, seed=seed)
        prompts += [dict(name=f"edit-{i + 1}", kind="code-edit", text=chat_text(text=t, response_prefix=work.response_prefix))
                    for i, t in enumerate(work.prompts)]
    return prompts


# -- llama.cpp ------------------------------------------------------------------------------------------
def find_binary(*, build_dir: Path, name: str) -> Path | None:
    for p in (build_dir / "bin" / name, build_dir / name):
        if p.is_file() and os.access(p, os.X_OK):
            return p
    return None


def llama_prompt_tokens(*, binary: Path, model: Path, prompt_file: Path) -> list[int]:
    out = subprocess.run([str(binary), "-m", str(model), "-f", str(prompt_file), "--ids", "--no-escape", "--log-disable"],
                         capture_output=True, text=True, check=True).stdout
    found = re.findall(r"\[([0-9, ]*)\]", out)
    if not found:
        raise Refused(f"{binary}: no token list in its output")
    return [int(t) for t in found[-1].replace(" ", "").split(",") if t]


_DECODED = re.compile(r"decoded\s+(\d+) tokens in\s+([0-9.]+) seconds")


def run_lookup(*, binary: Path, model: Path, prompt_file: Path, prompt_text: str, tokens: int, n_draft: int,
               threads: int) -> dict:
    """One llama-lookup run. -n tokens - 1: it stops once it has sampled more than -n tokens, the first
    of them from the prompt's logits, as specsim's first token is."""
    cmd = [str(binary), "-m", str(model), "-f", str(prompt_file), "-n", str(tokens - 1), "--temp", "0",
           "--seed", "0", "-t", str(threads), "-tb", str(threads), "-c", str(LLAMA_CTX),
           "--spec-draft-n-max", str(n_draft), "--no-escape"]
    load = os.getloadavg()[0]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise Refused(f"{binary.name} exited {proc.returncode}: {tail}")
    log = proc.stdout + "\n" + proc.stderr
    m = _DECODED.search(log)
    fields = {k: re.search(rf"\b{k}\s*=\s*(\d+)", log) for k in ("n_predict", "n_drafted", "n_accept")}
    if m is None or any(v is None for v in fields.values()):
        raise Refused(f"{binary.name}: its output lacks the 'decoded ...' line or n_predict/n_drafted/n_accept")
    n_predict, n_drafted, n_accept = (int(fields[k].group(1)) for k in ("n_predict", "n_drafted", "n_accept"))
    # stdout: "\n\n" + the prompt's pieces + the generated pieces + "\n\n" (after decoding) + "\n\n" (at exit)
    out = proc.stdout
    at = out.find(prompt_text)
    text = out[at + len(prompt_text):] if at >= 0 else None
    if text is not None and text.endswith("\n\n\n\n"):
        text = text[:-4]
    cycles = n_predict - n_accept - 1  # verify passes after the prompt (every loop samples one non-draft token)
    return dict(n_predict=n_predict, n_drafted=n_drafted, n_accepted=n_accept, n_cycles=cycles,
                decode_tokens=int(m.group(1)), decode_s=float(m.group(2)),
                tokens_per_s=int(m.group(1)) / float(m.group(2)), text=text, load_before=load, command=cmd)


# -- specsim --------------------------------------------------------------------------------------------
SPECSIM_CONFIGS = {  # label -> (drafter, flags)
    "specsim earliest K": ("prompt-lookup-earliest", ("-k", "{k}")),
    "specsim n-gram default": ("prompt-lookup", ()),
    "specsim n-gram max-draft K": ("prompt-lookup", ("--max-draft", "{k}")),
}


def specsim_executable() -> str:
    here = Path(sys.executable).parent / "specsim"
    found = str(here) if here.is_file() else shutil.which("specsim")
    if not found:
        raise Refused("the specsim command is neither beside this Python nor on PATH")
    return found


def run_specsim(*, exe: str, model: Path, prompt_file: Path, drafter: str, flags: tuple, tokens: int,
                repeats: int, threads: int, json_path: Path) -> dict:
    cmd = [exe, "decoder", "run", "--model", str(model), "--prompt-file", str(prompt_file), "--raw",
           "--drafter", drafter, *flags, "--tokens", str(tokens), "--threads", str(threads), "--clock", "thread",
           "--repeats", str(repeats), "--json", str(json_path)]
    load = os.getloadavg()[0]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise Refused(f"specsim decoder run exited {proc.returncode}: {tail}")
    data = json.loads(json_path.read_text(encoding="utf-8"))
    data["_load_before"], data["_command"] = load, cmd
    return data


def count_drafts(*, target, prompt_ids: list, tokens: int, drafter: str, k: int, max_draft: int | None) -> dict:
    """The drafted and accepted tokens of specsim's run, replayed: the drafter built as the CLI builds it
    (a request resets it, so what ran before does not matter), then the prompt."""
    from specsim.decoder.generate import generate_speculative
    from specsim.decoder.run import DRAFTERS, RunConfig

    given = {} if max_draft is None else {"max_draft": max_draft}  # None: the CLI's default
    cfg = RunConfig(drafter=drafter, k=k, tokens=tokens, raw=True, **given)
    capacity = len(prompt_ids) + tokens + k + 1
    d = DRAFTERS[drafter].build(target, cfg, capacity)
    spec = generate_speculative(target, d, prompt_ids, tokens)
    return dict(n_drafted=sum(c.n_drafted for c in spec.cycles), n_accepted=sum(c.n_accepted for c in spec.cycles),
                n_cycles=len(spec.cycles), hist=[c.n_accepted for c in spec.cycles], tokens=spec.tokens.tolist())


# -- the table ------------------------------------------------------------------------------------------
def first_text_difference(*, tokenizer, ids: list, text: str) -> int | None:
    """The index of specsim's token in which `text` first differs from the decoded `ids`, None if one is a
    prefix of the other (compared over the shorter)."""
    ref = tokenizer.decode(ids)
    n = min(len(ref), len(text))
    at = next((i for i in range(n) if ref[i] != text[i]), None)
    if at is None:
        return None
    for j in range(1, len(ids) + 1):
        if len(tokenizer.decode(ids[:j])) > at:
            return j - 1
    return len(ids)


def pooled(*, rows: list) -> dict:
    """Sums of counts; rates as total tokens / total seconds (each prompt's seconds from its median rate)."""
    drafted = sum(r["drafted"] for r in rows)
    accepted = sum(r["accepted"] for r in rows)
    cycles = sum(r["cycles"] for r in rows)
    plain_s = sum(r["plain_tokens"] / r["plain_tps"] for r in rows)
    spec_s = sum(r["spec_tokens"] / r["spec_tps"] for r in rows)
    plain_tps = sum(r["plain_tokens"] for r in rows) / plain_s
    spec_tps = sum(r["spec_tokens"] for r in rows) / spec_s
    return dict(drafted=drafted, accepted=accepted, cycles=cycles,
                accept_rate=accepted / drafted if drafted else None,
                tokens_per_cycle=(accepted + cycles) / cycles if cycles else None,
                accepted_per_cycle=accepted / cycles if cycles else None,
                plain_tps=plain_tps, spec_tps=spec_tps, speedup=spec_tps / plain_tps)


def format_table(*, rows: dict, tools: list, prompts: list, pools: dict) -> str:
    head = (f"{'prompt':12s} {'tool':28s} {'drafted':>7s} {'accepted':>8s} {'acc/dr':>6s} {'tok/cyc':>7s} "
            f"{'plain t/s':>9s} {'spec t/s':>8s} {'speedup':>7s}")
    lines = [head, "-" * len(head)]
    fmt = lambda x, f: "—" if x is None else format(x, f)  # noqa: E731
    for name in [p["name"] for p in prompts] + list(pools):
        for tool in tools:
            r = rows[name][tool] if name in rows else pools[name][tool]
            lines.append(f"{name:12s} {tool:28s} {r['drafted']:7d} {r['accepted']:8d} {fmt(r['accept_rate'], '6.1%')} "
                         f"{fmt(r['tokens_per_cycle'], '7.2f')} {r['plain_tps']:9.1f} {r['spec_tps']:8.1f} "
                         f"{r['speedup']:6.2f}x")
        lines.append("")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--llama-cpp", required=True, type=Path, help="llama.cpp build folder holding llama-lookup")
    ap.add_argument("--model", type=Path, default=None, help="GGUF (default: specsim's fetched SmolLM2-135M)")
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--k", type=int, default=4, help="llama-lookup's draft length and the earliest drafter's -k")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--n-code-edit", type=int, default=2, help="code-edit workload prompts (seed --seed)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--keep", type=Path, default=None, help="write the prompts and raw outputs here")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    try:
        return compare(args=args)
    except Refused as exc:
        print(f"compare_llamacpp_lookup: {exc}", file=sys.stderr)
        return 2


def compare(*, args) -> int:
    build = args.llama_cpp
    if not build.is_dir():
        raise Refused(f"--llama-cpp {build}: no such folder (build llama.cpp first; see this script's docstring)")
    lookup = find_binary(build_dir=build, name=LLAMA_LOOKUP)
    if lookup is None:
        raise Refused(f"--llama-cpp {build}: no {LLAMA_LOOKUP} in {build}/bin or {build} "
                      f"(cmake --build {build} --target {LLAMA_LOOKUP})")
    tokenize = find_binary(build_dir=build, name=LLAMA_TOKENIZE)
    from specsim.decoder.fetch import default_model_path
    from specsim.decoder.run import load_target

    model = args.model or default_model_path()
    if not Path(model).is_file():
        raise Refused(f"--model {model}: no such file")
    exe = specsim_executable()
    work = args.keep or Path(tempfile.mkdtemp(prefix="compare_lookup_"))
    work.mkdir(parents=True, exist_ok=True)
    prompts = make_prompts(n_code_edit=args.n_code_edit, seed=args.seed)
    target = load_target(Path(model), args.threads)
    tok = target.tokenizer
    for p in prompts:
        p["file"] = work / f"{p['name']}.txt"
        p["file"].write_text(p["text"], encoding="utf-8")
        p["ids"] = tok.encode(p["text"]).ids
        if tokenize is not None:
            p["llama_ids"] = llama_prompt_tokens(binary=tokenize, model=Path(model), prompt_file=p["file"])
            p["same_prompt_tokens"] = p["llama_ids"] == p["ids"]
    tools = ["llama-lookup", *SPECSIM_CONFIGS]
    rows, details = {}, {}
    for p in prompts:
        name = p["name"]
        print(f"[{name}] {len(p['ids'])} prompt tokens", file=sys.stderr, flush=True)
        lp = [run_lookup(binary=lookup, model=Path(model), prompt_file=p["file"], prompt_text=p["text"],
                         tokens=args.tokens, n_draft=0, threads=args.threads) for _ in range(args.repeats)]
        ls = [run_lookup(binary=lookup, model=Path(model), prompt_file=p["file"], prompt_text=p["text"],
                         tokens=args.tokens, n_draft=args.k, threads=args.threads) for _ in range(args.repeats)]
        s = ls[0]
        plain_tps = statistics.median(r["tokens_per_s"] for r in lp)
        spec_tps = statistics.median(r["tokens_per_s"] for r in ls)
        rows[name] = {"llama-lookup": dict(
            drafted=s["n_drafted"], accepted=s["n_accepted"], cycles=s["n_cycles"],
            accept_rate=s["n_accepted"] / s["n_drafted"] if s["n_drafted"] else None,
            tokens_per_cycle=(s["n_predict"] - 1) / s["n_cycles"] if s["n_cycles"] else None,
            accepted_per_cycle=s["n_accepted"] / s["n_cycles"] if s["n_cycles"] else None,
            plain_tps=plain_tps, spec_tps=spec_tps, speedup=spec_tps / plain_tps,
            plain_tokens=lp[0]["decode_tokens"], spec_tokens=s["decode_tokens"])}
        det = details[name] = {"prompt_tokens": len(p["ids"]), "same_prompt_tokens": p.get("same_prompt_tokens"),
                               "llama_plain_runs": [{k: v for k, v in r.items() if k != "text"} for r in lp],
                               "llama_spec_runs": [{k: v for k, v in r.items() if k != "text"} for r in ls],
                               "llama_plain_text": lp[0]["text"], "llama_spec_text": s["text"]}
        n_common = min(len(r["text"] or "") for r in lp + ls)  # a speculative run may overshoot by accepted drafts
        det["llama_texts_agree"] = len({(r["text"] or "")[:n_common] for r in lp + ls}) == 1
        specsim_plain = None
        for label, (drafter, flags) in SPECSIM_CONFIGS.items():
            flags = tuple(f.format(k=args.k) for f in flags)
            js = run_specsim(exe=exe, model=Path(model), prompt_file=p["file"], drafter=drafter, flags=flags,
                             tokens=args.tokens, repeats=args.repeats, threads=args.threads,
                             json_path=work / f"{name}.{label.replace(' ', '_')}.json")
            m = js["measurement"]
            max_draft = int(flags[1]) if flags and flags[0] == "--max-draft" else None
            c = count_drafts(target=target, prompt_ids=p["ids"], tokens=args.tokens, drafter=drafter, k=args.k,
                             max_draft=max_draft)
            hist = [0] * max(len(m["accepted_length_hist"]), max(c["hist"], default=0) + 1)
            for a in c["hist"]:
                hist[a] += 1
            cli_hist = m["accepted_length_hist"] + [0] * (len(hist) - len(m["accepted_length_hist"]))
            replay_ok = (c["n_cycles"] == m["n_cycles"] and hist == cli_hist
                         and c["tokens"] == m["outputs"][0]["speculative"])
            t = js["timings"]
            plain_tokens = len(m["outputs"][0]["plain"]) - 1
            spec_tokens = len(m["outputs"][0]["speculative"]) - 1
            rows[name][label] = dict(
                drafted=c["n_drafted"], accepted=c["n_accepted"], cycles=m["n_cycles"],
                accept_rate=c["n_accepted"] / c["n_drafted"] if c["n_drafted"] else None,
                tokens_per_cycle=m["tokens_per_cycle"], accepted_per_cycle=c["n_accepted"] / m["n_cycles"],
                plain_tps=t["plain_tokens_per_s"]["median"], spec_tps=t["spec_tokens_per_s"]["median"],
                speedup=t["speedup"]["median"], plain_tokens=plain_tokens, spec_tokens=spec_tokens)
            specsim_plain = m["outputs"][0]["plain"]
            det[label] = dict(greedy_match_plain=m["greedy_match"], mismatches=m["mismatches"],
                              same_tokens_every_repeat=js["same_tokens_every_repeat"], replay_matches_cli=replay_ok,
                              timings=t, load_before=js["_load_before"], command=js["_command"],
                              acceptance_unconditional=m["acceptance_unconditional"])
        det["specsim_plain_text"] = tok.decode(specsim_plain)
        if s["text"] is None:
            raise Refused(f"{name}: the prompt text is not in llama-lookup's output, so its answer cannot be compared")
        diff = det["llama_vs_specsim_first_diff_token"] = first_text_difference(tokenizer=tok, ids=specsim_plain,
                                                                                text=s["text"])
        if diff is not None:  # specsim's top two there: a small margin is a near tie that rounding can flip
            from specsim.decoder.generate import generate_plain

            g = generate_plain(target, p["ids"], diff + 1)
            ids, logits = g.top_ids[diff], g.top_logits[diff]
            det["specsim_top2_at_diff"] = [[int(ids[0]), tok.decode([int(ids[0])]), float(logits[0])],
                                           [int(ids[1]), tok.decode([int(ids[1])]), float(logits[1])]]
    pools = {}
    writing = [p["name"] for p in prompts if p["kind"] == "code-writing"]
    if writing:
        pools["pooled-write"] = {t: pooled(rows=[rows[n][t] for n in writing]) for t in tools}
    print(format_table(rows=rows, tools=tools, prompts=prompts, pools=pools))
    for name, det in details.items():
        same = det["same_prompt_tokens"]
        diff = det["llama_vs_specsim_first_diff_token"]
        top = det.get("specsim_top2_at_diff")
        where = (f"first differs at specsim token {diff} (specsim's top two there: {top[0][1]!r} {top[0][2]:.3f}, "
                 f"{top[1][1]!r} {top[1][2]:.3f})") if top else "same"
        print(f"{name}: prompt {det['prompt_tokens']} tokens"
              f"{'' if same is None else (', same prompt tokens in both tools' if same else ', PROMPT TOKENS DIFFER')}; "
              f"greedy text llama.cpp vs specsim plain: "
              f"{where}"
              f"{'' if det['llama_texts_agree'] else ' (llama.cpp runs disagree among themselves)'}; "
              + "; ".join(f"{lb}: spec==plain {det[lb]['greedy_match_plain']}, replay ok {det[lb]['replay_matches_cli']}"
                          for lb in SPECSIM_CONFIGS))
    if "pooled-write" in pools:
        old, new = pools["pooled-write"]["specsim earliest K"], pools["pooled-write"]["specsim n-gram default"]
        ratio = lambda a, b: None if a is None or not b else a / b  # noqa: E731
        print("pooled code-writing, n-gram default / earliest K: accept rate "
              f"{ratio(new['accept_rate'], old['accept_rate']) or float('nan'):.2f}x, accepted per cycle "
              f"{ratio(new['accepted_per_cycle'], old['accepted_per_cycle']) or float('nan'):.2f}x, speedup "
              f"{ratio(new['speedup'], old['speedup']):.2f}x")
    if args.json:
        out = dict(model=str(model), llama_cpp=str(build), tokens=args.tokens, k=args.k, repeats=args.repeats,
                   threads=args.threads, prompts=[{k: (str(v) if isinstance(v, Path) else v) for k, v in p.items()}
                                                  for p in prompts],
                   rows=rows, pooled=pools, details=details)
        args.json.write_text(json.dumps(out, indent=2, default=str) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
