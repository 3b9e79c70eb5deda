"""Serving-stack metrics imported by `calibrate acceptance --import`."""
from __future__ import annotations

from .cases import D


def add_cases(g) -> None:
    v0 = ("INFO 08-01 12:00:00 metrics.py:400] Speculative metrics: Draft acceptance rate: 0.642, System efficiency: "
          "0.598, Number of speculative tokens: {k}, Number of accepted tokens: {a}, Number of draft tokens: {d}, "
          "Number of emitted tokens: {e}.")
    v1 = ("INFO 08-01 12:00:00 [metrics.py:100] SpecDecoding metrics: Mean acceptance length: {tau}, Accepted "
          "throughput: 12.40 tokens/s, Drafted throughput: 15.10 tokens/s, Accepted: {a} tokens, Drafted: {d} tokens, "
          "Per-position acceptance rate: {rates}, Avg Draft acceptance rate: 82.1%")
    prom = ("vllm:spec_decode_num_drafts_total{{model_name=\"m\"}} {n}\n"
            "vllm:spec_decode_num_draft_tokens_total{{model_name=\"m\"}} {d}\n"
            "vllm:spec_decode_num_accepted_tokens_total{{model_name=\"m\"}} {a}\n"
            "vllm:spec_decode_num_accepted_tokens_per_pos_total{{model_name=\"m\",position=\"0\"}} {p0}\n"
            "vllm:spec_decode_num_accepted_tokens_per_pos_total{{model_name=\"m\",position=\"1\"}} {p1}\n")
    sglang = "[2025-01-01] Decode batch. #running-req: {r}, #token: 1234, token usage: 0.01, accept len: {tau}, gen throughput (token/s): 100\n"
    llama = "n_draft   = {k}\nn_predict = {p}\nn_drafted = {d}\nn_accept  = {a}\naccept    = 77.778%\n"
    files = [
        ("vLLM V0: valid", v0.format(k=3, a=8547, d=13311, e=10616), "either", ()),
        ("vLLM V0: 0 draft tokens", v0.format(k=3, a=0, d=0, e=0), "refuse", ("draft",)),
        ("vLLM V0: accepted above drafted", v0.format(k=3, a=20000, d=13311, e=10616), "refuse", ("accepted",)),
        ("vLLM V0: K = 0", v0.format(k=0, a=0, d=0, e=0), "refuse", ("k",)),
        ("vLLM V1: valid", v1.format(tau="3.26", a=226, d=300, rates="0.890, 0.760, 0.610") * 1, "either", ()),
        ("vLLM V1: 10^12 counters that disagree", v1.format(tau="2.73", a=10 ** 12, d=10 ** 12 + 7,
                                                             rates="0.500, 0.200, 0.100"), "refuse", ("agree", "drafts")),
        ("vLLM V1: 10^12 counters that agree", v1.format(tau="2.50", a=3 * 10 ** 12 // 2, d=3 * 10 ** 12,
                                                          rates="0.700, 0.500, 0.300"), "either", ()),
        ("vLLM V1: accepted above drafted", v1.format(tau="2.73", a=500, d=151, rates="0.890, 0.760, 0.610"),
         "refuse", ("accepted",)),
        ("vLLM V1: rates growing with position", v1.format(tau="2.73", a=124, d=151, rates="0.100, 0.760, 0.910"),
         "refuse", ("rates", "position")),
        ("vLLM V1: a rate above 1", v1.format(tau="2.73", a=124, d=151, rates="1.890, 0.760, 0.610"), "refuse", ("rate",)),
        ("Prometheus: valid", prom.format(n=100, d=200, a=120, p0=70, p1=50), "either", ()),
        ("Prometheus: accepted above drafted", prom.format(n=100, d=200, a=300, p0=100, p1=200), "refuse",
         ("accepted", "drafted", "per-position")),
        ("Prometheus: accepted above drafted, per position consistent", prom.format(n=100, d=150, a=180, p0=100, p1=80),
         "refuse", ("accepted", "drafted")),
        ("Prometheus: more draft tokens than drafts x K", prom.format(n=10, d=200, a=12, p0=7, p1=5), "refuse",
         ("drafted", "drafts")),
        ("Prometheus: no drafts", prom.format(n=0, d=0, a=0, p0=0, p1=0), "refuse", ("drafts",)),
        ("Prometheus: a negative counter", prom.format(n=100, d=-200, a=120, p0=70, p1=50), "refuse", ("count",)),
        ("Prometheus: NaN", prom.format(n=100, d="NaN", a=120, p0=70, p1=50), "refuse", ("count", "finite")),
        ("SGLang: valid", sglang.format(r=4, tau="3.21") + sglang.format(r=2, tau="2.9"), "either", ()),
        ("SGLang: accept len above K + 1", sglang.format(r=4, tau="9.5"), "refuse", ("accept",)),
        ("SGLang: accept len below 1", sglang.format(r=4, tau="0.5"), "refuse", ("accept",)),
        ("llama.cpp: valid", llama.format(k=16, p=128, d=90, a=70), "either", ()),
        ("llama.cpp: more accepted than drafted", llama.format(k=16, p=128, d=50, a=70), "refuse", ("n_accept",)),
        ("llama.cpp: n_draft 0", llama.format(k=0, p=128, d=90, a=70), "refuse", ("n_draft",)),
        ("empty", "", "refuse", ()), ("binary", "\x00\x01\x02", "refuse", ()),
    ]
    for title, text, exp, culprit in files:
        argv = ["calibrate", "acceptance", "--import", f"{D}/m.log", "--json"]
        if title.startswith("SGLang"):
            argv += ["-k", "4"]
        g.add("stack-metrics", title, argv, files={"m.log": text}, expect=exp, culprit=culprit + ("m.log",),
                 check="json")
    good = v1.format(tau="3.26", a=226, d=300, rates="0.890, 0.760, 0.610")
    for flag in ("--context-len", "--temperature"):
        for v in ("-1", "nan", "inf", "1e308"):
            exp = "either" if v == "1e308" and flag == "--context-len" and False else "refuse"
            for out in (False, True):
                argv = ["calibrate", "acceptance", "--import", f"{D}/m.log", f"{flag}={v}", "--json"]
                if out:
                    argv += ["--out", f"{D}/cal.toml", "--name", "llama-3.1-8b/eagle/chat"]
                g.add("stack-metrics", f"{flag} {v}" + (" with --out" if out else ""), argv,
                         files={"m.log": good}, expect=exp, culprit=(flag, flag.lstrip("-").replace("-", "_")),
                         check="json")
