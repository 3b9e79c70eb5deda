"""Runs sent SIGINT while they work: exit 130, one line, no output that looks complete."""
from __future__ import annotations

from .cases import analysis_scenario, D, serving_scenario, to_toml


def add_cases(g) -> None:
    big_serve = serving_scenario({"kind": "poisson", "n_requests": 3000, "rate_per_s": 20.0,
                                  "prompt": {"kind": "fixed", "tokens": 512}, "output": {"kind": "fixed", "tokens": 256}})
    for t in (1, 2, 3, 4, 5, 1.5, 2.5, 3.5, 4.5, 5):
        g.add("interrupt", f"SIGINT sweep seed-70b-hbm after {t} s",
                 ["sweep", "seed-70b-hbm", "--out", f"{D}/out", "--quiet"], interrupt_s=t, out="out",
                 expect="either", culprit=("interrupt",), timeout_s=400)
    for t in (1, 2, 3, 4, 5):
        g.add("interrupt", f"SIGINT simulate after {t} s", ["simulate", f"{D}/s.toml", "--out", f"{D}/out",
                 "--quiet", "--rates", "5,10,20"], files={"s.toml": to_toml(big_serve)}, interrupt_s=t, out="out",
                 expect="either", culprit=("interrupt",), timeout_s=400)
    for t in (2, 4):
        g.add("interrupt", f"SIGINT simulate's own process (kill -INT, not its workers) after {t} s",
                 ["simulate", f"{D}/s.toml", "--out", f"{D}/out", "--quiet", "--rates", "5,10,20"],
                 files={"s.toml": to_toml(big_serve)}, interrupt_s=t, interrupt_group=False, out="out",
                 expect="either", culprit=("interrupt",), timeout_s=400)
    small = analysis_scenario()
    for t in (2, 4):
        g.add("interrupt", f"SIGINT a re-run of sweep into a finished folder after {t} s",
                 ["sweep", "seed-70b-hbm", "--out", f"{D}/out", "--quiet", "--force"], interrupt_s=t, out="out",
                 prerun=[["sweep", f"{D}/small.toml", "--out", f"{D}/out", "--quiet", "--no-plots"]],
                 files={"small.toml": to_toml(small)}, expect="either", culprit=("interrupt",), timeout_s=400)
        g.add("interrupt", f"SIGINT a re-run of simulate into a finished folder after {t} s",
                 ["simulate", f"{D}/s.toml", "--out", f"{D}/out", "--quiet", "--rates", "5,10,20", "--force"],
                 interrupt_s=t, out="out", prerun=[["simulate", f"{D}/small.toml", "--out", f"{D}/out", "--quiet",
                                                   "--no-plots"]],
                 files={"s.toml": to_toml(big_serve), "small.toml": to_toml(serving_scenario())},
                 expect="either", culprit=("interrupt",), timeout_s=400)
