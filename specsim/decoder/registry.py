"""The reference decoder's drafters, declared once, keyed by the drafter families of
`specsim.speculation.families` (FAMILIES).

Each `DecoderDrafter` is one `specsim decoder run --drafter NAME`: the family it belongs to (what the
analytical model calls it, which is how calibrations and `validate` reach the cost model), the RunConfig
fields it reads (a flag for another drafter's option is refused, not ignored), whether it reports its
distribution q (needed by --verify rejection), the trained file it needs, how `decoder run` builds it and
how `specsim calibrate acceptance` (and `validate`, for the chains the model predicts) build it at a
fixed draft length. Everything else — the command's choices and help, RunConfig's checks, the calibrated
drafters, the family a calibration names — reads this module: adding a drafter is one entry here (and
its class in drafters.py or trained.py).

The calibrations keep the decoder names (`smollm2-135m/prompt-lookup/code-edit`). A name's fixed-K
build is what its calibration measured: for prompt lookup the earliest-match lookup at K (the n-gram
lookup `decoder run` uses adapts its draft length, so it has no K to calibrate at), as vLLM's n-gram
proposer drafts a fixed K.
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Callable, Mapping

from ..errors import SpecError
from ..speculation.families import FAMILIES
from ..speculation.trees import from_choices
from . import drafters as D
from . import trained as TR
from .gguf_model import load_gguf
from .model import Transformer
from .options import DEFAULT_TREE, flag, parse_tree
from .trained import DRAFT_GGUF, EAGLE_NPZ, MEDUSA_NPZ
from .weight_bytes import pass_weight_bytes


@dataclass(frozen=True, slots=True, kw_only=True)
class DecoderDrafter:
    """One decoder drafter (see the module docstring).

    build(target, cfg, capacity) -> drafter, for `decoder run`; fixed_k(target, k, n_layers, capacity)
    -> drafter, for the calibration runs (None: not calibrated), with fixed_k_note(target, k, n_layers)
    saying what was run; slots(cfg): the speculative rows a cycle needs beyond the context (the run's
    room check); notes(target, cfg): lines the run's report carries; base_options: for a drafter built
    on another one (the tree), the options each base reads; default_max_n: a lookup's own longest n-gram;
    catches_up: it drafts with a model that catches up on the target's tokens each cycle; empty_drafts: some
    of its cycles draft nothing (a lookup that finds no match: a plain step); validated:
    `specsim validate` predicts its runs (a chain the model costs), with scenario_options(n_layers,
    lookup_s_per_ktoken) its scenario's [drafter_options] (lookup_s_per_ktoken None: the family's default).
    A drafter that reads "layers" is run by validate at each layer count asked for."""

    name: str
    family: str
    help: str
    options: tuple[str, ...]
    gives_q: bool
    build: Callable
    fixed_k: Callable | None = None
    fixed_k_note: Callable | None = None
    weights: str | None = None
    slots: Callable = lambda cfg: cfg.k + 1
    notes: Callable = lambda target, cfg: ()
    base_options: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    default_max_n: int | None = None
    catches_up: bool = True
    empty_drafts: bool = False
    validated: bool = False
    scenario_options: Callable | None = None

    def __post_init__(self) -> None:
        if self.family not in FAMILIES:
            raise ValueError(f"decoder drafter {self.name}: family {self.family!r} is not in speculation.families "
                             f"({', '.join(FAMILIES)})")
        object.__setattr__(self, "base_options", MappingProxyType(dict(self.base_options)))

    def reads(self, tree_base: str | None = None) -> tuple[str, ...]:
        """The RunConfig fields this drafter reads (with `tree_base`'s when it is built on another one)."""
        return self.options + tuple(self.base_options.get(tree_base, ()))

    def available(self) -> bool:
        """Whether this install holds the trained file it needs (specsim/decoder/weights)."""
        if self.weights is None:
            return True
        return (TR.weights_dir() / self.weights).is_file()


def _default(cls_name: str, param: str):
    return inspect.signature(getattr(D, cls_name)).parameters[param].default


# -- how each is built ---------------------------------------------------------------------------------

def _layer_skip(target, cfg, capacity: int, k: int | None = None):
    return D.layer_skip(target, k=cfg.k if k is None else k, n_layers=cfg.resolved_layers(target), capacity=capacity)


def _draft_model(target, cfg, capacity: int, k: int | None = None):
    k = cfg.k if k is None else k
    if cfg.draft_model is None or TR.is_distilled(cfg.draft_model):  # the shipped (or a retrained) distilled model
        path = cfg.draft_model or (cfg.weights / TR.DRAFT_GGUF if cfg.weights else None)
        return D.distilled(target, k=k, path=path, capacity=capacity)
    return D.draft_model(target, Transformer(load_gguf(cfg.draft_model)), k=k, capacity=capacity)


def _prompt_lookup(target, cfg, capacity: int):
    # max_n None: the drafter's own (tuned) longest n-gram
    return D.NgramLookupDrafter(k=cfg.max_draft, min_n=cfg.min_n, **({} if cfg.max_n is None else {"max_n": cfg.max_n}))


def _prompt_lookup_earliest(target, cfg, capacity: int):
    return D.PromptLookupDrafter(k=cfg.k, min_n=cfg.min_n, **({} if cfg.max_n is None else {"max_n": cfg.max_n}))


def _medusa(target, cfg, capacity: int):
    return TR.MedusaDrafter(target, path=cfg.weights / TR.MEDUSA_NPZ if cfg.weights else None,
                            choices=parse_tree(cfg.medusa_tree))


def _eagle(target, cfg, capacity: int):
    return TR.EagleDrafter(target, path=cfg.weights / TR.EAGLE_NPZ if cfg.weights else None, depth=cfg.eagle_depth,
                           top_k=cfg.eagle_top_k, n_nodes=cfg.eagle_nodes, capacity=capacity)


_TREE_BASES = {"layer-skip": _layer_skip, "draft-model": _draft_model}


def _tree(target, cfg, capacity: int):
    choices = parse_tree(cfg.tree)
    if max(max(c) for c in choices) >= target.config.n_vocab:
        raise SpecError(f"{flag('tree')} {cfg.tree!r}: expected ranks below the vocabulary size {target.config.n_vocab}")
    return D.TreeDrafter(_TREE_BASES[cfg.tree_base](target, cfg, capacity, k=1), from_choices(choices))


def _tree_nodes(cfg) -> int:
    return from_choices(parse_tree(cfg.tree)).n_nodes


def _medusa_nodes(cfg) -> int:
    return from_choices(parse_tree(cfg.medusa_tree)).n_nodes


def _default_tree():
    return DEFAULT_TREE, from_choices(parse_tree(DEFAULT_TREE))


def _fixed_tree(target, k, n, capacity):
    return D.TreeDrafter(D.layer_skip(target, k=1, n_layers=n, capacity=capacity), _default_tree()[1])


def _layer_skip_note(target, cfg) -> tuple[str, ...]:
    """What a layer-skip draft pass reads, against a target step (on a memory-bound CPU, its cost)."""
    n = cfg.resolved_layers(target)
    full, part = pass_weight_bytes(target), pass_weight_bytes(target, n)
    return (f"a layer-skip draft pass runs {n} of {target.config.n_layer} layers and the whole LM head: "
            f"{part / 1e6:.1f} of the {full / 1e6:.1f} MB of weights a target step reads ({part / full:.0%}), "
            f"so on a memory-bound CPU a draft step costs about {part / full:.0%} of a target step, not "
            f"{n / target.config.n_layer:.0%}",)


# -- the fixed-K builds of the calibration runs: (target, k, n_layers, capacity) -> drafter -----------------
def _prompt_lookup_fixed(target, k, n, cap):
    return D.PromptLookupDrafter(k=k)


def _layer_skip_fixed(target, k, n, cap):
    return D.layer_skip(target, k=k, n_layers=n, capacity=cap)


def _distilled_fixed(target, k, n, cap):
    return D.distilled(target, k=k, capacity=cap)


def _medusa_fixed(target, k, n, cap):
    return TR.MedusaDrafter(target)


def _eagle_fixed(target, k, n, cap):
    return TR.EagleDrafter(target, capacity=cap)


# -- the registry: FAMILIES key -> the decoder's drafters of that family ---------------------------------
REGISTRY: Mapping[str, tuple[DecoderDrafter, ...]] = MappingProxyType({
    "prompt_lookup": (
        DecoderDrafter(
            name="prompt-lookup", family="prompt_lookup", gives_q=False, build=_prompt_lookup,
            help="n-gram lookup in the context (no model): longest match, then the most frequent and most recent "
                 "follower, a draft length (up to --max-draft) set by the acceptance seen",
            options=("max_draft", "min_n", "max_n"), slots=lambda cfg: cfg.max_draft + 1,
            default_max_n=_default("NgramLookupDrafter", "max_n"), catches_up=False, empty_drafts=True,
            fixed_k=_prompt_lookup_fixed,
            fixed_k_note=lambda target, k, n: f"k = {k}, n-grams 1..3 (earliest longest match)",
            validated=True,
            scenario_options=lambda n, lookup: {} if lookup is None else {"prompt_lookup_s_per_seq_per_ktoken": lookup}),
        DecoderDrafter(
            name="prompt-lookup-earliest", family="prompt_lookup", gives_q=False, build=_prompt_lookup_earliest,
            help="the simple prompt lookup: the -k tokens after the earliest longest match",
            options=("k", "min_n", "max_n"), default_max_n=_default("PromptLookupDrafter", "max_n"),
            catches_up=False, empty_drafts=True),
    ),
    "layer_skip": (
        DecoderDrafter(
            name="layer-skip", family="layer_skip", gives_q=True, build=_layer_skip,
            help="the target's first --layers layers + its LM head", options=("k", "layers"), notes=_layer_skip_note,
            fixed_k=_layer_skip_fixed,
            fixed_k_note=lambda target, k, n: f"k = {k}, the first {n} of {target.config.n_layer} layers + the LM head",
            validated=True, scenario_options=lambda n, lookup: {"skip_layers": n}),
        DecoderDrafter(
            name="tree", family="layer_skip", gives_q=False, build=_tree,
            help="top-k per depth from a model drafter (--tree-base) into --tree, verified in one pass with the tree "
                 "mask", options=("tree", "tree_base"),
            base_options={"layer-skip": ("layers",), "draft-model": ("draft_model", "weights")},
            slots=_tree_nodes, notes=lambda target, cfg: _layer_skip_note(target, cfg) if cfg.tree_base == "layer-skip"
            else (), fixed_k=_fixed_tree,
            fixed_k_note=lambda target, k, n: (f"tree {_default_tree()[0]} ({_default_tree()[1].n_nodes} nodes) from the "
                                               "layer-skip drafter's top-k")),
    ),
    "draft_model": (
        DecoderDrafter(
            name="draft-model", family="draft_model", gives_q=True, build=_draft_model, weights=DRAFT_GGUF,
            help="a second GGUF (--draft-model) sharing the target's tokenizer; without --draft-model, the distilled "
                 "draft model shipped in specsim/decoder/weights", options=("k", "draft_model", "weights"),
            fixed_k=_distilled_fixed,
            fixed_k_note=lambda target, k, n: f"k = {k}, the distilled draft model"),
    ),
    "medusa": (
        DecoderDrafter(
            name="medusa", family="medusa", gives_q=False, build=_medusa, weights=MEDUSA_NPZ,
            help="4 trained Medusa heads on the target's last hidden state, a static tree (--medusa-tree) verified in "
                 "one pass", options=("medusa_tree", "weights"), slots=_medusa_nodes,
            fixed_k=_medusa_fixed,
            fixed_k_note=lambda target, k, n: "Medusa heads, the shipped tree"),
    ),
    "eagle": (
        DecoderDrafter(
            name="eagle", family="eagle", gives_q=False, build=_eagle, weights=EAGLE_NPZ,
            help="the trained EAGLE head (target feature + next token -> next feature), an EAGLE-2 dynamic tree "
                 "(--eagle-depth, --eagle-top-k, --eagle-nodes) verified in one pass",
            options=("eagle_depth", "eagle_top_k", "eagle_nodes", "weights"), slots=lambda cfg: cfg.eagle_nodes,
            fixed_k=_eagle_fixed,
            fixed_k_note=lambda target, k, n: "EAGLE head, dynamic tree"),
    ),
})


DRAFTERS: Mapping[str, DecoderDrafter] = MappingProxyType({d.name: d for ds in REGISTRY.values() for d in ds})
TREE_BASES = tuple(_TREE_BASES)
OPTIONS = tuple(dict.fromkeys(o for d in DRAFTERS.values() for o in d.options + sum(d.base_options.values(), ())))


def family_of(name: str) -> str:
    """The FAMILIES key of decoder drafter `name`."""
    return DRAFTERS[name].family


def calibrated() -> tuple[str, ...]:
    """The drafters `specsim calibrate acceptance` runs (each at a fixed K), in registry order."""
    return tuple(n for n, d in DRAFTERS.items() if d.fixed_k is not None)


def validated() -> tuple[str, ...]:
    """The drafters `specsim validate` predicts (the chains the cost model knows)."""
    return tuple(n for n, d in DRAFTERS.items() if d.validated)


__all__ = ["DecoderDrafter", "REGISTRY", "DRAFTERS", "TREE_BASES", "OPTIONS", "family_of", "calibrated", "validated"]
