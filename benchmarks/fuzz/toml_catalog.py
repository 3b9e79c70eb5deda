"""Catalog TOML files (hardware, model, stack) with one field mutated: each run by `predict`."""
from __future__ import annotations

from .cases import _toml_value, D, judge, NUM_BAD, point_scenario, to_toml, typo


def add_cases(g, kind: str, ident: str, specs: dict, n: int, extra_keys=()) -> None:
    """Mutations of the installation's own catalog file `kind/ident.toml`."""
    rng = g.rng
    group = {"hardware": "toml-hardware", "models": "toml-model", "stacks": "toml-stack"}[kind]
    for i in range(n):
        op = rng.random()
        key = rng.choice(sorted(specs))
        if op < 0.7:
            value, k = rng.choice(NUM_BAD)
            mut = ("set", key, value)
            exp = judge(specs[key], value, k)
            title, culprit = f"{key} = {_toml_value(value)[:30]}", (key.split(".")[-1],)
        elif op < 0.82:
            bad = typo(key, rng)
            mut = ("rename", key, bad)
            exp, title, culprit = "refuse", f"unknown key {bad}", (bad.split(".")[-1],)
        elif op < 0.92:
            mut = ("delete", key, None)
            exp, title, culprit = "refuse", f"{key} missing", (key.split(".")[-1],)
        else:
            mut = ("set", "id", rng.choice([5, "", "other-id"]))
            exp, title, culprit = "either", f"id = {mut[2]!r}", ("id",)
        _catalog_case(g, group, kind, ident, mut, title, exp, culprit)
    for extra in extra_keys:
        _catalog_case(g, group, kind, ident, ("set", extra[0], extra[1]), f"{extra[0]} = {extra[1]!r}",
                           extra[2], (extra[0].split(".")[-1],))
    for title, mut, exp in (("empty file", ("raw", b""), "refuse"),
                            ("random binary", ("raw", bytes(rng.randrange(256) for _ in range(200))), "refuse"),
                            ("UTF-16", ("utf16", None, None), "refuse"), ("truncated", ("truncate", None, None), "refuse")):
        _catalog_case(g, group, kind, ident, mut, title, exp, (f"{kind[:5]}",))


def _catalog_case(g, group, kind, ident, mut, title, exp, culprit) -> None:
    fname = {"hardware": "hw.toml", "models": "model.toml", "stacks": "stack.toml"}[kind]
    files = {fname: ("catalog", kind, ident, mut)}
    if kind == "hardware":
        argv = ["predict", "--hardware", f"{D}/{fname}", "--target", "llama-3.1-8b", "--drafter", "llama-3.2-1b",
                "--alpha", "0.7", "--json"]
    elif kind == "models":
        argv = ["predict", "--target", f"{D}/{fname}", "--drafter", "llama-3.2-1b", "--alpha", "0.7", "--json"]
        if g.rng.random() < 0.25:
            argv = ["models", "show", f"{D}/{fname}", "--json"]
    else:
        files["s.toml"] = to_toml(point_scenario(stack=f"{D}/{fname}"))
        argv = ["predict", f"{D}/s.toml", "--json"]
    g.add(group, title, argv, files=files, expect=exp, culprit=culprit + (fname,),
             check="predict" if argv[0] == "predict" else "json", meta={"k": 4})
