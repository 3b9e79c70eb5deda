"""Malformed CSVs for `calibrate` step fits and `replay`."""
from __future__ import annotations

import copy

from .cases import calibrate_rows, D, file_level_bad, REPO


def add_cases(g) -> None:
    rng = g.rng
    replay = (REPO / "tests/data/published_examples.csv").read_text().splitlines()
    header, rows = replay[0], replay[1:6]
    cols = header.split(",")
    base_lines = [header] + rows + ["fz-r1,h100-sxm,1,vllm,llama-3.1-8b,llama-3.2-1b,draft_model,4,,1,1024,0,0.7,,1.8,,,fuzz"]
    import csv as _csv
    import io

    def parse(lines):
        return list(_csv.reader(io.StringIO("\n".join(lines))))

    def unparse(table):
        buf = io.StringIO()
        w = _csv.writer(buf, lineterminator="\n")
        w.writerows(table)
        return buf.getvalue().encode()

    table = parse(base_lines)

    def add(title, content, exp, culprit=(), bad_row=None):
        g.add("csv-replay", title, ["replay", f"{D}/rows.csv", "--json"], files={"rows.csv": content},
                 expect=exp, culprit=culprit + ("rows.csv",), check="replay", meta={"bad_row": bad_row})

    add("valid", unparse(table), "either")
    for title, content, exp in file_level_bad(rng, unparse(table)):
        add(title, content, exp)
    add("header only", unparse(table[:1]), "refuse")
    add("a required column missing", unparse([r[:7] + r[8:] for r in table]), "refuse", ("k",))
    add("optional column misspelt (target_dtyp)", unparse([[("target_dtyp" if c == "target_dtype" else c) for c in table[0]]]
                                                        + table[1:]), "refuse", ("target_dtyp",))
    add("an unknown column", unparse([table[0] + ["speedup_measured"]] + [r + ["1"] for r in table[1:]]), "refuse",
        ("speedup_measured",))
    add("duplicate ids", unparse(table + [table[-1]]), "either", ("id",))
    bad_values = {
        "k": ["-1", "0", "abc", "1.5", "nan", "1000"], "tree_size": ["0", "-3", "2", "abc"],
        "batch_size": ["0", "-1", "10000000", "abc", "1.5"], "context_len": ["-5", "abc", "10000000", "nan"],
        "temperature": ["-1", "nan", "inf", "abc"], "alpha": ["1.5", "-0.1", "nan", "abc", "inf"],
        "tau": ["100", "-1", "0.5", "nan", "abc", "0"], "measured_speedup": ["0", "-1", "nan", "inf", "abc", ""],
        "n_devices": ["0", "-1", "abc", "1.5"], "hardware": ["nope", ""], "target": ["nope", ""],
        "method": ["nope", ""], "stack": ["nope"], "target_dtype": ["fp3"], "drafter_options": ["x", "nope=1", "n_heads_medusa=-1"],
    }
    for col, vals in bad_values.items():
        ci = cols.index(col)
        for v in vals:
            t = copy.deepcopy(table)
            ri = len(t) - 1 if col not in ("tree_size",) else 1
            if col == "drafter_options":
                ri = 2  # the medusa row
            t[ri][ci] = v
            exp = "refuse"
            if (col, v) in {("k", "1000"), ("stack", "nope")}:
                exp = "refuse"
            if (col, v) == ("measured_speedup", ""):  # documented: a row predicted with nothing to compare
                add(f"{col} = {v!r} in row {t[ri][0]}", unparse(t), "either", (col,))
                continue
            culprit = (col, t[ri][0], col.split("_")[0]) + ((v,) if len(v) > 2 else ())
            add(f"{col} = {v!r} in row {t[ri][0]}", unparse(t), exp, culprit, bad_row=t[ri][0])
    # calibrate steps
    crow = calibrate_rows()
    ctable = parse(crow.decode().splitlines())
    ccols = ctable[0]

    def cadd(title, content, exp, culprit=()):
        g.add("csv-calibrate", title, ["calibrate", "steps", f"{D}/rows.csv", "--json"], files={"rows.csv": content},
                 expect=exp, culprit=culprit + ("rows.csv",), check="json")

    cadd("valid", crow, "either")
    for title, content, exp in file_level_bad(rng, crow):
        cadd(title, content, exp)
    cadd("header only", unparse(ctable[:1]), "refuse")
    cadd("a column missing", unparse([r[:-1] for r in ctable]), "refuse", ("measured_time_s",))
    cvals = {"measured_time_s": ["0", "-1", "nan", "inf", "abc", ""], "batch_size": ["0", "-1", "abc", "1.5"],
             "tp": ["0", "3", "-1"], "q_len": ["0", "-1"], "context_len": ["-1", "10000000"], "logit_len": ["-1", "abc"],
             "hardware": ["nope"], "target": ["nope"]}
    for col, vals in cvals.items():
        ci = ccols.index(col)
        for v in vals:
            t = copy.deepcopy(ctable)
            t[2][ci] = v
            cadd(f"{col} = {v!r}", unparse(t), "refuse" if (col, v) != ("tp", "3") else "either", (col,))
    # splitwise format
    split = (REPO / "data/perf/splitwise_sim/perf_model.csv").read_text().splitlines()
    sp = [split[0]] + [r for r in split[1:] if "llama2-70b,h100-80gb" in r][:40]
    sargs = ["calibrate", "steps", f"{D}/perf.csv", "--format", "splitwise", "--hardware", "h100-sxm", "--json"]
    g.add("csv-calibrate", "splitwise: valid", sargs, files={"perf.csv": "\n".join(sp) + "\n"}, check="json")
    stab = parse(sp)
    for col in ("token_time", "prompt_time", "batch_size", "tensor_parallel"):
        for v in ("-1", "0", "abc", "nan"):
            t = copy.deepcopy(stab)
            t[3][stab[0].index(col)] = v
            g.add("csv-calibrate", f"splitwise: {col} = {v!r}", sargs, files={"perf.csv": unparse(t)},
                     expect="refuse", culprit=(col, "perf.csv"), check="json")
    g.add("csv-calibrate", "splitwise: empty", sargs, files={"perf.csv": b""}, expect="refuse",
             culprit=("perf.csv",), check="json")
    # calibrate host --file (Vidur's cpu_overheads format)
    host = (REPO / "data/perf/vidur/cpu_overheads/a100.csv") if (REPO / "data/perf/vidur/cpu_overheads/a100.csv").exists() else None
    if host is not None:
        hl = host.read_text().splitlines()[:60]
        hargs = ["calibrate", "host", "--file", f"{D}/cpu.csv", "--json"]
        g.add("csv-calibrate", "host: valid", hargs, files={"cpu.csv": "\n".join(hl) + "\n"}, check="json")
        for title, content, exp in file_level_bad(rng, ("\n".join(hl) + "\n").encode()) + [
                ("header only", (hl[0] + "\n").encode(), "refuse")]:
            g.add("csv-calibrate", f"host: {title}", hargs, files={"cpu.csv": content}, expect=exp,
                     culprit=("cpu.csv",), check="json")
        htab = parse(hl)
        for ci in range(min(len(htab[0]), 8)):
            for v in ("-1", "abc", "nan"):
                t = copy.deepcopy(htab)
                t[4][ci] = v
                g.add("csv-calibrate", f"host: {htab[0][ci]} = {v!r}", hargs, files={"cpu.csv": unparse(t)},
                         expect="either", culprit=(htab[0][ci], "cpu.csv"), check="json")
