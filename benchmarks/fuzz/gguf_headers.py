"""Malformed GGUF headers read by the reference decoder."""
from __future__ import annotations

import sys

from .cases import D, REPO


def add_cases(g) -> None:
    rng = g.rng
    sys.path.insert(0, str(REPO / "tests"))
    try:
        from test_decoder_gguf import TINY_CASES  # the decoder tests' cases, reused
    except Exception:  # pragma: no cover - without numba/gguf
        TINY_CASES = {}
    finally:
        sys.path.pop(0)
    argv = ["decoder", "run", "--model", f"{D}/m.gguf", "--prompt-file", f"{D}/p.txt", "--raw", "--tokens", "4"]
    p = "hello world, this is a test\n"
    for name, (kw, _) in sorted(TINY_CASES.items()):
        g.add("gguf", f"tiny: {name}", argv, files={"m.gguf": ("tiny_gguf", kw), "p.txt": p}, expect="refuse",
                 culprit=("m.gguf",), check="decoder", timeout_s=240)
    for i in range(30):
        op = rng.choice(["truncate", "flip", "zero-run", "magic", "version", "counts"])
        g.add("gguf", f"tiny, bytes damaged: {op} #{i}", argv,
                 files={"m.gguf": ("tiny_gguf_damaged", {"op": op, "seed": rng.randrange(2**31)}), "p.txt": p},
                 expect="either", culprit=("m.gguf",), check="decoder", timeout_s=240)
    for title, data in (("empty", b""), ("random bytes", bytes(rng.randrange(256) for _ in range(4096))),
                        ("text file", b"GGUF is not this\n" * 10)):
        g.add("gguf", title, argv, files={"m.gguf": data, "p.txt": p}, expect="refuse", culprit=("m.gguf",),
                 check="decoder", timeout_s=240)
    for name, fields, drop in (("SmolLM2 head_count 7", {"llama.attention.head_count": 7}, None),
                               ("SmolLM2 head_count 8", {"llama.attention.head_count": 8}, None),
                               ("SmolLM2 head_count_kv 2", {"llama.attention.head_count_kv": 2}, None),
                               ("SmolLM2 five blocks removed", {}, "blocks")):
        g.add("gguf", name, argv, files={"m.gguf": ("smollm2_edit", {"fields": fields, "drop": drop}), "p.txt": p},
                 expect="refuse", culprit=("m.gguf", "head", "block"), check="decoder", timeout_s=300)
