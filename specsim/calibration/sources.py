"""Which measured rows share a source: the key that fitting and checking keep apart.

A figure fitted on some rows earns its place only on rows it never saw, and a row from the same
publication as a fit row is not unseen: sibling sweeps of one thread share its plain curve (the two
SpecForge #339 sweeps, the four W1 M3 sweeps of one benchmark repository), and a leaderboard read at
two commits repeats many of its numbers (Spec-Bench's 2024 and 2025 tables). So leave-out is done by
source, and the source of a row is derived from its `source` text by one rule:

1. The publication is the first GitHub repository the text names, `owner/name` (a `github.com/`
   prefix dropped, case folded: GitHub names are case-insensitive). Every file of a repository — a
   leaderboard at any commit, a README's tables, its notebooks, a blog post in a blog repository —
   is one source: a repository's files are written by its maintainers on their machines, so this
   joins rows that may share a setup (coarser groups leave more out, never less).
2. An issue or pull request of that repository is a source of its own (a thread is one reporter's
   runs; a repository like vllm-project/vllm hosts thousands): `#N` is added where the text names
   it right after the repository (`owner/name issue #N`, `owner/name PR #N`, `owner/name pull
   request #N`) or in the repository's URL (`github.com/owner/name/issues/N` or `/pull/N`, anywhere
   in the text).
3. A text that names no repository is its own source, keyed by the text before its first comma or
   opening parenthesis (case folded, spaces collapsed): 'MagicDec blog, ...' and 'MagicDec blog,
   ...' join.
4. An empty text has no source to share: the key is `fallback` (a row's id, a sweep's name), so such
   a row is left out alone. Never an error: the key only groups.

What the rule cannot see: two threads by one reporter on one harness (AngelSlim #163 and SpecForge
#339 are both Zzsf11's, on 4 and 2 H100s) stay two sources.
"""
from __future__ import annotations

import re

_REPO = re.compile(r"(?:https?://)?(?:www\.)?(?:github\.com/)?\b([A-Za-z0-9][A-Za-z0-9_.-]*)/([A-Za-z0-9_.-]*[A-Za-z0-9_-])")
_THREAD_AFTER = re.compile(r"^(?:/(?:issues|pull)/(\d+)|\s+(?:issue|PR|pull request)\s+#(\d+))", re.IGNORECASE)
_NOT_OWNER = {"tok", "token", "tokens", "req", "ms", "us", "s", "and", "or", "bs", "tp", "ep"}


def _repository(text: str):
    """The first `owner/name` match that reads as a repository (not 'tok/s', not a path's
    'results/x.json' after the repository: only the first match counts)."""
    for m in _REPO.finditer(text):
        owner, name = m.group(1), m.group(2)
        if owner.lower() in _NOT_OWNER or name.lower() in _NOT_OWNER or owner.replace(".", "").isdigit():
            continue
        if owner.lower() in ("github.com", "www.github.com"):
            continue
        return m
    return None


def source_key(text, *, fallback: str = "") -> str:
    """The source a row's `source` text names (see the module docstring for the rule).

    text: the row's source citation (str or None); fallback: the key when the text is empty.
    Returns e.g. 'hemingkx/spec-bench', 'vllm-project/vllm#20780', 'magicdec blog'."""
    s = "" if text is None else str(text).strip()
    if not s or s.lower() == "nan":
        return str(fallback)
    m = _repository(s)
    if m is None:
        head = re.split(r"[,(]", s, maxsplit=1)[0]
        return " ".join(head.split()).lower() or str(fallback)
    owner, name = m.group(1).lower(), m.group(2).lower()
    repo = f"{owner}/{name}"
    t = _THREAD_AFTER.match(s[m.end():])
    number = (t.group(1) or t.group(2)) if t else None
    if number is None:
        url = re.search(rf"github\.com/{re.escape(owner)}/{re.escape(name)}/(?:issues|pull)/(\d+)", s, re.IGNORECASE)
        number = url.group(1) if url else None
    return f"{repo}#{number}" if number else repo


def source_groups(key_sets) -> list[int]:
    """The group of each item, given each item's source keys (a str, or a set of them for an item
    such as a sweep whose rows cite several): items that share any key go together, transitively.
    Groups are numbered 0, 1, ... in the order of their first item."""
    sets = [{k} if isinstance(k, str) else set(k) for k in key_sets]
    parent = list(range(len(sets)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    owner: dict = {}
    for i, ks in enumerate(sets):
        for k in ks:
            if k in owner:
                a, b = root(owner[k]), root(i)
                if a != b:
                    parent[max(a, b)] = min(a, b)
            else:
                owner[k] = i
    numbers: dict = {}
    return [numbers.setdefault(root(i), len(numbers)) for i in range(len(sets))]


__all__ = ["source_key", "source_groups"]
