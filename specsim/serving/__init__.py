"""The serving simulator: continuous batching under load, with speculation and its off-switch.

`simulate(workload, config=..., cost=..., policy=...)` runs one workload under one gating policy
and returns a frozen `SimulationResult` (requests and steps DataFrames, a summary dict).
`build_serving(scenario)` wires a scenario's [workload], [engine], [policies] and [slo] sections;
`sweep(setup, rates=...)` runs every policy at every rate. simpy is imported by `engine` only.
"""
from .engine import EngineConfig, IterationMix
from .metrics import SLO
from .simulate import RooflineCost, SimulationResult, build_serving, crossover_rate, simulate, sweep
from .workloads import Lengths, Workload

__all__ = ["EngineConfig", "IterationMix", "SLO", "RooflineCost", "SimulationResult", "build_serving",
           "crossover_rate", "simulate", "sweep", "Lengths", "Workload"]
