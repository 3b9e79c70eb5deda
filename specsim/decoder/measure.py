"""Measure speculative decoding on real prompts: acceptance (vLLM's unconditional per-position rate
and the conditional one), tokens per cycle, the accepted-length histogram, plain and speculative
tokens per second, speedup, draft and verify time per cycle, and whether greedy output matches
plain greedy decoding token for token (and where not, the position and both logits).

What is timed: decoding only, for both runs. Plain: every step after the prefill. Speculative:
every cycle after the prefill, where a model drafter reads the prompt into its own cache during the
prefill (`draft_prefill_s`, reported apart, as the target's prefill is), so the first cycle's draft
time holds only that cycle's work; each later cycle's draft time holds the drafter's catch-up pass
(the tokens the target emitted that the drafter has not read: the bonus token, and the last draft
token when all were accepted) plus its remaining draft steps.

A figure that is not defined (a rate with no cycles, a conditional acceptance at a position no cycle
reached) is None, never NaN, and `undefined` says why; `to_dict()` is strict JSON."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

from .generate import Generation, generate_plain, generate_speculative
from .sampling import SamplingParams
from .verify import MODES


@dataclass(frozen=True, slots=True, kw_only=True)
class Mismatch:
    """First position where speculative output differs from plain output, with the target's top
    tokens and logits there in each run (a near tie shows as a small margin)."""

    prompt_index: int
    position: int
    plain_token: int
    spec_token: int
    plain_top: list
    spec_top: list


@dataclass(frozen=True, slots=True, kw_only=True)
class Measurement:
    drafter: str
    mode: str
    exact: bool
    temperature: float
    n_prompts: int
    n_new_tokens: int
    n_cycles: int
    tokens_per_cycle: float | None
    accepted_length_hist: list  # counts of 0, 1, ..., max accepted per cycle
    acceptance_unconditional: list  # position i: cycles accepting >= i / cycles that drafted (vLLM); None: none drafted
    acceptance_conditional: list  # position i: P(accept i | accepted 1..i-1 and i was drafted); None: never reached
    n_drafting_cycles: int
    draft_acceptance_rate: float | None  # accepted draft tokens / drafted tokens (tree: drafted nodes)
    plain_tokens_per_s: float | None
    spec_tokens_per_s: float | None
    speedup: float | None
    plain_step_s: float | None  # plain decoding: seconds per token (one target step)
    draft_s_per_cycle: float | None
    verify_s_per_cycle: float | None
    draft_s_per_node: float | None  # draft time per drafted node (per draft step for a chain model drafter)
    prefill_s: float  # the target's prefills, all prompts (not in any rate above)
    draft_prefill_s: float  # the drafter reading the prompts into its own cache, all prompts (not in any rate)
    greedy_match: bool | None
    n_mismatched_prompts: int
    mismatches: list = field(default_factory=list)
    outputs: list = field(default_factory=list)
    undefined: dict = field(default_factory=dict)  # field -> why it is None

    def to_dict(self) -> dict:
        """Strict JSON (no NaN or Infinity: undefined figures are None, explained in `undefined`)."""
        return asdict(self)


def acceptance_stats(cycles, max_depth: int) -> tuple[list, list, list, int]:
    """(accepted-length histogram, unconditional and conditional acceptance per position 1..max_depth,
    cycles that drafted). A rate with nothing to divide by is None."""
    acc = np.array([c.n_accepted for c in cycles], dtype=np.int64)
    drafted = np.array([c.n_drafted for c in cycles], dtype=np.int64)
    hist = np.bincount(acc, minlength=max_depth + 1).tolist()
    n_drafts = int(np.sum(drafted > 0))
    uncond, cond = [], []
    for i in range(1, max_depth + 1):
        accepted_i = int(np.sum(acc >= i))
        reached_i = int(np.sum((acc >= i - 1) & (drafted >= i)))
        uncond.append(accepted_i / n_drafts if n_drafts else None)
        cond.append(accepted_i / reached_i if reached_i else None)
    return hist, uncond, cond, n_drafts


def draft_acceptance_rate(cycles) -> float | None:
    """Accepted draft tokens over drafted tokens, all cycles pooled: vLLM's draft acceptance rate
    (spec_decode_num_accepted_tokens / spec_decode_num_draft_tokens) and llama.cpp's lookup 'accept'
    line. A tree counts every drafted node (root excluded). None when nothing was drafted."""
    drafted = sum(c.n_nodes - 1 for c in cycles)
    return sum(c.n_accepted for c in cycles) / drafted if drafted else None


def _first_mismatch(index, plain: Generation, spec: Generation) -> Mismatch | None:
    n = min(plain.tokens.size, spec.tokens.size)
    diff = np.flatnonzero(plain.tokens[:n] != spec.tokens[:n])
    if not diff.size:
        return None
    i = int(diff[0])
    top = lambda g: [[int(t), float(v)] for t, v in zip(g.top_ids[i], g.top_logits[i])]  # noqa: E731
    return Mismatch(prompt_index=index, position=i, plain_token=int(plain.tokens[i]),
                    spec_token=int(spec.tokens[i]), plain_top=top(plain), spec_top=top(spec))


def measure(model, drafter, prompts, n_new: int, *, mode: str = "greedy",
            sampling: SamplingParams = SamplingParams(), seed: int = 0, stop_token: int | None = None,
            warmup: bool = True) -> Measurement:
    """prompts: a list of token-id lists. Plain and speculative runs use the same per-request seed."""
    if warmup:  # compile every kernel shape before timing
        generate_speculative(model, drafter, prompts[0][:16], 4, mode=mode, sampling=sampling, seed=seed)
        generate_plain(model, prompts[0][:16], 2, sampling=sampling, seed=seed)
    cycles, plain_s, plain_n, spec_s, spec_n = [], 0.0, 0, 0.0, 0
    prefill_s, draft_prefill_s = 0.0, 0.0
    mismatches, outputs = [], []
    for i, prompt in enumerate(prompts):
        plain = generate_plain(model, prompt, n_new, sampling=sampling, seed=seed, index=i, stop_token=stop_token)
        spec = generate_speculative(model, drafter, prompt, n_new, mode=mode, sampling=sampling, seed=seed,
                                    index=i, stop_token=stop_token)
        cycles.extend(spec.cycles)
        plain_s += plain.decode_s
        plain_n += plain.tokens.size - 1
        spec_s += spec.decode_s
        spec_n += spec.tokens.size - 1
        prefill_s += plain.prefill_s
        draft_prefill_s += getattr(spec, "draft_prefill_s", 0.0)
        outputs.append(dict(plain=plain.tokens.tolist(), speculative=spec.tokens.tolist()))
        if sampling.greedy:
            mm = _first_mismatch(i, plain, spec)
            if mm:
                mismatches.append(mm)
    depth = max([c.n_drafted for c in cycles] + [1])
    hist, uncond, cond, n_drafts = acceptance_stats(cycles, depth)
    undefined = {}
    if not n_drafts:
        undefined["acceptance_unconditional"] = "no cycle drafted a token"
    if any(c is None for c in cond):
        undefined["acceptance_conditional"] = ("None at a position no cycle reached (every earlier position "
                                               "accepted and this one drafted)")
    plain_tps = plain_n / plain_s if plain_n and plain_s > 0 else None
    spec_tps = spec_n / spec_s if spec_n and spec_s > 0 else None
    if plain_tps is None or spec_tps is None:
        undefined["plain_tokens_per_s" if plain_tps is None else "spec_tokens_per_s"] = (
            "no token was decoded after the prefill (one new token per prompt comes from the prefill)")
    n_cyc = len(cycles)
    n_nodes = sum(c.n_nodes - 1 for c in cycles)
    if not n_cyc:
        undefined["tokens_per_cycle"] = "no speculative cycle ran (every prompt ended at the prefill's token)"
    if not n_nodes:
        undefined["draft_s_per_node"] = "no cycle drafted a token"
        undefined["draft_acceptance_rate"] = "no cycle drafted a token"
    mean = lambda xs: float(np.mean(xs)) if n_cyc else None  # noqa: E731
    return Measurement(
        drafter=drafter.name, mode=mode, exact=MODES[mode] == "exact", temperature=sampling.temperature,
        n_prompts=len(prompts), n_new_tokens=n_new, n_cycles=n_cyc,
        tokens_per_cycle=mean([c.n_accepted + 1 for c in cycles]),
        accepted_length_hist=hist, acceptance_unconditional=uncond, acceptance_conditional=cond,
        n_drafting_cycles=n_drafts, draft_acceptance_rate=draft_acceptance_rate(cycles),
        plain_tokens_per_s=plain_tps, spec_tokens_per_s=spec_tps,
        speedup=spec_tps / plain_tps if plain_tps and spec_tps else None,
        plain_step_s=plain_s / plain_n if plain_n else None,
        draft_s_per_cycle=mean([c.draft_s for c in cycles]), verify_s_per_cycle=mean([c.verify_s for c in cycles]),
        draft_s_per_node=sum(c.draft_s for c in cycles) / n_nodes if n_nodes else None,
        prefill_s=prefill_s, draft_prefill_s=draft_prefill_s,
        greedy_match=(not mismatches) if sampling.greedy else None, n_mismatched_prompts=len(mismatches),
        mismatches=[asdict(m) for m in mismatches], outputs=outputs, undefined=undefined)


def _pct(x) -> str:
    return "    —" if x is None else f"{x:5.1%}"


def _ms(x) -> str:
    return "—" if x is None else f"{x * 1e3:.1f} ms"


def format_report(m: Measurement, tokenizer=None) -> str:
    """The measurement as text; an undefined figure shows as '—' with the reason below the table."""
    pct = lambda xs: " ".join(_pct(x) for x in xs)  # noqa: E731
    num = lambda x, f: "—" if x is None else format(x, f)  # noqa: E731
    lines = [
        f"drafter {m.drafter}   verify {m.mode} ({'exact' if m.exact else 'LOSSY: not the target distribution'})"
        f"   temperature {m.temperature:g}",
        f"prompts {m.n_prompts} x {m.n_new_tokens} new tokens   cycles {m.n_cycles} ({m.n_drafting_cycles} drafted)",
        f"tokens per cycle        {num(m.tokens_per_cycle, '.2f')}   drafted tokens accepted "
        f"{_pct(m.draft_acceptance_rate).strip()}",
        f"accepted-length hist    {m.accepted_length_hist}",
        f"acceptance by position  unconditional (vLLM) {pct(m.acceptance_unconditional)}",
        f"                        conditional          {pct(m.acceptance_conditional)}",
        f"plain                   {num(m.plain_tokens_per_s, '7.1f')} tok/s   one step {_ms(m.plain_step_s)}",
        f"speculative             {num(m.spec_tokens_per_s, '7.1f')} tok/s   speedup "
        f"{num(m.speedup, '.2f')}{'x' if m.speedup is not None else ''}",
        f"per cycle               draft {_ms(m.draft_s_per_cycle)}   verify {_ms(m.verify_s_per_cycle)}"
        f"   (draft per drafted node {_ms(m.draft_s_per_node)})",
        f"prefill, not timed above  target {_ms(m.prefill_s)}   drafter {_ms(m.draft_prefill_s)}   (all prompts)",
    ]
    for name, why in m.undefined.items():
        lines.append(f"  — {name}: {why}")
    if m.greedy_match is not None:
        if m.greedy_match:
            lines.append("greedy output matches plain greedy decoding token for token")
        for mm in m.mismatches:
            lines.append(f"MISMATCH prompt {mm['prompt_index']} position {mm['position']}: plain {mm['plain_token']} "
                         f"vs speculative {mm['spec_token']}; plain top {mm['plain_top']}, speculative top {mm['spec_top']}")
    if tokenizer is not None:
        for i, out in enumerate(m.outputs):
            lines.append(f"output {i}: " + repr(tokenizer.decode(out["speculative"]))[:400])
    return "\n".join(lines)
