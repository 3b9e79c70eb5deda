"""Which machine and which run a measured hardware profile describes (its `[machine]` table).

`specsim calibrate machine` measures the reference decoder's own kernels, and what they cost depends on
more than the figures it fits: the CPU, the instruction sets its kernels took (the block matmuls run
AVX512-VNNI tiles, AVX2 tiles or plain loops; attention 16-lane vectors or plain loops, and the tiles'
row counts differ: 8, 4, 1 with VNNI, 4, 1 with AVX2), the thread count the `[kernels]` curve was
fitted at, and the clock (wall time, or one thread's CPU time on a shared machine). The profile records
them; `check_machine` compares them with this machine and a run (its threads and clock), and says what
differs and which command re-measures the machine, before any figure from the profile is used.

Instruction sets are named as LLVM names them (`avx512vnni`), read here from /proc/cpuinfo's flags
(Linux), so that this check runs without numba or llvmlite; the decoder reads the same sets from
LLVM (`decoder.kernels.host`) and chooses its paths by the same rule, `kernel_paths`.
"""
from __future__ import annotations

import os
import platform
import sys
from dataclasses import dataclass

from ..errors import SpecError, field_error, reject_unknown_keys

# the instruction sets the decoder's kernels choose between, or that would change what they cost
INSTRUCTION_SETS = ("avx2", "fma", "avx512f", "avx512bw", "avx512vnni", "avxvnni", "amx-int8")
_CPUINFO_FLAGS = {"avx2": "avx2", "fma": "fma", "avx512f": "avx512f", "avx512bw": "avx512bw",
                  "avx512_vnni": "avx512vnni", "avx_vnni": "avxvnni", "amx_int8": "amx-int8"}
CLOCKS = ("wall", "thread")
# numba's thread pool has one thread per logical CPU unless told otherwise; the largest CPU servers have a few
# hundred logical CPUs, so a count far beyond that is a typing slip, not a machine
MAX_THREADS = 4096
_MAX_WHY = "more threads than any CPU server has is not a measured run"
MATMUL_PATHS = ("vnni", "avx2", "plain")
ATTENTION_PATHS = ("vector", "plain")


def kernel_paths(instruction_sets) -> dict:
    """The decoder's kernel paths on a CPU with these instruction sets (after any switch that caps them):
    the block matmuls take the VNNI tiles with AVX512-VNNI and AVX512-BW, else the AVX2 tiles with AVX2,
    else plain loops; attention its 16-lane vector blocks with AVX512-F, or AVX2 with FMA (LLVM splits
    each vector in two), else plain loops."""
    s = set(instruction_sets)
    matmul = "vnni" if {"avx512vnni", "avx512bw"} <= s else "avx2" if "avx2" in s else "plain"
    attention = "vector" if "avx512f" in s or {"avx2", "fma"} <= s else "plain"
    return {"block_matmul": matmul, "attention": attention}


def capped(instruction_sets, *, isa: str = "", plain: bool = False) -> tuple[str, ...]:
    """The sets the kernels may use under the decoder's switches: SPECSIM_DECODER_ISA=avx2 drops AVX-512,
    the plain switches (SPECSIM_DECODER_PLAIN=1, SPECSIM_DECODER_ISA=plain, NUMBA_DISABLE_JIT=1) drop all."""
    if plain or isa == "plain":
        return ()
    return tuple(n for n in instruction_sets if not (isa == "avx2" and n.startswith("avx512")))


@dataclass(frozen=True, slots=True, kw_only=True)
class MachineIdentity:
    """cpu: the model name (/proc/cpuinfo); instruction_sets: those of INSTRUCTION_SETS the CPU has
    (None: unknown, not Linux); block_matmul, attention: the kernel paths the decoder took; threads: the
    numba threads of the run (of a profile: those its [kernels] curve was fitted at); threads_measured: a
    profile's thread counts; logical_cpus: the CPUs the process could run on; clock: wall or thread."""

    cpu: str
    block_matmul: str
    attention: str
    threads: int
    instruction_sets: tuple[str, ...] | None = None
    clock: str = "wall"
    threads_measured: tuple[int, ...] = ()
    logical_cpus: int = 0

    def __post_init__(self) -> None:
        where = "[machine]"
        if not isinstance(self.cpu, str) or not self.cpu.strip():
            raise field_error(where, "cpu", self.cpu, "the CPU's model name")
        if self.instruction_sets is not None:
            bad = [n for n in self.instruction_sets if n not in INSTRUCTION_SETS]
            if bad:
                raise field_error(where, "instruction_sets", bad[0], f"names among {', '.join(INSTRUCTION_SETS)}")
            object.__setattr__(self, "instruction_sets", tuple(n for n in INSTRUCTION_SETS if n in self.instruction_sets))
        if self.block_matmul not in MATMUL_PATHS:
            raise field_error(where, "block_matmul", self.block_matmul, f"one of {', '.join(MATMUL_PATHS)}")
        if self.attention not in ATTENTION_PATHS:
            raise field_error(where, "attention", self.attention, f"one of {', '.join(ATTENTION_PATHS)}")
        for name, low in (("threads", 1), ("logical_cpus", 0)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or not low <= v <= MAX_THREADS:
                raise field_error(where, name, v, f"an integer in {low}..{MAX_THREADS} ({_MAX_WHY})")
        bad = [t for t in self.threads_measured if isinstance(t, bool) or not isinstance(t, int) or not 1 <= t <= MAX_THREADS]
        if bad:
            raise field_error(where, "threads_measured", bad[0], f"integers in 1..{MAX_THREADS} ({_MAX_WHY})")
        object.__setattr__(self, "threads_measured", tuple(self.threads_measured))
        # the [kernels] curve is fitted at the largest measured count (calibrate machine): a threads that was
        # never measured names a run the figures do not describe
        if self.threads_measured and self.threads not in self.threads_measured:
            raise field_error(where, "threads", self.threads,
                              f"one of threads_measured {list(self.threads_measured)} (the counts the profile measured)")
        if self.clock not in CLOCKS:
            raise field_error(where, "clock", self.clock, "wall or thread")

    def toml(self) -> str:
        """The `[machine]` table of a hardware file."""
        import json

        lines = ["[machine]", f"cpu = {json.dumps(self.cpu)}"]
        if self.instruction_sets is not None:
            lines.append(f"instruction_sets = [{', '.join(json.dumps(n) for n in self.instruction_sets)}]")
        lines += [f'block_matmul = "{self.block_matmul}"', f'attention = "{self.attention}"', f"threads = {self.threads}"]
        if self.threads_measured:
            lines.append(f"threads_measured = [{', '.join(map(str, self.threads_measured))}]")
        if self.logical_cpus:
            lines.append(f"logical_cpus = {self.logical_cpus}")
        lines.append(f'clock = "{self.clock}"')
        return "\n".join(lines) + "\n"


_KEYS = {"cpu", "instruction_sets", "block_matmul", "attention", "threads", "threads_measured", "logical_cpus", "clock"}


def machine_from_dict(where: str, raw) -> MachineIdentity:
    """A hardware file's `[machine]` table."""
    if not isinstance(raw, dict):
        raise field_error(where, "machine", raw, "a [machine] table")
    reject_unknown_keys(f"{where} [machine]", raw, _KEYS)
    for key in ("cpu", "block_matmul", "attention", "threads"):
        if key not in raw:
            raise field_error(where, f"machine.{key}", None, "a value (written by `specsim calibrate machine`)")
    for key in ("instruction_sets", "threads_measured"):
        if key in raw and not isinstance(raw[key], list):
            raise field_error(where, f"machine.{key}", raw[key], "a list")
    kw = dict(raw)
    if "instruction_sets" in kw:
        kw["instruction_sets"] = tuple(kw["instruction_sets"])
    if "threads_measured" in kw:
        kw["threads_measured"] = tuple(kw["threads_measured"])
    try:
        return MachineIdentity(**kw)
    except SpecError as exc:  # the field error names [machine]; name the file too
        raise SpecError(f"{where}: {exc}") from None


# ---- this machine -----------------------------------------------------------------------------------

def _cpuinfo() -> tuple[str, tuple[str, ...] | None]:
    """(model name, the INSTRUCTION_SETS its flags list) from /proc/cpuinfo; (platform's name, None) without it."""
    name, flags = "", None
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                key, _, value = line.partition(":")
                key = key.strip()
                if key == "model name" and not name:
                    name = value.strip()
                elif key in ("flags", "Features") and flags is None:
                    have = set(value.split())
                    flags = tuple(n for f_, n in _CPUINFO_FLAGS.items() if f_ in have)
                if name and flags is not None:
                    break
    except OSError:
        pass
    return name or platform.processor() or platform.machine() or "unknown CPU", flags


def default_threads() -> int:
    """The threads the decoder's kernels use here unless a run sets them: NUMBA_NUM_THREADS, else the CPUs
    this process may run on (numba's own default)."""
    env = os.environ.get("NUMBA_NUM_THREADS", "")
    if env.isdigit() and int(env) >= 1:
        return int(env)
    return logical_cpus()


def logical_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def this_machine(*, threads: int | None = None, clock: str = "wall") -> MachineIdentity:
    """This machine and a run on it (threads None: the decoder's default here), with the kernel paths the
    decoder would take in this environment (its switches included)."""
    cpu, sets = _cpuinfo()
    plain = bool(os.environ.get("SPECSIM_DECODER_PLAIN")) or os.environ.get("NUMBA_DISABLE_JIT", "0") not in ("", "0")
    paths = kernel_paths(capped(sets or (), isa=os.environ.get("SPECSIM_DECODER_ISA", ""), plain=plain))
    if sets is None and not plain:  # not Linux: the flags are unknown; the decoder reads LLVM's view when it runs
        paths = {"block_matmul": "plain", "attention": "plain"}
    return MachineIdentity(cpu=cpu, instruction_sets=sets, threads=threads or default_threads(), clock=clock,
                           logical_cpus=logical_cpus(), **paths)


# ---- the check --------------------------------------------------------------------------------------

_PATH_WORDS = {"vnni": "AVX512-VNNI tiles", "avx2": "AVX2 tiles", "plain": "plain loops", "vector": "16-lane vectors"}
_CLOCK_WORDS = {"wall": "wall time", "thread": "one thread's CPU time"}


def mismatches(recorded: MachineIdentity, here: MachineIdentity) -> list[str]:
    """What differs between the machine and run a profile describes and this one, in words (empty: none)."""
    out = []
    if recorded.cpu != here.cpu:
        out.append(f"CPU: {recorded.cpu!r} there, {here.cpu!r} here")
    if recorded.instruction_sets is not None and here.instruction_sets is not None \
            and recorded.instruction_sets != here.instruction_sets:
        gone = [n for n in recorded.instruction_sets if n not in here.instruction_sets]
        new = [n for n in here.instruction_sets if n not in recorded.instruction_sets]
        out.append("instruction sets: " + "; ".join(p for p in (
            f"{', '.join(gone)} there, not here" if gone else "", f"{', '.join(new)} here, not there" if new else "") if p))
    for part, label in (("block_matmul", "block matmuls"), ("attention", "attention")):
        a, b = getattr(recorded, part), getattr(here, part)
        if a != b:
            out.append(f"{label}: {_PATH_WORDS[a]} there, {_PATH_WORDS[b]} here")
    if recorded.threads != here.threads:
        out.append(f"threads: the [kernels] curve was fitted at {recorded.threads}, this run uses {here.threads}")
    if recorded.clock != here.clock:
        out.append(f"clock: {_CLOCK_WORDS[recorded.clock]} there, {_CLOCK_WORDS[here.clock]} here")
    return out


def remedy(here: MachineIdentity, out_path: str = "hardware/local.toml") -> str:
    """The command that measures this machine for this run."""
    cmd = f"specsim calibrate machine --out {out_path} --force"
    if here.clock == "thread":
        return cmd + " --threads 1 --clock thread"
    return cmd + (f" --threads 1,{here.threads}" if here.threads > 1 else " --threads 1")


def check_machine(hw, *, threads: int | None = None, clock: str = "wall") -> list[str]:
    """The mismatches between hardware profile `hw`'s `[machine]` and this machine and a run (threads None:
    the decoder's default here). A catalog part (no `[machine]`, not measured here) has none; a profile
    `specsim calibrate machine` wrote before it recorded the machine says so."""
    recorded = getattr(hw, "machine", None)
    if recorded is None:
        measured = any("specsim calibrate machine" in str(v) for v in getattr(hw, "sources", {}).values())
        return ["it does not record which machine it describes (written before `calibrate machine` recorded it)"] \
            if measured else []
    return mismatches(recorded, this_machine(threads=threads, clock=clock))


def mismatch_message(hw, found: list[str], *, threads: int | None = None, clock: str = "wall",
                     default_run: bool = False) -> str:
    """One paragraph: what differs, against which run, and the commands that measure this machine."""
    here = this_machine(threads=threads, clock=clock)
    run = (f" (against the decoder's default run here: {here.threads} thread{'s' * (here.threads > 1)}, "
           f"{_CLOCK_WORDS[here.clock]})" if default_run else "")
    what = (f"hardware {hw.id!r} {found[0]}" if getattr(hw, "machine", None) is None else
            f"hardware {hw.id!r} was measured on another machine or for another run{run}: {'; '.join(found)}")
    verb = "may not describe" if getattr(hw, "machine", None) is None else "do not describe"
    run_flags = " --threads 1 --clock thread" if here.clock == "thread" else ""
    # the commands name the files they write and read by path: a catalog id reads the copy the package ships
    # (an installed wheel's own), not the file just written in this folder
    return (f"{what}. Its figures {verb} this one. Measure this machine first: `{remedy(here)}`; then the decoder's "
            f"stack: `specsim decoder bench --out out/bench{run_flags}` and `specsim calibrate steps out/bench --format "
            "bench --bench-hardware hardware/local.toml --write-stack stacks/specsim-numba.toml`, and pass both files "
            "by path (`--hardware hardware/local.toml --stack stacks/specsim-numba.toml`)")


_SAID: set = set()  # (profile id, its machine) already checked in this process


def warn_if_other_machine(hw, *, threads: int | None = None, clock: str = "wall", run: bool = False,
                          stream=None) -> list[str]:
    """check_machine, with the message on stderr. run=False (a prediction: `resolve` calls this for every
    operating point): against the decoder's default run here, once per profile in this process (a sweep
    resolves thousands), and not at all after a run's own check. run=True (validate, calibrate steps: a
    run's threads and clock are known): always, and it silences the prediction check after it."""
    key = (hw.id, getattr(hw, "machine", None))
    if not run and key in _SAID:
        return []
    _SAID.add(key)
    found = check_machine(hw, threads=threads, clock=clock)
    if found:
        print(f"warning: {mismatch_message(hw, found, threads=threads, clock=clock, default_run=not run)}",
              file=stream or sys.stderr)
    return found


__all__ = ["MachineIdentity", "machine_from_dict", "this_machine", "kernel_paths", "capped", "mismatches",
           "check_machine", "warn_if_other_machine", "mismatch_message", "default_threads", "INSTRUCTION_SETS"]
