"""A scenario's analysis tables as frozen specs: `[sweep]` and `[threshold]`.

Checked when the scenario loads (`specs.scenario`) whatever command reads it. What needs the
catalogs or the drafter families (a method's name, a figure's name in `[sweep] plots`, a context
past a model's maximum) is checked where the grid is resolved: the figure names by
`presentation.figures.check_sweep_plots`, which the sweep calls before any point is evaluated.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..errors import field_error
from . import checks as C

MAX_TREE_NODES = 4096  # a tree's expected accepted length walks every node against every other (grows as M²)
MAX_BATCH = 1 << 20  # sequences decoding together: more than any device holds
MAX_TEMPERATURE = 100.0  # far past where sampling is uniform noise
MAX_GRID_POINTS = 10_000_000  # rows of the sweep's table (about 300 bytes each)
ATTENTION_KERNELS = ("fused", "naive")

SWEEP_CATEGORICAL = ("hardware", "target", "method", "drafter", "stack", "tp", "attention", "temperature")
SWEEP_NUMERIC = ("k", "tree_size", "batch_size", "context_len", "alpha", "tau")
SWEEP_KEYS = SWEEP_CATEGORICAL + SWEEP_NUMERIC + ("tau_k", "plots")


@dataclass(frozen=True, slots=True, kw_only=True)
class SweepTable:
    """`[sweep]`: each axis a tuple of values, or None where the table leaves it to the top-level
    value. plots: figure names, or ("all",)."""

    hardware: tuple | None = None
    target: tuple | None = None
    method: tuple | None = None
    drafter: tuple | None = None
    stack: tuple | None = None
    tp: tuple | None = None
    attention: tuple | None = None
    temperature: tuple | None = None
    k: tuple | None = None
    tree_size: tuple | None = None
    batch_size: tuple | None = None
    context_len: tuple | None = None
    alpha: tuple | None = None
    tau: tuple | None = None
    tau_k: int | None = None
    plots: tuple = ("all",)
    where: str = field(default="[sweep]", repr=False, compare=False)

    def __post_init__(self) -> None:
        w = self.where
        ints = {"tp": (1, 4096, "devices"), "k": (0, 64, "draft tokens"),
                "tree_size": (1, MAX_TREE_NODES, "tree nodes"), "batch_size": (1, MAX_BATCH, "sequences"),
                "context_len": (0, C.INT32_MAX, "tokens")}
        for name, (lo, hi, unit) in ints.items():
            self._set(name, lambda v, n=name, a=lo, b=hi, u=unit: C.integers(w, n, v, lo=a, hi=b, unit=u,
                                                                            distinct=True, scalar_ok=True))
        self._set("alpha", lambda v: C.floats(w, "alpha", v, lo=0.0, hi=1.0, unit="acceptance rates", distinct=True,
                                              scalar_ok=True))
        self._set("temperature", lambda v: C.floats(w, "temperature", v, lo=0.0, hi=MAX_TEMPERATURE, distinct=True,
                                                    scalar_ok=True))
        for name in ("hardware", "target", "method", "drafter"):
            self._set(name, lambda v, n=name: C.texts(w, n, v, what="ids or paths (strings)", scalar_ok=True))
        self._set("stack", lambda v: C.texts(w, "stack", v, what='stack ids or paths ("" = none)', empty_ok=True,
                                             scalar_ok=True))
        self._set("attention", lambda v: tuple(C.choice(w, "attention", a, ATTENTION_KERNELS)
                                               for a in C.texts(w, "attention", v, scalar_ok=True)))
        if self.alpha is not None and self.tau is not None:
            raise field_error(w, "tau", list(self.tau), "either alpha or tau, not both")
        if self.tau_k is not None:
            C.integer(w, "tau_k", self.tau_k, lo=1, hi=64, unit="the K the τ values were measured at")
        if self.tau is not None:
            top = self.tau_k + 1 if C.is_int(self.tau_k) else None
            self._set("tau", lambda v: C.floats(w, "tau", v, lo=1.0, hi=top, distinct=True, scalar_ok=True,
                                                unit="mean tokens per cycle" + (f", at most tau_k + 1 = {top}" if top else "")))
        plots = C.texts(w, "plots", self.plots, what='"all" or figure names (strings)', scalar_ok=True)
        object.__setattr__(self, "plots", plots)
        n = math.prod(len(getattr(self, a)) for a in SWEEP_CATEGORICAL + SWEEP_NUMERIC if getattr(self, a) is not None)
        if n > MAX_GRID_POINTS:
            raise field_error(w, "batch_size", f"a grid of {n:,} points",
                              f"at most {MAX_GRID_POINTS:,} points over all axes (one row each): fewer values per axis")

    def _set(self, name: str, check) -> None:
        v = getattr(self, name)
        if v is not None:
            object.__setattr__(self, name, check(list(v) if isinstance(v, tuple) else v))

    def axis(self, name: str, default) -> list:
        """The values of an axis: the table's, or [default]."""
        v = getattr(self, name)
        return list(v) if v is not None else [default]

    @classmethod
    def from_table(cls, raw, *, where: str) -> "SweepTable":
        raw = C.fields(where, raw, SWEEP_KEYS)
        return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in raw.items()}, where=where)


THRESHOLD_KEYS = ("margin", "k_max", "batch_sizes", "alphas", "batch_limit", "drafter_model")
DEFAULT_BATCH_SIZES = (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512)
DEFAULT_MARGIN = 0.05  # speculate where the speedup is at least 1.05x
MAX_BATCH_LIMIT = 1 << 16


@dataclass(frozen=True, slots=True, kw_only=True)
class ThresholdTable:
    """`[threshold]`: margin (0.1: speculate where the speedup is at least 1.1×), k_max (K candidates
    1..k_max), batch_sizes and alphas (the grids), batch_limit (largest batch examined), drafter_model
    (the path or Hugging Face id printed in the configs). alphas None: 0, 0.01, ..., 1."""

    margin: float = DEFAULT_MARGIN
    k_max: int = 8
    batch_sizes: tuple = DEFAULT_BATCH_SIZES
    alphas: tuple | None = None
    batch_limit: int = 1024
    drafter_model: str | None = None
    where: str = field(default="[threshold]", repr=False, compare=False)

    def __post_init__(self) -> None:
        w = self.where
        C.number(w, "margin", self.margin, lo=0.0, hi=10.0, hi_open=True, unit="a safety margin: 0.1 = require a 1.1× "
                 "speedup")
        C.integer(w, "k_max", self.k_max, lo=1, hi=64, unit="the largest K candidate")
        C.integer(w, "batch_limit", self.batch_limit, lo=1, hi=MAX_BATCH_LIMIT, unit="the largest batch examined")
        object.__setattr__(self, "batch_sizes", C.integers(w, "batch_sizes", list(self.batch_sizes), lo=1,
                                                           hi=MAX_BATCH_LIMIT, distinct=True, unit="sequences"))
        if self.alphas is not None:
            object.__setattr__(self, "alphas", C.floats(w, "alphas", list(self.alphas), lo=0.0, hi=1.0, min_len=2,
                                                        distinct=True, unit="acceptance rates"))
        if self.drafter_model is not None:
            C.text(w, "drafter_model", self.drafter_model, what="a path or Hugging Face id (a string)")

    @classmethod
    def from_table(cls, raw, *, where: str) -> "ThresholdTable":
        raw = C.fields(where, raw, THRESHOLD_KEYS)
        for key in ("batch_sizes", "alphas"):
            if key in raw and not isinstance(raw[key], list):
                raise field_error(where, key, raw[key], "a list")
        return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in raw.items()}, where=where)


__all__ = ["SweepTable", "ThresholdTable", "SWEEP_KEYS", "THRESHOLD_KEYS", "MAX_TREE_NODES", "MAX_BATCH",
           "MAX_TEMPERATURE", "MAX_GRID_POINTS", "ATTENTION_KERNELS"]
