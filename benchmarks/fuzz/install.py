"""An installation of specsim under test (its interpreter, flags and catalogs) and the case files
written for it."""
from __future__ import annotations

import hashlib
import os
import random
import re
import shutil
import subprocess
import threading
from pathlib import Path

try:
    import tomllib
except ImportError:  # pragma: no cover
    import tomli as tomllib

from .cases import D, del_path, RUNNER, set_path, to_toml


class Installation:
    def __init__(self, python: str, env: dict, work: Path):
        self.python = os.path.abspath(python)  # absolute, not resolved: a venv's python is a link
        self.env = {k: v for k, v in os.environ.items() if k not in ("SPECSIM_DEBUG", "CI")}
        self.env.update(env)
        self.env["MPLBACKEND"] = "Agg"
        self.env.setdefault("NUMBA_CACHE_DIR", str(work / "numba-cache"))
        self.env["PYTHONDONTWRITEBYTECODE"] = "1"
        self.cwd = work  # never the harness's folder: `python -c` imports from the current folder first
        out = subprocess.run([self.python, "-c", "import specsim, pathlib; print(pathlib.Path(specsim.__file__).resolve().parent)"],
                             capture_output=True, text=True, env=self.env, check=True, cwd=self.cwd)
        self.package = Path(out.stdout.strip())
        self.flags: dict[tuple, set] = {}
        self._lock = threading.Lock()
        top = self._help([])
        self.commands = set(re.findall(r"^    ([a-z][\w-]*)", top, flags=re.M))
        cal = self._help(["calibrate"]) if "calibrate" in self.commands else ""
        self.calibrate_group = bool(re.search(r"^\s+steps\s", cal, flags=re.M))

    def catalog_file(self, kind: str, ident: str) -> Path:
        for p in (self.package / "catalog" / kind / f"{ident}.toml", self.package.parent / kind / f"{ident}.toml"):
            if p.is_file():
                return p
        raise FileNotFoundError(f"{kind}/{ident}.toml in {self.package}")

    def _help(self, path: list) -> str:
        r = subprocess.run([self.python, "-c", RUNNER, *path, "--help"], capture_output=True, text=True, env=self.env,
                           timeout=120, cwd=self.cwd)
        return r.stdout if r.returncode == 0 else ""

    def supported(self, path: tuple) -> set | None:
        with self._lock:
            if path not in self.flags:
                text = self._help(list(path))
                self.flags[path] = set(re.findall(r"(?<![\w-])(--?[a-zA-Z][\w-]*)", text)) if text else None
            return self.flags[path]

    def adapt(self, argv: list) -> list | None:
        """The abstract command line in this installation's dialect, or None when it cannot say it."""
        argv = list(argv)
        if argv[:2] == ["calibrate", "steps"] and not self.calibrate_group:
            argv = ["calibrate"] + argv[2:]
            path = ("calibrate",)
        elif argv[0] == "calibrate" and not self.calibrate_group:
            return None
        elif argv[0] in ("calibrate", "decoder", "hardware", "models", "scenarios"):
            path = tuple(argv[:2])
        else:
            path = (argv[0],)
        if argv[0] not in self.commands:
            return None
        flags = self.supported(path)
        if flags is None:
            return None
        out = []
        for a in argv:
            if re.match(r"^--?[a-zA-Z]", a):
                name = a.split("=", 1)[0]
                if name not in flags:
                    if name in ("--force", "--quiet"):
                        continue  # the earlier CLI always overwrote and never drew progress bars when piped

                    return None
            out.append(a)
        return out


_SMOL = str(Path(os.environ.get("SPECSIM_CACHE") or Path.home() / ".cache" / "specsim") / "SmolLM2-135M-Instruct.Q4_1.gguf")


def materialise(value, path: Path, inst: Installation, shared: Path, case_dir: Path):
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(value, str):
        path.write_text(value.replace(D, str(case_dir)))
    elif isinstance(value, bytes):
        path.write_bytes(value)
    elif value[0] == "symlink":  # a link (its target relative to the link's folder, as given)
        os.symlink(value[1], path)
    elif value[0] == "catalog":
        _, kind, ident, mut = value
        src = inst.catalog_file(kind, ident)
        raw = src.read_bytes()
        if mut[0] == "raw":
            path.write_bytes(mut[1])
            return
        if mut[0] == "utf16":
            path.write_bytes(raw.decode().encode("utf-16"))
            return
        if mut[0] == "truncate":
            path.write_bytes(raw[: len(raw) // 2])
            return
        table = tomllib.loads(raw.decode())
        table.pop("sources", None)
        if mut[0] == "set":
            set_path(table, mut[1], mut[2])
        elif mut[0] == "delete":
            del_path(table, mut[1])
        elif mut[0] == "rename":
            v = table
            for p in mut[1].split(".")[:-1]:
                v = v.get(p, {})
            old = v.pop(mut[1].split(".")[-1], 1)
            set_path(table, mut[2], old)
        path.write_text(to_toml(table))
    elif value[0] == "tiny_gguf":
        from specsim.decoder.testing import write_tiny_gguf

        key = hashlib.sha1(repr(sorted(value[1].items(), key=str)).encode()).hexdigest()[:12]
        cached = shared / f"tiny-{key}.gguf"
        if not cached.exists():
            write_tiny_gguf(cached, **value[1])
        shutil.copy(cached, path)
    elif value[0] == "tiny_gguf_damaged":
        from specsim.decoder.testing import write_tiny_gguf

        cached = shared / "tiny-base.gguf"
        if not cached.exists():
            write_tiny_gguf(cached)
        data = bytearray(cached.read_bytes())
        r = random.Random(value[1]["seed"])
        op = value[1]["op"]
        if op == "truncate":
            data = data[: r.randrange(1, len(data))]
        elif op == "flip":
            for _ in range(r.randint(1, 8)):
                data[r.randrange(0, min(len(data), 4096))] ^= 1 << r.randrange(8)
        elif op == "zero-run":
            i = r.randrange(0, 2048)
            data[i:i + r.randint(1, 64)] = b"\x00" * len(data[i:i + r.randint(1, 64)])
        elif op == "magic":
            data[0:4] = b"GGUX"
        elif op == "version":
            data[4:8] = (r.choice([0, 1, 99, 2**31]) & 0xFFFFFFFF).to_bytes(4, "little")
        elif op == "counts":
            off = r.choice([8, 16])
            data[off:off + 8] = r.choice([0, 2**40, 2**63 - 1, 2**64 - 1]).to_bytes(8, "little")
        path.write_bytes(bytes(data))
    elif value[0] == "smollm2_edit":
        from specsim.decoder.testing import rewrite_gguf

        key = hashlib.sha1(repr(value[1]).encode()).hexdigest()[:12]
        cached = shared / f"smol-{key}.gguf"
        if not cached.exists():
            drop = None
            if value[1]["drop"] == "blocks":
                drop = lambda name: any(name.startswith(f"blk.{b}.") for b in range(25, 30))  # noqa: E731
            rewrite_gguf(_SMOL, cached, fields=dict(value[1]["fields"]) or None, drop=drop)
        os.link(cached, path)
    else:
        raise ValueError(value)
