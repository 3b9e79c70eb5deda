"""More trace and replay inputs (issue 28)."""
from __future__ import annotations

from .cases import D, REPO, serving_scenario, to_toml, WORKLOAD


def add_cases(g) -> None:
    replay = (REPO / "tests/data/published_examples.csv").read_text().splitlines()
    header = replay[0]
    row = "fz-self,h100-sxm,1,vllm,llama-3.1-8b,llama-3.1-8b,draft_model,4,,1,1024,0,0.7,,1.8,,,fuzz"
    g.add("csv-replay", "a row whose drafter is the target", ["replay", f"{D}/rows.csv", "--json"],
             files={"rows.csv": "\n".join([header, replay[1], row]) + "\n"}, expect="refuse",
             culprit=("drafter", "fz-self"), check="replay", meta={"bad_row": "fz-self"})
    moon = (REPO / "data/traces/mooncake_fast25/conversation_trace.jsonl").read_text().splitlines()[:40]
    plain = ["arrival_time_s,prompt_tokens,output_tokens"] + [f"{0.25 * i:.2f},{200 + 7 * i},{20 + i % 13}"
                                                              for i in range(50)]
    for fmt, name, data, extra, exp, culprit in (
            ("mooncake", "trace.jsonl", moon, {"jitter_s": -1}, "refuse", ("jitter_s",)),
            ("mooncake", "trace.jsonl", moon, {"jitter_s": float("nan")}, "refuse", ("jitter_s",)),
            ("mooncake", "trace.jsonl", moon, {"jitter_s": "x"}, "refuse", ("jitter_s",)),
            ("mooncake", "trace.jsonl", moon, {"jitter_s": [1]}, "refuse", ("jitter_s",)),
            ("plain", "trace.csv", plain, {"jitter_s": 1.0}, "refuse", ("jitter_s",)),
            ("plain", "trace.csv", plain, {"time_scale": 1e300}, "refuse", ("time_scale",)),
            ("plain", "trace.csv", plain, {"time_scale": 0}, "refuse", ("time_scale",)),
            ("plain", "trace.csv", plain, {"time_scale": 1e-300}, "refuse", ("time_scale", "arrival")),
            ("plain", "trace.csv", plain, {"hash_block_tokens": 0}, "refuse", ("hash_block_tokens",)),
            ("plain", "trace.csv", plain, {"window_s": [0, float("inf")]}, "refuse", ("window_s",)),
            ("plain", "trace.csv", plain, {"window_s": ["a", "b"]}, "refuse", ("window_s",))):
        wl = {"kind": "trace", "trace": f"{D}/{name}", "format": fmt, **extra}
        g.add("trace", f"{fmt}: {extra}", ["simulate", f"{D}/s.toml", "--json", "--quiet", "--rates", "2",
                                              "--policies", "never,static_k4"],
                 files={"s.toml": to_toml(serving_scenario(wl)), name: "\n".join(data) + "\n"}, expect=exp,
                 culprit=culprit, check="simulate", meta={"k": 4}, timeout_s=240)
    for title, data, exp in (("a trace of one request", plain[:2], "refuse"), ("a missing trace", None, "refuse"),
                             ("a valid trace", plain, "either")):
        wl = dict(WORKLOAD, lengths_from=f"{D}/lt.csv")
        del wl["prompt"], wl["output"]
        files = {"s.toml": to_toml(serving_scenario(wl))}
        if data is not None:
            files["lt.csv"] = "\n".join(data) + "\n"
        g.add("trace", f"lengths_from: {title}", ["simulate", f"{D}/s.toml", "--json", "--quiet"], files=files,
                 expect=exp, culprit=("lengths_from", "lt.csv"), check="simulate", meta={"k": 4}, timeout_s=240)
