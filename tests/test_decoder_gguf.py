"""The GGUF loader refuses every file whose metadata disagrees with itself or with its tensor shapes,
before any numba kernel sees it (issue 14, class 1: a head count that does not divide the width used
to corrupt the heap), and a fuzz over tiny files finds no third outcome between "refused with an
InputError" and "runs and gives finite logits". Under numba's bounds checking, the same cases and the
kernel twins run in a fresh process (test_boundscheck_subprocess)."""
from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("numba")
pytest.importorskip("gguf")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from specsim.decoder import fetch, kernels  # noqa: E402
from specsim.decoder.gguf_model import QTensor, load_gguf  # noqa: E402
from specsim.decoder.model import Transformer  # noqa: E402
from specsim.decoder.testing import rewrite_gguf, tiny_vocab, write_tiny_gguf  # noqa: E402
from specsim.errors import InputError, SpecError  # noqa: E402

V = len(tiny_vocab())  # 280 tokens: the tiny files' vocabulary
KERNELS = ("matmul", "rmsnorm", "rope", "attention", "swiglu")


@contextlib.contextmanager
def counting_kernels():
    """Count calls of the kernel entry points the Transformer uses (it looks them up on the module)."""
    calls = {"n": 0}
    saved = {name: getattr(kernels, name) for name in KERNELS}

    def wrap(f):
        def counted(*a, **k):
            calls["n"] += 1
            return f(*a, **k)
        return counted
    try:
        for name, f in saved.items():
            setattr(kernels, name, wrap(f))
        yield calls
    finally:
        for name, f in saved.items():
            setattr(kernels, name, f)


# -- the cases on tiny files: each refused with the file, the key or tensor, the value, the expectation
TINY_CASES = {
    "head_count does not divide embedding_length": (
        dict(metadata={"attention.head_count": 3}),
        r"tiny.gguf: llama.attention.head_count = 3: expected a divisor of llama.embedding_length = 64"),
    "head_count_kv does not divide head_count": (
        dict(metadata={"attention.head_count_kv": 3}),
        r"llama.attention.head_count_kv = 3: expected a divisor of llama.attention.head_count = 4"),
    "head count edited, kv heads divide it": (  # 64 / 8 = head dim 8: attn_k (32, 64) now implies 2 x 8 = 16 rows
        dict(metadata={"attention.head_count": 8}),
        r"tensor 'blk.0.attn_k.weight' has shape \(32, 64\): expected \(16, 64\) = \(head_count_kv 2 x head dim 8"),
    "odd head dimension": (  # shapes agree, but rope rotates pairs: a head of 3 would be read past its end
        dict(d_model=96, n_head=32, n_kv_head=32, n_layer=1),
        r"head dimension llama.embedding_length / llama.attention.head_count = 96 / 32 = 3: expected an even"),
    "block_count below the blocks present": (
        dict(metadata={"block_count": 2}),
        r"llama.block_count = 2 but the file has 3 blocks \(block 2 present beyond it\)"),
    "block_count above the blocks present": (
        dict(metadata={"block_count": 5}),
        r"llama.block_count = 5 but the file has 3 blocks \(blocks 3..4 missing\)"),
    "a block's tensor missing": (
        dict(omit={"blk.1.ffn_up.weight"}),
        r"tensor 'blk.1.ffn_up.weight' is missing; expected shape \(128, 64\) = \(feed_forward_length 128"),
    "a whole block missing": (
        dict(omit={f"blk.1.{n}.weight" for n in ("attn_norm", "ffn_norm", "attn_q", "attn_k", "attn_v",
                                                  "attn_output", "ffn_gate", "ffn_up", "ffn_down")}),
        r"llama.block_count = 3 but the file has 2 blocks \(block 1 missing\)"),
    "q rows": (dict(shapes={"blk.0.attn_q.weight": (32, 64)}), r"'blk.0.attn_q.weight' has shape \(32, 64\): expected \(64, 64\)"),
    "v rows": (dict(shapes={"blk.2.attn_v.weight": (64, 64)}), r"'blk.2.attn_v.weight' has shape \(64, 64\): expected \(32, 64\)"),
    "o columns": (dict(shapes={"blk.0.attn_output.weight": (64, 96)}), r"'blk.0.attn_output.weight' has shape \(64, 96\): expected \(64, 64\)"),
    "gate rows": (dict(shapes={"blk.0.ffn_gate.weight": (96, 64)}), r"'blk.0.ffn_gate.weight' has shape \(96, 64\): expected \(128, 64\)"),
    "down columns": (dict(shapes={"blk.1.ffn_down.weight": (64, 96)}), r"'blk.1.ffn_down.weight' has shape \(64, 96\): expected \(64, 128\)"),
    "norm length": (dict(shapes={"blk.0.attn_norm.weight": (65,)}), r"'blk.0.attn_norm.weight' has shape \(65,\): expected \(64,\)"),
    "norm as a matrix": (dict(shapes={"output_norm.weight": (2, 64)}), r"'output_norm.weight' has shape \(2, 64\): expected \(64,\)"),
    "embedding width": (dict(shapes={"token_embd.weight": (V, 96)}), rf"'token_embd.weight' has shape \({V}, 96\): expected \({V}, 64\)"),
    "output head rows": (dict(shapes={"output.weight": (V - 1, 64)}), rf"'output.weight' has shape \({V - 1}, 64\): expected \({V}, 64\)"),
    "vocab_size against the embedding": (dict(metadata={"vocab_size": V + 1}), rf"llama.vocab_size = {V + 1}: expected {V}"),
    "rope dimension": (dict(metadata={"rope.dimension_count": 8}), r"llama.rope.dimension_count = 8: expected the head dimension 16"),
    "unknown tensor": (dict(extra={"rope_freqs.weight": (1, 8)}), r"tensor 'rope_freqs.weight' is not one this decoder reads"),
    "a block beyond the count": (dict(extra={"blk.3.attn_norm.weight": (1, 64)}), r"block 3 present beyond it"),
    "head count as an array": (dict(metadata={"attention.head_count": [4, 4, 4]}), r"llama.attention.head_count = \[4, 4, 4\]: expected one integer"),
    "head count as a string": (dict(metadata={"attention.head_count": "four"}), r"llama.attention.head_count = 'four': expected one integer"),
    "zero heads": (dict(metadata={"attention.head_count": 0}), r"llama.attention.head_count = 0: expected an integer >= 1"),
    "negative width": (dict(metadata={"embedding_length": -64}), r"llama.embedding_length = -64: expected an integer >= 1"),
    "missing block_count": (dict(metadata={"block_count": None}), r"GGUF metadata key 'llama.block_count' is missing"),
    "rope base NaN": (dict(metadata={"rope.freq_base": float("nan")}), r"llama.rope.freq_base = nan: expected a finite number > 0"),
    "rms eps negative": (dict(metadata={"attention.layer_norm_rms_epsilon": -1.0}), r"layer_norm_rms_epsilon = -1.0: expected a finite number >= 0"),
    "context length 0": (dict(metadata={"context_length": 0}), r"llama.context_length = 0: expected an integer >= 1"),
    "rope scaling": (dict(metadata={"rope.scaling.type": "linear"}), r"llama.rope.scaling.type = 'linear': expected 'none'"),
    "unsupported type": (dict(types={"attn_q": "Q5_0"}), r"'blk.0.attn_q.weight' has type Q5_0 \(id 6\); supported tensor types"),
}


@pytest.mark.parametrize("case", sorted(TINY_CASES))
def test_malformed_tiny_gguf_is_refused(tmp_path, case):
    kw, message = TINY_CASES[case]
    path = write_tiny_gguf(tmp_path / "tiny.gguf", **kw)
    with counting_kernels() as calls, pytest.raises(InputError, match=message):
        Transformer(load_gguf(path))
    assert calls["n"] == 0


def test_a_huge_block_count_is_refused_without_counting_to_it(tmp_path):
    # the CI fuzz run drew block_count = 2^31: the refusal built a set of 2^31 block numbers (24 GB, OOM)
    path = tmp_path / "huge.gguf"
    write_tiny_gguf(path, n_layer=2, d_model=64, n_head=2, n_kv_head=1, n_ff=64, tied=True,
                    metadata={"block_count": 2 ** 31})
    with pytest.raises(SpecError, match=r"block_count = 2147483648 but the file has 2 blocks \(blocks 2\.\.2147483647 missing\)"):
        load_gguf(path)


def test_tokenizer_metadata_is_checked(tmp_path):
    import gguf

    path = write_tiny_gguf(tmp_path / "ok.gguf")
    cases = {
        "tokenizer.ggml.bos_token_id": (V, rf"tokenizer.ggml.bos_token_id = {V}: expected a token id below the vocabulary size {V}"),
        "tokenizer.ggml.tokens": (tiny_vocab()[:-1], rf"tokenizer.ggml.tokens has {V - 1} entries: expected {V}"),
        "tokenizer.ggml.merges": (["Ġt"], r"tokenizer.ggml.merges\[0\] = 'Ġt': expected 'left right'"),
    }
    for key, (value, message) in cases.items():
        bad = rewrite_gguf(path, tmp_path / "bad.gguf", fields={key: value})
        with pytest.raises(InputError, match=message):
            load_gguf(bad)
    assert gguf.GGUFReader(str(path)).fields["tokenizer.ggml.bos_token_id"].contents() < V  # the original loads
    load_gguf(path)


def test_tied_output_and_a_valid_variant_load_and_run(tmp_path):
    """Leaving out output.weight is allowed (tied to the embedding); 8 heads of 8 with 8 kv heads is a
    consistent file and runs."""
    for kw in (dict(tied=True), dict(n_head=8, n_kv_head=8), dict(n_head=4, n_kv_head=1)):
        model = Transformer(load_gguf(write_tiny_gguf(tmp_path / "m.gguf", **kw)))
        logits = model.prefill(model.new_cache(16), np.arange(5))
        assert logits.shape == (V,) and np.isfinite(logits).all()


def test_qtensor_refuses_inconsistent_raw_data():
    with pytest.raises(SpecError, match=r"raw data uint8 \(4, 36\): expected a C-contiguous uint8 array of shape \(4, 20\)"):
        QTensor(name="w", type_name="Q4_1", n_rows=4, n_cols=32, raw=np.zeros((4, 36), np.uint8))
    with pytest.raises(SpecError, match=r"columns a multiple of 32"):
        QTensor(name="w", type_name="Q8_0", n_rows=4, n_cols=40, raw=np.zeros((4, 40), np.uint8))


def test_forward_refuses_a_cache_of_another_shape(tmp_path):
    model = Transformer(load_gguf(write_tiny_gguf(tmp_path / "m.gguf")))
    other = Transformer(load_gguf(write_tiny_gguf(tmp_path / "o.gguf", n_head=4, n_kv_head=4)))
    with counting_kernels() as calls:
        with pytest.raises(SpecError, match=r"KV cache of shape \(3, 4, 16, 16\): expected \(layers, 2, capacity, 16\)"):
            model.forward(other.new_cache(16), np.arange(3), np.arange(3))
        with pytest.raises(SpecError, match=r"n_layers = 4: expected 1..3"):
            model.forward(model.new_cache(16), np.arange(3), np.arange(3), n_layers=4)
    assert calls["n"] == 0


def test_kernels_refuse_disagreeing_shapes():
    """The entry guards: a caller's shape mistake is a ValueError, never an out-of-bounds access (the VNNI
    tiles load through raw pointers, which numba's boundscheck cannot see)."""
    rng = np.random.default_rng(0)
    import gguf

    raw = gguf.quants.quantize(rng.standard_normal((20, 64)).astype(np.float32), gguf.GGMLQuantizationType.Q4_1)
    packed = kernels.pack("Q4_1", raw, 64)
    x_wide = np.zeros((2, 96), np.float32)
    with pytest.raises(ValueError, match="block matmul: shapes"):
        kernels.matmul(np.zeros((2, 20), np.float32), kernels.new_scratch(1, 2, 96), "Q4_1", packed, x_wide, kernels.F16_LUT)
    with pytest.raises(ValueError, match="block matmul: shapes"):  # out narrower than the weight's rows
        kernels.matmul(np.zeros((2, 16), np.float32), kernels.new_scratch(1, 2, 64), "Q4_1", packed,
                       np.zeros((2, 64), np.float32), kernels.F16_LUT)
    with pytest.raises(ValueError, match="matmul_f32: shapes"):
        kernels.matmul(np.zeros((2, 5), np.float32), kernels.new_scratch(1, 2, 64), "F32", (np.zeros((5, 64), np.float32),),
                       x_wide, kernels.F16_LUT)
    with pytest.raises(ValueError, match="rmsnorm: shapes"):
        kernels.rmsnorm(np.zeros((2, 64), np.float32), np.zeros((2, 64), np.float32), np.ones(63, np.float32), 1e-5)
    with pytest.raises(ValueError, match="rope: shapes"):
        kernels.rope(np.zeros((2, 4, 6), np.float32), np.arange(2), np.ones(4))
    q, kc = np.zeros((2, 4, 16), np.float32), np.zeros((2, 8, 16), np.float32)
    with pytest.raises(ValueError, match="attention: shapes"):  # 6 + 3 rows seen, 8 in the cache
        kernels.attention(np.zeros_like(q), np.zeros((2, 4, 16), np.float32), q, kc, kc, 6, np.ones((2, 3), bool))
    with pytest.raises(ValueError, match="swiglu: shapes"):
        kernels.swiglu(np.zeros((2, 8), np.float32), np.zeros((1, 8), np.int32), np.zeros((2, 8), np.float32),
                       np.zeros((2, 8), np.float32))


# -- the real SmolLM2 file, edited as the fuzzer did --------------------------------------------
@pytest.fixture(scope="module")
def smollm2():
    """(path, reader) of the fetched SmolLM2-135M file; the reader is parsed once (its 49k-token
    vocabulary takes seconds) and shared by the cases."""
    import gguf

    path = fetch.default_model_path()
    if not path.is_file():
        pytest.skip(f"SmolLM2-135M GGUF not in the cache at {path}; run `specsim decoder fetch`")
    return path, gguf.GGUFReader(str(path))


def _blocks(lo, hi):
    return lambda name: name.startswith("blk.") and lo <= int(name.split(".")[1]) < hi


SMOLLM2_CASES = {  # SmolLM2-135M: embedding 576, 9 heads of 64, 3 kv heads, 30 blocks
    "head count 7": (dict(fields={"llama.attention.head_count": 7}),
                     r"llama.attention.head_count = 7: expected a divisor of llama.embedding_length = 576"),
    "head count 8": (dict(fields={"llama.attention.head_count": 8}),
                     r"llama.attention.head_count_kv = 3: expected a divisor of llama.attention.head_count = 8"),
    "kv head count 2": (dict(fields={"llama.attention.head_count_kv": 2}),
                        r"llama.attention.head_count_kv = 2: expected a divisor of llama.attention.head_count = 9"),
    "block count 25 of 30 blocks": (dict(fields={"llama.block_count": 25}),
                                    r"llama.block_count = 25 but the file has 30 blocks \(blocks 25..29 present beyond it\)"),
    "5 blocks removed, count 30": (dict(drop=_blocks(25, 30)),
                                   r"llama.block_count = 30 but the file has 25 blocks \(blocks 25..29 missing\)"),
    "5 middle blocks removed, count 25": (dict(drop=_blocks(10, 15), fields={"llama.block_count": 25}),
                                          r"blocks 10..14 missing; blocks 25..29 present beyond it"),
}


@pytest.mark.realmodel
@pytest.mark.parametrize("case", sorted(SMOLLM2_CASES))
def test_malformed_smollm2_is_refused(tmp_path, smollm2, case):
    kw, message = SMOLLM2_CASES[case]
    bad = rewrite_gguf(smollm2[0], tmp_path / "bad.gguf", reader=smollm2[1], **kw)
    with counting_kernels() as calls, pytest.raises(InputError, match=message):
        Transformer(load_gguf(bad))
    assert calls["n"] == 0


@pytest.mark.realmodel
def test_smollm2_cut_to_25_consistent_blocks_loads(tmp_path, smollm2):
    """The last 5 blocks removed and block_count set to 25: a consistent (shallower) model, accepted."""
    g = load_gguf(rewrite_gguf(smollm2[0], tmp_path / "cut.gguf", reader=smollm2[1], drop=_blocks(25, 30),
                               fields={"llama.block_count": 25}))
    assert g.config.n_layer == 25 and g.config.n_head == 9 and g.config.n_kv_head == 3


# -- fuzz: header values and tensor shapes drawn at random; refused exactly when inconsistent ---------------
KEYS = ("embedding_length", "attention.head_count", "attention.head_count_kv", "block_count", "feed_forward_length",
        "vocab_size", "rope.dimension_count", "context_length")
BLOCK_KINDS = ("attn_norm", "ffn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down")


@st.composite
def gguf_cases(draw):
    n_kv = draw(st.sampled_from([1, 2]))
    n_head = n_kv * draw(st.sampled_from([1, 2]))
    head_dim = draw(st.sampled_from([32, 64]))  # d_model a multiple of 32, so every block type can hold it
    s = dict(n_layer=draw(st.integers(1, 3)), d_model=n_head * head_dim, n_head=n_head, n_kv_head=n_kv,
             n_ff=draw(st.sampled_from([32, 64, 96])), tied=draw(st.booleans()))
    meta = {}
    for key in draw(st.lists(st.sampled_from(KEYS), max_size=2, unique=True)):
        meta[key] = draw(st.one_of(st.integers(0, 300), st.none(), st.just(2 ** 31),
                                   st.sampled_from([s["n_head"] * 2, s["n_kv_head"] * 2, s["d_model"] // 2])))
    names = ["token_embd.weight", "output_norm.weight"] + ([] if s["tied"] else ["output.weight"]) + [
        f"blk.{i}.{k}.weight" for i in range(s["n_layer"]) for k in BLOCK_KINDS]
    shapes, omit, extra = {}, set(), {}
    if draw(st.booleans()):
        name = draw(st.sampled_from(names))
        if "norm" in name:
            shapes[name] = draw(st.sampled_from([(s["d_model"] + 1,), (s["d_model"] - 1,), (s["d_model"],)]))
        else:
            rows, cols = _written_shape(name, s)
            shapes[name] = (rows + draw(st.sampled_from([-1, 1, 16, 0])), cols + draw(st.sampled_from([0, 32])))
    if draw(st.booleans()):
        omit.add(draw(st.sampled_from(names)))
    if draw(st.integers(0, 4)) == 0:
        extra[draw(st.sampled_from([f"blk.{s['n_layer']}.attn_norm.weight", "rope_freqs.weight"]))] = (1, 32)
    return s, meta, shapes, omit, extra


def _written_shape(name, s):
    d, f, e = s["d_model"], s["n_ff"], s["d_model"] // s["n_head"]
    kind = name.split(".")[-2] if name.startswith("blk.") else name.split(".")[0]
    return {"token_embd": (V, d), "output": (V, d), "attn_q": (d, d), "attn_k": (s["n_kv_head"] * e, d),
            "attn_v": (s["n_kv_head"] * e, d), "attn_output": (d, d), "ffn_gate": (f, d), "ffn_up": (f, d),
            "ffn_down": (d, f)}[kind]


def _consistent(s, meta, shapes, omit, extra) -> bool:
    """A second statement of the rule, from the Llama architecture: the metadata as written must
    imply every tensor shape as written, and name exactly the blocks there are."""
    key = {"embedding_length": s["d_model"], "attention.head_count": s["n_head"],
           "attention.head_count_kv": s["n_kv_head"], "block_count": s["n_layer"],
           "feed_forward_length": s["n_ff"], "context_length": 256, **meta}
    if any(key[k] is None for k in ("embedding_length", "attention.head_count", "block_count",
                                    "feed_forward_length", "context_length")):
        return False  # a required key left out
    d, h, n_layer, f = key["embedding_length"], key["attention.head_count"], key["block_count"], key["feed_forward_length"]
    g = key["attention.head_count_kv"] if key["attention.head_count_kv"] is not None else h
    if min(d, h, g, n_layer, f, key["context_length"]) < 1 or d % h or h % g or (d // h) % 2:
        return False
    e = d // h
    if meta.get("rope.dimension_count") not in (None, e) or meta.get("vocab_size") not in (None, V):
        return False
    if extra or n_layer != s["n_layer"] or omit - {"output.weight"}:
        return False
    implied = {"token_embd": (V, d), "output": (V, d), "output_norm": (d,), "attn_norm": (d,), "ffn_norm": (d,),
               "attn_q": (h * e, d), "attn_k": (g * e, d), "attn_v": (g * e, d), "attn_output": (d, h * e),
               "ffn_gate": (f, d), "ffn_up": (f, d), "ffn_down": (d, f)}
    for name in ["token_embd.weight", "output_norm.weight", "output.weight"] + [
            f"blk.{i}.{k}.weight" for i in range(s["n_layer"]) for k in BLOCK_KINDS]:
        if name == "output.weight" and (s["tied"] or name in omit):
            continue
        kind = name.split(".")[-2] if name.startswith("blk.") else name.split(".")[0]
        written = shapes.get(name, (s["d_model"],) if "norm" in kind else _written_shape(name, s))
        if tuple(written) != implied[kind]:
            return False
    return True


@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(case=gguf_cases())
def test_fuzz_gguf_header_and_shapes(tmp_path, case):
    s, meta, shapes, omit, extra = case
    path = tmp_path / "fuzz.gguf"
    # a perturbed matrix may have rows of any length: write every matrix as F32 then (else the default mix)
    types = {k: "F32" for k in ("token_embd", "output", *BLOCK_KINDS[2:])} if shapes else None
    write_tiny_gguf(path, **s, metadata=meta, shapes=shapes, omit=omit, extra=extra, types=types)
    consistent = _consistent(s, meta, shapes, omit, extra)
    with counting_kernels() as calls:
        try:
            model = Transformer(load_gguf(path))
        except SpecError as exc:  # InputError is a SpecError
            assert calls["n"] == 0, "refused after a kernel ran"
            assert not consistent, f"a consistent file was refused: {exc}"
            assert str(path) in str(exc)
            return
        assert consistent, "an inconsistent file was accepted"
        cache = model.new_cache(16)
        tree = np.array([[1, 0, 0], [1, 1, 0], [1, 0, 1]], bool)
        logits = model.forward(cache, np.array([1, 2, 3]), np.array([0, 1, 1]), tree)
        assert logits.shape == (3, V) and np.isfinite(logits).all()
        assert cache.length == 3 and calls["n"] > 0


# -- bounds checking on, in a fresh process -------------------------------------------------------------
@pytest.mark.slow
def test_boundscheck_subprocess(tmp_path):
    """The malformed cases, the kernels against their twins on tiny shapes and a whole tiny model's
    prefill, tree verify and speculative generation, all under NUMBA_BOUNDSCHECK=1 with a fresh numba
    cache (nothing compiled without the checks is reused) and the plain block loops (the VNNI tiles are
    LLVM IR, outside what boundscheck sees; their bounds come from the shape guards tested above)."""
    script = Path(__file__).with_name("decoder_boundscheck_script.py")
    env = dict(os.environ, NUMBA_BOUNDSCHECK="1", NUMBA_CACHE_DIR=str(tmp_path / "numba"), SPECSIM_DECODER_PLAIN="1")
    done = subprocess.run([sys.executable, str(script), str(tmp_path)], env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "boundscheck: all cases passed" in done.stdout


def test_numba_cache_stays_out_of_the_package(tmp_path):
    """Without NUMBA_CACHE_DIR, compiled kernels go to $SPECSIM_CACHE/numba, never into specsim/."""
    import specsim

    package = Path(specsim.__file__).parent
    before = {p: p.stat().st_mtime_ns for ext in ("*.nbi", "*.nbc") for p in package.rglob(ext)}
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_CACHE_DIR"}
    env["SPECSIM_CACHE"] = str(tmp_path / "cache")
    code = ("import numpy as np\nfrom numba.core.dispatcher import Dispatcher\nfrom specsim.decoder import kernels\n"
            "x = np.ones((2, 8), np.float32); o = np.zeros_like(x)\n"
            "kernels.rmsnorm(o, x, np.ones(8, np.float32), 1e-5)\nassert abs(o[0, 0] - 1) < 1e-3\n"
            "import numba; print(numba.config.CACHE_DIR)\n"
            # every cached kernel of the module, compiled or not, has its cache in that folder
            "kernels_ = [f for f in vars(kernels).values() if isinstance(f, Dispatcher) and f._cache is not None"
            " and hasattr(f._cache, '_cache_path')]\n"
            "assert len(kernels_) >= 10, len(kernels_)\n"
            "bad = [f.__name__ for f in kernels_ if not f._cache._cache_path.startswith(numba.config.CACHE_DIR)]\n"
            "assert not bad, bad\n")
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[0] == str(tmp_path / "cache" / "numba")
    after = {p: p.stat().st_mtime_ns for ext in ("*.nbi", "*.nbc") for p in package.rglob(ext)}
    assert after == before, "numba wrote cache files into the package"
    assert list((tmp_path / "cache" / "numba").rglob("*rmsnorm*.nbi")), "no cache file in the user cache folder"


def _array_count_at(path: Path, key: str) -> int:
    """Where the element count of array field `key` sits, from the gguf package's own field offset: the
    key's length (8 bytes), the key, the value type (4) and the item type (4) come first."""
    from gguf import GGUFReader

    return int(GGUFReader(os.fspath(path)).fields[key].offset) + 8 + len(key.encode()) + 4 + 4


@pytest.mark.parametrize("count", [2 ** 40, 2 ** 63, 2 ** 64 - 1])
def test_a_damaged_array_count_is_refused_before_the_reader_builds_it(tmp_path, count):
    """A fresh-clone CI run drew a header byte flip in the tokens array's count: the gguf reader then built
    lists of 2^56 strings until the test worker was killed. The count is checked against the bytes left."""
    path = write_tiny_gguf(tmp_path / "tiny.gguf")
    data = bytearray(path.read_bytes())
    at = _array_count_at(path, "tokenizer.ggml.tokens")
    assert int.from_bytes(data[at:at + 8], "little") == len(tiny_vocab())  # the offset is the count's
    data[at:at + 8] = count.to_bytes(8, "little")
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(bytes(data))
    with pytest.raises(InputError, match=rf"bad\.gguf: not a readable GGUF file: metadata entry \d+ element count = "
                                         rf"{count} at byte {at} does not fit"):
        load_gguf(bad)


@pytest.mark.parametrize("where, field", [(8, "tensor count"), (16, "metadata count")])
def test_a_damaged_header_count_is_refused(tmp_path, where, field):
    path = write_tiny_gguf(tmp_path / "tiny.gguf")
    data = bytearray(path.read_bytes())
    data[where:where + 8] = (2 ** 40).to_bytes(8, "little")
    path.write_bytes(bytes(data))
    with pytest.raises(InputError, match=rf"{field} = {2 ** 40} at byte {where} does not fit"):
        load_gguf(path)


def test_a_gguf_version_the_reader_cannot_read_is_refused(tmp_path):
    path = write_tiny_gguf(tmp_path / "tiny.gguf")
    data = bytearray(path.read_bytes())
    data[4:8] = (1).to_bytes(4, "little")
    path.write_bytes(bytes(data))
    with pytest.raises(InputError, match=r"GGUF version 1: expected 2 or 3"):
        load_gguf(path)
