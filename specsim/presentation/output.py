"""Output folders and files written as a unit, so an interrupted or failed run never leaves a
partial file that looks complete, and a reused folder never mixes two runs.

`OutputDir(path, force=...)`: files are written into a hidden staging folder inside `path` and moved
into place (one `os.replace` each) only when the run completes, followed by `manifest.json` naming
the command and every file of the run. A folder that already holds files is refused unless
`force=True`; with force, the files an earlier specsim run listed in its manifest and this run did not
write are removed (files specsim did not write are never touched). On an exception or Ctrl-C the
staging folder is deleted and the folder is left as it was. The commit itself (the renames and the
manifest) is not cut short by Ctrl-C: an interrupt that arrives during it is raised once the folder is
whole, saying so, so the folder is either as it was or complete, never between.

`write_file_atomically(path, text_or_bytes)`: one file, written beside itself and renamed.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path

from ..errors import OutputError

MANIFEST = "manifest.json"
_STAGING_PREFIX = ".specsim-partial-"


def _check_folder_path(path, flag: str) -> Path:
    text = str(path)  # the text as given: Path('') would read as '.', the current folder
    if not text.strip():
        raise OutputError(f"{flag} {text!r}: expected a folder path (use {flag} . for the current folder)")
    p = Path(text).expanduser()
    for parent in [p, *p.parents]:
        if parent.exists():
            if not parent.is_dir():
                raise OutputError(f"{flag} {text!r}: {parent} is a file, not a folder")
            if not os.access(parent, os.W_OK | os.X_OK):
                raise OutputError(f"{flag} {text!r}: no permission to write in {parent}")
            break
    if str(p.resolve()).startswith(("/proc", "/sys", "/dev")):
        raise OutputError(f"{flag} {text!r}: not a place for output files (a kernel file system)")
    return p


class OutputDir:
    """A folder of outputs written as one unit (see the module docstring)."""

    def __init__(self, path, *, force: bool = False, flag: str = "--out", command: str | None = None):
        self.path = _check_folder_path(path, flag)
        self.flag = flag
        self.force = force
        self.command = command if command is not None else " ".join(["specsim", *sys.argv[1:]])
        self._written: list[str] = []
        self._stage: Path | None = None
        if self.path.is_dir():
            existing = [p.name for p in self.path.iterdir() if not p.name.startswith(_STAGING_PREFIX)]
            if existing and not force:
                listed = ", ".join(sorted(existing)[:4]) + (", ..." if len(existing) > 4 else "")
                raise OutputError(f"{flag} {str(path)!r} is not empty ({len(existing)} entries: {listed}); "
                                  f"pass --force to replace an earlier run's files, or choose another folder")

    def __enter__(self) -> "OutputDir":
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            self._stage = Path(self.path) / f"{_STAGING_PREFIX}{os.getpid()}"
            self._stage.mkdir(exist_ok=True)
        except OSError as exc:
            raise OutputError(f"{self.flag} {str(self.path)!r}: cannot create it ({exc.strerror})") from None
        return self

    def file(self, name: str) -> Path:
        """Where to write output `name` now (inside the staging folder); it appears on completion."""
        if self._stage is None:
            raise RuntimeError("OutputDir.file() outside its `with` block")
        if "/" in name or name in ("", ".", "..", MANIFEST):
            raise ValueError(f"output name {name!r}: expected a plain file name other than {MANIFEST}")
        if name not in self._written:
            self._written.append(name)
        return self._stage / name

    def write_text(self, name: str, text: str) -> Path:
        p = self.file(name)
        p.write_text(text)
        return self.path / name

    def __exit__(self, exc_type, exc, tb) -> bool:
        stage, self._stage = self._stage, None
        if exc_type is not None:
            shutil.rmtree(stage, ignore_errors=True)
            return False
        with _interrupts_held() as held:
            try:
                old = self._previous_manifest()
                for name in self._written:
                    if (stage / name).exists():
                        os.replace(stage / name, self.path / name)
                for name in old:
                    if name not in self._written and (self.path / name).is_file():
                        (self.path / name).unlink()
                manifest = {"command": self.command, "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                            "files": sorted(n for n in self._written if (self.path / n).exists())}
                write_file_atomically(self.path / MANIFEST, json.dumps(manifest, indent=2) + "\n")
            except OSError as exc:
                raise OutputError(f"{self.flag} {str(self.path)!r}: cannot write ({exc.strerror})") from None
            finally:
                shutil.rmtree(stage, ignore_errors=True)
        if held:
            raise KeyboardInterrupt(f"the interrupt came as {self.path} was being completed: it is whole "
                                    f"({len(manifest['files'])} files and {MANIFEST})")
        return False

    def _previous_manifest(self) -> list[str]:
        p = self.path / MANIFEST
        if not p.is_file():
            return []
        try:
            files = json.loads(p.read_text()).get("files", [])
        except (OSError, ValueError, AttributeError):
            return []
        return [f for f in files if isinstance(f, str) and "/" not in f]


@contextmanager
def _interrupts_held():
    """SIGINT held off while a folder is committed (yields the list of signals that came meanwhile).
    Only the main thread can set a handler; where SIGINT is ignored (a background job) it stays so."""
    held: list = []
    if threading.current_thread() is not threading.main_thread() or \
            signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        yield held
        return
    previous = signal.signal(signal.SIGINT, lambda signum, frame: held.append(signum))
    try:
        yield held
    finally:
        signal.signal(signal.SIGINT, previous)


def write_file_atomically(path, data, *, flag: str = "output") -> Path:
    """Write text or bytes to `path` through a temporary file beside it and one rename."""
    if not str(path).strip():
        raise OutputError(f"{flag} {str(path)!r}: expected a file path")
    if str(path).endswith(("/", os.sep)):
        raise OutputError(f"{flag} {str(path)!r} ends with a separator (a folder); expected a file path")
    p = Path(path).expanduser()
    if p.is_dir():
        raise OutputError(f"{flag} {str(path)!r} is a folder; expected a file path")
    if str(p.resolve()).startswith(("/proc", "/sys", "/dev")) and not p.exists():
        raise OutputError(f"{flag} {str(path)!r}: not a place for output files (a kernel file system)")
    tmp = p.with_name(f".{p.name}.partial-{os.getpid()}")
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(data, bytes):
            tmp.write_bytes(data)
        else:
            tmp.write_text(data)
        os.replace(tmp, p)
    except OSError as exc:
        tmp.unlink(missing_ok=True) if tmp.parent.is_dir() else None
        raise OutputError(f"{flag} {str(path)!r}: cannot write ({exc.strerror})") from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return p


__all__ = ["OutputDir", "write_file_atomically", "MANIFEST"]
