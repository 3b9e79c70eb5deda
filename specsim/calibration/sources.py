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
from dataclasses import dataclass

_THREAD_AFTER = re.compile(r"^(?:/(?:issues|pull)/(\d+)|\s+(?:issue|PR|pull request)\s+#(\d+))", re.IGNORECASE)
_NOT_OWNER = {"tok", "token", "tokens", "req", "ms", "us", "s", "and", "or", "bs", "tp", "ep"}

# `owner/name` as the pattern
#     (?:https?://)?(?:www\.)?(?:github\.com/)?\b([A-Za-z0-9][A-Za-z0-9_.-]*)/([A-Za-z0-9_.-]*[A-Za-z0-9_-])
# reads it, found without a regular expression: that pattern tries every start inside a run of
# owner characters and rescans the run to its end from each, so a 100 kB citation of 'a.a.a...' took
# minutes (issue 37). The owner runs to the end of its run of owner characters (no '/' inside it), so
# the run's end is looked up once (`_run_ends`) and every start costs the same few steps.
_OWNER_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-")
_ALNUM = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789")
_NAME_LAST = _ALNUM | {"_", "-"}
# the optional prefixes in the order the pattern tries them (each group taken before it is skipped)
_PREFIXES = tuple(a + b + c for a in ("https://", "http://", "") for b in ("www.", "") for c in ("github.com/", ""))


@dataclass(frozen=True, slots=True)
class _Match:
    owner: str
    name: str
    end: int  # where the name ends in the text


def _run_ends(text: str) -> list[int]:
    """For each position, where its run of owner characters ends (the position itself outside one)."""
    ends = [0] * (len(text) + 1)
    ends[len(text)] = len(text)
    for i in range(len(text) - 1, -1, -1):
        ends[i] = ends[i + 1] if text[i] in _OWNER_CHARS else i
    return ends


def _repository_matches(text: str):
    """Every `owner/name` of the text, left to right, each search resuming where the last match ended
    (the pattern's `finditer`)."""
    n = len(text)
    ends = _run_ends(text)
    names: dict[int, int | None] = {}  # where a name starting at q ends (None: no name there)

    def name_end(q: int):
        if q not in names:
            j = ends[q] if q < n else q
            while j > q and text[j - 1] not in _NAME_LAST:  # trailing dots are not part of a name
                j -= 1
            names[q] = j if j > q else None
        return names[q]

    def at(p: int):
        for prefix in _PREFIXES if text[p] in "hwg" else ("",):
            if prefix and not text.startswith(prefix, p):
                continue
            o = p + len(prefix)
            if o >= n or text[o] not in _ALNUM or (o > 0 and (text[o - 1].isalnum() or text[o - 1] == "_")):
                continue  # \b and an owner's first character
            slash = ends[o]
            if slash < n and text[slash] == "/":
                e = name_end(slash + 1)
                if e is not None:
                    return _Match(text[o:slash], text[slash + 1:e], e)
        return None

    p = 0
    while p < n:
        m = at(p)
        if m is None:
            p += 1
            continue
        yield m
        p = m.end


def _repository(text: str):
    """The first `owner/name` match that reads as a repository (not 'tok/s', not a path's
    'results/x.json' after the repository: only the first match counts)."""
    for m in _repository_matches(text):
        owner, name = m.owner, m.name
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
    owner, name = m.owner.lower(), m.name.lower()
    repo = f"{owner}/{name}"
    t = _THREAD_AFTER.match(s[m.end:])
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
