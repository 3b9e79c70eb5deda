"""numba kernels of the reference decoder, one operation or one instruction set a file. Each kernel has a
plain numpy twin in `decoder/reference.py`; the vector paths have plain numba twins here.

  host.py             the CPU's instruction sets, the switches to the plain loops, the JIT options, threads
  quant.py            the block formats: packed weight layout (`pack`), Q8 activations (`quantize_q8`)
  matmul.py           the matrix products: which tiles this CPU runs, the tiled driver, F16/F32, `matmul`
  block_tiles.py      the block matmuls' vector tile (LLVM IR): 16 weight rows x a tile of query rows
  block_sums.py       one block's exact integer sums: AVX512-VNNI (vpdpbusd) and AVX2
  block_dot_plain.py  the same sums and epilogue as plain loops (any CPU; the tiles' twin)
  elementwise.py      RMSNorm, rotary positions, SwiGLU
  expf.py             exp in float32 (Cephes), written once: SwiGLU and the softmax use it
  attention.py        fused attention over the KV cache with a tree mask (`attention`)
  attention_blocks.py its register blocks of rows: 16-lane vectors (LLVM IR) or plain loops
  softmax.py          a row's maximum, exp and sum, in fixed orders
  llvm_ir.py          helpers the IR kernels share

Conventions: outputs first; no allocation inside a kernel (scratch comes in); no random draws. Every
entry point checks that its arrays' shapes agree before its loops (a ValueError otherwise), so a caller's
mistake never becomes an out-of-bounds read or write: the vector tiles load through raw pointers, where
numba's boundscheck cannot see. The tests run the kernels under NUMBA_BOUNDSCHECK=1, with the plain loops
(SPECSIM_DECODER_PLAIN=1), and with the JIT off (NUMBA_DISABLE_JIT=1, in CI). The callers (the Transformer)
look the entry points up on this module, so a test can wrap them.
"""
from __future__ import annotations

from .attention import TK, attention
from .block_tiles import TILES
from .elementwise import rmsnorm, rope, swiglu
from .host import (HAVE_AVX2, HAVE_AVX512, HAVE_TILES, HAVE_VECTOR_ATTENTION, HAVE_VNNI, JIT_OFF, PLAIN,
                   instruction_sets, kernel_paths, set_threads, stream_sum)
from .matmul import (EIGHT_ROW_TILES, ROW_TILES, TILE_KERNELS, matmul, matmul_f16, matmul_f32, matmul_q4_0,
                     matmul_q4_1, matmul_q8_0, new_scratch)
from .quant import F16_LUT, GROUP, pack, quantize_q8

__all__ = ["attention", "matmul", "new_scratch", "pack", "quantize_q8", "rmsnorm", "rope", "swiglu", "stream_sum",
           "set_threads", "instruction_sets", "kernel_paths", "matmul_q4_1", "matmul_q4_0", "matmul_q8_0",
           "matmul_f16", "matmul_f32", "F16_LUT", "GROUP", "TILES", "ROW_TILES", "EIGHT_ROW_TILES", "TILE_KERNELS",
           "TK", "HAVE_VNNI", "HAVE_AVX2", "HAVE_AVX512", "HAVE_TILES", "HAVE_VECTOR_ATTENTION", "JIT_OFF", "PLAIN"]
