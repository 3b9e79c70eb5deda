"""Hugging Face config.json files read by `models import`."""
from __future__ import annotations

import json

from .cases import D, file_level_bad


def add_cases(g) -> None:
    rng = g.rng
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
           "intermediate_size": 14336, "num_attention_heads": 32, "num_key_value_heads": 8,
           "num_hidden_layers": 32, "vocab_size": 128256, "max_position_embeddings": 131072,
           "tie_word_embeddings": False, "torch_dtype": "bfloat16"}
    argv = ["models", "import", f"{D}/config.json", "--id", "fz-model", "--tokenizer", "llama3"]
    good = json.dumps(cfg).encode()
    g.add("json-config", "valid", argv, files={"config.json": good}, expect="either", check="none")
    for title, content, exp in file_level_bad(rng, good) + [("a JSON list", b"[1, 2]", "refuse"),
                                                           ("a JSON string", b'"x"', "refuse"),
                                                           ("JSON with NaN", good.replace(b"4096", b"NaN", 1), "refuse")]:
        g.add("json-config", title, argv, files={"config.json": content}, expect=exp,
                 culprit=("config.json",), check="none")
    for key in ("hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads",
                "num_hidden_layers", "vocab_size", "max_position_embeddings"):
        for v in ("4096", 0, -8, 1.5, None, [1], 10**30, 3):
            c = dict(cfg)
            if v is None:
                c.pop(key)
            else:
                c[key] = v
            exp = "either" if v == 3 and key in ("num_hidden_layers", "vocab_size", "intermediate_size",
                                                "max_position_embeddings") else "refuse"
            if v is None and key in ("num_key_value_heads", "max_position_embeddings"):
                exp = "either"
            g.add("json-config", f"{key} = {v!r}", argv, files={"config.json": json.dumps(c).encode()},
                     expect=exp, culprit=(key, "config.json", "n_", "head", "hidden", "layers", "vocab", "ffn",
                                          "context"), check="none")
    for title, target, files, exp in (("--out is a folder", f"{D}/adir", {"adir/x": "x"}, "refuse"),
                                      ("--out below a file", f"{D}/afile/m.toml", {"afile": "x"}, "refuse"),
                                      ("--out in /proc", "/proc/specsim-fuzz.toml", {}, "refuse"),
                                      ("--out ''", "", {}, "refuse"),
                                      ("--out a new file", f"{D}/m.toml", {}, "either")):
        g.add("output", f"models import: {title}", argv + ["--out", target],
                 files={"config.json": good, **files}, expect=exp, culprit=("--out", "out", "adir", "afile", "proc"),
                 check="none")
