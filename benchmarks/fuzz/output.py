"""Reused, unwritable and odd output folders and files."""
from __future__ import annotations

from .cases import analysis_scenario, calibrate_rows, D, REPO, serving_scenario, to_toml


def add_cases(g) -> None:
    serve = to_toml(serving_scenario())
    small = to_toml(analysis_scenario())
    replay = (REPO / "tests/data/published_examples.csv").read_text()
    crow = calibrate_rows()
    cmds = {
        "sweep": (["sweep", f"{D}/s.toml", "--quiet", "--no-plots", "--out"], {"s.toml": small}, "folder"),
        "simulate": (["simulate", f"{D}/s.toml", "--quiet", "--no-plots", "--out"], {"s.toml": serve}, "folder"),
        "replay": (["replay", f"{D}/rows.csv", "--out"], {"rows.csv": replay}, "file"),
        "calibrate": (["calibrate", "steps", f"{D}/rows.csv", "--out"], {"rows.csv": crow}, "file"),
    }
    for name, (argv, files, kind) in cmds.items():
        for title, target, extra_files, exp in (
                ("--out is an existing file", f"{D}/afile", {"afile": "x"}, "refuse" if kind == "folder" else "either"),
                ("--out below a file", f"{D}/afile/sub", {"afile": "x"}, "refuse"),
                ("--out in /proc", "/proc/specsim-fuzz-out", {}, "refuse"),
                ("--out ''", "", {}, "refuse"),
                ("--out is a folder" if kind == "file" else "--out new nested folder", f"{D}/new/a/b" if kind == "folder" else f"{D}/adir",
                 {"adir/keep": "x"} if kind == "file" else {}, "refuse" if kind == "file" else "either"),
                ("--out with a trailing slash", f"{D}/o2/", {}, "either" if kind == "folder" else "refuse")):
            g.add("output", f"{name}: {title}", argv + [target], files={**files, **extra_files}, expect=exp,
                     culprit=("--out", "out", "afile", "adir", "proc"), check="none",
                     out=target.replace(f"{D}/", "") if target.startswith(D) else None)
    # reused folders
    for name in ("sweep", "simulate"):
        argv, files, _ = cmds[name]
        g.add("output", f"{name}: non-empty --out without --force", argv + [f"{D}/out"], files=files,
                 prefill={"notes.txt": "mine"}, out="out", expect="refuse", culprit=("--out", "out", "force"),
                 check="none")
    g.add("output", "simulate: rerun with other policies into the same folder (--force where it exists)",
             ["simulate", f"{D}/s.toml", "--quiet", "--no-plots", "--policies", "never", "--out", f"{D}/out", "--force"],
             files={"s.toml": serve}, out="out", expect="either", check="none",
             prerun=[["simulate", f"{D}/s.toml", "--quiet", "--no-plots", "--out", f"{D}/out"]])
    g.add("output", "sweep: rerun with plots off into a folder with plots (--force where it exists)",
             ["sweep", f"{D}/s.toml", "--quiet", "--no-plots", "--out", f"{D}/out", "--force"],
             files={"s.toml": small}, out="out", expect="either", check="none",
             prerun=[["sweep", f"{D}/s.toml", "--quiet", "--out", f"{D}/out"]], timeout_s=240)
    g.add("output", "simulate: rerun into the same folder without --force",
             ["simulate", f"{D}/s.toml", "--quiet", "--no-plots", "--policies", "never", "--out", f"{D}/out"],
             files={"s.toml": serve}, out="out", expect="either", check="none", culprit=("--out", "force"),
             prerun=[["simulate", f"{D}/s.toml", "--quiet", "--no-plots", "--out", f"{D}/out"]])
    g.add("output", "replay: --out over an existing CSV", ["replay", f"{D}/rows.csv", "--out", f"{D}/old.csv"],
             files={"rows.csv": replay, "old.csv": "a,b\n1,2\n"}, expect="either", check="none", out="old.csv")
    # a failing run must leave --out as it was
    bad = serving_scenario()
    bad["policies"]["static_k4"]["k"] = -1
    g.add("output", "simulate: a run refused after --out was checked leaves no files",
             ["simulate", f"{D}/s.toml", "--quiet", "--no-plots", "--out", f"{D}/out"], files={"s.toml": to_toml(bad)},
             out="out", expect="refuse", culprit=("k", "static_k4"), check="none")
    badsweep = analysis_scenario()
    badsweep["sweep"]["batch_size"] = [1, 4, -1]
    g.add("output", "sweep: a grid refused leaves no files",
             ["sweep", f"{D}/s.toml", "--quiet", "--no-plots", "--out", f"{D}/out"], files={"s.toml": to_toml(badsweep)},
             out="out", expect="refuse", culprit=("batch_size",), check="none")
