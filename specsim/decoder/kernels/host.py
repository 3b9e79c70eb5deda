"""What this CPU offers the kernels, and how they are compiled.

Instruction sets are read once from LLVM's view of the host (`llvmlite.binding.get_host_cpu_features`):
the block matmuls take AVX512-VNNI tiles, else AVX2 tiles (the same integers), else plain loops;
attention takes its 16-lane vector blocks on AVX-512 or on AVX2 with FMA, else plain loops. Switches,
for the tests of each path on any machine: SPECSIM_DECODER_ISA=avx2 (the AVX2 paths where the CPU has
AVX-512), SPECSIM_DECODER_PLAIN=1 or SPECSIM_DECODER_ISA=plain (the plain numba loops, compiled) and
NUMBA_DISABLE_JIT=1 (every kernel body runs as Python, which the LLVM-IR tiles cannot: CI runs the
kernel tests once this way, so the bodies count in coverage).

The JIT options: FAST for the float matmuls and element-wise kernels; ORDERED for attention, which sums
in the order written (a masked row adds an exact 0, so a query's result does not depend on how many
masked rows the pass carries); EXACT for the block matmuls and the IEEE steps (quantization, exp,
softmax sums): no fast-math, so each float epilogue runs in the fixed order written, whatever the
tile and M. A callee inherits its caller's fast-math unless it sets its own, so every kernel sets it.
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

from ...specs.machine import INSTRUCTION_SETS, capped
from ...specs.machine import kernel_paths as paths_for
from ..fetch import configure_numba_cache

configure_numba_cache()  # before numba defines anything: compiled kernels go to a user cache folder

import llvmlite.binding  # noqa: E402
from numba import config as _numba_config  # noqa: E402
from numba import njit  # noqa: E402


def _clear_stale_cache() -> None:
    """numba keys a cached kernel on its own file's contents, but these kernels call one another across the
    files of this package: one cached before a callee's file changed would keep the old callee. The
    package's cache folder therefore holds a hash of every file here, and is emptied when it differs."""
    if _numba_config.DISABLE_JIT or not _numba_config.CACHE_DIR:
        return
    try:
        from numba.core.caching import _CacheLocator

        here = Path(__file__).parent
        digest = hashlib.sha256(b"".join(p.name.encode() + p.read_bytes() for p in sorted(here.glob("*.py")))).hexdigest()
        folder = Path(_numba_config.CACHE_DIR) / _CacheLocator.get_suitable_cache_subpath(__file__)
        mark = folder / "sources.sha256"
        if mark.is_file() and mark.read_text() == digest:
            return
        folder.mkdir(parents=True, exist_ok=True)
        for f in list(folder.glob("*.nbi")) + list(folder.glob("*.nbc")):
            f.unlink(missing_ok=True)
        tmp = folder / f"sources.sha256.{os.getpid()}"
        tmp.write_text(digest)
        tmp.replace(mark)
    except (OSError, ImportError, AttributeError):  # no cache folder to keep fresh: numba compiles as it can
        pass


_clear_stale_cache()

FAST = dict(cache=True, fastmath=True, nogil=True)
ORDERED = dict(cache=True, fastmath={"nsz", "arcp", "contract", "afn"}, nogil=True)  # -inf marks masked rows
EXACT = dict(cache=True, fastmath=False, nogil=True)

FEATURES = llvmlite.binding.get_host_cpu_features()
JIT_OFF = bool(_numba_config.DISABLE_JIT)  # NUMBA_DISABLE_JIT=1: kernels are Python functions
ISA = os.environ.get("SPECSIM_DECODER_ISA", "")  # "avx2": no AVX-512 paths (tests the AVX2 ones on any x86-64)
if ISA not in ("", "avx2", "plain"):
    raise ValueError(f"SPECSIM_DECODER_ISA={ISA!r}: expected avx2 (the AVX2 paths even where the CPU has AVX-512), "
                     "plain (the plain loops) or unset (what this CPU has)")
PLAIN = bool(os.environ.get("SPECSIM_DECODER_PLAIN")) or ISA == "plain" or JIT_OFF  # the plain loops, any CPU


SETS = tuple(n for n in INSTRUCTION_SETS if FEATURES.get(n, False))  # those the kernels care about, as LLVM sees them
_USABLE = set(capped(SETS, isa=ISA, plain=PLAIN))
PATHS = paths_for(_USABLE)  # the one rule (specs.machine), which a hardware profile's [machine] check uses too
HAVE_VNNI = PATHS["block_matmul"] == "vnni"  # vpdpbusd on 512-bit vectors
HAVE_AVX2 = "avx2" in _USABLE
HAVE_AVX512 = "avx512f" in _USABLE
HAVE_TILES = PATHS["block_matmul"] != "plain"  # the block matmuls' vector tiles: vpdpbusd, or the same integers from AVX2
# attention's 16-lane IR vectors need no AVX-512: LLVM splits each into two 8-lane halves on AVX2 with FMA, the same
# operations lane by lane, so the same bits (AVX2's 16 registers then hold half as many; a block's rows spill
# some queries to the stack, which costs loads the FMAs can take as operands, measured no slower than smaller blocks)
HAVE_VECTOR_ATTENTION = PATHS["attention"] == "vector"


def instruction_sets() -> tuple[str, ...]:
    """The instruction sets of specs.machine.INSTRUCTION_SETS this CPU has (LLVM's view, before any switch)."""
    return SETS


def kernel_paths() -> dict:
    """Which implementation each kernel family runs in this process: the block matmuls (vnni, avx2 or
    plain) and attention (vector or plain), and the switch that chose other paths than the CPU's, if any."""
    why = ("NUMBA_DISABLE_JIT=1" if JIT_OFF else "SPECSIM_DECODER_PLAIN=1" if PLAIN and ISA != "plain"
           else f"SPECSIM_DECODER_ISA={ISA}" if ISA else "")
    return dict(PATHS, plain_because=why)


@njit(parallel=True, **FAST)
def stream_sum(a):
    # a (S,) f32, a large array read once (the memory-bandwidth probe); numba's parallel reduction
    return a.sum()


def set_threads(n: int) -> None:
    """Threads the parallel kernels use (numba's set_num_threads); scratch buffers made after this."""
    import numba

    numba.set_num_threads(n)

