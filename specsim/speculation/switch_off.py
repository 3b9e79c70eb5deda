"""When to switch speculation off: the answer's types (`SwitchOff`, labelled with what it assumes) and the
serving workload an answer may assume (`WorkloadMix`). The answer itself, `analyses.switch_off.switch_off_point`,
prices a workload's iterations with the serving simulator's cost (layer 4), so it lives above it.

As the running batch B grows, continuous batching fills the arithmetic units speculation relied on,
and a verify pass of B·(K + 1) tokens stops being nearly free. `switch_off_point` finds the smallest
batch from which speculation no longer pays at least 1 + margin, under stated assumptions:

- K: the operating point's K, or K re-tuned per batch (the best of 1..k_max at each B);
- view: decode only (B sequences decoding, nothing else in the iteration), or under a workload —
  with chunked prefill the prompts of arriving requests share the iterations. In a steady state the
  prompt tokens processed per output token emitted equal the workload's mean prompt / mean output
  length (flow balance), so an iteration that emits B·τ tokens also carries B·τ·p̄/ō prompt tokens
  (τ = 1 without speculation): speculation's bigger iterations carry more prefill, and the verify
  pass leaves the bandwidth plateau at a smaller B. A drafter that keeps its own cache (a draft
  model, an EAGLE or MTP head) also runs over those prompt tokens. Decoding sequences sit at the
  workload's output-weighted mean context, E[o·(p + o/2)] / E[o].
- memory: speculation needs its drafter and slots to fit; past the largest batch that fits with
  them it cannot run, whatever its speed (`memory_limited`).

The serving simulator's comparison of gates (`specsim simulate`) checks the workload view; the
threshold command, the sweep plot and the report all print this one function's answer.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import field_error

DEFAULT_K_MAX = 8
DEFAULT_BATCH_LIMIT = 1024


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkloadMix:
    """What a serving workload puts beside the decoding sequences of an iteration.

    mean_prompt_tokens p̄, mean_output_tokens ō: per request; decode_context_len: the context a
    decoding sequence sits at, averaged over decode steps (E[o·(p + o/2)] / E[o]); source: the
    workload's description."""

    mean_prompt_tokens: float
    mean_output_tokens: float
    decode_context_len: float
    source: str = ""

    def __post_init__(self) -> None:
        for name in ("mean_prompt_tokens", "mean_output_tokens", "decode_context_len"):
            v = getattr(self, name)
            if not (np.isfinite(v) and v >= (1.0 if name == "mean_output_tokens" else 0.0)):
                raise field_error("workload mix", name, v, "a finite token count (output >= 1)")

    @classmethod
    def from_lengths(cls, prompt_tokens, output_tokens, *, source: str = "") -> "WorkloadMix":
        p = np.asarray(prompt_tokens, dtype=float)
        o = np.asarray(output_tokens, dtype=float)
        if p.size == 0 or o.sum() <= 0:
            raise field_error("workload mix", "requests", p.size, "at least one request with output tokens")
        ctx = float((o * (p + o / 2.0)).sum() / o.sum())
        return cls(mean_prompt_tokens=float(p.mean()), mean_output_tokens=float(o.mean()), decode_context_len=ctx,
                   source=source)

    @property
    def prompt_per_output(self) -> float:
        return self.mean_prompt_tokens / self.mean_output_tokens


@dataclass(frozen=True, slots=True, kw_only=True)
class SwitchOff:
    """The switch-off point and everything it assumed.

    batch_off: speculation off for a running batch >= batch_off (None: it pays at every batch up to
    batch_limit); k_at_batch: the K it would run below batch_off (per batch when re-tuned);
    batch_sizes, speedup, best_k: the curve behind the answer (B = 1..limit, speedup with the K used);
    memory_limited: batch_off is where memory runs out, not where speed does."""

    batch_off: int | None
    margin: float
    retune_k: bool
    k: int
    view: str
    memory_limited: bool
    max_batch_speculative: int | None
    batch_limit: int
    batch_sizes: np.ndarray
    speedup: np.ndarray
    best_k: np.ndarray
    context_len: float
    workload: WorkloadMix | None = None

    @property
    def assumptions(self) -> str:
        k = "K re-tuned per batch" if self.retune_k else f"the scenario's K = {self.k}"
        mem = (f"memory: speculation fits up to batch {self.max_batch_speculative}"
               if self.max_batch_speculative is not None else "memory not limiting")
        return f"{self.view}, {k}, speedup ≥ {1 + self.margin:.2f}×, context {self.context_len:.0f}, {mem}"

    def label(self) -> str:
        if self.batch_off is None:
            what = f"pays at every batch to {self.batch_limit}"
        elif self.batch_off <= 1:
            what = "never pays (off at every batch)"
        else:
            what = f"off at batch ≥ {self.batch_off}" + (" (memory)" if self.memory_limited else "")
        return f"{what} [{self.assumptions}]"

    def to_dict(self) -> dict:
        return {"batch_off": self.batch_off, "margin": self.margin, "retune_k": self.retune_k, "k": self.k,
                "view": self.view, "memory_limited": self.memory_limited,
                "max_batch_speculative": self.max_batch_speculative, "context_len": self.context_len,
                "assumptions": self.assumptions, "label": self.label(),
                "workload": None if self.workload is None else {
                    "mean_prompt_tokens": self.workload.mean_prompt_tokens,
                    "mean_output_tokens": self.workload.mean_output_tokens,
                    "decode_context_len": self.workload.decode_context_len, "source": self.workload.source}}


__all__ = ["SwitchOff", "WorkloadMix", "DEFAULT_K_MAX", "DEFAULT_BATCH_LIMIT"]
