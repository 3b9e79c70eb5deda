"""The serving simulator: continuous batching under load, with speculation and its off-switch.

`build_serving(op)` wires an operating point's [workload], [engine], [policies] and [slo] tables
(setup.py); `ServingCost(op)` prices each iteration's mix (cost.py); `simulate(workload, config=...,
cost=..., policy=...)` runs one workload under one gating policy and returns a frozen
`SimulationResult` (run.py); `sweep(setup, rates=...)` runs every policy at every rate (rates.py).
A fleet of replicas behind a router, or a disaggregated prefill/decode layout, is a `FleetSpec`
(fleet.py, router.py); prefix caching is prefix_cache.py. simpy is imported by `engine` only.
"""
from .cost import ServingCost
from .config import EngineConfig
from .mix import IterationMix
from .fleet import FleetSpec
from .metrics import SLO
from .rates import crossover_rate, sweep
from .router import RouterConfig
from .run import SimulationResult, simulate
from .setup import ServingSetup, build_serving, workload_mix
from .workloads import Lengths, Workload

__all__ = ["EngineConfig", "FleetSpec", "RouterConfig", "IterationMix", "SLO", "ServingCost", "ServingSetup", "SimulationResult", "build_serving",
           "workload_mix", "crossover_rate", "simulate", "sweep", "Lengths", "Workload"]
