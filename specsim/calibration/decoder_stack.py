"""The reference decoder as a serving stack (stacks/specsim-numba.toml), fitted from
`specsim decoder bench` output: `specsim calibrate steps BENCH --write-stack stacks/specsim-numba.toml`.

`bench_rows` reads what `specsim decoder bench --out DIR` (or `--json FILE`) writes — one verify pass of
M query tokens at context L per row — as the rows `calibration.fit` fits (hardware, target, tp,
batch_size, q_len, context_len, logit_len, measured_time_s): tp 1, batch 1, q_len M, context_len L, and
logit_len M (the decoder computes logits for every row of a pass). The fit (`fit.fit_efficiency`)
finds the stack's bandwidth and compute fractions (which, on a part with a `[kernels]` table, apply to
attention and the KV write only: the matrix products follow the measured curve) and its fixed costs
per pass and per layer (the Python dispatch between kernels).

`measure_host_in_loop` times the decoder's work between forward passes where it happens, in its own
generation loop: a plain and a prompt-lookup generation of one prompt with the target's `forward`
timed by the same clock, the rest of the loop divided by its steps (a plain step: picking and recording
the token; a speculative cycle: the tree mask, the verification, the KV compaction, the recording of the
emitted tokens and the context bookkeeping; the lookup itself is the drafter's, timed apart). They
become the stack's `[host] step_us` and `cycle_overhead_us`. `measure_host` times the same operations
one by one outside the loop (the model drafter's per-token work is read from it); in the loop they
cost 1.5-1.8x more on an AMD EPYC (cold caches after each forward pass, the loop's own Python).
"""
from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pandas as pd

from ..decoder.bench import check_bench
from ..decoder.disturbance import disturbed_note
from ..errors import InputError, SpecError, field_error
from ..specs.hardware import load_hardware
from .fit import ROW_COLUMNS

DEFAULT_TARGET = "smollm2-135m-q4_1"  # the catalog entry of the GGUF `specsim decoder fetch` gets
DEFAULT_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def read_bench(path) -> dict:
    """bench.json from a `decoder bench --out` folder or a `--json` file."""
    p = Path(path)
    if p.is_dir():
        p = p / "bench.json"
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError(f"{p}: no such file (write one with `specsim decoder bench --out DIR`)") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(f"{p}: not a bench JSON file ({exc})") from None
    if not isinstance(data, dict) or not isinstance(data.get("rows"), list):
        raise InputError(f"{p}: expected the JSON `specsim decoder bench` writes (an object with 'rows')")
    data["_path"] = str(p)
    return data


def bench_machine_mismatches(path, hardware: str = "local") -> list[str]:
    """What differs between the machine and run the bench describes (its `machine`, or for a bench written
    before it recorded one, this machine at the bench's threads and clock) and those hardware profile
    `hardware` was measured on: a stack fitted to passes of another machine or run is fitted to the
    wrong residuals."""
    from ..specs.machine import MachineIdentity, check_machine, mismatches

    data = read_bench(path)
    hw = load_hardware(hardware)
    config = data.get("config") or {}
    if hw.machine is None or not isinstance(data.get("machine"), dict) or not data["machine"]:
        return check_machine(hw, threads=config.get("threads"), clock=config.get("clock", "wall"))
    try:
        ran = MachineIdentity(**{k: (tuple(v) if isinstance(v, list) else v) for k, v in data["machine"].items()})
    except (SpecError, TypeError) as exc:
        raise InputError(f"{data['_path']}: its 'machine' is not a machine identity ({exc})") from None
    return mismatches(hw.machine, ran)


def bench_rows(path, *, hardware: str = "local", target: str | None = None) -> pd.DataFrame:
    """The bench's verify passes as calibration rows (see the module docstring). target: the catalog
    model the bench ran (default: smollm2-135m-q4_1 when the bench ran the fetched GGUF)."""
    data = read_bench(path)
    where = data["_path"]
    hw = load_hardware(hardware)
    if hw.kind != "cpu":  # the bench ran the reference decoder here: fitted against a GPU, its stack means nothing
        raise field_error("--bench-hardware", "kind", f"{hardware} is a {hw.kind} part",
                          "the CPU profile of the machine the bench ran on (`specsim calibrate machine --out FILE`)")
    if target is None:
        model = str(data.get("model", ""))
        if Path(model).name != DEFAULT_GGUF:
            raise SpecError(f"{where}: the bench ran {model!r}; name its catalog model with --target")
        target = DEFAULT_TARGET
    rows = []
    for i, r in enumerate(data["rows"]):
        try:
            m, ctx, t = int(r["m"]), int(r["context_len"]), float(r["verify_s"])
        except (KeyError, TypeError, ValueError):
            raise InputError(f"{where}: row {i}: expected m, context_len and verify_s") from None
        rows.append(dict(hardware=hardware, target=target, tp=1, batch_size=1, q_len=m, context_len=ctx, logit_len=m,
                         measured_time_s=t))
    if not rows:
        raise InputError(f"{where}: no rows")
    return pd.DataFrame(rows, columns=list(ROW_COLUMNS))


# a stack fitted to the decoder's own passes misses them by 3-8 % at the median on a quiet machine: past this
# the fit explains something other than the passes (the 37 % of a bench taken beside other work)
STEP_FIT_ERROR_LIMIT_FRAC = 0.15


def check_bench_file(path) -> list[str]:
    """A bench's own checks (decoder.bench.check_bench) on the file as written, and its mark if it was
    written with --force although they failed."""
    data = read_bench(path)
    out = [f"{data['_path']} was written with --force although: {p}" for p in (data.get("disturbed") or [])]
    rows = [r for r in data["rows"] if isinstance(r, dict) and {"m", "context_len", "verify_s"} <= set(r)]
    return out + [f"{data['_path']}: {p}" for p in check_bench(rows) if not out]


def check_step_fit(cal) -> list[str]:
    """What in a step fit contradicts its rows: fixed costs per pass larger than the fastest pass they are
    part of, or a fit that misses its own rows past STEP_FIT_ERROR_LIMIT_FRAC at the median."""
    from ..specs.models import load_model

    out = []
    rows = cal.rows
    e = cal.efficiency
    for target, d in rows.groupby("target"):
        fixed = e.step_overhead_s + e.per_layer_overhead_s * load_model(target).n_layers
        fastest = float(d["measured_time_s"].min())
        if fixed >= fastest:
            out.append(f"the fitted fixed cost per pass ({e.step_overhead_s * 1e6:.0f} us a step + "
                       f"{e.per_layer_overhead_s * 1e6:.1f} us a layer = {fixed * 1e3:.2f} ms) is no less than the fastest "
                       f"pass it explains ({fastest * 1e3:.2f} ms)")
    err = float(rows["relative_error_after"].abs().median())
    if err > STEP_FIT_ERROR_LIMIT_FRAC:
        worst = rows.loc[rows["relative_error_after"].abs().idxmax()]
        out.append(f"the fit misses its own passes by {err:.0%} at the median (expected within "
                   f"{STEP_FIT_ERROR_LIMIT_FRAC:.0%}; worst M = {int(worst['q_len'])} at context "
                   f"{int(worst['context_len'])}, {worst['relative_error_after']:+.0%})")
    return out


def check_host(host: dict) -> list[str]:
    """The host work between passes: a speculative cycle does a plain step's work and more (the tree mask,
    the verification, the KV compaction), so it cannot cost less."""
    out = [f"host work per {k} measured {host[k] * 1e6:.1f} us: expected a time > 0"
           for k in ("step_s", "cycle_s") if not host[k] > 0]
    if not out and host["cycle_s"] < host["step_s"]:
        out.append(f"a speculative cycle's host work ({host['cycle_s'] * 1e6:.1f} us) measured below a plain step's "
                   f"({host['step_s'] * 1e6:.1f} us), which it includes")
    return out


def _median_time(fn, repeats: int, inner: int, clock=time.perf_counter) -> float:
    fn()
    out = []
    for _ in range(repeats):
        t0 = clock()
        for _ in range(inner):
            fn()
        out.append((clock() - t0) / inner)
    return float(np.median(out))


def _clock(name: str):
    if name not in ("wall", "thread"):
        raise SpecError(f"clock {name!r}: expected wall or thread")
    return time.thread_time if name == "thread" else time.perf_counter


def measure_host(*, vocab: int = 49152, k: int = 4, repeats: int = 7, clock: str = "wall") -> dict:
    """Seconds of the decoder's host work (see the module docstring), median of `repeats`."""
    from ..decoder import generate as G
    from ..decoder import verify as V
    from ..decoder.kv_cache import KVCache
    from ..speculation.trees import ancestor_mask, chain

    rng = np.random.default_rng(0)
    row = rng.standard_normal(vocab).astype(np.float32)

    def plain():
        tok = int(np.argmax(row))
        G._top(row)
        np.array([tok])

    tree = chain(k)
    toks = np.arange(k + 1, dtype=np.int64)
    logits = rng.standard_normal((k + 1, vocab)).astype(np.float32)
    for i in range(k // 2):  # half of the draft accepted: the argmax of node i is the token of node i + 1
        logits[i, toks[i + 1]] = 100.0
    cache = KVCache(30, 3, 1024, 64)

    def cycle():
        ancestor_mask(tree)
        v = V.verify_greedy(tree, toks, logits)
        cache.length = 600
        cache.compact(595, 595 + np.array((0,) + v.path, np.int64))
        for node in (0,) + v.path:
            G._top(logits[node])

    from ..decoder.sampling import SamplingParams, probs

    greedy = SamplingParams()

    def draft_tokens():  # a model drafter's K tokens: the distribution of each, its pick, the stacked q
        qs = []
        for i in range(k):
            q = probs(logits[i], greedy)
            int(np.argmax(q))
            qs.append(q)
        np.stack(qs + [np.zeros_like(qs[0])])

    c = _clock(clock)
    step = _median_time(plain, repeats, 200, c)
    cyc = _median_time(cycle, repeats, 100, c)
    per_draft = _median_time(draft_tokens, repeats, 20, c) / k
    return {"step_s": step, "cycle_s": cyc, "draft_token_s": per_draft, "vocab": vocab, "k": k, "accepted": k // 2,
            "repeats": repeats, "clock": clock}


def measure_host_in_loop(*, model=None, tokens: int = 48, repeats: int = 5, clock: str = "wall",
                         threads: int | None = None) -> dict:
    """Host seconds per plain step and per speculative cycle in the decoder's generation loop (see the
    module docstring): the median over `repeats` generations of `tokens` new tokens from one prompt of
    the prose workload (seed 99: not a prompt `specsim validate` runs)."""
    from ..decoder import drafters as D
    from ..decoder import generate as G
    from ..decoder.run import load_target
    from ..decoder.workloads import chat_prompt, load_workload

    target = load_target(model, threads)
    w = load_workload("prose", 1, seed=99)
    prompt = chat_prompt(target.tokenizer, w.prompts[0], w.response_prefix)
    c = _clock(clock)
    spent: list = []
    inner = target.forward

    def forward(*a, **kw):  # the target's pass, timed by the clock the rest of the loop is read with
        t0 = c()
        out = inner(*a, **kw)
        spent.append(c() - t0)
        return out

    target.forward = forward
    steps, cycles, drafter_k = [], [], 4
    try:
        with G.clock(clock):
            for _ in range(repeats):
                spent.clear()
                g = G.generate_plain(target, prompt, tokens)
                # forward passes after the prefill (which generate_plain times apart)
                steps.append((g.decode_s - sum(spent[1:])) / max(len(spent) - 1, 1))
                spent.clear()
                g = G.generate_speculative(target, D.PromptLookupDrafter(k=drafter_k), prompt, tokens)
                draft = sum(cy.draft_s for cy in g.cycles)
                cycles.append((g.decode_s - sum(spent[1:]) - draft) / max(len(g.cycles), 1))
    finally:
        target.forward = inner
    return {"step_s": float(np.median(steps)), "cycle_s": float(np.median(cycles)), "k": drafter_k,
            "tokens": tokens, "repeats": repeats, "clock": clock, "where": "in the generation loop"}


def measure_prompt_lookup(*, contexts=(256, 1024, 4096), repeats: int = 5, clock: str = "wall") -> dict:
    """Seconds of one prompt-lookup search (`decoder.drafters.PromptLookupDrafter.propose`, K = 4,
    n-grams 3..1) over a context with no match (every n tried to the end), and its slope per 1,000
    context tokens (the family's `prompt_lookup_s_per_seq_per_ktoken`)."""
    from ..decoder.drafters import PromptLookupDrafter
    from ..decoder.sampling import SamplingParams

    d = PromptLookupDrafter(k=4)
    rng = np.random.default_rng(0)
    times = []
    for n in contexts:
        ctx = rng.permutation(n).astype(np.int64)  # all distinct: no n-gram recurs
        times.append(_median_time(lambda: d.propose(ctx, SamplingParams(), rng), repeats, 20, _clock(clock)))
    slope = float(np.polyfit(np.asarray(contexts, float) / 1000.0, times, 1)[0])
    return {"contexts": list(contexts), "seconds": times, "s_per_ktoken": max(slope, 0.0)}


def describes(machine: dict | None) -> str:
    """The machine and run a bench's `machine` (specs.machine.MachineIdentity as a dict) names, in words."""
    if not machine:
        return ""
    t = machine.get("threads")
    return (f"{machine.get('cpu', '?')} ({machine.get('block_matmul', '?')} matmul tiles, {machine.get('attention', '?')} "
            f"attention), {t} thread{'s' * (t != 1)}, {machine.get('clock', '?')} clock")


def stack_toml(cal, host: dict, *, stack_id: str, command: str, bench_path: str, hardware: str,
               lookup: dict | None = None, disturbed: tuple = (), machine: dict | None = None) -> str:
    """The stack file: the fitted efficiency and overheads (from `fit.fit_efficiency`) and the
    measured host work, each with its source."""
    e = cal.efficiency
    s = cal.summary()
    when = time.strftime("%Y-%m-%d %H:%M")
    fit_src = (f"fitted by `{command}` ({when}) to {cal.n_rows} verify passes of `specsim decoder bench` ({bench_path}) "
               f"on hardware {hardware!r}: median |error| {s['median_relative_error_after']:.1%} (worst "
               f"{s['worst_relative_error_after']:.1%})")
    how = ("calibration.decoder_stack.measure_host_in_loop (a plain and a prompt-lookup generation of "
           f"{host.get('tokens')} tokens, the loop less its forward passes)" if host.get("where") == "in the generation loop"
           else "calibration.decoder_stack.measure_host")
    host_src = (f"measured by `{command}` ({when}): {how}, median of {host['repeats']}"
                + (", this thread's CPU time" if host.get("clock") == "thread" else ""))
    notes = ("Efficiencies and fixed costs of one forward pass fitted to the decoder bench; host work between passes "
             "timed directly. Attention and the KV write use these fractions; the matrix products follow the hardware "
             "[kernels] curve.")
    if lookup:
        notes += (f" Prompt lookup search: {lookup['s_per_ktoken'] * 1e6:.1f} us per 1000 context tokens (a scenario's "
                  f"[drafter_options] prompt_lookup_s_per_seq_per_ktoken).")
    where = describes(machine)
    if where:
        notes = f"Describes {where}: the machine and run of the bench it was fitted to. {notes}"
    mark = disturbed_note(list(disturbed)) if disturbed else ""
    if mark:
        notes = f"{mark}. {notes}"
    lines = [f"# The reference decoder (specsim decoder) as a stack, fitted on this machine by `{command}`.",
             *([f"# It describes {where}: the machine and run of the bench."] if where else []),
             *([f"# {mark}"] if mark else []),
             f'id = "{stack_id}"', 'name = "specsim reference decoder (numba, CPU)"', 'version = "specsim 0.1"',
             f"bandwidth_frac = {e.bandwidth_frac:.6f}", f"compute_frac = {e.compute_frac:.6f}",
             f"step_overhead_us = {e.step_overhead_s * 1e6:.3f}", f"per_layer_overhead_us = {e.per_layer_overhead_s * 1e6:.4f}",
             f"cycle_overhead_us = {max(host['cycle_s'] - host['step_s'], 0.0) * 1e6:.3f}",
             'tree_verification = "static"', 'multi_gpu = "none"',
             'methods = ["prompt_lookup", "layer_skip", "draft_model", "medusa", "eagle"]',
             f"notes = {json.dumps(notes)}",
             "", "[host]", f"step_us = {host['step_s'] * 1e6:.3f}", "per_seq_us = 0",
             f"spec_per_draft_pass_us = {host.get('draft_token_s', 0.0) * 1e6:.3f}", 'overlap = "none"',
             "", "[sources]"]
    for key in ("bandwidth_frac", "compute_frac", "step_overhead_us", "per_layer_overhead_us"):
        lines.append(f"{key} = {json.dumps(fit_src)}")
    lines.append(f"cycle_overhead_us = {json.dumps(host_src + ': per speculative cycle (K = ' + str(host['k']) + ') the tree mask, greedy verification, KV compaction, recording of the emitted tokens and the context bookkeeping, less one plain step of host work')}")
    lines.append('tree_verification = "specsim.decoder.generate verifies any tree in one pass with the ancestor mask"')
    lines.append('multi_gpu = "the decoder runs on one CPU"')
    lines.append('methods = "specsim.decoder: prompt-lookup, layer-skip, draft-model (distilled), medusa and eagle drafters"')
    draft_src = host.get("draft_source", host_src)
    lines += ["", "[sources.host]", f"step_us = {json.dumps(host_src + ': per plain step, picking and recording the token (argmax and top-2 of one vocabulary row) and the loop around it')}",
              'per_seq_us = "the decoder runs one sequence: its whole per-step host work is in step_us"',
              f"spec_per_draft_pass_us = {json.dumps(draft_src + ': a model drafter per drafted token (one pass each): its distribution over the vocabulary, its pick, its share of the stacked q')}",
              'overlap = "the decoder is one Python thread: host work and kernels run in turn"']
    return "\n".join(lines) + "\n"


__all__ = ["check_bench_file", "check_step_fit", "check_host", "bench_rows", "read_bench", "measure_host", "measure_host_in_loop", "measure_prompt_lookup", "stack_toml",
           "DEFAULT_TARGET"]
