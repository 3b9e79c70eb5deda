"""The reference decoder's two measurements as library calls: `run` (speculative decoding on prompts,
against plain decoding of the same prompts) and `bench` (one verify pass over M query tokens at
context L). `specsim decoder run` and `specsim decoder bench` parse their flags into a `RunConfig`
or `BenchConfig`, call these and print the result; a Python user does the same:

    from specsim.decoder.run import RunConfig, run
    result = run(RunConfig(drafter="layer-skip", layers=24, k=3, repeats=3))
    print(result.format_report())
    result.to_json()  # strict JSON: an undefined figure is null, and `undefined` says why

Every option is checked before the model is loaded (and against the model once it is), and a bad
value is a SpecError naming the flag, the value and what was expected; nothing is silently replaced
by a default. Timings are the median and the range (min–max) over `repeats` runs of the same
prompts: this machine is shared and its timings move from run to run; acceptance does not (the same
seeds give the same tokens), and a run whose tokens differ between repeats says so.
"""
from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

import numpy as np

from ..errors import InputError, SpecError
from .options import DEFAULT_TREE, bad_option, flag, parse_tree, show
from .registry import DRAFTERS, OPTIONS, TREE_BASES
from .verify import MODES
from .weight_bytes import pass_weight_bytes
from .workloads import WORKLOADS

# flag, parse_tree and pass_weight_bytes live below the registry (which needs them too); a caller of
# this module's own API finds them here as before
__all__ = ["RunConfig", "RunResult", "BenchConfig", "BenchResult", "Spread", "run", "bench", "flag", "parse_tree",
           "pass_weight_bytes", "option_conflicts", "read_prompt_file", "load_target", "set_threads", "run_machine"]

def _is_int(v) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, bool)


def _is_real(v) -> bool:
    return isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool)


def _check_int(name: str, v, lo: int, hi: int | None = None) -> None:
    if not _is_int(v) or v < lo or (hi is not None and v > hi):
        raise bad_option(name, v, f"an integer >= {lo}" if hi is None else f"an integer in {lo}..{hi}")


# -- run ------------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True, kw_only=True)
class RunConfig:
    """What `specsim decoder run` measures; the flags are the field names (k is -k). These defaults
    are the command's defaults."""

    model: Path | None = None  # the target GGUF; None: the fetched SmolLM2-135M
    drafter: str = "prompt-lookup"
    k: int = 4  # draft length of a chain drafter
    min_n: int = 1  # prompt lookup: shortest n-gram
    max_n: int | None = None  # prompt lookup: longest n-gram; None: the drafter's own (n-gram lookup 6, earliest 3)
    max_draft: int = 12  # prompt lookup: longest draft (its length adapts below this)
    layers: int | None = None  # layer skip: layers the drafter runs; None: 4/5 of the target's (24 of 30)
    draft_model: Path | None = None  # draft-model drafter (and --tree-base draft-model); None: the shipped one
    weights: Path | None = None  # folder of trained drafter files (specsim decoder train); None: the shipped ones
    medusa_tree: str = "0;1;0,0"  # Medusa's static tree, as Medusa choices
    eagle_depth: int = 4  # EAGLE: drafting rounds (tree depth)
    eagle_top_k: int = 2  # EAGLE: frontier nodes expanded per round, and children taken per node
    eagle_nodes: int = 6  # EAGLE: tree nodes verified (root included)
    tree: str = DEFAULT_TREE  # tree drafter topology, Medusa choices
    tree_base: str = "layer-skip"  # which model proposes the tree drafter's top-k candidates
    verify: str = "greedy"
    temperature: float = 0.0
    top_k: int = 0  # 0: no top-k cut
    top_p: float = 1.0  # 1: no nucleus cut
    workload: str = "code-edit"
    prompt_file: Path | None = None  # instead of the workload: prompts separated by a line '---'
    n_prompts: int = 3  # prompts taken from the workload
    tokens: int = 128  # new tokens per prompt
    seed: int = 0
    raw: bool = False  # no chat template
    stop_at_eos: bool = False
    repeats: int = 1  # timed runs of the same prompts (median and range reported)
    threads: int | None = None  # numba threads; None: all it may use
    clock: str = "wall"  # "thread": time with this thread's CPU time (a shared machine; needs --threads 1)

    def __post_init__(self) -> None:
        if self.drafter not in DRAFTERS:
            raise bad_option("drafter", self.drafter, f"one of {', '.join(DRAFTERS)}")
        _check_int("k", self.k, 1, 64)
        _check_int("min_n", self.min_n, 1)
        if self.max_n is not None:
            _check_int("max_n", self.max_n, 1)
        _check_int("max_draft", self.max_draft, 1, 64)
        parse_tree(self.medusa_tree)
        _check_int("eagle_depth", self.eagle_depth, 1, 16)
        _check_int("eagle_top_k", self.eagle_top_k, 1, 16)
        _check_int("eagle_nodes", self.eagle_nodes, 2, 64)
        own = DRAFTERS[self.drafter].default_max_n
        max_n = self.max_n if self.max_n is not None else own if own is not None else self.min_n
        if self.min_n > max_n:
            given = "" if self.max_n is not None else f" (the {self.drafter} default)"
            raise SpecError(f"--min-n {self.min_n} --max-n {max_n}{given}: expected --min-n <= --max-n")
        if self.layers is not None:
            _check_int("layers", self.layers, 1)
        if self.tree_base not in TREE_BASES:
            raise bad_option("tree_base", self.tree_base, " or ".join(TREE_BASES))
        parse_tree(self.tree)
        if self.verify not in MODES:
            raise bad_option("verify", self.verify, f"one of {', '.join(MODES)}")
        if not _is_real(self.temperature) or not math.isfinite(self.temperature) or self.temperature < 0:
            raise bad_option("temperature", self.temperature, "a finite number >= 0 (0 = greedy)")
        _check_int("top_k", self.top_k, 0)
        if not _is_real(self.top_p) or not 0 < self.top_p <= 1:
            raise bad_option("top_p", self.top_p, "a number in (0, 1] (1 = no nucleus cut)")
        if self.verify == "greedy" and self.temperature > 0:
            raise SpecError(f"--verify greedy --temperature {self.temperature:g}: greedy verification keeps the "
                            "target's argmax, so it needs --temperature 0; above 0 use rejection, onehot or typical")
        if self.verify == "rejection" and not DRAFTERS[self.drafter].gives_q:
            raise SpecError(f"--verify rejection --drafter {self.drafter}: rejection sampling needs the drafter's "
                            f"distribution q ({', '.join(n for n, d in DRAFTERS.items() if d.gives_q)}); "
                            f"{self.drafter} drafts one-hot tokens: use onehot (exact) or typical (lossy)")
        if self.prompt_file is None and self.workload not in WORKLOADS:
            raise bad_option("workload", self.workload, f"one of {', '.join(WORKLOADS)}")
        _check_int("n_prompts", self.n_prompts, 1)
        _check_int("tokens", self.tokens, 1)
        _check_int("seed", self.seed, 0)
        _check_int("repeats", self.repeats, 1)
        if self.threads is not None:
            _check_int("threads", self.threads, 1)
        _check_clock(self.clock, self.threads)

    def resolved_layers(self, target) -> int:
        """--layers checked against the target, or its default: 4/5 of the target's layers."""
        n = target.config.n_layer
        if self.layers is None:
            return max(1, (4 * n) // 5)
        if self.layers > n:
            raise bad_option("layers", self.layers, f"an integer in 1..{n} (the target's layers)")
        return self.layers

    def sampling(self):
        from .sampling import SamplingParams

        return SamplingParams(temperature=float(self.temperature), top_k=int(self.top_k), top_p=float(self.top_p))


def option_conflicts(drafter: str, given: set[str], *, tree_base: str = "layer-skip") -> list[str]:
    """The options among `given` (RunConfig field names set explicitly) that --drafter `drafter` (with
    `tree_base` for the tree drafter) does not read: a command line naming one is refused rather than
    having it silently ignored."""
    options = set(DRAFTERS[drafter].reads(tree_base))
    return [n for n in OPTIONS if n in given and n not in options]


def read_prompt_file(path) -> tuple[str, ...]:
    """Prompts from a UTF-8 text file, separated by a line '---'. InputError for a missing, unreadable,
    binary or empty file."""
    path = Path(path)
    where = f"--prompt-file {path}"
    if path.is_dir():
        raise InputError(f"{where}: is a folder; expected a text file")
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise InputError(f"{where}: no such file") from None
    except PermissionError:
        raise InputError(f"{where}: no permission to read it") from None
    except OSError as exc:
        raise InputError(f"{where}: cannot be read ({exc.strerror})") from None
    nul = data.find(b"\0")
    if nul >= 0:
        raise InputError(f"{where}: a binary file (a NUL byte at offset {nul}); expected UTF-8 text")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"{where}: not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start})") from None
    prompts = tuple(t.strip() for t in text.replace("\r\n", "\n").split("\n---\n") if t.strip())
    if not prompts:
        raise InputError(f"{where}: no prompts; expected text, prompts separated by a line '---'")
    return prompts


@dataclass(frozen=True, slots=True, kw_only=True)
class Spread:
    """The median and range of one figure over the repeats (None where it is undefined)."""

    median: float | None
    min: float | None
    max: float | None
    values: tuple

    @classmethod
    def of(cls, values) -> "Spread":
        xs = [float(v) for v in values if v is not None and math.isfinite(v)]
        if not xs:
            return cls(median=None, min=None, max=None, values=tuple(values))
        return cls(median=float(np.median(xs)), min=min(xs), max=max(xs), values=tuple(values))


TIMED = ("plain_tokens_per_s", "spec_tokens_per_s", "speedup", "plain_step_s", "draft_s_per_cycle",
         "verify_s_per_cycle", "draft_s_per_node", "prefill_s", "draft_prefill_s")


@dataclass(frozen=True, slots=True, kw_only=True)
class RunResult:
    """measurements: one per repeat (the same prompts and seeds); timings: each timed figure's Spread
    over them; the acceptance figures are the first repeat's (`same_tokens` says whether every repeat
    produced the same tokens); notes: what the figures hold, for a reader of the report."""

    config: RunConfig
    model_path: str
    prompts: tuple
    measurements: tuple
    timings: dict
    same_tokens: bool
    output_texts: tuple = ()  # the first repeat's speculative output of each prompt, decoded
    notes: tuple = ()

    @property
    def measurement(self):
        return self.measurements[0]

    def to_dict(self) -> dict:
        first = self.measurement.to_dict()
        return _strict({
            "config": {f.name: (str(getattr(self.config, f.name)) if isinstance(getattr(self.config, f.name), Path)
                                else getattr(self.config, f.name)) for f in fields(self.config)},
            "model": self.model_path, "prompts": list(self.prompts), "repeats": len(self.measurements),
            "same_tokens_every_repeat": self.same_tokens,
            "timings": {k: asdict(v) for k, v in self.timings.items()},
            "measurement": first,
            "repeat_timings": [{k: getattr(m, k) for k in TIMED} for m in self.measurements],
            "notes": list(self.notes), "undefined": first["undefined"]})

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, allow_nan=False) + "\n"

    def format_report(self, tokenizer=None) -> str:
        from .measure import format_report

        lines = [format_report(self.measurement, tokenizer)]
        if tokenizer is None:
            lines += [f"output {i}: " + repr(t)[:400] for i, t in enumerate(self.output_texts)]
        if len(self.measurements) > 1:
            lines.append(f"timings over {len(self.measurements)} repeats: median (min–max)")
            for name, unit, scale in (("plain_tokens_per_s", "tok/s", 1), ("spec_tokens_per_s", "tok/s", 1),
                                      ("speedup", "x", 1), ("plain_step_s", "ms", 1e3),
                                      ("draft_s_per_cycle", "ms", 1e3), ("verify_s_per_cycle", "ms", 1e3),
                                      ("draft_s_per_node", "ms", 1e3)):
                s = self.timings[name]
                if s.median is None:
                    lines.append(f"  {name:20s} —")
                else:
                    lines.append(f"  {name:20s} {s.median * scale:8.2f} {unit}  ({s.min * scale:.2f}–{s.max * scale:.2f})")
            if not self.same_tokens:
                lines.append("  NOTE: the repeats produced different tokens (acceptance shown is the first repeat's)")
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines)


def _strict(obj):
    """Non-finite floats -> None (a second guard; the measurement already uses None)."""
    if isinstance(obj, dict):
        return {str(k): _strict(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_strict(v) for v in obj]
    if isinstance(obj, (float, np.floating)):
        return float(obj) if math.isfinite(obj) else None
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, Path):
        return str(obj)
    return obj


def set_threads(threads: int | None) -> None:
    """numba's thread count for the parallel kernels; refused above what numba may use."""
    if threads is None:
        return
    import numba

    from .kernels import set_threads as _set

    most = int(numba.config.NUMBA_NUM_THREADS)
    if threads > most:
        raise bad_option("threads", threads, f"an integer in 1..{most} (the threads numba may use here; NUMBA_NUM_THREADS)")
    _set(threads)


def load_target(path: Path | None, threads: int | None = None):
    """The target Transformer from `path` (default: the fetched SmolLM2-135M), after setting threads."""
    from .fetch import default_model_path
    from .gguf_model import load_gguf
    from .model import Transformer

    set_threads(threads)
    return Transformer(load_gguf(path if path is not None else default_model_path()))


def run(config: RunConfig) -> RunResult:
    """Measure speculative decoding as `specsim decoder run` does (see the module docstring)."""
    from .measure import measure
    from .workloads import chat_prompt, load_workload

    target = load_target(config.model, config.threads)
    tok = target.tokenizer
    prefix = ""
    if config.prompt_file is not None:
        texts = read_prompt_file(config.prompt_file)
    else:
        work = load_workload(config.workload, config.n_prompts, seed=config.seed)
        texts, prefix = tuple(work.prompts), work.response_prefix
    prompts = [tok.encode(t + prefix).ids if config.raw else chat_prompt(tok, t, prefix) for t in texts]
    kind = DRAFTERS[config.drafter]
    room = kind.slots(config)
    for i, p in enumerate(prompts):
        if len(p) + config.tokens + room > target.config.n_ctx:
            where = f"prompt {i + 1} of {config.prompt_file or 'the workload ' + config.workload}"
            raise SpecError(f"{where}: {len(p)} tokens + --tokens {config.tokens} (+{room} speculative slots) exceed "
                            f"the model's context of {target.config.n_ctx} tokens")
    capacity = max(len(p) for p in prompts) + config.tokens + room
    drafter = kind.build(target, config, capacity)
    notes = list(kind.notes(target, config))
    if kind.catches_up:
        notes.append("draft time per cycle = the drafter's catch-up pass (the target's bonus token, and the last "
                     "draft token when all were accepted) + its remaining draft steps; the drafter's reading of the "
                     "prompt is its prefill, timed apart (not in any rate)")
    stop = target.gguf.eos_id if config.stop_at_eos else None
    sampling = config.sampling()
    ms = []
    from .generate import clock

    if config.clock != "wall":
        notes.append(f"timings are this thread's CPU time (--clock {config.clock}), not wall time")
    with clock(config.clock):
        for r in range(config.repeats):
            ms.append(measure(target, drafter, prompts, config.tokens, mode=config.verify, sampling=sampling,
                              seed=config.seed, stop_token=stop, warmup=r == 0))
    same = all(m.outputs == ms[0].outputs for m in ms[1:])
    timings = {name: Spread.of([getattr(m, name) for m in ms]) for name in TIMED}
    decoded = tuple(tok.decode(o["speculative"]) for o in ms[0].outputs)
    return RunResult(config=config, model_path=str(target.gguf.path), prompts=tuple(texts), measurements=tuple(ms),
                     timings=timings, same_tokens=same, output_texts=decoded, notes=tuple(notes))


# -- bench ----------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True, kw_only=True)
class BenchConfig:
    """What `specsim decoder bench` times: one verify pass per (context, M), the median of `repeats`."""

    model: Path | None = None
    m_values: tuple = (1, 2, 4, 8, 16, 32, 64)
    contexts: tuple = (128, 512, 2048)
    repeats: int = 5
    seed: int = 0
    threads: int | None = None
    clock: str = "wall"  # "thread": this thread's CPU time (a shared machine; needs --threads 1)

    def __post_init__(self) -> None:
        for name in ("m_values", "contexts"):
            if isinstance(getattr(self, name), list):
                object.__setattr__(self, name, tuple(getattr(self, name)))
            v = getattr(self, name)
            if not isinstance(v, tuple) or not v or not all(_is_int(x) and x >= 1 for x in v):
                raise bad_option(name, v, "a non-empty comma-separated list of integers >= 1")
            if len(set(v)) != len(v):
                raise bad_option(name, v, "each value once")
        _check_int("repeats", self.repeats, 1)
        _check_int("seed", self.seed, 0)
        if self.threads is not None:
            _check_int("threads", self.threads, 1)
        _check_clock(self.clock, self.threads)


def _check_clock(clock: str, threads: int | None) -> None:
    if clock not in ("wall", "thread"):
        raise bad_option("clock", clock, "wall or thread")
    if clock == "thread" and threads != 1:
        raise SpecError(f"--clock thread: needs --threads 1 (this thread's CPU time leaves out numba's other threads; "
                        f"got --threads {threads})")


@dataclass(frozen=True, slots=True, kw_only=True)
class BenchResult:
    config: BenchConfig
    model_path: str
    rows: tuple  # dicts: context_len, m, verify_s, per_token_s, ratio_to_m1 (None when M = 1 is not measured)
    undefined: dict = field(default_factory=dict)
    machine: dict = field(default_factory=dict)  # the machine and run the rows describe (specs.machine.MachineIdentity)

    def to_dict(self) -> dict:
        return _strict({"model": self.model_path, "config": {f.name: getattr(self.config, f.name) for f in fields(self.config)},
                        "machine": self.machine, "rows": list(self.rows), "undefined": self.undefined})

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, allow_nan=False) + "\n"

    def format_report(self) -> str:
        lines = [f"{'context':>8} {'M':>4} {'verify ms':>10} {'ms/token':>9} {'x M=1':>6}"]
        for r in self.rows:
            ratio = "—" if r["ratio_to_m1"] is None else f"{r['ratio_to_m1']:6.2f}"
            lines.append(f"{r['context_len']:8d} {r['m']:4d} {r['verify_s'] * 1e3:10.2f} {r['per_token_s'] * 1e3:9.2f} {ratio:>6}")
        lines += [f"  — {k}: {v}" for k, v in self.undefined.items()]
        return "\n".join(lines)


def bench(config: BenchConfig) -> BenchResult:
    from .bench import verify_times

    target = load_target(config.model, config.threads)
    need = max(config.contexts) + max(config.m_values)
    if need > target.config.n_ctx:
        raise SpecError(f"--contexts {show(config.contexts)} --m {show(config.m_values)}: the longest context plus "
                        f"the largest M is {need} tokens: expected at most the model's context of {target.config.n_ctx}")
    rows = verify_times(target, m_values=config.m_values, contexts=config.contexts, repeats=config.repeats,
                        seed=config.seed, clock=config.clock)
    undefined = {} if 1 in config.m_values else {"ratio_to_m1": "M = 1 is not among --m"}
    return BenchResult(config=config, model_path=str(target.gguf.path), rows=tuple(rows), undefined=undefined,
                       machine=run_machine(config.threads, config.clock))


def run_machine(threads: int | None, clock: str) -> dict:
    """This machine and a run's threads and clock, with the kernel paths this process takes, as a dict
    (`specs.machine.MachineIdentity`): what a measurement says it describes."""
    from dataclasses import replace

    import numba

    from ..specs.machine import this_machine
    from .kernels import kernel_paths

    paths = kernel_paths()
    here = this_machine(threads=threads or numba.get_num_threads(), clock=clock)
    return asdict(replace(here, block_matmul=paths["block_matmul"], attention=paths["attention"]))
