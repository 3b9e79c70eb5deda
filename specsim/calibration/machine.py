"""This machine as a hardware profile, measured with the reference decoder's own kernels
(`specsim calibrate machine --out hardware/local.toml`).

What is measured (each figure the median of `repeats` timed repetitions, each repetition a loop long
enough to dwarf the timer, with min and max kept as the spread):

- sustained read bandwidth: `kernels.stream_sum` over a buffer the size of the decoder's working set
  (the weights of SmolLM2-135M, about 100 MB) and over one of 1 GiB, per thread count;
- the decoder's quantized matrix products (`kernels.matmul`, the kernels a forward pass runs) per
  weight format (Q4_1, Q8_0, Q4_0, F16) and thread count, for M = 1..64 query rows, on the model's
  matrix shapes: the LM head (49152 × 576) and the layer matrices (gate+up 3072 × 576, down 576 × 1536),
  each shape cycled over as many copies as fill the decoder's working set (WORKING_SET_BYTES, at least
  30 of a layer's shapes), so that every matrix comes from where a forward pass finds it: after the rest of
  the pass's weights, not from a cache the previous repeat left it in (on a CPU whose last-level cache holds
  30 copies of a layer matrix, 30 copies timed cache-resident products a pass never gets: on a 2-core
  Xeon with AVX512-VNNI, a pass's layer products took twice what 30 cycled copies did);
- attention per cached token (`kernels.attention`, 9 query heads over 3 key/value heads of 64) for
  M = 1..64 query rows (ATTENTION_M) at contexts 128..2048;
- the floors: an empty parallel region, the smallest matrix product, the smallest element-wise call;
- element-wise kernels (RMSNorm, rotary, SwiGLU, residual add, embedding rows) for M rows;
- the float32 multiply-add rate of independent register accumulators (`decoder.probes`).

From them: the profile's memory bandwidth (the faster of the streaming read and the best
matrix–vector read at the working-set size: both are this machine moving the decoder's bytes), its
int8 peak (the best matrix–matrix rate of the block-quantized kernels: Q8_0, Q4_0, Q4_1) and fp32
peak (the faster of the probe and the decoder's attention kernel at its largest M and context: a probe
that keeps its accumulators in memory reads low on some CPUs, 29 GFLOP/s where the attention reached 50 on an AMD EPYC), and a
`[kernels]` table (`cost.kernels`): the GEMM curve fitted to the Q4_1 products at the full thread
count (tile 1 × 16: one query row by one interleaved group of 16 weight rows, the unit the VNNI kernel
computes; n_sm = threads; each row tile's pass its own cost, the largest tile's fixed at its rows' worth),
the overlap exponent of attention's cache read and arithmetic (fitted, with a read rate and a compute
rate, to the attention table), and element-wise floors and rates. The serving-stack side (the decoder's
Python overheads, attention's efficiency) is fitted by `specsim calibrate steps` from
`specsim decoder bench` rows into stacks/specsim-numba.toml.
"""
from __future__ import annotations

import math
import os
import platform
import time
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

from ..decoder import disturbance as D
from ..errors import SpecError
from ..specs.hardware import ELEMENTWISE_KINDS, ROW_BLOCKED_KINDS, KernelProfile
from ..specs.machine import MachineIdentity, this_machine
from ..specs.models import ACTIVATION_BYTES

FORMATS = ("Q4_1", "Q8_0", "Q4_0", "F16")
# the catalog's weight-format names (models.WEIGHT_FORMATS) of the block formats
FORMAT_NAMES = {"Q4_1": "gguf-q4_1", "Q8_0": "gguf-q8_0", "Q4_0": "gguf-q4_0"}
BITS = {"Q4_1": 5.0, "Q4_0": 4.5, "Q8_0": 8.5, "F16": 16.0, "F32": 32.0}
# (name, N, K, output bytes per element in the cost model, the fewest copies cycled per timing)
# every matrix shape a SmolLM2-135M pass runs: the fused q, k, v (960 x 576) and the attention output (576 x 576)
# beside the three largest; without the two small ones the curve's floor is fitted where nothing tells it from
# the read (21 us a product, where the smallest product takes 2), and a pass's 120 layer products carried it
SHAPES = (("head", 49152, 576, 4.0, 1), ("gate_up", 3072, 576, ACTIVATION_BYTES, 30),
          ("down", 576, 1536, ACTIVATION_BYTES, 30), ("qkv", 960, 576, ACTIVATION_BYTES, 30),
          ("o", 576, 576, ACTIVATION_BYTES, 30))
QUICK_SHAPES = (("head", 2048, 64, 4.0, 1), ("gate_up", 256, 64, ACTIVATION_BYTES, 4))
TILE = (1, 16)
# attention query rows: to the largest verify pass validate checks (the rate still grows past M = 8), and
# the small M where reading the cache and the arithmetic take comparable time (their overlap is fitted)
ATTENTION_M = (1, 2, 3, 4, 5, 8, 16, 64)
WORKING_SET_BYTES = 128 * 2 ** 20
DRAM_BYTES = 2 ** 30


@dataclass(frozen=True, slots=True, kw_only=True)
class MachineConfig:
    repeats: int = 5
    threads: tuple | None = None  # default: (1, all numba may use)
    formats: tuple = FORMATS
    m_values: tuple = (1, 2, 3, 4, 5, 8, 9, 12, 16, 32, 64)  # 3, 5, 9, 12: the tile mixes (4 + 1, 8 + 1, 8 + 4)
    contexts: tuple = (128, 512, 2048)
    quick: bool = False  # small shapes and buffers (tests)
    clock: str = "wall"  # "thread": this thread's CPU time (a machine shared with other work; threads (1,) only)
    # the 1 GiB streaming read beside the working set's: only a note in the profile (the bandwidth is the working
    # set's), and 9 s of a short calibration on a busy 2-core machine
    dram_read: bool = True

    def __post_init__(self) -> None:
        if self.clock not in ("wall", "thread"):
            raise SpecError(f"--clock {self.clock!r}: expected wall or thread")
        if self.clock == "thread" and tuple(self.threads or ()) != (1,):
            raise SpecError("--clock thread: needs --threads 1 (this thread's CPU time leaves out numba's other threads)")
        if isinstance(self.repeats, bool) or not isinstance(self.repeats, int) or self.repeats < 1:
            raise SpecError(f"--repeats {self.repeats!r}: expected an integer >= 1")
        bad = [f for f in self.formats if f not in BITS or f == "F32"]
        if bad or not self.formats:
            raise SpecError(f"--formats {','.join(map(str, self.formats))}: expected among {', '.join(FORMATS)}")
        if "Q4_1" not in self.formats:
            raise SpecError("--formats: Q4_1 is needed (the [kernels] curve is fitted to it: the decoder's layer format)")
        for name in ("m_values", "contexts"):
            v = getattr(self, name)
            if not v or any(isinstance(x, bool) or not isinstance(x, int) or x < 1 for x in v):
                raise SpecError(f"--{name.replace('_', '-')} {v!r}: expected integers >= 1")


_CLOCK = {"clock": time.perf_counter}  # measure_machine sets time.thread_time for --clock thread


def _time(fn, repeats: int, min_s: float = 0.02) -> tuple[float, float, float]:
    """(median, min, max) seconds per call of fn over `repeats` repetitions; each repetition loops fn
    enough times to last about min_s."""
    clock = _CLOCK["clock"]
    fn()
    t0 = clock()
    fn()
    once = max(clock() - t0, 1e-7)
    inner = max(1, int(min_s / once))
    out = []
    for _ in range(repeats):
        t0 = clock()
        for _ in range(inner):
            fn()
        out.append((clock() - t0) / inner)
    return float(np.median(out)), float(min(out)), float(max(out))


def _copies(fewest: int, matrix_bytes: float, *, quick: bool = False) -> int:
    """Copies of a matrix cycled in one timing: enough that they span the decoder's working set (each one
    then comes from where a pass finds it), and at least `fewest`."""
    return fewest if quick else max(fewest, math.ceil(WORKING_SET_BYTES / matrix_bytes))


def _row(**kw) -> dict:
    med, lo, hi = kw.pop("t")
    return dict(kw, time_s=med, time_min_s=lo, time_max_s=hi)


def _random_matrix(fmt: str, n: int, k: int, rng) -> np.ndarray:
    import gguf

    a = rng.standard_normal((n, k)).astype(np.float32) * 0.05
    if fmt == "F16":
        return a.astype(np.float16).view(np.uint16)
    return gguf.quants.quantize(a, getattr(gguf.GGMLQuantizationType, fmt))


@dataclass(frozen=True, slots=True, kw_only=True)
class MachineProfile:
    cpu: str
    max_threads: int
    memory_bytes: float
    llc_bytes: float
    repeats: int
    bandwidth: pd.DataFrame
    gemm: pd.DataFrame
    attention: pd.DataFrame
    elementwise: pd.DataFrame
    floors: dict
    fma: pd.DataFrame
    mem_bandwidth_bytes_per_s: float
    bandwidth_source: str
    peak_int8_ops_per_s: float
    peak_fp32_flops_per_s: float
    kernels: KernelProfile
    gemm_fit_errors: pd.DataFrame
    when: str = ""
    notes: tuple = field(default=())
    fp32_source: str = "probe"  # what set peak_fp32: the probe, or the attention kernel's own rate
    identity: MachineIdentity | None = None  # the CPU, instruction sets, kernel paths, threads and clock measured
    # what check_profile found, kept only when written anyway (--force): the file says so at its top and in notes
    disturbed: tuple = field(default=())

    def summary(self) -> dict:
        t = self.max_threads
        g = self.gemm[(self.gemm["threads"] == t)]
        per_fmt = {}
        for fmt, d in g.groupby("format"):
            one = d[(d["m"] == 1) & (d["shape"] == "head")]
            big = d[(d["m"] == d["m"].max()) & (d["shape"] == "head")]
            per_fmt[fmt] = {"matvec_gb_s": float(one["bytes"].iloc[0] / one["time_s"].iloc[0] / 1e9) if len(one) else None,
                            "matmat_tops": float(big["flops"].iloc[0] / big["time_s"].iloc[0] / 1e12) if len(big) else None}
        att = self.attention[(self.attention["threads"] == t) & (self.attention["m"] == 1)].sort_values("context_len")
        per_token = (float(np.polyfit(att["context_len"], att["time_s"], 1)[0]) if len(att) >= 2 else None)
        from dataclasses import asdict

        return {"cpu": self.cpu, "threads": t, "machine": asdict(self.identity) if self.identity is not None else None,
                "mem_bandwidth_gb_s": self.mem_bandwidth_bytes_per_s / 1e9,
                "peak_int8_tops": self.peak_int8_ops_per_s / 1e12, "peak_fp32_tflops": self.peak_fp32_flops_per_s / 1e12,
                "formats": per_fmt, "attention_s_per_cached_token_per_layer": per_token, "floors_s": dict(self.floors),
                "gemm_fit_median_abs_error": float(self._fit_errors("Q4_1").abs().median()),
                "format_fit_median_abs_error": {f: float(self._fit_errors(f).abs().median())
                                                for f in FORMAT_NAMES if f != "Q4_1" and len(self._fit_errors(f))},
                "kernels": {"gemm_bandwidth_frac": self.kernels.gemm_bandwidth_frac,
                            "gemm_compute_frac": self.kernels.gemm_compute_frac,
                            "gemm_overlap_exponent": self.kernels.gemm_overlap_exponent,
                            "gemm_floor_s": self.kernels.gemm_floor_s,
                            "gemm_row_tiles": list(self.kernels.gemm_row_tiles),
                            "gemm_tile_pass_cost": list(self.kernels.gemm_tile_pass_cost),
                            "attention_overlap_exponent": self.kernels.attention_overlap_exponent,
                            "gemm_compute_frac_by_format": dict(self.kernels.gemm_compute_frac_by_format),
                            "gemm_tile_pass_cost_by_format": {f: list(v) for f, v in
                                                              self.kernels.gemm_tile_pass_cost_by_format.items()}}}

    def toml(self, *, hw_id: str = "local", command: str = "specsim calibrate machine") -> str:
        """The hardware file: every figure with the command that measured it, the measured tables as
        comments."""
        k = self.kernels
        src = f"measured on this machine ({self.cpu}, {self.max_threads} threads) by `{command}` on {self.when}"
        rep = f"median of {self.repeats} repeats"
        s = self.summary()
        import json

        ident = self.identity
        paths = f", {ident.block_matmul} matmul tiles, {ident.clock} clock" if ident is not None else ""
        lines = [f"# This machine, measured with the reference decoder's kernels by `{command}` ({self.when}).",
                 "# Measured tables (median, min-max over the repeats) follow as comments; `--json` gives them all.",
                 "# [machine]: what it describes; validate and every prediction from it check it against the machine",
                 "# and the run, and say what differs.",
                 *([f"# {self._disturbed_note()}"] if self.disturbed else []),
                 f'id = "{hw_id}"', f"name = {json.dumps(f'This machine: {self.cpu}, {self.max_threads} threads{paths}')}",
                 'kind = "cpu"',
                 f"memory_gb = {self.memory_bytes / 1e9:.3f}",
                 f"mem_bandwidth_gb_s = {self.mem_bandwidth_bytes_per_s / 1e9:.3f}",
                 "interconnect_gb_s = 0", "interconnect_latency_us = 0"]
        if self.llc_bytes:
            lines.append(f"llc_mb = {self.llc_bytes / 1e6:.1f}")
        notes = self.notes + ((self._disturbed_note(),) if self.disturbed else ())
        lines.append(f"notes = {json.dumps('; '.join(notes))}")
        lines += ["", "[peak_tflops]", f"int8 = {self.peak_int8_ops_per_s / 1e12:.6f}",
                  f"fp32 = {self.peak_fp32_flops_per_s / 1e12:.6f}",
                  "", "[efficiency]", "bandwidth_frac = 1.0", "compute_frac = 1.0",
                  "", "[kernels]", f"n_sm = {k.n_sm}", f"gemm_bandwidth_frac = {k.gemm_bandwidth_frac:.6f}",
                  f"gemm_compute_frac = {k.gemm_compute_frac:.6f}", f"gemm_overlap_exponent = {k.gemm_overlap_exponent:.6f}",
                  f"gemm_tile = [{k.gemm_tile[0]}, {k.gemm_tile[1]}]", f"gemm_floor_us = {k.gemm_floor_s * 1e6:.4f}",
                  f"gemm_row_tiles = [{', '.join(str(x) for x in k.gemm_row_tiles)}]",
                  f"gemm_tile_pass_cost = [{', '.join(f'{c:.6f}' for c in k.gemm_tile_pass_cost)}]",
                  f"attention_overlap_exponent = {k.attention_overlap_exponent:.6f}",
                  *([("gemm_compute_frac_by_format = { " + ", ".join(f'"{f}" = {v:.6f}' for f, v in
                                                                     k.gemm_compute_frac_by_format.items()) + " }")]
                    if k.gemm_compute_frac_by_format else []),
                  *([("gemm_tile_pass_cost_by_format = { " + ", ".join(
                      f'"{f}" = [{", ".join(f"{c:.6f}" for c in v)}]' for f, v in k.gemm_tile_pass_cost_by_format.items())
                      + " }")] if k.gemm_tile_pass_cost_by_format else []),
                  f"elementwise_floor_us = {k.elementwise_floor_s * 1e6:.4f}",
                  f"elementwise_rows_per_sm = {k.elementwise_rows_per_sm}"]
        machine = ["", self.identity.toml().rstrip("\n")] if self.identity is not None else []
        lines += [f"{kind}_bandwidth_frac = {k.elementwise_bandwidth_frac[kind]:.6f}" for kind in ELEMENTWISE_KINDS]
        lines += [f"{kind}_row_ns_per_elem = {k.elementwise_row_s_per_elem[kind] * 1e9:.6f}" for kind in ROW_BLOCKED_KINDS]
        err = s["gemm_fit_median_abs_error"]
        lines += machine
        lines += ["", "[sources]",
                  f'memory_gb = "/proc/meminfo MemTotal, read by `{command}`"',
                  f'mem_bandwidth_gb_s = "{src}: {self.bandwidth_source} ({rep})"',
                  'interconnect_gb_s = "one CPU socket: no tensor-parallel group"',
                  'interconnect_latency_us = "one CPU socket: no tensor-parallel group"']
        if self.identity is not None:
            lines.append(f'machine = "read by `{command}`: /proc/cpuinfo (model name, flags), the kernel paths '
                         'decoder.kernels took, the thread counts and the clock of the measurement"')
        if self.llc_bytes:
            lines.append('llc_mb = "/sys/devices/system/cpu/cpu0/cache (the last-level cache the OS reports)"')
        lines += [f'"peak_tflops.int8" = "{src}: the best rate of the decoder\'s Q8_0 matrix product (VNNI when the CPU '
                  f'has it) over M = 1..64 query rows ({rep})"',
                  (f'"peak_tflops.fp32" = "{src}: independent float32 multiply-adds in registers, decoder.probes.fma_rate '
                   f'({rep})"' if self.fp32_source == "probe" else
                   f'"peak_tflops.fp32" = "{src}: the decoder\'s attention kernel ({self.fp32_source}: 4 M H L E FLOP), '
                   f'faster than the register multiply-add probe decoder.probes.fma_rate ({rep})"'),
                  '"efficiency.bandwidth_frac" = "1: the figures above are measured, what this machine reached; the '
                  'decoder\'s own efficiency is the specsim-numba stack"',
                  '"efficiency.compute_frac" = "1: the peaks above are measured, as bandwidth_frac"',
                  f'kernels = "{src}: GEMM curve fitted (least squares on log time) to the decoder\'s Q4_1 matrix products '
                  f'(row tiles {list(k.gemm_row_tiles)}: decoder.kernels.ROW_TILES, each tile\'s pass its own cost in rows) '
                  f'at {k.n_sm} threads on the model\'s shapes, M = 1..64, each other block format measured (Q8_0, Q4_0) on the '
                  f'same curve with its own compute fraction (gemm_compute_frac_by_format; median |error| {err:.1%}); attention\'s '
                  f'overlap exponent fitted to the attention table below; floors from the '
                  f'smallest product and element-wise call; element-wise rates from the decoder\'s RMSNorm, rotary, SwiGLU, '
                  f'residual add and embedding kernels ({rep})"', ""]
        lines += ["# measured: matrix products at the full thread count, median time per call (us)"]
        g = self.gemm[self.gemm["threads"] == self.max_threads]
        for (fmt, shape), d in g.groupby(["format", "shape"], sort=False):
            cells = ", ".join(f"M={int(r.m)}: {r.time_s * 1e6:.1f} ({r.time_min_s * 1e6:.1f}-{r.time_max_s * 1e6:.1f})"
                              for r in d.itertuples())
            lines.append(f"#   {fmt} {shape}: {cells}")
        lines.append("# per format: matrix-vector read rate and matrix-matrix rate (head shape), by threads")
        for (fmt, thr), d in self.gemm[self.gemm["shape"] == "head"].groupby(["format", "threads"]):
            one, big = d[d["m"] == d["m"].min()], d[d["m"] == d["m"].max()]
            lines.append(f"#   {fmt} threads {thr}: matvec {float(one['bytes'].iloc[0] / one['time_s'].iloc[0] / 1e9):.2f} "
                         f"GB/s, M={int(big['m'].iloc[0])} {float(big['flops'].iloc[0] / big['time_s'].iloc[0] / 1e12):.3f} "
                         f"TOP/s")
        lines.append("# sustained read (stream_sum), GB/s median (min-max)")
        for r in self.bandwidth.itertuples():
            lines.append(f"#   {r.size_bytes / 2 ** 20:.0f} MiB, threads {r.threads}: {r.size_bytes / r.time_s / 1e9:.2f} "
                         f"({r.size_bytes / r.time_max_s / 1e9:.2f}-{r.size_bytes / r.time_min_s / 1e9:.2f})")
        lines.append("# attention per layer (9 query heads, 3 kv heads of 64), us median")
        for r in self.attention.itertuples():
            lines.append(f"#   threads {r.threads} M={r.m} context {r.context_len}: {r.time_s * 1e6:.1f}")
        if s["attention_s_per_cached_token_per_layer"] is not None:
            lines.append(f"#   M = 1: {s['attention_s_per_cached_token_per_layer'] * 1e9:.2f} ns per cached token per layer")
        lines.append("# floors (us): " + ", ".join(f"{k2} {v * 1e6:.2f}" for k2, v in self.floors.items()))
        return "\n".join(lines) + "\n"

    def _fit_errors(self, fmt: str) -> pd.Series:
        """The GEMM curve's relative errors on one format's products (Q4_1: the curve's own fit)."""
        e = self.gemm_fit_errors
        return e.loc[e["format"] == fmt, "relative_error"]

    def _disturbed_note(self) -> str:
        return D.disturbed_note(list(self.disturbed))

    def to_dict(self) -> dict:
        return {"summary": self.summary(), "disturbed": list(self.disturbed), "bandwidth": self.bandwidth.to_dict(orient="records"),
                "gemm": self.gemm.to_dict(orient="records"), "attention": self.attention.to_dict(orient="records"),
                "elementwise": self.elementwise.to_dict(orient="records"), "fma": self.fma.to_dict(orient="records"),
                "gemm_fit": self.gemm_fit_errors.to_dict(orient="records")}


def _cpu_name() -> str:
    try:
        for line in open("/proc/cpuinfo", encoding="utf-8"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _memory_bytes() -> float:
    try:
        for line in open("/proc/meminfo", encoding="utf-8"):
            if line.startswith("MemTotal:"):
                return float(line.split()[1]) * 1024.0
    except OSError:
        pass
    return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


def _llc_bytes() -> float:
    best = 0.0
    root = "/sys/devices/system/cpu/cpu0/cache"
    try:
        for idx in sorted(os.listdir(root)):
            try:
                text = open(f"{root}/{idx}/size", encoding="utf-8").read().strip()
            except OSError:
                continue
            mult = {"K": 1024, "M": 1024 ** 2, "G": 1024 ** 3}.get(text[-1:], 1)
            best = max(best, float(text.rstrip("KMG")) * mult)
    except OSError:
        pass
    return best


def measure_machine(config: MachineConfig, *, progress=None) -> MachineProfile:
    """Run every probe (see the module docstring) and fit the profile."""
    from ..decoder import kernels as K
    from ..decoder import probes

    most = probes.max_threads()
    threads = tuple(sorted(set(config.threads or (1, most))))
    if any(t < 1 or t > most for t in threads):
        raise SpecError(f"--threads {','.join(map(str, threads))}: expected integers in 1..{most} (numba's limit here)")
    say = progress or (lambda msg: None)
    rng = np.random.default_rng(0)
    reps = config.repeats
    shapes = QUICK_SHAPES if config.quick else SHAPES
    m_values = tuple(sorted(config.m_values))
    bw_rows, gemm_rows, att_rows, ew_rows, fma_rows = [], [], [], [], []
    _CLOCK["clock"] = time.thread_time if config.clock == "thread" else time.perf_counter
    try:
        for t in threads:
            K.set_threads(t)
            say(f"read bandwidth, {t} thread(s)")
            sizes = (2 ** 20, 4 * 2 ** 20) if config.quick else (WORKING_SET_BYTES, DRAM_BYTES)
            for size in sizes if config.dram_read else sizes[:1]:
                a = np.ones(size // 4, np.float32)
                bw_rows.append(_row(size_bytes=size, threads=t, t=_time(lambda: K.stream_sum(a), reps, 0.05)))
                del a
            say(f"float32 multiply-add rate, {t} thread(s)")
            scratch = np.ones((t, probes.LANES), np.float32)
            n = 200_000
            med, lo, hi = _time(lambda: probes.fma_rate(scratch, n), reps)
            flops = probes.fma_flops(t, n)
            fma_rows.append(dict(threads=t, flops_per_s=flops / med, flops_per_s_min=flops / hi, flops_per_s_max=flops / lo))
            for fmt in config.formats:
                for name, nn, kk, out_bytes, copies in shapes:
                    say(f"{fmt} matrix products {name} ({nn} x {kk}), {t} thread(s)")
                    distinct = [K.pack(fmt, _random_matrix(fmt, nn, kk, rng), kk) for _ in range(min(copies, 2))]
                    copies = _copies(copies, nn * kk * BITS[fmt] / 8.0, quick=config.quick)
                    packed = [tuple(a.copy() for a in distinct[i % len(distinct)]) for i in range(copies)]
                    for m in m_values:
                        x = rng.standard_normal((m, kk)).astype(np.float32)
                        out = np.zeros((m, nn), np.float32)
                        sc = K.new_scratch(t, m, kk)

                        def call():
                            for p in packed:
                                K.matmul(out, sc, fmt, p, x, K.F16_LUT)
                        med, lo, hi = _time(call, reps)
                        gemm_rows.append(dict(format=fmt, shape=name, n=nn, k=kk, threads=t, m=m, out_bytes=out_bytes,
                                              bytes=nn * kk * BITS[fmt] / 8.0, flops=2.0 * m * nn * kk,
                                              time_s=med / copies, time_min_s=lo / copies, time_max_s=hi / copies))
            say(f"attention, {t} thread(s)")
            g, h, e = 3, 9, 64
            for m in ATTENTION_M:
                for ctx in config.contexts:
                    kc = rng.standard_normal((g, ctx + m, e)).astype(np.float32)
                    vc = rng.standard_normal((g, ctx + m, e)).astype(np.float32)
                    q = rng.standard_normal((m, h, e)).astype(np.float32)
                    out = np.zeros_like(q)
                    scores = np.zeros((g, m * h // g, ctx + m + 2), np.float32)
                    mask = np.tril(np.ones((m, m), np.bool_))
                    att_rows.append(_row(threads=t, m=m, context_len=ctx,
                                         # scores and values: 2 FLOP a multiply-add, each query head over every key
                                         flops=4.0 * m * h * (ctx + m) * e,
                                         t=_time(lambda: K.attention(out, scores, q, kc, vc, ctx, mask), reps)))
            say(f"floors, {t} thread(s)")
            tiny = K.pack("Q4_1", _random_matrix("Q4_1", 16, 32, rng), 32)
            x1, o1, s1 = np.ones((1, 32), np.float32), np.zeros((1, 16), np.float32), K.new_scratch(t, 1, 32)
            ew_rows.append(_row(kind="gemm_floor", threads=t, m=1,
                                t=_time(lambda: K.matmul(o1, s1, "Q4_1", tiny, x1, K.F16_LUT), reps)))
            po = np.zeros(t, np.float32)
            ew_rows.append(_row(kind="parallel_floor", threads=t, m=1, t=_time(lambda: probes.empty_parallel(po), reps)))
        K.set_threads(threads[-1])
        say("element-wise kernels")
        d, f, h, e = (64, 128, 4, 16) if config.quick else (576, 1536, 9, 64)
        w = np.ones(d, np.float32)
        inv = 10000.0 ** (-np.arange(0, e, 2, dtype=np.float64) / e)
        emb = _random_matrix("Q8_0", 512, d, rng)
        from ..decoder import reference

        for m in m_values:
            x, y = rng.standard_normal((m, d)).astype(np.float32), np.zeros((m, d), np.float32)
            qh = rng.standard_normal((m, h, e)).astype(np.float32)
            pos = np.arange(m, dtype=np.int64)
            gate, up = rng.standard_normal((m, f)).astype(np.float32), rng.standard_normal((m, f)).astype(np.float32)
            act, bits = np.zeros((m, f), np.float32), np.zeros((m, f), np.int32)
            ids = rng.integers(0, 512, m)
            tt = threads[-1]
            ew_rows.append(_row(kind="norm", threads=tt, m=m, row_elems=d, t=_time(lambda: K.rmsnorm(y, x, w, 1e-5), reps)))
            ew_rows.append(_row(kind="rope", threads=tt, m=m, row_elems=h * e, t=_time(lambda: K.rope(qh, pos, inv), reps)))
            ew_rows.append(_row(kind="act", threads=tt, m=m, row_elems=f, t=_time(lambda: K.swiglu(act, bits, gate, up), reps)))
            ew_rows.append(_row(kind="add", threads=tt, m=m, row_elems=d, t=_time(lambda: np.add(y, x, out=y), reps)))
            ew_rows.append(_row(kind="embed", threads=tt, m=m, row_elems=d,
                                t=_time(lambda: reference.dequantize("Q8_0", emb[ids], d), reps)))
    finally:
        K.set_threads(most)
        _CLOCK["clock"] = time.perf_counter
    bandwidth, gemm = pd.DataFrame(bw_rows), pd.DataFrame(gemm_rows)
    attention, elementwise, fma = pd.DataFrame(att_rows), pd.DataFrame(ew_rows), pd.DataFrame(fma_rows)
    prof = fit_profile(bandwidth=bandwidth, gemm=gemm, attention=attention, elementwise=elementwise, fma=fma,
                       threads=threads[-1], repeats=reps, quick=config.quick)

    here = this_machine(threads=threads[-1], clock=config.clock)
    paths = K.kernel_paths()
    prof = replace(prof, identity=replace(here, block_matmul=paths["block_matmul"], attention=paths["attention"],
                                          threads_measured=threads))
    if config.clock == "thread":
        prof = replace(prof, notes=prof.notes + ("timed with this thread's CPU time (--clock thread): the machine is "
                                                 "shared, and wall time would count the waits for a CPU",))
    return prof


# block formats whose matrix-vector products read the same kind of weights with the same kernel family: their
# read rates differ by the unpacking each does (Q8_0 reads 1.9x the bytes of Q4_0 per weight), not by 10x
BLOCK_READ_RATIO_LIMIT = 4.0
# a fitted GEMM curve whose median error on its own rows passes this fits something other than the decoder's
# products (a machine calibrated cleanly fits the Q4_1 table within 5-10 %)
GEMM_FIT_ERROR_LIMIT_FRAC = 0.20


def check_profile(prof: MachineProfile) -> list[str]:
    """What in a measured profile contradicts itself or the physics of the kernels (see
    decoder.disturbance): repeats that spread too far, a cost that does not grow with M or context, a
    negative per-token cost, block formats whose read rates differ past BLOCK_READ_RATIO_LIMIT, a fitted
    GEMM floor above the products it explains, or a GEMM curve that misses its own rows."""
    out = []
    tables = {"matrix products": (prof.gemm, lambda r: f"{r['format']} {r['shape']} M = {r['m']}, {r['threads']} thread(s)"),
              "attention figures": (prof.attention, lambda r: f"M = {r['m']} context {r['context_len']}, "
                                                              f"{r['threads']} thread(s)"),
              "element-wise figures": (prof.elementwise, lambda r: f"{r['kind']} M = {r['m']}"),
              "bandwidth figures": (prof.bandwidth, lambda r: f"{r['size_bytes'] // 2 ** 20} MiB, {r['threads']} thread(s)")}
    for what, (df, label) in tables.items():
        if len(df):
            out += D.spread_problems(df.to_dict(orient="records"), what=what, label=label)
    if len(prof.attention):
        for (t, m), d in prof.attention.groupby(["threads", "m"]):
            d = d.sort_values("context_len")
            out += D.must_grow(list(zip(d["context_len"], d["time_s"])), what=f"attention over M = {m} ({t} thread(s))",
                               along="context", unit="us", scale=1e6)
            if len(d) >= 2:
                slope = float(np.polyfit(d["context_len"].to_numpy(float), d["time_s"].to_numpy(float), 1)[0])
                if slope <= 0:
                    out.append(f"attention over M = {m} ({t} thread(s)) costs {slope * 1e9:.3g} ns per cached token per "
                               "layer: a cost that cannot be negative")
        for (t, ctx), d in prof.attention.groupby(["threads", "context_len"]):
            d = d.sort_values("m")
            out += D.must_grow(list(zip(d["m"], d["time_s"])), what=f"attention at context {ctx} ({t} thread(s))",
                               along="M", unit="us", scale=1e6)
    for (fmt, shape, t), d in prof.gemm.groupby(["format", "shape", "threads"]):
        d = d.sort_values("m")
        # the row tiles make M = 4 cheaper than M = 3: compare each M with the smallest, not its neighbour
        first = float(d["time_s"].iloc[0])
        low = d[d["time_s"] < (1.0 - D.DIP_TOLERANCE_FRAC) * first]
        if len(low):
            r = low.iloc[0]
            out.append(f"the {fmt} {shape} product at M = {int(r['m'])} ({t} thread(s)) takes {r['time_s'] * 1e6:.3g} us, "
                       f"less than {1 - D.DIP_TOLERANCE_FRAC:.0%} of M = {int(d['m'].iloc[0])}'s {first * 1e6:.3g} us; a "
                       "cost that must grow with M")
        elif len(d) > 1 and float(d["time_s"].iloc[-1]) <= first:
            out.append(f"the {fmt} {shape} product at M = {int(d['m'].iloc[-1])} ({t} thread(s)) takes no more than at "
                       f"M = {int(d['m'].iloc[0])}; a cost that must grow with M")
    head = prof.gemm[(prof.gemm["shape"] == "head") & prof.gemm["format"].isin(("Q8_0", "Q4_0", "Q4_1"))]
    for t, d in head.groupby("threads"):
        one = d[d["m"] == d["m"].min()]
        rates = dict(zip(one["format"], one["bytes"] / one["time_s"]))
        if len(rates) > 1:
            fast, slow = max(rates, key=rates.get), min(rates, key=rates.get)
            if rates[fast] > BLOCK_READ_RATIO_LIMIT * rates[slow]:
                out.append(f"{slow} matrix-vector products read {rates[slow] / 1e9:.2f} GB/s beside {fast}'s "
                           f"{rates[fast] / 1e9:.2f} GB/s ({t} thread(s)): block formats beyond "
                           f"{BLOCK_READ_RATIO_LIMIT:g}x of each other")
    for kind, d in prof.elementwise[prof.elementwise["kind"].isin(ELEMENTWISE_KINDS)].groupby("kind"):
        d = d.sort_values("m")
        if len(d) > 1 and float(np.polyfit(d["m"].to_numpy(float), d["time_s"].to_numpy(float), 1)[0]) <= 0:
            out.append(f"the {kind} kernel's time does not grow with its rows (M = {int(d['m'].min())}..{int(d['m'].max())}): "
                       "a cost per row that cannot be negative")
    q41 = prof.gemm[(prof.gemm["format"] == "Q4_1") & (prof.gemm["threads"] == prof.max_threads)]
    if len(q41) and prof.kernels.gemm_floor_s > float(q41["time_s"].min()):
        out.append(f"the fitted GEMM floor {prof.kernels.gemm_floor_s * 1e6:.3g} us exceeds the fastest product it explains "
                   f"({float(q41['time_s'].min()) * 1e6:.3g} us)")
    # the curve's own format only: another format shares its memory side and tiles (only the compute fraction
    # is its own), which fits within 7-8 % at the median on an AVX2 EPYC but need not everywhere
    e = prof._fit_errors("Q4_1")
    err = float(e.abs().median()) if len(e) else 0.0
    if err > GEMM_FIT_ERROR_LIMIT_FRAC:
        out.append(f"the GEMM curve misses its own Q4_1 products by {err:.0%} at the median (expected within "
                   f"{GEMM_FIT_ERROR_LIMIT_FRAC:.0%})")
    return out


def measure_machine_checked(config: MachineConfig, *, attempts: int = 2, force: bool = False,
                            progress=None) -> MachineProfile:
    """measure_machine, checked (check_profile and the numba threads' share of the CPUs) and measured
    again while its figures disagree, `attempts` times in all; then refused (DisturbedError) unless
    `force`, which returns the profile with `disturbed` set (its file then says so)."""
    most = max(config.threads or (D.n_cpus(),))
    prof, problems = D.measure_checked(lambda: measure_machine(config, progress=progress), check_profile,
                                       what="calibrate machine", threads=most, clock=config.clock, attempts=attempts,
                                       force=force, say=progress)
    return replace(prof, disturbed=tuple(problems)) if problems else prof


def attention_bytes(row) -> float:
    """Bytes of the KV cache one attention call of the machine's table reads: keys and values of the
    3 key/value heads of 64, float32, over context + M positions (the cost model's KV read)."""
    return 2.0 * 3 * (row.context_len + row.m) * 64 * 4.0


def fit_attention_overlap(att: pd.DataFrame, bandwidth_bytes_per_s: float) -> float:
    """The exponent q with which attention's cache read and arithmetic combine, (t_mem^q + t_comp^q)^(1/q),
    fitted with a read rate and a compute rate (least squares on log time) to the attention table;
    inf (the roofline's max) when the table cannot tell (fewer than 4 points)."""
    if len(att) < 4:
        return math.inf
    rows = list(att.itertuples())
    b = np.array([attention_bytes(r) for r in rows])
    f = att["flops"].to_numpy(float)
    t_meas = att["time_s"].to_numpy(float)
    peak = float((f / t_meas).max())

    def pred(th):
        mem, comp = b / (bandwidth_bytes_per_s * th[0]), f / (peak * th[1])
        m = np.maximum(mem, comp)
        return m * ((mem / m) ** th[2] + (comp / m) ** th[2]) ** (1.0 / th[2])

    res = least_squares(lambda th: np.log(pred(th) / t_meas), x0=[0.5, 1.0, 2.0],
                        bounds=([1e-3, 0.1, 1.0], [4.0, 4.0, 50.0]), loss="soft_l1", f_scale=0.1, x_scale="jac")
    return float(res.x[2])


def fit_profile(*, bandwidth, gemm, attention, elementwise, fma, threads: int, repeats: int,
                quick: bool = False) -> MachineProfile:
    """The profile from the measured tables (see the module docstring)."""
    from ..cost.kernels import gemm_time_s

    t = threads
    big = bandwidth[(bandwidth["threads"] == t)]
    ws = big[big["size_bytes"] == big["size_bytes"].min()]
    stream = float((ws["size_bytes"] / ws["time_s"]).iloc[0])
    mv = gemm[(gemm["threads"] == t) & (gemm["m"] == gemm["m"].min()) & (gemm["shape"] == "head")]
    matvec = float((mv["bytes"] / mv["time_s"]).max())
    if matvec > stream:
        bw, how = matvec, (f"the best matrix-vector read of the decoder's kernels on the {int(mv['n'].iloc[0])} x "
                           f"{int(mv['k'].iloc[0])} head-shaped matrix ({matvec / 1e9:.2f} GB/s; a streaming sum of "
                           f"{int(ws['size_bytes'].iloc[0]) // 2 ** 20} MiB reads {stream / 1e9:.2f} GB/s)")
    else:
        bw, how = stream, (f"a streaming sum over {int(ws['size_bytes'].iloc[0]) // 2 ** 20} MiB, the decoder's working "
                           f"set (the best matrix-vector read is {matvec / 1e9:.2f} GB/s)")
    # every block format multiplies the same int8 activations by its weight integers; which kernel does it
    # fastest depends on the CPU (Q8_0 with VNNI; the nibble formats with AVX2, whose vpmaddubsw Q8_0 cannot use)
    blocks = gemm[(gemm["threads"] == t) & gemm["format"].isin(("Q8_0", "Q4_0", "Q4_1"))]
    src = blocks if len(blocks) else gemm[gemm["threads"] == t]
    peak_int8 = float((src["flops"] / src["time_s"]).max())
    peak_fp32 = float(fma[fma["threads"] == t]["flops_per_s"].iloc[0])
    fp32_source = "probe"
    att = attention[(attention["threads"] == t)] if "flops" in attention else attention.iloc[0:0]
    if len(att):
        big_att = att[(att["m"] == att["m"].max())]
        big_att = big_att[big_att["context_len"] == big_att["context_len"].max()]
        att_rate = float((big_att["flops"] / big_att["time_s"]).iloc[0])
        if att_rate > peak_fp32:
            peak_fp32, fp32_source = att_rate, (f"attention at M = {int(big_att['m'].iloc[0])}, context "
                                                f"{int(big_att['context_len'].iloc[0])}")
    floors = {}
    for kind in ("gemm_floor", "parallel_floor"):
        d = elementwise[(elementwise["kind"] == kind) & (elementwise["threads"] == t)]
        floors[kind] = float(d["time_s"].iloc[0])
    # element-wise: floor = the cheapest call at M = 1; row kinds' per-element time from the slope over M
    ew = elementwise[elementwise["kind"].isin(ELEMENTWISE_KINDS)]
    ew_floor = float(ew[ew["m"] == ew["m"].min()]["time_s"].min())
    rows_per_sm = 1
    per_elem, fracs = {}, {}
    for kind in ELEMENTWISE_KINDS:
        d = ew[ew["kind"] == kind].sort_values("m")
        m, ts, r = d["m"].to_numpy(float), d["time_s"].to_numpy(float), float(d["row_elems"].iloc[0])
        slope = max(float(np.polyfit(m, ts, 1)[0]) if len(d) > 1 else float(ts[0] / m[0]), 1e-12)  # s per row
        if kind in ROW_BLOCKED_KINDS:  # t = floor + ceil(M / (n_sm · rows)) · r · c: c = slope · n_sm / r
            per_elem[kind] = slope * t * rows_per_sm / r
            fracs[kind] = 1.0
        else:  # t = floor + bytes / (B · f): the cost model's bytes per row over what one row took
            model_bytes = {"add": 3, "embed": 2}[kind] * r * ACTIVATION_BYTES
            fracs[kind] = float(min(1.0, model_bytes / (bw * slope)))
    g = gemm[(gemm["threads"] == t) & (gemm["format"] == "Q4_1")].reset_index(drop=True)
    # the decoder's matmul takes the query rows in tiles of 8, 4, then 1, unpacking the weights once per tile
    # pass (decoder.kernels.ROW_TILES: 4 and 1 on an AVX2 CPU): M = 2 costs about what M = 4 does, which no
    # smooth curve in M follows
    from ..decoder.kernels import ROW_TILES

    base = dict(n_sm=t, gemm_tile=TILE, gemm_row_tiles=tuple(ROW_TILES), elementwise_floor_s=ew_floor,
                elementwise_rows_per_sm=rows_per_sm, elementwise_bandwidth_frac=fracs, elementwise_row_s_per_elem=per_elem)

    n_free = len(ROW_TILES) - 1  # the largest tile's pass is fixed at its rows (it sets gemm_compute_frac)

    def profile(theta) -> KernelProfile:
        return KernelProfile(gemm_bandwidth_frac=float(theta[0]), gemm_compute_frac=float(theta[1]),
                             gemm_overlap_exponent=float(theta[2]), gemm_floor_s=float(theta[3]) * 1e-6,
                             gemm_tile_pass_cost=(float(ROW_TILES[0]),) + tuple(float(x) for x in theta[4:4 + n_free]),
                             attention_overlap_exponent=att_q, **base)

    def predict(theta, rows=None, fmt: str = "Q4_1") -> np.ndarray:
        kp = profile(theta)
        return np.array([float(gemm_time_s(kp, n_tokens=r.m, k=r.k, n=r.n, bandwidth_bytes_per_s=bw * kp.gemm_bandwidth_frac,
                                           flops_per_s=peak_int8 * kp.gemm_compute_frac,
                                           weight_bytes_per_elem=BITS[fmt] / 8.0, out_bytes_per_elem=r.out_bytes))
                         for r in (g if rows is None else rows).itertuples()])

    measured = g["time_s"].to_numpy(float)
    floor0 = max(floors["gemm_floor"] * 1e6, 0.0)
    att_q = fit_attention_overlap(attention[attention["threads"] == t], bw) if len(attention) else math.inf
    res = least_squares(lambda th: np.log(predict(th) / measured),
                        x0=[0.8, 0.5, 2.0, floor0] + [float(s_) + 1.0 for s_ in ROW_TILES[1:]],
                        bounds=([0.02, 0.01, 1.0, 0.0] + [0.05] * n_free,
                                [1.0, 1.0, 30.0, max(1e3, 10 * floor0)] + [64.0] * n_free), loss="soft_l1",
                        f_scale=0.1, x_scale="jac")
    kp = profile(res.x)
    errors = g[["format", "shape", "m", "time_s"]].assign(predicted_s=predict(res.x))
    errors["relative_error"] = errors["predicted_s"] / errors["time_s"] - 1.0
    # every other block format on the same curve, its compute fraction its own: the memory side carries by bytes
    # (Q8_0 reads 8.5 bits a weight where Q4_1 reads 5), the arithmetic does not always (on an AVX2 CPU the
    # decoder's Q8_0 products multiply at a third of Q4_1's rate at M >= 4; with VNNI alike)
    by_format, tiles_by_format = {}, {}
    for fmt in ("Q8_0", "Q4_0"):
        gf = gemm[(gemm["threads"] == t) & (gemm["format"] == fmt)].reset_index(drop=True)
        if not len(gf):
            continue
        # theta[1] is gemm_compute_frac, theta[4:] the smaller tiles' pass costs: the format's own
        free = [1] + list(range(4, 4 + n_free))

        def resid(z, gf=gf, fmt=fmt):
            th = np.array(res.x, float)
            th[free] = z
            return np.log(predict(th, gf, fmt) / gf["time_s"].to_numpy(float))

        rf = least_squares(resid, x0=np.array(res.x, float)[free], bounds=([0.01] + [0.05] * n_free, [1.0] + [64.0] * n_free),
                           loss="soft_l1", f_scale=0.1)
        by_format[FORMAT_NAMES[fmt]] = float(rf.x[0])
        tiles_by_format[FORMAT_NAMES[fmt]] = (float(ROW_TILES[0]),) + tuple(float(c) for c in rf.x[1:])
        th = np.array(res.x, float)
        th[free] = rf.x
        more = gf[["format", "shape", "m", "time_s"]].assign(predicted_s=predict(th, gf, fmt))
        more["relative_error"] = more["predicted_s"] / more["time_s"] - 1.0
        errors = pd.concat([errors, more], ignore_index=True)
    kp = replace(kp, gemm_compute_frac_by_format=by_format, gemm_tile_pass_cost_by_format=tiles_by_format)
    notes = [f"measured with {repeats} repeats per figure on a shared machine; spread in the comments below",
             f"streaming read {stream / 1e9:.2f} GB/s over the working set"]
    dram = big[big["size_bytes"] == big["size_bytes"].max()]
    if len(dram) and int(dram["size_bytes"].iloc[0]) != int(ws["size_bytes"].iloc[0]):
        notes.append(f"{float((dram['size_bytes'] / dram['time_s']).iloc[0]) / 1e9:.2f} GB/s over "
                     f"{int(dram['size_bytes'].iloc[0]) // 2 ** 20} MiB")
    if quick:
        notes.append("QUICK: small shapes, not a calibration")
    return MachineProfile(cpu=_cpu_name(), max_threads=t, memory_bytes=_memory_bytes(), llc_bytes=_llc_bytes(),
                          repeats=repeats, bandwidth=bandwidth, gemm=gemm, attention=attention, elementwise=elementwise,
                          floors=floors, fma=fma, mem_bandwidth_bytes_per_s=bw, bandwidth_source=how,
                          peak_int8_ops_per_s=peak_int8, peak_fp32_flops_per_s=peak_fp32, fp32_source=fp32_source,
                          kernels=kp,
                          gemm_fit_errors=errors, when=time.strftime("%Y-%m-%d %H:%M"), notes=tuple(notes))


__all__ = ["MachineConfig", "MachineProfile", "measure_machine", "fit_profile", "check_profile", "measure_machine_checked",
           "FORMATS"]
