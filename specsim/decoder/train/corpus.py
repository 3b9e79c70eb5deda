"""The training text and its held-out split (no torch here).

Code: Python standard-library modules (this interpreter's own source files), in sorted path order.
Every module the code-edit workload draws prompts from (`workloads.STDLIB_MODULES`, with its package)
and every test module is left out of training; a seeded sample of other modules is held out as well,
so held-out code is read by nothing that trains. Prose: each book under data/corpora, Gutenberg
boilerplate stripped; its first 90 % trains, its last 10 % (`workloads.HELDOUT_FRAC`) is held out (the
prose-heldout workload draws its prompts from there)."""
from __future__ import annotations

import re
import sysconfig
import textwrap
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..workloads import HELDOUT_FRAC, STDLIB_MODULES, corpora_dir, strip_gutenberg


@dataclass(frozen=True, slots=True, kw_only=True)
class Text:
    kind: str  # "code" or "prose"
    source: str  # file (and character range)
    text: str


def stdlib_files() -> list[Path]:
    """Top-level and package modules of the standard library, tests, idlelib and site-packages aside."""
    root = Path(sysconfig.get_paths()["stdlib"])
    skip = re.compile(r"(^|/)(test|tests|idle_test|idlelib|site-packages|dist-packages|lib2to3|ensurepip|"
                      r"turtledemo|tkinter|encodings|__pycache__)(/|$)")
    return sorted(p for p in root.rglob("*.py") if not skip.search(p.relative_to(root).as_posix()))


def _module_name(path: Path) -> str:
    root = Path(sysconfig.get_paths()["stdlib"])
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def workload_modules() -> set[str]:
    """The code-edit workload's modules and their top-level packages (json.encoder -> json, json.*)."""
    return {m.split(".")[0] for m in STDLIB_MODULES} | set(STDLIB_MODULES)


def split_code(seed: int, *, heldout_frac: float = 0.1) -> tuple[list[Path], list[Path]]:
    """(train files, held-out files): the workload's modules are always held out, and a seeded
    `heldout_frac` of the others too."""
    held = workload_modules()
    train, heldout = [], []
    rng = np.random.default_rng(np.random.SeedSequence([seed, 31]))
    for p in stdlib_files():
        top = _module_name(p).split(".")[0]
        if top in held or _module_name(p) in held:
            heldout.append(p)
        elif rng.random() < heldout_frac:
            heldout.append(p)
        else:
            train.append(p)
    return train, heldout


def book_texts() -> list[tuple[Path, str]]:
    return [(p, strip_gutenberg(p.read_text(encoding="utf-8", errors="replace")))
            for p in sorted(corpora_dir().glob("*/*.txt"))]


def split_prose() -> tuple[list[Text], list[Text]]:
    """Each book cut at 1 - HELDOUT_FRAC of its length (at the paragraph break before the cut)."""
    train, heldout = [], []
    for path, text in book_texts():
        cut = int(len(text) * (1 - HELDOUT_FRAC))
        brk = text.rfind("\n\n", 0, cut)
        cut_train = brk if brk > 0 else cut  # training stops at a paragraph break before the held-out part
        train.append(Text(kind="prose", source=f"{path}:chars 0-{cut_train}", text=text[:cut_train]))
        heldout.append(Text(kind="prose", source=f"{path}:chars {cut}-{len(text)}", text=text[cut:]))
    return train, heldout


def code_texts(files: list[Path]) -> list[Text]:
    out = []
    for p in files:
        try:
            s = p.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        out.append(Text(kind="code", source=str(p), text=s))
    return out


def token_chunks(tokenizer, texts: list[Text], *, n_chunks: int, length: int, seed: int,
                 stream: int) -> tuple[np.ndarray, list[str]]:
    """n_chunks windows of `length` tokens, each from a seeded random text (weighted by its length)
    at a seeded random offset; returns int64 (n_chunks, length) and each window's source."""
    rng = np.random.default_rng(np.random.SeedSequence([seed, stream]))
    sizes = np.array([len(t.text) for t in texts], np.float64)
    chunks, sources = [], []
    cache: dict[int, np.ndarray] = {}
    while len(chunks) < n_chunks:
        i = int(rng.choice(len(texts), p=sizes / sizes.sum()))
        if i not in cache:
            cache[i] = np.array(tokenizer.encode(texts[i].text).ids, np.int64)
        ids = cache[i]
        if ids.size <= length:
            continue
        at = int(rng.integers(0, ids.size - length))
        chunks.append(ids[at:at + length])
        sources.append(f"{texts[i].source} tokens {at}-{at + length}")
    return np.stack(chunks), sources


def chat_prompts(texts: list[Text], *, n: int, seed: int, stream: int, max_chars: int) -> list[tuple[str, str, str]]:
    """Prompts of the two workload kinds built from training text (never from held-out text):
    (prompt text, response prefix, source). Code: a function and an instruction to rewrite it with a
    renamed identifier; prose: a passage and an instruction to continue it."""
    from ..workloads import _rename_target  # the same instruction the workload writes

    rng = np.random.default_rng(np.random.SeedSequence([seed, stream]))
    out = []
    while len(out) < n:
        t = texts[int(rng.integers(len(texts)))]
        if t.kind == "code":
            lines = t.text.splitlines()
            starts = [i for i, ln in enumerate(lines) if re.match(r"\s*def \w+\(", ln)]
            if not starts:
                continue
            i = starts[int(rng.integers(len(starts)))]
            chunk, j = [], i
            while j < len(lines) and sum(len(c) + 1 for c in chunk) + len(lines[j]) < max_chars:
                chunk.append(lines[j])
                j += 1
            code = textwrap.dedent("\n".join(chunk))
            old = _rename_target(code)
            out.append((f"```python\n{code}\n```\n\nRewrite the code above with `{old}` renamed to `new_{old}`.",
                        "```python\n", f"{t.source}:{i + 1}-{j}"))
        else:
            paras = [m.start() for m in re.finditer(r"\n\n(?=\S)", t.text)] or [0]
            at = paras[int(rng.integers(len(paras)))]
            passage = t.text[at:at + max_chars].strip()
            passage = passage[:passage.rfind(" ")] if " " in passage else passage
            out.append((f"Continue this passage in the same style:\n\n{passage}", "", f"{t.source}:char {at}"))
    return out
