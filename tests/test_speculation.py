"""Cycle analytics for every family: closed forms against Monte Carlo of the acceptance process,
the seed's worked example by hand, properties, and the decisions (best K, thresholds)."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specsim.speculation import trees
from specsim.speculation.families import DrafterConfig, make_config
from specsim.specs.hardware import load_hardware
from specsim.specs.models import load_model
from specsim.speculation.cycle import Deployment, acceptance_threshold, batch_size_threshold, best_config, evaluate_grid, hardware_best_tree_size, lookahead_tokens_per_step, rank_acceptance_from_alpha, regression_region, speculative_cycle, target_step_time, tokens_per_cycle, tokens_per_cycle_iid, tree_tokens_per_cycle
from specsim.specs.stacks import load_stack

HBM = load_hardware("seed-hbm-2tbs")
DDR5 = load_hardware("seed-ddr5-90gbs")
T70 = load_model("seed-70b")
SEED = make_config("draft_model", T70, drafter="seed-1b")
DEP = Deployment(hardware=HBM)


# ---- Monte Carlo of the acceptance processes ---------------------------------------------------------

def _mc_chain(alpha, k, n, rng):
    """Simulate n cycles: draft i is accepted with probability α if all before it were."""
    u = rng.random((n, k))
    accepted = np.argmin(np.concatenate([u < alpha, np.zeros((n, 1), bool)], axis=1), axis=1)
    return accepted + 1.0  # + the bonus token


@pytest.mark.parametrize("alpha,k", [(0.5, 3), (0.8, 5), (0.95, 8)])
def test_chain_closed_form_matches_monte_carlo(alpha, k):
    rng = np.random.default_rng(1)
    x = _mc_chain(alpha, k, 200_000, rng)
    # 5 standard errors
    assert float(tokens_per_cycle_iid(alpha, k)) == pytest.approx(x.mean(), abs=5 * x.std() / np.sqrt(x.size))


def _mc_tree(tree, cond, n, rng):
    """Walk the tree: at an accepted node try its children best rank first, accepting the rank-r child
    with the conditional rate cond[r] given the better ones were rejected; stop when none is accepted."""
    kids = {i: tree.children(i) for i in range(tree.n_nodes)}
    out = np.empty(n)
    for t in range(n):
        node, tokens = 0, 1
        while True:
            for c in kids[node]:
                r = tree.ranks[c]
                if r < cond.size and rng.random() < cond[r]:
                    node, tokens = c, tokens + 1
                    break
            else:
                break
        out[t] = tokens
    return out


@pytest.mark.parametrize("alpha,m,depth", [(0.7, 12, 4), (0.85, 20, 6)])
def test_tree_tokens_match_monte_carlo_of_the_rank_process(alpha, m, depth):
    # the tree analytics use Sequoia's joint per-rank vector built from conditional rates α·0.5^r;
    # the simulation uses the conditional rates directly (an independent path through the process)
    cond = alpha * 0.5 ** np.arange(8)
    p = rank_acceptance_from_alpha(alpha)
    tree = trees.optimal_tree(m, p, max_depth=depth)
    rng = np.random.default_rng(7)
    x = _mc_tree(tree, cond, 40_000, rng)
    expected = float(tree_tokens_per_cycle(alpha, depth, m))
    assert expected == pytest.approx(x.mean(), abs=5 * x.std() / np.sqrt(x.size))


def test_lookahead_closed_form_matches_monte_carlo():
    alpha, n_gram, guesses = 0.4, 5, 7
    rng = np.random.default_rng(3)
    u = rng.random((100_000, guesses, n_gram - 1)) < alpha
    run = np.where(u.all(axis=2), n_gram - 1, np.argmin(u, axis=2))  # accepted prefix of each guess
    x = 1.0 + run.max(axis=1)
    assert float(lookahead_tokens_per_step(alpha, ngram=n_gram, guesses=guesses)) == pytest.approx(
        x.mean(), abs=5 * x.std() / np.sqrt(x.size))


@given(st.floats(0, 1), st.integers(1, 12), st.floats(0.05, 0.95))
def test_rank_vector_is_a_sub_distribution_led_by_alpha(alpha, n_ranks, decay):
    p = rank_acceptance_from_alpha(alpha, n_ranks=n_ranks, rank_decay=decay)
    assert p[0] == pytest.approx(alpha)
    assert np.all(p >= 0) and p.sum() <= 1 + 1e-12


@settings(deadline=None, max_examples=40)
@given(st.floats(0.05, 0.95), st.integers(1, 6))
def test_a_chain_shaped_tree_gives_the_chain_closed_form(alpha, k):
    # with one candidate per level the best (K+1)-node depth-K tree is the chain: Leviathan's eq. 1
    assert float(tree_tokens_per_cycle(alpha, k, k + 1)) >= float(tokens_per_cycle_iid(alpha, k)) - 1e-12
    one_rank = trees.optimal_tree_values(k + 1, [alpha], max_depth=k)[k + 1]
    assert one_rank == pytest.approx(float(tokens_per_cycle_iid(alpha, k)), rel=1e-12)


# ---- the seed's worked example -------------------------------------------------------------------------

def test_seed_cycle_by_hand():
    # 5 × 1 ms + 70 ms = 75 ms; 3.5 tokens → 46.7 tok/s against 14.3 (seed article)
    c = speculative_cycle(SEED, T70, DEP, batch_size=1, k=5, context_len=256, tokens_per_cycle=3.5)
    assert float(c.cycle_time_s) == pytest.approx(0.075, rel=0.01)
    assert float(c.tokens_per_s) == pytest.approx(3.5 / 0.075, rel=0.01)
    assert float(c.speedup) == pytest.approx(3.5 * 0.070 / 0.075, rel=0.01)


def test_speedup_decays_from_about_tau_to_a_regression_under_load():
    g = evaluate_grid(SEED, T70, DEP, k=[5], batch_size=[1, 512], context_len=[256], alpha=[0.7773])
    s = g.speedup[0, 0, :, 0, 0]
    assert s[0] == pytest.approx(3.5 * 70 / 75, rel=0.02)  # ≈ E[tokens] × (verify / cycle)
    assert s[1] < 1.0
    assert regression_region(s).tolist() == [False, True]


def test_verify_pass_stays_near_one_token_until_b_m_passes_the_ridge():
    ridge = HBM.ridge_flops_per_byte("fp16")  # 312e12 / 2e12 = 156
    assert ridge == pytest.approx(156)
    one = target_step_time(T70, DEP, batch_size=1, q_len=1, context_len=256)
    assert float(target_step_time(T70, DEP, batch_size=1, q_len=64, context_len=256) / one) < 1.05  # 64 < 156
    # B·M = 64 × 8 = 512 > 156: compute bound, 2 × 70e9 × 512 / 312e12 = 0.23 s against 0.07 s by hand
    big = target_step_time(T70, DEP, batch_size=64, q_len=8, context_len=256)
    assert float(big) == pytest.approx(2 * 70e9 * 512 / 312e12, rel=0.05)


def test_long_context_shrinks_the_win_under_naive_attention_and_fused_gqa_keeps_it():
    kw = dict(k=[5], batch_size=[1], context_len=[256, 131072], alpha=[0.7773])
    fused = evaluate_grid(SEED, T70, DEP, **kw).speedup[0, 0, 0, :, 0]
    naive = evaluate_grid(SEED, T70, Deployment(hardware=HBM, attention="naive"), **kw).speedup[0, 0, 0, :, 0]
    assert naive[1] < 0.7 * naive[0]          # naive re-reads the 128k cache for each of the M queries
    assert fused[1] > 0.85 * fused[0]         # fused reads it once per step: the win mostly survives
    assert naive[0] == pytest.approx(fused[0], rel=0.01)


# ---- grid evaluation equals the pointwise path ----------------------------------------------------------

@pytest.mark.parametrize("method", ["draft_model", "eagle", "medusa", "prompt_lookup", "layer_skip", "sparse_kv",
                                    "lookahead"])
def test_grid_equals_pointwise_evaluation(method):
    cfg = SEED if method == "draft_model" else DrafterConfig(method=method)
    tree = [4, 16] if cfg.supports_tree else None
    g = evaluate_grid(cfg, T70, DEP, k=[2, 4], tree_size=tree, batch_size=[1, 32], context_len=[0, 4096],
                      alpha=[0.6, 0.9])
    for idx in [(0, 0, 0, 0, 0), (1, -1, 1, 1, 1), (0, -1, 1, 0, 1)]:
        k, m, b, l, a = (g.k[idx], g.tree_size[idx], g.batch_size[idx], g.context_len[idx], g.alpha[idx])
        tm = int(m) if g.is_tree else None
        tau = tokens_per_cycle(cfg, alpha=a, k=int(k), tree_size=tm)
        c = speculative_cycle(cfg, T70, DEP, batch_size=int(b), k=int(k), context_len=int(l), tokens_per_cycle=tau,
                              tree_size=tm)
        assert g.speedup[idx] == pytest.approx(float(c.speedup), rel=1e-12)


@settings(deadline=None, max_examples=30)
@given(st.floats(0.0, 0.98), st.floats(0.0, 0.98), st.integers(1, 8), st.sampled_from([1, 16, 256]))
def test_speedup_grows_with_acceptance(a1, a2, k, b):
    lo, hi = sorted((a1, a2))
    g = evaluate_grid(SEED, T70, DEP, k=[k], batch_size=[b], context_len=[512], alpha=[lo, hi])
    s = g.speedup[0, 0, 0, 0]
    assert s[1] >= s[0] - 1e-12


@settings(deadline=None, max_examples=30)
@given(st.integers(1, 8), st.floats(0.3, 0.95))
def test_zero_acceptance_never_pays(k, alpha):
    g = evaluate_grid(SEED, T70, DEP, k=[k], batch_size=[1, 64], context_len=[512], alpha=[0.0, alpha])
    assert np.all(g.speedup[0, 0, :, 0, 0] < 1.0)  # drafts cost time and nothing is accepted
    assert np.all(g.tokens_per_cycle <= k + 1)


def test_best_config_and_thresholds():
    g = evaluate_grid(SEED, T70, DEP, k=[1, 2, 4, 8], batch_size=[1, 16, 64, 256], context_len=[256],
                      alpha=[0.5, 0.8])
    best = best_config(g)
    assert best["speedup"].shape == (4, 1, 2)
    assert np.allclose(best["speedup"], g.speedup.max(axis=(0, 1)))
    # the best K shrinks as the batch grows (the verify pass leaves the plateau sooner for long drafts)
    assert best["k"][0, 0, 1] >= best["k"][2, 0, 1]
    # thresholds by hand on a toy curve
    assert batch_size_threshold([1, 2, 4, 8], [3.0, 2.0, 1.05, 0.9]) == 8
    assert batch_size_threshold([1, 2, 4, 8], [3.0, 2.0, 1.05, 0.9], margin=0.1) == 4
    assert batch_size_threshold([1, 2], [3.0, 2.0]) is None
    # linear interpolation between α = 0.4 (0.9×) and 0.6 (1.3×): speedup 1.0 at α = 0.45
    assert acceptance_threshold([0.2, 0.4, 0.6], [0.5, 0.9, 1.3]) == pytest.approx(0.45)
    assert acceptance_threshold([0.2, 0.4], [0.5, 0.9]) is None


def test_hardware_aware_tree_is_wide_on_hbm_and_narrow_on_a_cpu():
    m_hbm, s_hbm = hardware_best_tree_size(SEED, T70, DEP, alpha=0.78, k=6, batch_size=1, context_len=256)
    assert m_hbm >= 32 and s_hbm > 3
    t7 = load_model("seed-7b-q4")
    cfg = make_config("draft_model", t7, drafter="seed-0.5b")
    cpu = Deployment.from_stack(DDR5, load_stack("llama.cpp"))
    m_cpu, _ = hardware_best_tree_size(cfg, t7, cpu, alpha=0.7, k=4, batch_size=1, context_len=256)
    assert 4 <= m_cpu <= 8  # seed article: "think M of 4 to 8, not 64"
    # the same search at a large batch shrinks the tree on HBM too
    m_busy, _ = hardware_best_tree_size(SEED, T70, DEP, alpha=0.78, k=6, batch_size=64, context_len=256)
    assert m_busy < m_hbm


def test_trees_need_a_stack_that_verifies_them():
    dep = Deployment.from_stack(HBM, load_stack("vllm"))
    with pytest.raises(Exception, match="tree"):
        speculative_cycle(SEED, T70, dep, batch_size=1, k=4, context_len=0, tokens_per_cycle=3.0, tree_size=16)
    with pytest.raises(Exception, match="tree"):  # refused, not silently run as a chain
        evaluate_grid(SEED, T70, dep, k=[4], tree_size=[16], batch_size=[1], context_len=[0], alpha=[0.8])
