"""Measure speculative decoding on real prompts: acceptance (vLLM's unconditional per-position rate
and the conditional one), tokens per cycle, the accepted-length histogram, plain and speculative
tokens per second, speedup, draft and verify time per cycle, and whether greedy output matches
plain greedy decoding token for token (and where not, the position and both logits)."""
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
    tokens_per_cycle: float
    accepted_length_hist: list  # counts of 0, 1, ..., max accepted per cycle
    acceptance_unconditional: list  # position i: cycles accepting >= i / cycles that drafted (vLLM)
    acceptance_conditional: list  # position i: P(accept i | accepted 1..i-1 and i was drafted)
    n_drafting_cycles: int
    plain_tokens_per_s: float
    spec_tokens_per_s: float
    speedup: float
    draft_s_per_cycle: float
    verify_s_per_cycle: float
    greedy_match: bool | None
    n_mismatched_prompts: int
    mismatches: list = field(default_factory=list)
    outputs: list = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)


def acceptance_stats(cycles, max_depth: int) -> tuple[list, list, list, int]:
    acc = np.array([c.n_accepted for c in cycles], dtype=np.int64)
    drafted = np.array([c.n_drafted for c in cycles], dtype=np.int64)
    hist = np.bincount(acc, minlength=max_depth + 1).tolist()
    n_drafts = int(np.sum(drafted > 0))
    uncond, cond = [], []
    for i in range(1, max_depth + 1):
        accepted_i = int(np.sum(acc >= i))
        reached_i = int(np.sum((acc >= i - 1) & (drafted >= i)))
        uncond.append(accepted_i / n_drafts if n_drafts else float("nan"))
        cond.append(accepted_i / reached_i if reached_i else float("nan"))
    return hist, uncond, cond, n_drafts


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
        outputs.append(dict(plain=plain.tokens.tolist(), speculative=spec.tokens.tolist()))
        if sampling.greedy:
            mm = _first_mismatch(i, plain, spec)
            if mm:
                mismatches.append(mm)
    depth = max([c.n_drafted for c in cycles] + [1])
    hist, uncond, cond, n_drafts = acceptance_stats(cycles, depth)
    plain_tps = plain_n / plain_s if plain_s else float("nan")
    spec_tps = spec_n / spec_s if spec_s else float("nan")
    n_cyc = len(cycles)
    return Measurement(
        drafter=drafter.name, mode=mode, exact=MODES[mode] == "exact", temperature=sampling.temperature,
        n_prompts=len(prompts), n_new_tokens=n_new, n_cycles=n_cyc,
        tokens_per_cycle=float(np.mean([c.n_accepted + 1 for c in cycles])) if cycles else float("nan"),
        accepted_length_hist=hist, acceptance_unconditional=uncond, acceptance_conditional=cond,
        n_drafting_cycles=n_drafts, plain_tokens_per_s=plain_tps, spec_tokens_per_s=spec_tps,
        speedup=spec_tps / plain_tps, draft_s_per_cycle=float(np.mean([c.draft_s for c in cycles])) if cycles else 0.0,
        verify_s_per_cycle=float(np.mean([c.verify_s for c in cycles])) if cycles else 0.0,
        greedy_match=(not mismatches) if sampling.greedy else None, n_mismatched_prompts=len(mismatches),
        mismatches=[asdict(m) for m in mismatches], outputs=outputs)


def format_report(m: Measurement, tokenizer=None) -> str:
    pct = lambda xs: " ".join(f"{x:5.1%}" for x in xs)  # noqa: E731
    lines = [
        f"drafter {m.drafter}   verify {m.mode} ({'exact' if m.exact else 'LOSSY: not the target distribution'})"
        f"   temperature {m.temperature:g}",
        f"prompts {m.n_prompts} x {m.n_new_tokens} new tokens   cycles {m.n_cycles} ({m.n_drafting_cycles} drafted)",
        f"tokens per cycle        {m.tokens_per_cycle:.2f}",
        f"accepted-length hist    {m.accepted_length_hist}",
        f"acceptance by position  unconditional (vLLM) {pct(m.acceptance_unconditional)}",
        f"                        conditional          {pct(m.acceptance_conditional)}",
        f"plain                   {m.plain_tokens_per_s:7.1f} tok/s",
        f"speculative             {m.spec_tokens_per_s:7.1f} tok/s   speedup {m.speedup:.2f}x",
        f"per cycle               draft {m.draft_s_per_cycle * 1e3:.1f} ms   verify {m.verify_s_per_cycle * 1e3:.1f} ms",
    ]
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
