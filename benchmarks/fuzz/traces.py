"""Malformed Azure, Mooncake and plain traces read by `simulate`."""
from __future__ import annotations

import json

from .cases import D, file_level_bad, REPO, serving_scenario, to_toml


def add_cases(g) -> None:
    rng = g.rng
    azure = (REPO / "data/traces/azure_llm_inference_2023/AzureLLMInferenceTrace_conv.csv").read_text().splitlines()[:61]
    plain = ["arrival_time_s,prompt_tokens,output_tokens"] + [f"{0.25 * i:.2f},{200 + 7 * i},{20 + i % 13}"
                                                              for i in range(50)]
    moon = (REPO / "data/traces/mooncake_fast25/conversation_trace.jsonl").read_text().splitlines()[:40]

    def add(fmt, title, lines_or_bytes, exp, culprit=("trace.",), **extra):
        data = lines_or_bytes if isinstance(lines_or_bytes, bytes) else ("\n".join(lines_or_bytes) + "\n").encode()
        name = {"azure": "trace.csv", "plain": "trace.csv", "mooncake": "trace.jsonl"}[fmt]
        wl = {"kind": "trace", "trace": f"{D}/{name}", "format": fmt}
        wl.update(extra)
        scen = serving_scenario(wl)
        g.add("trace", f"{fmt}: {title}", ["simulate", f"{D}/s.toml", "--json", "--quiet", "--rates", "2",
                                              "--policies", "never,static_k4"],
                 files={"s.toml": to_toml(scen), name: data}, expect=exp, culprit=culprit + (name,),
                 check="simulate", meta={"k": 4}, timeout_s=240)

    for fmt, lines in (("azure", azure), ("plain", plain)):
        head, body = lines[0], lines[1:]
        add(fmt, "valid", lines, "either")
        add(fmt, "empty", b"", "refuse")
        add(fmt, "header only", [head], "refuse")
        add(fmt, "header and blank lines", [head, "", ""], "refuse")
        for title, content, exp in file_level_bad(rng, ("\n".join(lines) + "\n").encode())[1:]:
            add(fmt, title, content, exp)
        add(fmt, "BOM before the header", b"\xef\xbb\xbf" + ("\n".join(lines) + "\n").encode(), "either")
        add(fmt, "CRLF line ends", ("\r\n".join(lines) + "\r\n").encode(), "either")
        cols = head.split(",")
        add(fmt, "a column renamed", [",".join([cols[0], cols[1] + "x", cols[2]])] + body, "refuse", (cols[1],))
        add(fmt, "a column missing", [",".join(cols[:2])] + [",".join(r.split(",")[:2]) for r in body], "refuse",
            (cols[2],))
        add(fmt, "columns reordered", [",".join([cols[1], cols[0], cols[2]])] +
            [",".join([r.split(",")[1], r.split(",")[0], r.split(",")[2]]) for r in body], "either")
        add(fmt, "an extra column", [head + ",extra"] + [r + ",1" for r in body], "either")
        add(fmt, "a short row", [head] + body[:5] + [",".join(body[5].split(",")[:2])] + body[6:], "refuse")
        for col in (1, 2):
            for bad in ("-5", "0", "abc", "3.5", "", "nan", "inf", "1e9", "99999999999999999999"):
                i = rng.randrange(len(body))
                row = body[i].split(",")
                row[col] = bad
                exp = "either" if bad == "1e9" and False else "refuse"
                if bad in ("1e9", "99999999999999999999"):
                    exp = "either"
                add(fmt, f"{cols[col]} = {bad!r} on line {i + 2}", [head] + body[:i] + [",".join(row)] + body[i + 1:],
                    exp, (cols[col],))
        for bad in ("abc", "", "nan", "-1", "inf") + (("2023-13-45 99:99:99.0",) if fmt == "azure" else ()):
            i = rng.randrange(1, len(body))
            row = body[i].split(",")
            row[0] = bad
            exp = "refuse"
            add(fmt, f"time = {bad!r} on line {i + 2}", [head] + body[:i] + [",".join(row)] + body[i + 1:], exp,
                (cols[0],))
        shuffled = body[:]
        i = rng.randrange(5, len(body) - 5)
        shuffled[i], shuffled[i + 3] = shuffled[i + 3], shuffled[i]
        add(fmt, "unsorted times", [head] + shuffled, "refuse", (cols[0],))
        add(fmt, "every prompt past the model's context", [head] + [
            ",".join([r.split(",")[0], "200000", r.split(",")[2]]) for r in body], "refuse", ("context", "reject"))
        add(fmt, "window with no requests", lines, "refuse", ("window",), window_s=[1e6, 2e6])
    add("mooncake", "valid", moon, "either")
    add("mooncake", "empty", b"", "refuse")
    add("mooncake", "not JSON", moon[:5] + ["{not json"] + moon[5:], "refuse")
    add("mooncake", "random binary", bytes(rng.randrange(256) for _ in range(300)), "refuse")
    for key, bad in (("input_length", -5), ("input_length", "x"), ("output_length", 0), ("timestamp", -1),
                     ("timestamp", "x"), ("output_length", None)):
        rows = [json.loads(x) for x in moon]
        i = rng.randrange(1, len(rows))
        if bad is None:
            rows[i].pop(key)
        else:
            rows[i][key] = bad
        add("mooncake", f"{key} = {bad!r} on line {i + 1}", [json.dumps(r) for r in rows], "refuse", (key,))
