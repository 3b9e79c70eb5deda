"""The tiled attention kernel (decoder.kernels.attention): a tree node's row in a verify pass is bit for
bit the decode step of that token, whose ancestors then sit in the shared rows instead of among masked
siblings (what greedy exactness with tree drafts needs), for the blocked head dims (multiples of 16) and
the plain path alike, under one and two threads."""
from __future__ import annotations

import numpy as np
import pytest

from specsim.decoder import kernels
from specsim.decoder import reference
from specsim.speculation.trees import ancestor_mask, from_choices


@pytest.mark.parametrize("e", [64, 16, 24, 32, 128])
@pytest.mark.parametrize("n_threads", [1, 2])
def test_tree_row_is_its_decode_step(e, n_threads):
    import numba

    rng = np.random.default_rng(11)
    h, g, n_shared = 9, 3, 150  # keys cross several tiles of 64
    tree = from_choices(((0,), (1,), (2,), (0, 0), (0, 1), (1, 0), (0, 0, 0), (0, 1, 0)))
    m = tree.n_nodes
    mask = ancestor_mask(tree)
    c = n_shared + m
    q = rng.standard_normal((m, h, e)).astype(np.float32)
    kc = rng.standard_normal((g, c, e)).astype(np.float32)
    vc = rng.standard_normal((g, c, e)).astype(np.float32)
    saved = numba.get_num_threads()
    try:
        kernels.set_threads(n_threads)
        full = np.zeros((m, h, e), np.float32)
        kernels.attention(full, np.zeros((g, m * h // g, c + 2), np.float32), q, kc, vc, n_shared, mask)
        twin = np.zeros_like(full)
        reference.attention(twin, None, q, kc, vc, n_shared, mask)
        assert np.abs(full - twin).max() <= 1e-5 * np.abs(twin).max()  # the numpy twin, to rounding
        for i in range(m):
            path = [j for j in range(m) if mask[i, j]]  # root .. i, ascending slots
            k2 = np.concatenate([kc[:, :n_shared], kc[:, [n_shared + j for j in path]]], axis=1)
            v2 = np.concatenate([vc[:, :n_shared], vc[:, [n_shared + j for j in path]]], axis=1)
            one = np.zeros((1, h, e), np.float32)
            n2 = n_shared + len(path) - 1  # the decode step: every earlier token shared, itself the one new row
            kernels.attention(one, np.zeros((g, h // g, n2 + 3), np.float32), q[i:i + 1], k2, v2, n2,
                              np.ones((1, 1), bool))
            np.testing.assert_array_equal(one[0], full[i])
    finally:
        kernels.set_threads(saved)
