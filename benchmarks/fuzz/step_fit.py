"""`calibrate steps` on rows that cannot determine the fit."""
from __future__ import annotations

from .cases import D, REPO


def add_cases(g) -> None:
    head = "hardware,target,tp,batch_size,q_len,context_len,logit_len,measured_time_s"
    row = lambda b, q, t: f"h100-sxm,llama-3.1-8b,1,{b},{q},1024,{q},{t:.6f}"  # noqa: E731
    cases = [("one row, five parameters", [row(1, 1, 0.0062)], "", "refuse"),
             ("two identical rows", [row(1, 1, 0.0062)] * 2, "", "refuse"),
             ("six identical rows, two parameters", [row(4, 1, 0.0063)] * 6, "bandwidth_frac,step_overhead_s", "refuse"),
             ("rows of one batch and query length, both fractions", [row(4, 2, 0.0063 + 1e-5 * i) for i in range(8)],
              "bandwidth_frac,compute_frac", "refuse"),
             ("eight distinct rows, both fractions", [row(b, q, 0.0062 + 4e-5 * b * q) for b in (1, 4, 16, 64)
                                                      for q in (1, 5)], "bandwidth_frac,compute_frac", "either"),
             ("three distinct rows, one parameter", [row(b, 1, 0.0062 + 4e-5 * b) for b in (1, 4, 16)],
              "step_overhead_s", "either")]
    for title, rows, fit, exp in cases:
        argv = ["calibrate", "steps", f"{D}/rows.csv", "--json"] + (["--fit", fit] if fit else [])
        g.add("step-fit", title, argv, files={"rows.csv": "\n".join([head] + rows) + "\n"}, expect=exp,
                 culprit=("distinct", "parameters", "tokens in flight", "rows.csv"), check="json")
    split = (REPO / "data/perf/splitwise_sim/perf_model.csv").read_text().splitlines()
    sp = [split[0]] + [r for r in split[1:] if "llama2-70b,h100-80gb," in r][:40]
    cols = sp[0].split(",")
    for col, bad in (("model", "llama2-70bx"), ("hardware", "h100-80gbx"), ("model", "")):
        t = [r.split(",") for r in sp]
        t[5][cols.index(col)] = bad
        g.add("step-fit", f"splitwise: {col} = {bad!r}", ["calibrate", "steps", f"{D}/perf.csv", "--format",
                 "splitwise", "--hardware", "h100-sxm", "--json"], files={"perf.csv": "\n".join(",".join(r) for r in t) + "\n"},
                 expect="refuse", culprit=(col, "perf.csv"), check="json")
