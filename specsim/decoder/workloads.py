"""Named, seeded prompt sets on real text nobody here wrote.

- "code-edit": a chunk of a Python standard-library source file on this machine plus an instruction
  to repeat it with a small change (the case prompt lookup is made for).
- "prose": a passage of a public-domain book from the corpora folder (`corpora/` under the data
  folder: $SPECSIM_DATA, default the copy shipped in the package) with an instruction to continue it; Project Gutenberg
  boilerplate stripped, CRLF normalised.
"""
from __future__ import annotations

import builtins
import importlib
import inspect
import keyword
import re
import textwrap
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import SpecError
from ..specs.data import data_dir

STDLIB_MODULES = ("json.encoder", "json.decoder", "textwrap", "heapq", "bisect", "string", "fractions",
                  "statistics", "shlex", "calendar", "difflib", "csv", "argparse", "dataclasses")


@dataclass(frozen=True, slots=True, kw_only=True)
class Workload:
    name: str
    prompts: tuple
    sources: tuple  # where each prompt's text came from
    response_prefix: str = ""  # the start of the assistant's answer, written into the prompt


def corpora_dir() -> Path:
    """The corpora under the data folder ($SPECSIM_DATA, default the copy shipped in the package)."""
    return data_dir() / "corpora"


def strip_gutenberg(text: str) -> str:
    """Normalise CRLF and keep what lies between the '*** START OF' and '*** END OF' markers."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    start = re.search(r"^\*\*\* ?START OF.*?\*\*\*\s*$", text, flags=re.M | re.I)
    end = re.search(r"^\*\*\* ?END OF.*?\*\*\*\s*$", text, flags=re.M | re.I)
    if start:
        text = text[start.end():end.start() if end and end.start() > start.end() else None]
    return text.strip()


def _code_chunk(rng: np.random.Generator, max_chars: int) -> tuple[str, str]:
    name = STDLIB_MODULES[int(rng.integers(len(STDLIB_MODULES)))]
    path = inspect.getsourcefile(importlib.import_module(name))
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    starts = [i for i, ln in enumerate(lines) if re.match(r"\s*def \w+\(", ln)] or [0]
    i = starts[int(rng.integers(len(starts)))]
    chunk, j = [], i
    while j < len(lines) and sum(len(c) + 1 for c in chunk) + len(lines[j]) < max_chars:
        chunk.append(lines[j])
        j += 1
    return "\n".join(chunk), f"{path}:{i + 1}-{j}"


def _rename_target(code: str) -> str:
    """The most frequent identifier that is not a keyword or a builtin (ties: first seen)."""
    names = re.findall(r"\b[A-Za-z_][A-Za-z0-9_]*\b", code)
    skip = set(keyword.kwlist) | set(dir(builtins)) | {"self", "cls"}
    counts: dict[str, int] = {}
    for n in names:
        if n not in skip and len(n) > 1:
            counts[n] = counts.get(n, 0) + 1
    return max(counts, key=counts.get) if counts else "x"


def code_edit(n_prompts: int = 3, *, seed: int = 0, max_chars: int = 800) -> Workload:
    """The code block first, then the instruction (SmolLM2-135M copies reliably in this order); the
    answer is primed with an opening code fence."""
    rng = np.random.default_rng(np.random.SeedSequence([seed, 1]))
    prompts, sources = [], []
    for _ in range(n_prompts):
        code, src = _code_chunk(rng, max_chars)
        code = textwrap.dedent(code)
        old = _rename_target(code)
        prompts.append(f"```python\n{code}\n```\n\nRewrite the code above with `{old}` renamed to `new_{old}`.")
        sources.append(src)
    return Workload(name="code-edit", prompts=tuple(prompts), sources=tuple(sources), response_prefix="```python\n")


HELDOUT_FRAC = 0.1  # the last tenth of each book: the trained drafters never see it (decoder/train)


def prose(n_prompts: int = 3, *, seed: int = 0, max_chars: int = 1200, split: str = "all") -> Workload:
    """split: "all" (passages from anywhere), or "heldout" (passages starting in the last HELDOUT_FRAC of
    each book, text the trained drafters were not trained on)."""
    if split not in ("all", "heldout"):
        raise SpecError(f"prose workload split {split!r}: expected 'all' or 'heldout'")
    root = corpora_dir()
    files = sorted(root.glob("*/*.txt")) if root.is_dir() else []
    if not files:
        raise SpecError(f"prose workload: no corpora under {root} (set SPECSIM_DATA to a folder whose corpora/ holds "
                        "<name>/<file>.txt public-domain texts)")
    rng = np.random.default_rng(np.random.SeedSequence([seed, 2]))
    prompts, sources = [], []
    for _ in range(n_prompts):
        path = files[int(rng.integers(len(files)))]
        text = strip_gutenberg(path.read_text(encoding="utf-8", errors="replace"))
        lo = int(len(text) * (1 - HELDOUT_FRAC)) if split == "heldout" else 0
        paras = [m.start() for m in re.finditer(r"\n\n(?=\S)", text) if m.start() >= lo] or [lo]
        at = paras[int(rng.integers(len(paras)))]
        passage = text[at:at + max_chars].strip()
        passage = passage[:passage.rfind(" ")] if " " in passage else passage
        prompts.append(f"Continue this passage in the same style:\n\n{passage}")
        sources.append(f"{path}:char {at}")
    return Workload(name="prose" if split == "all" else f"prose-{split}", prompts=tuple(prompts),
                    sources=tuple(sources))


def prose_heldout(n_prompts: int = 3, *, seed: int = 0, max_chars: int = 1200) -> Workload:
    return prose(n_prompts, seed=seed, max_chars=max_chars, split="heldout")


# code-edit draws from STDLIB_MODULES, which decoder/train leaves out of its training text: held out too
WORKLOADS = {"code-edit": code_edit, "prose": prose, "prose-heldout": prose_heldout}


def load_workload(name: str, n_prompts: int = 3, *, seed: int = 0) -> Workload:
    try:
        make = WORKLOADS[name]
    except KeyError:
        raise SpecError(f"workload {name!r}: expected one of {', '.join(WORKLOADS)}") from None
    return make(n_prompts, seed=seed)


def chat_prompt(tokenizer, text: str, response_prefix: str = "") -> list[int]:
    """Wrap in the ChatML turns SmolLM2-Instruct was tuned on when the vocabulary has them; the
    assistant's turn starts with `response_prefix`."""
    if tokenizer.token_to_id("<|im_start|>") is not None:
        text = f"<|im_start|>user\n{text}<|im_end|>\n<|im_start|>assistant\n"
    return tokenizer.encode(text + response_prefix).ids
