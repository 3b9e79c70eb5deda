"""Cycle analytics for speculative decoding: tokens per cycle, cycle time, speedup.

A linear cycle (Leviathan et al. 2022, §3; Chen et al. 2023, Alg. 2): the drafter proposes K tokens
in K sequential steps, then the target scores all K + 1 positions (the K drafts and the bonus
position) in one verify pass. With i.i.d. per-token acceptance α the number of tokens a cycle emits
(accepted drafts plus the one token the target always contributes) has expectation

    E[tokens per cycle] = (1 − α^(K+1)) / (1 − α)          (Leviathan et al. 2022, eq. 1)

which is K + 1 at α = 1. Speedup is measured against plain decoding at the same batch size and
context: plain emits B tokens per target step of one query token per sequence.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from ..cost.deployment import Deployment
from ..cost.pricing import device_cycle_overhead_s, target_step_time
from ..errors import field_error
from ..specs.models import ModelSpec
from .acceptance import (alpha_from_tau, rank_acceptance_from_conditional, shaped_conditional,  # noqa: F401
                         tokens_per_cycle_iid)
from .families import DraftCost, DrafterConfig, DrafterWork, draft_cost


@dataclass(frozen=True, slots=True, kw_only=True)
class CycleTimes:
    """A speculative cycle against plain decoding; arrays broadcast like the inputs.
    tokens_per_s and baseline_tokens_per_s are aggregate over the batch."""

    target_step_time_s: np.ndarray
    draft_step_time_s: np.ndarray
    draft_time_s: np.ndarray
    verify_time_s: np.ndarray
    overhead_s: np.ndarray
    cycle_time_s: np.ndarray
    tokens_per_cycle: np.ndarray
    baseline_tokens_per_s: np.ndarray
    tokens_per_s: np.ndarray
    speedup: np.ndarray
    verify_q_len: np.ndarray | float = 1.0
    # the two iterations split into device and host work (None where the caller did not say): the
    # plain iteration is plain_device_s and plain_host_s in turn or overlapped, the cycle device_s
    # (drafting + verify + per-cycle device work) and host_s likewise (Deployment.iteration_time_s)
    plain_device_s: np.ndarray | None = None
    plain_host_s: np.ndarray | None = None
    device_s: np.ndarray | None = None
    host_s: np.ndarray | None = None


def cycle_times(*, target_step_time_s, draft_time_s, verify_time_s, tokens_per_cycle, batch_size=1,
                draft_step_time_s=None, overhead_s=0.0, verify_q_len=1.0, parts: dict | None = None) -> CycleTimes:
    """cycle = drafting + verify + per-cycle overhead; speedup = (τ / cycle) / (1 / plain step)."""
    target = np.asarray(target_step_time_s, dtype=float)
    draft = np.asarray(draft_time_s, dtype=float)
    verify = np.asarray(verify_time_s, dtype=float)
    over = np.asarray(overhead_s, dtype=float)
    tau = np.asarray(tokens_per_cycle, dtype=float)
    b = np.asarray(batch_size, dtype=float)
    cycle = draft + verify + over
    baseline = b / target
    spec = b * tau / cycle
    return CycleTimes(
        target_step_time_s=target, draft_step_time_s=np.asarray(draft if draft_step_time_s is None else draft_step_time_s, dtype=float),
        draft_time_s=draft, verify_time_s=verify, overhead_s=over, cycle_time_s=cycle, tokens_per_cycle=tau,
        baseline_tokens_per_s=baseline, tokens_per_s=spec, speedup=spec / baseline,
        verify_q_len=np.asarray(verify_q_len, dtype=float), **(parts or {}),
    )


# ==================================================================================================
# Every drafter family: acceptance → tokens per cycle, cost → cycle time, and the decisions on top.
# ==================================================================================================
#
# Tokens per cycle, per family (all include the bonus token the target always contributes):
# - chains (draft_model, prompt_lookup, layer_skip, sparse_kv, and eagle/mtp/medusa with M = K + 1):
#   the i.i.d. closed form above.
# - trees (draft_model, medusa, eagle, mtp with M nodes of depth ≤ K): the best M-node tree under
#   Sequoia's positional model (`trees.optimal_tree_values`, Chen et al. 2024 §3.1). A single rate α
#   is turned into a per-rank vector by `rank_acceptance_from_alpha` (documented assumption below).
# - lookahead: each step verifies G pool n-grams of N − 1 tokens; with per-token acceptance α of a
#   pool guess and independent guesses, the longest accepted prefix among G has
#   E = Σ_{j=1}^{N−1} P(max ≥ j) = Σ_j 1 − (1 − α^j)^G, plus the one token the step always emits.
#
# Cycle time = drafting (sequential steps outside the verify pass) + verify over M query tokens per
# sequence (+ work a family adds inside it) + per-cycle overhead. The per-cycle overhead is
#   stack.cycle_overhead_s                                   (host work: proposer, rejection launch)
# + B·(M − 1)·V·4 bytes · 2 / bandwidth                      (reading the extra fp32 target logits
#                                                             and draft probabilities for rejection)
# + tree only: 2 · B · τ · kv_bytes_per_token / bandwidth    (KV compaction: gather the accepted
#                                                             path's rows and write them contiguous)
# Plain decoding at the same B and L is the baseline: B tokens per target step of one query token.

DEFAULT_N_RANKS = 8
DEFAULT_RANK_DECAY = 0.5


def rank_acceptance_from_alpha(alpha: float, *, n_ranks: int = DEFAULT_N_RANKS,
                               rank_decay: float = DEFAULT_RANK_DECAY) -> np.ndarray:
    """Sequoia's joint per-rank vector p_r from one acceptance rate α (ASSUMPTION, documented).

    The drafter's best guess is accepted with probability α (the chain's rate). Given ranks 0..r−1
    were rejected, rank r is accepted with the conditional rate c_r = α·ρ^r (ρ = rank_decay), so
    p_r = c_r · Π_{j<r} (1 − c_j), Σ p_r ≤ 1. ρ = 0.5 is an estimate of the shape of Sequoia's
    measured vectors (Chen et al. 2024, Fig. 3: a large first entry, the next ones falling off fast);
    pass measured vectors to the tree functions directly when you have them."""
    a = float(alpha)
    if not 0.0 <= a <= 1.0:
        raise field_error("speculation", "alpha", a, "an acceptance rate in [0, 1]")
    return rank_acceptance_from_conditional(a * rank_decay ** np.arange(n_ranks))


@lru_cache(maxsize=4096)
def _tree_values(alpha: float, max_depth: int, max_nodes: int, n_ranks: int, rank_decay: float) -> np.ndarray:
    from .trees import optimal_tree_values  # lazy: trees is a sibling in layer 3

    p = rank_acceptance_from_alpha(alpha, n_ranks=n_ranks, rank_decay=rank_decay)
    v = optimal_tree_values(max_nodes, p, max_depth=max_depth)
    v.setflags(write=False)
    return v


def tree_tokens_per_cycle(alpha, k, tree_size, *, n_ranks: int = DEFAULT_N_RANKS,
                          rank_decay: float = DEFAULT_RANK_DECAY) -> np.ndarray:
    """E[tokens per cycle] of the best tree of M nodes (root included) and depth ≤ K for rate α;
    arrays broadcast. One dynamic program per distinct (α, K), cached."""
    a, kk, m = np.broadcast_arrays(np.asarray(alpha, dtype=float), np.asarray(k, dtype=np.int64),
                                   np.asarray(tree_size, dtype=np.int64))
    if np.any(m < 1):
        raise field_error("speculation", "tree_size", int(m.min()), "an integer >= 1 (the root counts)")
    out = np.empty(a.shape)
    max_nodes = int(m.max()) if m.size else 1
    ua, ia = np.unique(a, return_inverse=True)
    uk, ik = np.unique(kk, return_inverse=True)
    ia, ik = ia.reshape(a.shape), ik.reshape(a.shape)
    for i, av in enumerate(ua):
        for j, kv in enumerate(uk):
            sel = (ia == i) & (ik == j)
            if not sel.any():
                continue
            if kv < 1:
                out[sel] = 1.0
                continue
            vals = _tree_values(float(av), int(kv), max(max_nodes, 2), n_ranks, rank_decay)
            out[sel] = vals[m[sel]]
    return out


def lookahead_tokens_per_step(alpha, *, ngram: int, guesses: int) -> np.ndarray:
    """E[tokens per Lookahead step] = 1 + Σ_{j=1}^{N−1} [1 − (1 − α^j)^G] (best of G pool guesses,
    each an (N − 1)-token chain with per-token acceptance α; see the section comment)."""
    a = np.asarray(alpha, dtype=float)[..., None]
    j = np.arange(1, ngram)
    return 1.0 + (1.0 - (1.0 - a ** j) ** guesses).sum(axis=-1)


def tokens_per_cycle(cfg: DrafterConfig, *, alpha, k, tree_size=None, n_ranks: int = DEFAULT_N_RANKS,
                     rank_decay: float = DEFAULT_RANK_DECAY) -> np.ndarray:
    """E[tokens per cycle] for a family at acceptance α, depth K and tree size M (None: chain)."""
    if not cfg.family.uses_k:  # Lookahead: best of G pool guesses per step
        a, _ = np.broadcast_arrays(np.asarray(alpha, dtype=float), np.asarray(k, dtype=float))
        return lookahead_tokens_per_step(a, ngram=cfg.lookahead_ngram, guesses=cfg.lookahead_guesses)
    if tree_size is None or not cfg.supports_tree:
        return tokens_per_cycle_iid(alpha, k)
    return tree_tokens_per_cycle(alpha, k, tree_size, n_ranks=n_ranks, rank_decay=rank_decay)


def plain_parts(target: ModelSpec, dep: Deployment, *, batch_size, context_len, device_time_s=None):
    """(device, host) seconds of one plain decoding iteration of B sequences: the target's step with a
    load calibration's terms, and the engine's host work. device_time_s: the step if already computed."""
    b = np.asarray(batch_size, dtype=float)
    dev = target_step_time(target, dep, batch_size=b, q_len=1, context_len=context_len) if device_time_s is None \
        else device_time_s
    dev = dep.calibrated_device_s(dev, n_seqs=b, n_emitted=b)  # a load calibration's terms (else unchanged)
    return dev, dep.host_time_s(n_seqs=b, n_tokens=b)


def plain_iteration_s(target: ModelSpec, dep: Deployment, *, batch_size, context_len, device_time_s=None):
    """One plain decoding iteration of B sequences: the target's step and the engine's host work
    (overlapped if the stack hides it), seconds. device_time_s: the step if already computed."""
    dev, host = plain_parts(target, dep, batch_size=batch_size, context_len=context_len, device_time_s=device_time_s)
    return dep.iteration_time_s(dev, host, speculative=False)


def expected_verify_width(cfg: DrafterConfig, q_len):
    """Target tokens a speculating sequence verifies a cycle, in expectation: q where the proposer drafts
    every cycle, 1 + f·(q − 1) where it drafts in a share f (`DrafterConfig.draft_frac`)."""
    q = np.asarray(q_len, dtype=float)
    return q if cfg.draft_frac == 1.0 else 1.0 + float(cfg.draft_frac) * (q - 1.0)


def speculative_cycle(cfg: DrafterConfig, target: ModelSpec, dep: Deployment, *, batch_size, k, context_len,
                      tokens_per_cycle, tree_size=None, plain_step_time_s=None, verify_step_time_s=None,
                      work: DrafterWork | None = None, draft: DraftCost | None = None) -> CycleTimes:
    """One speculative cycle of family `cfg` against plain decoding at the same B and L.

    batch_size B, k K, tree_size M (None: chain of K + 1), context_len L, tokens_per_cycle τ (from
    `tokens_per_cycle` or measured): arrays that broadcast. plain_step_time_s / verify_step_time_s:
    the target's plain and verify passes on the deployment (`cost.pricing.target_step_cost`, hops
    included) when already computed; work / draft: the family's resolved DrafterWork and this cycle's
    DraftCost when already computed (an OperatingPoint holds the work). Both sides include the
    engine's host work per iteration (the stack's [host] model; overlapped with the device where the
    stack does that). Returns CycleTimes (aggregate tokens/s; target_step_time_s is the plain
    iteration; verify_time_s the verify pass plus the work a family adds inside it)."""
    tree = tree_size is not None and cfg.supports_tree
    if tree and not dep.supports_tree:
        raise field_error(f"stack {dep.stack_id!r}", "tree_verification", "none",
                          "a stack that verifies trees (use a chain: tree_size = None)")
    work = cfg.family.work(cfg, target, dep.tp) if work is None else work
    dc = draft if draft is not None else draft_cost(cfg, target, dep, batch_size=batch_size, k=k,
                                                    tree_size=tree_size if tree else None, context_len=context_len,
                                                    work=work)
    b = np.asarray(batch_size, dtype=float)
    plain_dev, plain_host = plain_parts(target, dep, batch_size=b, context_len=context_len,
                                        device_time_s=plain_step_time_s)
    plain = dep.iteration_time_s(plain_dev, plain_host, speculative=False)
    # a proposer that drafts in a share f of a sequence's cycles (prompt lookup finding no match in the
    # rest: that sequence verifies its one token and emits it): the cycle is priced at the expected
    # width 1 + f·(q − 1) a sequence, with f·B sequences speculating, and emits 1 + f·(τ − 1) tokens
    frac = float(cfg.draft_frac)
    q = expected_verify_width(cfg, dc.verify_q_len)
    if frac != 1.0:
        tokens_per_cycle = 1.0 + frac * (np.asarray(tokens_per_cycle, dtype=float) - 1.0)
    verify_pass = (target_step_time(target, dep, batch_size=b, q_len=dc.verify_q_len, context_len=context_len,
                                    draft_frac=frac)
                   if verify_step_time_s is None else np.asarray(verify_step_time_s, dtype=float))
    verify = verify_pass + dc.verify_extra_s
    # a load calibration's device terms priced into each part, not only their sum: the verify pass carries
    # the per-sequence and per-token terms, every device part the scale. Reporting the raw passes beside a
    # calibrated cycle made the overhead (cycle - draft - verify) negative where the scale is below 1.
    draft_time = dep.calibrated_device_s(dc.draft_time_s, n_seqs=0.0, n_emitted=0.0)
    draft_step = dep.calibrated_device_s(dc.draft_step_time_s, n_seqs=0.0, n_emitted=0.0)
    verify = dep.calibrated_device_s(verify, n_seqs=b, n_emitted=b * np.asarray(tokens_per_cycle, dtype=float))
    device = draft_time + verify + dep.calibrated_device_s(
        device_cycle_overhead_s(target, dep, batch_size=b, verify_q_len=q,
                                tokens_per_cycle=tokens_per_cycle, tree=tree), n_seqs=0.0, n_emitted=0.0)
    passes = np.asarray(k, dtype=float) if work.has_passes else 0.0
    host = dep.host_time_s(n_seqs=b, n_tokens=b * q, n_spec_seqs=b * frac, n_draft_tokens=b * (q - 1.0),
                           n_draft_passes=passes, speculating=True)
    cycle = dep.iteration_time_s(device, host, speculative=True)
    return cycle_times(target_step_time_s=plain, draft_time_s=draft_time, verify_time_s=verify,
                       tokens_per_cycle=tokens_per_cycle, batch_size=batch_size,
                       draft_step_time_s=draft_step, overhead_s=cycle - draft_time - verify,
                       verify_q_len=q,
                       parts=dict(plain_device_s=plain_dev, plain_host_s=plain_host, device_s=device, host_s=host))


# ---- decisions: best configuration, regression region, thresholds ----------------------------------

@dataclass(frozen=True, slots=True, kw_only=True)
class GridResult:
    """A family evaluated on a grid: every array has shape (nK, nM, nB, nL, nα) (M = tree sizes;
    for chains the M axis has length 1 and tree_size = K + 1)."""

    k: np.ndarray
    tree_size: np.ndarray
    batch_size: np.ndarray
    context_len: np.ndarray
    alpha: np.ndarray
    tokens_per_cycle: np.ndarray
    draft_time_s: np.ndarray
    verify_time_s: np.ndarray
    overhead_s: np.ndarray
    cycle_time_s: np.ndarray
    target_step_time_s: np.ndarray
    tokens_per_s: np.ndarray
    baseline_tokens_per_s: np.ndarray
    speedup: np.ndarray
    verify_q_len: np.ndarray
    is_tree: bool
    alpha_effective: np.ndarray | None = None

    @property
    def shape(self) -> tuple[int, ...]:
        return self.speedup.shape


def evaluate_grid(cfg: DrafterConfig, target: ModelSpec, dep: Deployment, *, k, batch_size, context_len, alpha,
                  tree_size=None, n_ranks: int = DEFAULT_N_RANKS, rank_decay: float = DEFAULT_RANK_DECAY,
                  alpha_factor=None, conditional=None, position_ratios=None,
                  work: DrafterWork | None = None) -> GridResult:
    """Evaluate a family on the outer product of 1-D grids K × M × B × L × α, fully vectorised:
    the step costs are computed once per (K or M, B, L) and the acceptance once per (K, M, L, α).

    alpha_factor: optional (nL,) multipliers of the acceptance per context length (an
    `acceptance.AcceptanceModel` factor: acceptance falling with context or temperature); the
    effective rates are clipped to [0, 1]. conditional: per-position conditional rates (c_1..c_n)
    instead of an i.i.d. α (then `alpha` must hold one value, c_1, shown in the α column): a chain of
    K emits τ = 1 + Σ_{j≤K} Π_{i≤j} c_i; a tree uses c_1 as its α. position_ratios: a chain's
    measured shape r_j relative to α: its rates are clip(α_eff·r_j, 0, 1) at every α of the grid
    (`acceptance.shaped_conditional`; a tree ignores it). work: the family's resolved DrafterWork
    (`OperatingPoint.work`), if known."""
    ks = np.atleast_1d(np.asarray(k, dtype=np.int64))
    bs = np.atleast_1d(np.asarray(batch_size, dtype=np.int64))
    ls = np.atleast_1d(np.asarray(context_len, dtype=np.int64))
    al = np.atleast_1d(np.asarray(alpha, dtype=float))
    tree = tree_size is not None and cfg.supports_tree
    if tree and not dep.supports_tree:
        raise field_error(f"stack {dep.stack_id!r}", "tree_verification", "none",
                          "a stack that verifies trees (use a chain: no tree_size)")
    K = ks[:, None, None, None, None]
    if tree:
        ms = np.atleast_1d(np.asarray(tree_size, dtype=np.int64))
        M = ms[None, :, None, None, None]
    else:
        M = K + 1
    B = bs[None, None, :, None, None]
    L = ls[None, None, None, :, None]
    A = al[None, None, None, None, :]
    f = (np.ones(L.shape) if alpha_factor is None else
         np.broadcast_to(np.asarray(alpha_factor, dtype=float), ls.shape)[None, None, None, :, None])
    A_eff = np.clip(A * f, 0.0, 1.0)
    if conditional is not None and not tree and cfg.family.uses_k:
        if al.size != 1:
            raise field_error("evaluate_grid", "alpha", al.tolist(), "one value (c_1) when conditional rates are given")
        c = np.asarray(conditional, dtype=float)
        if ks.max() > c.size:
            raise field_error("evaluate_grid", "k", int(ks.max()), f"<= {c.size} (per-position rates given)")
        run = np.cumprod(np.clip(c[None, :] * f.reshape(-1, 1), 0.0, 1.0), axis=1)  # (nL, n)
        tau_kl = 1.0 + np.stack([run[:, :kk].sum(axis=1) for kk in ks])                  # (nK, nL)
        tau = tau_kl[:, None, None, :, None]
    elif position_ratios is not None and not tree and cfg.family.uses_k:
        rates = shaped_conditional(A_eff, position_ratios, int(ks.max()))            # (1, 1, 1, nL, nA, Kmax)
        run = np.cumprod(rates, axis=-1)
        upto = np.arange(1, rates.shape[-1] + 1) <= K[..., None]                     # (nK, 1, 1, 1, 1, Kmax)
        tau = 1.0 + np.sum(np.where(upto, run, 0.0), axis=-1)
    else:
        tau = tokens_per_cycle(cfg, alpha=A_eff, k=K, tree_size=M if tree else None, n_ranks=n_ranks,
                               rank_decay=rank_decay)
    plain = target_step_time(target, dep, batch_size=B, q_len=1, context_len=L)
    cyc = speculative_cycle(cfg, target, dep, batch_size=B, k=K, context_len=L, tokens_per_cycle=tau,
                            tree_size=M if tree else None, plain_step_time_s=plain, work=work)
    shape = np.broadcast_shapes(K.shape, M.shape, B.shape, L.shape, A.shape)
    full = lambda x: np.broadcast_to(np.asarray(x, dtype=float), shape)  # noqa: E731
    return GridResult(k=full(K), tree_size=full(M), batch_size=full(B),
                      context_len=full(L), alpha=full(A), tokens_per_cycle=full(cyc.tokens_per_cycle),
                      draft_time_s=full(cyc.draft_time_s), verify_time_s=full(cyc.verify_time_s),
                      overhead_s=full(cyc.overhead_s), cycle_time_s=full(cyc.cycle_time_s),
                      target_step_time_s=full(cyc.target_step_time_s), tokens_per_s=full(cyc.tokens_per_s),
                      baseline_tokens_per_s=full(cyc.baseline_tokens_per_s), speedup=full(cyc.speedup),
                      verify_q_len=full(cyc.verify_q_len), is_tree=tree, alpha_effective=full(A_eff))


def best_config(grid: GridResult) -> dict[str, np.ndarray]:
    """The best (K, M) per (B, L, α): arrays of shape (nB, nL, nα) with keys k, tree_size,
    speedup, tokens_per_s, tokens_per_cycle."""
    nk, nm = grid.shape[:2]
    flat = grid.speedup.reshape(nk * nm, *grid.shape[2:])
    idx = np.argmax(flat, axis=0)
    pick = lambda a: np.take_along_axis(a.reshape(nk * nm, *grid.shape[2:]), idx[None], axis=0)[0]  # noqa: E731
    return {"k": pick(grid.k).astype(int), "tree_size": pick(grid.tree_size).astype(int), "speedup": pick(grid.speedup),
            "tokens_per_s": pick(grid.tokens_per_s), "tokens_per_cycle": pick(grid.tokens_per_cycle)}


def regression_region(speedup) -> np.ndarray:
    """Boolean mask of the points where speculation is a slowdown (speedup < 1)."""
    return np.asarray(speedup) < 1.0


def batch_size_threshold(batch_sizes, best_speedup, *, margin: float = 0.0):
    """The smallest batch size at which the best configuration's speedup falls below 1 + margin
    (speculation should be off from there up); None if it pays at every batch size given.
    batch_sizes: (nB,) in any order; best_speedup: (nB,) in the same order."""
    b = np.asarray(batch_sizes)
    s = np.asarray(best_speedup, dtype=float)
    order = np.argsort(b, kind="stable")
    b, s = b[order], s[order]
    off = np.flatnonzero(s < 1.0 + margin)
    return None if off.size == 0 else int(b[off[0]])


def acceptance_threshold(alphas, best_speedup, *, margin: float = 0.0):
    """The acceptance rate below which the best configuration stops paying (speedup < 1 + margin),
    interpolated linearly between grid points; None if it never pays on the grid, 0.0 if it pays
    everywhere. alphas: (nα,) in any order; best_speedup: (nα,) in the same order (non-decreasing in α)."""
    a = np.asarray(alphas, dtype=float)
    s = np.asarray(best_speedup, dtype=float) - (1.0 + margin)
    order = np.argsort(a, kind="stable")
    a, s = a[order], s[order]
    ok = np.flatnonzero(s >= 0)
    if ok.size == 0:
        return None
    i = int(ok[0])
    if i == 0:
        return float(a[0]) if s[0] > 0 and a[0] > 0 else 0.0
    a0, a1, s0, s1 = a[i - 1], a[i], s[i - 1], s[i]
    return float(a0 + (a1 - a0) * (-s0) / (s1 - s0)) if s1 != s0 else float(a1)


def hardware_best_tree_size(cfg: DrafterConfig, target: ModelSpec, dep: Deployment, *, alpha: float, k: int,
                            batch_size: int, context_len: int, max_nodes: int = 64) -> tuple[int, float]:
    """Sequoia's hardware-aware tree size: the M in 1..max_nodes maximising tokens/s, using the
    best M-node tree's E[tokens] (trees.optimal_tree_values) and the cost of a cycle verifying M
    tokens at this B and L. Returns (M, speedup at that M)."""
    ms = np.arange(1, max_nodes + 1)
    g = evaluate_grid(cfg, target, dep, k=[k], tree_size=ms, batch_size=[batch_size], context_len=[context_len],
                      alpha=[alpha])
    s = g.speedup[0, :, 0, 0, 0]
    i = int(np.argmax(s))
    return int(g.tree_size[0, i, 0, 0, 0]), float(s[i])
