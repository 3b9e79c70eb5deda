"""A fleet of replicas: how many, how they are laid out, how requests are routed, and what moving a
prompt's KV cache from a prefill replica to a decode replica costs.

Layouts:
- `colocated`: N replicas, each prefilling and decoding its own requests (vLLM's default).
- `disaggregated`: a pool of prefill replicas and a pool of decode replicas (DistServe, Zhong et al.
  2024; Splitwise, Patel et al. 2024). A request is routed to a prefill replica, which computes its
  prompt and its first token and then hands the prompt's KV cache (the target's, and a draft model's
  or head's when the drafter ran over the prompt there) to a decode replica chosen by the router.

KV transfer: each of the tp devices of the prefill replica sends its shard of the cache to its peer
on the decode replica, all shards at once, over the hardware profile's interconnect
(`interconnect_gb_s` per direction, `interconnect_latency_us`), unless `[fleet] kv_transfer_gb_s` /
`kv_transfer_latency_us` give another link (an InfiniBand NIC when the pools sit in different
nodes). One transfer at a time per prefill replica (a later one waits for the link):

    transfer_s = latency + prompt_tokens × per-device KV bytes per token / bandwidth

The transfer is not overlapped with the prefill (Splitwise overlaps it layer by layer; not modelled).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import field_error
from ..specs import checks as C
from ..specs.serving_tables import LAYOUTS, MAX_REPLICAS
from .router import RouterConfig


@dataclass(frozen=True, slots=True, kw_only=True)
class FleetSpec:
    """n_replicas: colocated replicas, or for a disaggregated layout n_prefill + n_decode.
    kv_transfer_s_per_token / kv_transfer_latency_s: the prefill-to-decode handoff (see the module
    docstring); prefill_runs_drafter: the prefill replicas run the drafter over the prompt and send
    its cache along (else the decode replica's drafter catches up on the whole prompt)."""

    layout: str = "colocated"
    n_replicas: int = 1
    n_prefill: int = 0
    router: RouterConfig = field(default_factory=RouterConfig)
    kv_transfer_s_per_token: float = 0.0
    kv_transfer_latency_s: float = 0.0
    prefill_runs_drafter: bool = True

    def __post_init__(self) -> None:
        w = "[fleet]"
        C.choice(w, "layout", self.layout, LAYOUTS)
        C.integer(w, "n_replicas", self.n_replicas, lo=1, hi=MAX_REPLICAS, unit="replicas")
        if self.layout == "disaggregated":
            if self.n_replicas < 2:
                raise field_error(w, "n_replicas", self.n_replicas, "at least 2 for a disaggregated layout")
            C.integer(w, "n_prefill", self.n_prefill, lo=1, hi=self.n_replicas - 1,
                      unit="prefill replicas: at least one, and one replica left to decode")
        elif self.n_prefill != 0:
            raise field_error(w, "n_prefill", self.n_prefill, "0: only a disaggregated layout has a prefill pool")
        for name in ("kv_transfer_s_per_token", "kv_transfer_latency_s"):
            C.number(w, name, getattr(self, name), lo=0.0, unit="seconds")
        C.boolean(w, "prefill_runs_drafter", self.prefill_runs_drafter)

    @property
    def disaggregated(self) -> bool:
        return self.layout == "disaggregated"

    def roles(self) -> tuple[str, ...]:
        """Each replica's role: 'both', 'prefill' or 'decode' (prefill replicas first)."""
        if not self.disaggregated:
            return ("both",) * self.n_replicas
        return ("prefill",) * self.n_prefill + ("decode",) * (self.n_replicas - self.n_prefill)

    def transfer_s(self, tokens: int) -> float:
        return self.kv_transfer_latency_s + tokens * self.kv_transfer_s_per_token


__all__ = ["FleetSpec", "LAYOUTS"]
