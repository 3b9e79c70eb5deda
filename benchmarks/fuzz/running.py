"""Running one case as a subprocess and classifying what it did (the classes are in
`benchmarks/fuzz_campaign.py`'s docstring)."""
from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

try:
    import tomllib
except ImportError:  # pragma: no cover
    import tomli as tomllib

from .cases import Case, D, RUNNER
from .checks import check_output, Nonsense, snapshot, strict_json
from .install import Installation, materialise


@dataclass


class Outcome:
    cls: str
    reason: str = ""
    rc: int | None = None
    argv: list | None = None
    stdout: str = ""
    stderr: str = ""
    seconds: float = 0.0


def _run(inst: Installation, argv: list, cwd: Path, timeout: float, interrupt_s: float | None = None,
         group: bool = True):
    cmd = [inst.python, "-c", RUNNER, *argv]
    t0 = time.monotonic()
    # SIGINT back to its default in the child: a campaign started in the background of a shell
    # inherits SIGINT ignored, and Python would then never raise KeyboardInterrupt
    p = subprocess.Popen(cmd, cwd=cwd, env=inst.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         stdin=subprocess.DEVNULL, start_new_session=True,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    sent = False
    try:
        if interrupt_s is not None:
            try:
                out, err = p.communicate(timeout=interrupt_s)
            except subprocess.TimeoutExpired:
                if group:
                    os.killpg(p.pid, signal.SIGINT)
                else:
                    p.send_signal(signal.SIGINT)
                sent = True
                out, err = p.communicate(timeout=30)
        else:
            out, err = p.communicate(timeout=timeout)
        return p.returncode, out.decode(errors="replace"), err.decode(errors="replace"), False, sent, time.monotonic() - t0
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate()
        return None, out.decode(errors="replace"), err.decode(errors="replace"), True, sent, time.monotonic() - t0


def _stderr_lines(err: str) -> list[str]:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    # argparse prints a usage block before its one error line; progress bars are not errors
    if lines and re.match(r"^specsim[\w -]*: error:", lines[-1]) and lines[0].startswith("usage:"):
        return lines[-1:]
    return [ln for ln in lines if "it/s]" not in ln and "s/it]" not in ln and not ln.startswith("\r")
            and not ln.startswith("specsim: note:")]


def run_case(case: Case, inst: Installation, work: Path, shared: Path) -> Outcome:
    argv = inst.adapt(case.argv)
    if argv is None:
        return Outcome("n/a", "the installation has no such command or flag")
    d = work / case.id
    if d.exists():
        shutil.rmtree(d, ignore_errors=True)
    cwd = d / "cwd"
    cwd.mkdir(parents=True)
    try:
        for name, value in case.files.items():
            materialise(value, d / name, inst, shared, d)
    except Exception as exc:  # a mutation the installation's file does not allow: still a case
        return Outcome("n/a", f"could not build the inputs: {type(exc).__name__}: {exc}")
    fill = lambda a: a.replace(D, str(d))  # noqa: E731
    argv = [fill(a) for a in argv]
    for pre in case.prerun:
        pre = inst.adapt(pre)
        if pre is None:
            return Outcome("n/a", "prerun not expressible")
        _run(inst, [fill(a) for a in pre], cwd, 600)
    out_path = d / case.out if case.out else None
    if out_path is not None and case.prefill:
        out_path.mkdir(parents=True, exist_ok=True)
        for name, text in case.prefill.items():
            (out_path / name).write_text(text)
    before = snapshot(out_path) if out_path is not None else {}
    rc, out, err, hung, sent, secs = _run(inst, argv, cwd, case.timeout_s, case.interrupt_s, case.interrupt_group)
    o = Outcome("", rc=rc, argv=argv, stdout=out, stderr=err, seconds=secs)
    both = out + err
    if hung:
        o.cls, o.reason = "hang", f"no exit within {case.timeout_s if not sent else 30} s" + (" of the SIGINT" if sent else "")
        return o
    if rc is not None and rc < 0 and not (sent and rc == -signal.SIGINT):
        o.cls, o.reason = "native crash", f"killed by signal {-rc} ({signal.Signals(-rc).name})"
        return o
    escaped = _outside_writes(case, d)
    if escaped:
        o.cls, o.reason = "stray output", escaped
        return o
    after = snapshot(out_path) if out_path is not None else {}
    partial = ""
    if out_path is not None and rc != 0:
        changed = sorted(k for k, v in after.items() if before.get(k) != v)
        if changed:
            partial = f"exit {rc} left {len(changed)} new or changed file(s): {', '.join(changed[:5])}"
    if out_path is not None and rc == 0 and case.prerun and out_path.is_dir():
        rewritten = {k for k, v in after.items() if before.get(k) != v}
        stale = sorted(k for k in after if k not in rewritten and k in before)
        manifest = out_path / "manifest.json"
        listed = None
        if manifest.is_file():
            try:
                listed = set(json.loads(manifest.read_text()).get("files", []))
            except ValueError:
                listed = None
        if stale and (listed is None or any(s in listed for s in stale)):
            partial = f"a rerun left {len(stale)} file(s) of the earlier run beside its own: {', '.join(stale[:5])}"
    also = f" (also: {partial})" if partial else ""
    if "Traceback (most recent call last)" in both or rc == 70 or "internal error" in err:
        tail = [ln for ln in err.splitlines() if ln.strip()][-1:] or ["?"]
        o.cls, o.reason = "traceback", tail[0][:300] + also
        return o
    if rc is not None and rc < 0:
        o.cls, o.reason = "traceback", "died of the SIGINT without handling it" + also
        return o
    if partial:
        o.cls, o.reason = "partial output", partial
        return o
    strays = [p.name for p in cwd.iterdir()]
    if strays:
        o.cls, o.reason = "stray output", f"wrote into the current folder: {', '.join(sorted(strays)[:5])}"
        return o
    if sent and rc == 130 and case.expect == "refuse":
        o.cls, o.reason = "hang", f"ran until the SIGINT at {case.interrupt_s:g} s on an input that must be refused"
        return o
    if sent and rc == 130 and case.meta.get("notice") and "specsim: note:" not in err:
        o.cls, o.reason = "hang", f"ran past {case.interrupt_s:g} s without saying before it started that it would take long"
        return o
    if rc == 0:
        if case.interrupt_s is not None and (sent or case.group == "interrupt"):
            if sent and secs > case.interrupt_s + 10:
                o.cls, o.reason = "hang", f"ignored the SIGINT: ran to completion {secs - case.interrupt_s:.0f} s after it"
                return o
            o.cls, o.reason = "valid result", "finished before the SIGINT" if not sent else "finished just after the SIGINT"
            return o
        if case.expect == "refuse" and case.check == "replay" and case.meta.get("bad_row"):
            # replay reports a row it cannot predict, with the reason, and goes on with the others
            try:
                rows = {str(r.get("id")): r for r in strict_json(out).get("rows", [])}
            except Nonsense as exc:
                o.cls, o.reason = "silent nonsense", str(exc)
                return o
            row = rows.get(case.meta["bad_row"])
            if row is None or row.get("predicted_speedup") is not None or not row.get("reason"):
                o.cls, o.reason = "silent nonsense", (f"row {case.meta['bad_row']} predicted "
                                                      f"({None if row is None else row.get('predicted_speedup')}) "
                                                      f"from an input that must be refused")
                return o
            reason = str(row["reason"])
            if case.culprit and not any(c and c.lower() in reason.lower() for c in case.culprit):
                o.cls, o.reason = "unclear refusal", f"row refused without naming {list(case.culprit)}: {reason[:200]}"
                return o
            o.cls, o.reason = "clean refusal", f"row refused: {reason[:200]}"
            return o
        if case.expect == "refuse":
            o.cls, o.reason = "silent nonsense", "exit 0 on an input that must be refused"
            return o
        meta = dict(case.meta)
        if case.check == "predict":
            meta["max_context_of_target"] = _max_context_for(argv, inst, d)
        try:
            check_output(case, out, d, meta)
            if case.twin:
                twin = inst.adapt(case.twin)
                if twin is not None:
                    rc2, out2, err2, hung2, _, _ = _run(inst, [fill(a) for a in twin], cwd, case.timeout_s)
                    if rc2 != 0:
                        raise Nonsense(f"the twin run exited {rc2}: {err2.strip()[-200:]}")
                    if meta.get("metamorphic"):
                        a, b = strict_json(out), strict_json(out2)
                        for key in ("batch_off", "alpha_off", "alpha_off_deployed_k"):
                            if a.get(key) != b.get(key):
                                raise Nonsense(f"reordering the grid changed {key}: {a.get(key)} -> {b.get(key)}")
                    elif case.twin == case.argv and out2 != out:  # determinism
                        raise Nonsense("the same command gave a different answer the second time")
        except Nonsense as exc:
            o.cls, o.reason = "silent nonsense", str(exc)
            return o
        except Exception as exc:  # a check that could not read the output
            o.cls, o.reason = "silent nonsense", f"output unreadable: {type(exc).__name__}: {exc}"
            return o
        o.cls = "valid result"
        return o
    if rc in (2, 3, 4, 5, 6) or (sent and rc == 130):
        lines = _stderr_lines(err)
        if len(lines) != 1:
            o.cls, o.reason = "unclear refusal", f"exit {rc} with {len(lines)} lines on stderr"
            return o
        msg = lines[0].lower()
        if case.culprit and not any(c and c.lower() in msg for c in case.culprit):
            o.cls, o.reason = "unclear refusal", f"exit {rc}: does not name any of {list(case.culprit)}: {lines[0][:200]}"
            return o
        o.cls, o.reason = "clean refusal", lines[0][:200]
        return o
    o.cls, o.reason = "other exit", f"exit {rc}: {(err.strip().splitlines() or [''])[-1][:200]}"
    return o


def _outside_writes(case: Case, d: Path) -> str:
    """A file outside the output folder that the run created (meta "absent") or changed (meta
    "unchanged": name -> the text it must keep), whatever the exit status."""
    made = [rel for rel in case.meta.get("absent", []) if (d / rel).exists()]
    if made:
        return f"created {', '.join(made)} outside the output folder"
    changed = [rel for rel, text in case.meta.get("unchanged", {}).items()
               if not (d / rel).is_file() or (d / rel).read_text(errors="replace") != text]
    return f"changed {', '.join(changed)} outside the output folder" if changed else ""


def _max_context_for(argv: list, inst: Installation, d: Path) -> int | None:
    target = None
    if "--target" in argv:
        target = argv[argv.index("--target") + 1]
    elif len(argv) > 1 and argv[1].endswith(".toml"):
        try:
            target = tomllib.loads(Path(argv[1]).read_text()).get("target")
        except Exception:
            return None
    if target is None:
        target = "llama-3.1-8b"
    try:
        p = Path(target) if target.endswith(".toml") else inst.catalog_file("models", target)
        return int(tomllib.loads(p.read_text())["max_context"])
    except Exception:
        return None


def write_failure(root: Path, case: Case, o: Outcome, work: Path) -> None:
    f = root / "failures" / o.cls.replace(" ", "_") / case.id
    f.mkdir(parents=True, exist_ok=True)
    (f / "case.json").write_text(json.dumps({
        "id": case.id, "group": case.group, "title": case.title, "class": o.cls, "reason": o.reason, "exit": o.rc,
        "argv": o.argv, "command": " ".join(shlex.quote(a) for a in (o.argv or [])), "expect": case.expect,
        "seconds": round(o.seconds, 2)}, indent=2) + "\n")
    (f / "stdout.txt").write_text(o.stdout[-20000:])
    (f / "stderr.txt").write_text(o.stderr[-20000:])
    src = work / case.id
    for name in case.files:
        p = src / name
        if p.is_file() and p.stat().st_size < 2_000_000:
            (f / "inputs").mkdir(exist_ok=True)
            shutil.copy(p, f / "inputs" / name.replace("/", "_"))
