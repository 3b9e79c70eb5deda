"""Run by tests/test_decoder_gguf.py::test_boundscheck_subprocess in a fresh process with
NUMBA_BOUNDSCHECK=1, a fresh NUMBA_CACHE_DIR and SPECSIM_DECODER_PLAIN=1 (not collected by pytest).

Checks, with every numba array access bounds-checked: (1) the checks are really on; (2) malformed
tiny GGUFs are refused before a kernel runs; (3) the core of the kernel twin tests on tiny shapes;
(4) a whole tiny model's prefill, tree verify and speculative generation against the numpy twin.
An out-of-bounds access raises IndexError here, and the script exits non-zero.
argv[1]: a scratch folder."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np


def main(scratch: Path) -> None:
    from numba import config, njit

    assert config.BOUNDSCHECK, "NUMBA_BOUNDSCHECK is not set"

    @njit
    def probe(a, i):
        return a[i]

    try:
        probe(np.zeros(3), 5)
        raise SystemExit("boundscheck is not in effect: a[5] of 3 elements did not raise")
    except IndexError:
        pass

    import gguf

    from specsim.decoder import drafters as D
    from specsim.decoder import kernels, reference
    from specsim.decoder.generate import generate_plain, generate_speculative
    from specsim.decoder.gguf_model import load_gguf
    from specsim.decoder.model import Transformer
    from specsim.decoder.testing import write_tiny_gguf
    from specsim.errors import InputError
    from specsim.speculation.trees import ancestor_mask, from_choices

    assert not kernels.HAVE_VNNI, "expected the plain block loops (SPECSIM_DECODER_PLAIN=1)"

    # (2) malformed files: refused at load, before a kernel runs
    malformed = {
        "head_count 3 of width 64": dict(metadata={"attention.head_count": 3}),
        "head_count 8 (kv shapes disagree)": dict(metadata={"attention.head_count": 8}),
        "head_count_kv 3 of 4": dict(metadata={"attention.head_count_kv": 3}),
        "block_count 2 of 3": dict(metadata={"block_count": 2}),
        "block 1 removed": dict(omit={f"blk.1.{n}.weight" for n in ("attn_norm", "ffn_norm", "attn_q", "attn_k",
                                                                     "attn_v", "attn_output", "ffn_gate", "ffn_up",
                                                                     "ffn_down")}),
        "odd head dim": dict(d_model=96, n_head=32, n_kv_head=32, n_layer=1),
        "attn_k rows": dict(shapes={"blk.0.attn_k.weight": (64, 64)}),
        "ffn_down columns": dict(shapes={"blk.0.ffn_down.weight": (64, 96)}),
    }
    for name, kw in malformed.items():
        path = write_tiny_gguf(scratch / "bad.gguf", **kw)
        try:
            Transformer(load_gguf(path))
        except InputError as exc:
            print(f"refused {name}: {exc}")
        else:
            raise SystemExit(f"malformed case {name!r} was accepted")

    # (3) kernels against their twins, tiny shapes, every type
    rng = np.random.default_rng(2)
    for type_name in ("F32", "F16", "Q8_0", "Q4_0", "Q4_1"):
        for m in (1, 3, 9):
            n, k = 37, 64
            w = rng.standard_normal((n, k)).astype(np.float32)
            if type_name == "F32":
                raw = w
            elif type_name == "F16":
                raw = w.astype(np.float16).view(np.uint16)
            else:
                raw = gguf.quants.quantize(w, getattr(gguf.GGMLQuantizationType, type_name))
            x = rng.standard_normal((m, k)).astype(np.float32)
            out, twin = np.zeros((m, n), np.float32), np.zeros((m, n), np.float32)
            kernels.matmul(out, kernels.new_scratch(2, m, k), type_name, kernels.pack(type_name, raw, k), x,
                           kernels.F16_LUT)
            reference.matmul(twin, reference.prepare(type_name, raw, k), x)
            assert np.abs(out - twin).max() <= 1e-5 * np.abs(twin).max(), (type_name, m)
    m, h, g, e, c = 5, 4, 2, 16, 32
    x = rng.standard_normal((m, 64)).astype(np.float32)
    a, b = np.zeros_like(x), np.zeros_like(x)
    kernels.rmsnorm(a, x, np.ones(64, np.float32), 1e-5)
    reference.rmsnorm(b, x, np.ones(64, np.float32), 1e-5)
    assert np.abs(a - b).max() <= 1e-5
    q = rng.standard_normal((m, h, e)).astype(np.float32)
    q1, q2 = q.copy(), q.copy()
    inv = 10000.0 ** (-np.arange(0, e, 2) / e)
    kernels.rope(q1, np.arange(m), inv)
    reference.rope(q2, np.arange(m), inv)
    assert np.abs(q1 - q2).max() <= 1e-5
    gate, up = rng.standard_normal((m, 32)).astype(np.float32), rng.standard_normal((m, 32)).astype(np.float32)
    s1, s2 = np.zeros_like(gate), np.zeros_like(gate)
    kernels.swiglu(s1, np.zeros(gate.shape, np.int32), gate, up)
    reference.swiglu(s2, None, gate, up)
    assert np.abs(s1 - s2).max() <= 1e-5
    kc, vc = (rng.standard_normal((g, c, e)).astype(np.float32) for _ in range(2))
    for n_shared, w_rows in ((10, 7), (0, 5), (27, 5)):  # the last fills the cache to its end
        mask = rng.random((m, w_rows)) < 0.5
        mask[:, 0] = True
        o1, o2 = np.zeros((m, h, e), np.float32), np.zeros((m, h, e), np.float32)
        kernels.attention(o1, np.zeros((g, m * h // g, n_shared + w_rows + 2), np.float32), q, kc, vc, n_shared, mask)
        reference.attention(o2, None, q, kc, vc, n_shared, mask)
        assert np.abs(o1 - o2).max() <= 1e-4, n_shared

    # (4) whole tiny models: prefill, tree verify, speculative generation; numba against the numpy twin
    for kw in (dict(), dict(tied=True, n_head=4, n_kv_head=1), dict(n_head=2, n_kv_head=2, d_model=64)):
        gg = load_gguf(write_tiny_gguf(scratch / "ok.gguf", seed=5, **kw))
        fast, slow = Transformer(gg), Transformer(gg, backend="numpy")
        cf, cs = fast.new_cache(40), slow.new_cache(40)
        prompt = np.array(gg.tokenizer.encode("the cat and the dog and the cat").ids)
        lf, ls = fast.prefill(cf, prompt), slow.prefill(cs, prompt)
        assert np.abs(lf - ls).max() <= 1e-4 * np.abs(ls).max()
        tree = from_choices([(0,), (1,), (0, 0), (1, 0), (0, 0, 0)])
        toks = np.arange(tree.n_nodes) + 3
        lf = fast.forward(cf, toks, cf.length + tree.depths, ancestor_mask(tree)).copy()
        ls = slow.forward(cs, toks, cs.length + tree.depths, ancestor_mask(tree)).copy()
        assert np.abs(lf - ls).max() <= 1e-4 * np.abs(ls).max()
        plain = generate_plain(fast, prompt, 12)
        for drafter in (D.layer_skip(fast, k=3, n_layers=1), D.TreeDrafter(D.layer_skip(fast, k=1, n_layers=2), tree),
                        D.PromptLookupDrafter(k=3)):
            spec = generate_speculative(fast, drafter, prompt, 12, mode="greedy")
            assert (spec.tokens == plain.tokens).all(), drafter.name
    print("boundscheck: all cases passed")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
