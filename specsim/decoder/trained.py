"""The trained drafters at run time: numpy and the numba kernels, no torch.

Weights live in `specsim/decoder/weights/` (fp16; `specsim decoder train` writes them, RECIPE.md there
says how and from what):
- draft.gguf: the distilled draft model, a small Llama. Its token embedding and its LM head are the
  target's, read from the target's GGUF at load time through two trained projections
  (`specsim.token_embd_proj`, `specsim.output_proj`), its LM head restricted to the drafting vocabulary.
- medusa.npz: 4 Medusa heads (a residual block each) over the target's last hidden state.
- eagle.npz: the EAGLE head (fc + one decoder layer + norm) over (target feature, next-token embedding).

Every drafter draws tokens from the drafting vocabulary `vocab` (the ids the target most often predicts
in the training text, stored with each file) through the target's own LM-head rows for those ids
(FR-Spec's frequency-ranked draft vocabulary, Zhao et al. 2025): on this 135M target the full
49152-row head costs a tenth of a target step, so drafting over it would eat most of the gain.
Verification always uses the target's full vocabulary, so outputs stay exact."""
from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np

from ..errors import InputError, SpecError
from ..speculation.trees import Tree, chain, from_choices
from . import reference
from .draft import Draft
from .gguf_model import GGUFModel, LlamaConfig, QTensor
from .kv_cache import KVCache
from .model import Transformer
from .sampling import SamplingParams

DRAFT_GGUF = "draft.gguf"
MEDUSA_NPZ = "medusa.npz"
EAGLE_NPZ = "eagle.npz"
LAYER_TENSORS = ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down")


def weights_dir() -> Path:
    return Path(__file__).resolve().parent / "weights"


def vocabulary_hash(tokens) -> str:
    """sha256 of the vocabulary strings joined by newlines: what ties a drafter to its target."""
    return hashlib.sha256("\n".join(tokens).encode("utf-8")).hexdigest()


def _check_vocab(target: Transformer, want: str, path: Path) -> None:
    got = vocabulary_hash(target.gguf.tokens)
    if got != want:
        raise SpecError(f"{path}: trained for a target whose vocabulary hash is {want[:16]}…; this target's "
                        f"({target.gguf.path}) is {got[:16]}…: the drafter needs the tokenizer it was trained with")


WEIGHT_TYPES = ("Q8_0", "F16")


def _matrix(name: str, a: np.ndarray, weight_type: str) -> QTensor:
    """A shipped fp16 matrix as the decoder runs it: Q8_0 (quantized at load, the VNNI kernels; the
    default) or F16 (as shipped, float activations)."""
    if weight_type not in WEIGHT_TYPES:
        raise SpecError(f"drafter weight type {weight_type!r}: expected one of {', '.join(WEIGHT_TYPES)}")
    a = np.asarray(a)
    if weight_type == "Q8_0" and a.shape[1] % 32 == 0:
        return _q8(name, a.astype(np.float32))
    return _f16(name, a)


def _f16(name: str, a: np.ndarray) -> QTensor:
    a = np.ascontiguousarray(a, dtype=np.float16)
    return QTensor(name=name, type_name="F16", n_rows=a.shape[0], n_cols=a.shape[1], raw=a.view(np.uint16))


def _q8(name: str, a: np.ndarray) -> QTensor:
    """float32 (N, K) -> a Q8_0 QTensor (gguf's reference quantizer)."""
    import gguf

    raw = gguf.quants.quantize(np.ascontiguousarray(a, dtype=np.float32), gguf.GGMLQuantizationType.Q8_0)
    return QTensor(name=name, type_name="Q8_0", n_rows=a.shape[0], n_cols=a.shape[1], raw=raw)


def head_rows(target: Transformer, vocab: np.ndarray, name: str = "head") -> QTensor:
    """The target's LM-head rows `vocab` (N,), as a QTensor of the same type (rows are independent)."""
    out = target.output
    return QTensor(name=f"{name}.{out.name}", type_name=out.type_name, n_rows=int(vocab.size), n_cols=out.n_cols,
                   raw=np.ascontiguousarray(out.raw[vocab]))


def dense(qt: QTensor) -> np.ndarray:
    return reference.dequantize(qt.type_name, qt.raw, qt.n_cols)


class Head:
    """A matrix applied with the decoder's kernels (numba) or its twin (numpy): out (M, N) = x (M, K) W^T."""

    def __init__(self, qt: QTensor, backend: str = "numba"):
        self.qt, self.backend = qt, backend
        if backend == "numba":
            from . import kernels

            self._k = kernels
            self._packed = kernels.pack(qt.type_name, qt.raw, qt.n_cols)
            self._scratch = {}
        else:
            self._w = reference.prepare(qt.type_name, qt.raw, qt.n_cols)

    def __call__(self, x: np.ndarray) -> np.ndarray:
        x = np.ascontiguousarray(x, dtype=np.float32)
        out = np.zeros((x.shape[0], self.qt.n_rows), np.float32)
        if self.backend == "numba":
            import numba

            m = x.shape[0]
            sc = self._scratch.get(m)
            if sc is None:
                sc = self._scratch[m] = self._k.new_scratch(numba.get_num_threads(), m, self.qt.n_cols)
            self._k.matmul(out, sc, self.qt.type_name, self._packed, x, self._k.F16_LUT)
        else:
            reference.matmul(out, self._w, x)
        return out


# -- the distilled draft model ---------------------------------------------------------------------
def _gguf_scalar(reader, key: str, path: Path):
    f = reader.fields.get(key)
    if f is None:
        raise InputError(f"{path}: metadata key {key!r} is missing; not a specsim draft model")
    return f.contents()


def is_distilled(path) -> bool:
    """Whether a GGUF is a specsim distilled draft model (it names the vocabulary it was trained for)."""
    import gguf

    try:
        return "specsim.vocabulary_sha256" in gguf.GGUFReader(str(path)).fields
    except Exception:  # noqa: BLE001 — not readable here: the plain GGUF loader reports it properly
        return False


def load_draft_model(target: Transformer, path: Path | None = None, *,
                     weight_type: str = "Q8_0") -> tuple[Transformer, np.ndarray]:
    """The distilled draft model as a Transformer whose logits cover the drafting vocabulary, and that
    vocabulary (N,) int64. Embedding = target embedding @ token_embd_proj^T; LM head = target head rows
    @ output_proj, quantized to Q8_0 (as the target's head) at load time."""
    import gguf

    path = Path(path or weights_dir() / DRAFT_GGUF)
    if not path.is_file():
        raise InputError(f"draft model {path}: no such file (run `specsim decoder train`, or reinstall specsim)")
    try:
        reader = gguf.GGUFReader(str(path))
    except Exception as exc:  # noqa: BLE001 — any parse failure is an unreadable file
        raise InputError(f"{path}: not a readable GGUF file ({exc})") from None
    arch = _gguf_scalar(reader, "general.architecture", path)
    _check_vocab(target, _gguf_scalar(reader, "specsim.vocabulary_sha256", path), path)
    g = lambda k: _gguf_scalar(reader, f"{arch}.{k}", path)  # noqa: E731
    raw = {t.name: np.asarray(t.data) for t in reader.tensors}
    tc = target.config
    cfg = LlamaConfig(n_vocab=tc.n_vocab, n_ctx=tc.n_ctx, d_model=int(g("embedding_length")),
                      n_layer=int(g("block_count")), n_ff=int(g("feed_forward_length")),
                      n_head=int(g("attention.head_count")), n_kv_head=int(g("attention.head_count_kv")),
                      rope_base=float(g("rope.freq_base")), rms_eps=float(g("attention.layer_norm_rms_epsilon")))
    vocab = raw["specsim.vocab"].astype(np.int64).ravel()
    emb_t = dense(target.embedding)  # (V, D_target)
    p_in = raw["specsim.token_embd_proj.weight"].astype(np.float32)  # (d, D_target)
    p_out = raw["specsim.output_proj.weight"].astype(np.float32)  # (D_target, d)
    tensors = {"token_embd.weight": QTensor(name="token_embd.weight", type_name="F32", n_rows=tc.n_vocab,
                                            n_cols=cfg.d_model, raw=np.ascontiguousarray(emb_t @ p_in.T)),
               "output_norm.weight": QTensor(name="output_norm.weight", type_name="F32", n_rows=1, n_cols=cfg.d_model,
                                             raw=raw["output_norm.weight"].astype(np.float32).reshape(1, -1))}
    for i in range(cfg.n_layer):
        for n in LAYER_TENSORS:
            a = raw[f"blk.{i}.{n}.weight"]
            tensors[f"blk.{i}.{n}.weight"] = _matrix(f"blk.{i}.{n}.weight", a.reshape(a.shape[0], -1), weight_type)
        for n in ("attn_norm", "ffn_norm"):
            tensors[f"blk.{i}.{n}.weight"] = QTensor(name=f"blk.{i}.{n}.weight", type_name="F32", n_rows=1,
                                                     n_cols=cfg.d_model, raw=raw[f"blk.{i}.{n}.weight"].astype(np.float32).reshape(1, -1))
    model = GGUFModel(path=path, config=cfg, tensors=tensors, tokenizer=target.tokenizer, tokens=target.gguf.tokens,
                      bos_id=target.gguf.bos_id, eos_id=target.gguf.eos_id)
    head = _q8("specsim.draft_head", dense(head_rows(target, vocab)) @ p_out)  # (N, d)
    return NarrowHeadTransformer(model, head, backend=target.backend), vocab


class NarrowHeadTransformer(Transformer):
    """A Transformer whose LM head is `head` (N rows: the drafting vocabulary) instead of the full
    vocabulary: logits are (M, N). Built from a valid model (here one whose head is tied to its
    embedding), then the head is swapped."""

    def __init__(self, gguf: GGUFModel, head: QTensor, *, backend: str = "numba"):
        super().__init__(gguf, backend=backend)
        self.weight_bytes_per_pass += head.n_bytes - self.output.n_bytes
        self.output = head
        if backend == "numba":
            self._packed[head.name] = self._k.pack(head.type_name, head.raw, head.n_cols)


# -- Medusa ----------------------------------------------------------------------------------------
MEDUSA_TREE = ((0,), (1,), (0, 0))  # small: one more verify row costs ~0.2 of a step on a 2-core CPU


def _load_npz(path: Path, kind: str) -> dict:
    if not path.is_file():
        raise InputError(f"{kind} weights {path}: no such file (run `specsim decoder train`, or reinstall specsim)")
    try:
        with np.load(path, allow_pickle=False) as z:
            return {k: z[k] for k in z.files}
    except Exception as exc:  # noqa: BLE001
        raise InputError(f"{path}: not a readable .npz file ({exc})") from None


class MedusaDrafter:
    """Medusa-1 (Cai et al. 2024): head k on the target's last hidden state h (the state whose LM head
    produced the root) proposes the token k places after the root: h + SiLU(W_k h + b_k) through the
    target's head rows. The tree is static (Medusa's choices): a node at depth d with rank path
    (r_1 .. r_d) takes head d's (r_d + 1)-th best token. Verified in one pass with the tree mask."""

    gives_q = False
    uses_features = True

    def __init__(self, target: Transformer, *, path: Path | None = None, choices=MEDUSA_TREE,
                 weight_type: str = "Q8_0"):
        path = Path(path or weights_dir() / MEDUSA_NPZ)
        z = _load_npz(path, "Medusa")
        _check_vocab(target, str(z["vocabulary_sha256"]), path)
        self.w = z["w"].astype(np.float32)  # (K, D, D)
        self.b = z["b"].astype(np.float32)  # (K, D)
        self.vocab = z["vocab"].astype(np.int64)
        self.tree = from_choices(choices)
        if self.tree.max_depth > self.w.shape[0]:
            raise SpecError(f"Medusa tree depth {self.tree.max_depth} exceeds the {self.w.shape[0]} trained heads")
        self.head = Head(head_rows(target, self.vocab, "medusa"), target.backend)
        k, d, _ = self.w.shape  # the K residual blocks read the same h: one (K*D, D) matrix, one matmul
        self.blocks = Head(_matrix("medusa.w", z["w"].reshape(k * d, d), weight_type), target.backend)
        self.name = f"medusa({self.tree.n_nodes} nodes)"
        self.k = self.tree.max_depth
        self._depth = self.tree.depths
        self.reset()

    def reset(self) -> None:
        self.feature = None

    def observe(self, features: np.ndarray) -> None:
        """The target's final-norm hidden states of the tokens it just read, in order."""
        if len(features):
            self.feature = np.array(features[-1], np.float32)

    def head_logits(self, h: np.ndarray) -> np.ndarray:
        """h (D,) -> (K, N) logits of every head."""
        z = self.blocks(h[None, :]).reshape(self.b.shape) + self.b
        z = h[None, :] + z / (1.0 + np.exp(-z))
        return self.head(z)

    def propose(self, context: np.ndarray, sampling: SamplingParams, rng) -> Draft:
        ctx = np.asarray(context, dtype=np.int64)
        if self.feature is None:
            return Draft(ctx[-1:].copy(), chain(0))
        lg = self.head_logits(self.feature)  # (K, N)
        n_rank = int(self.tree.ranks.max()) + 1
        best = np.argsort(-lg, axis=1, kind="stable")[:, :n_rank]  # (K, R)
        toks = np.empty(self.tree.n_nodes, np.int64)
        toks[0] = ctx[-1]
        for i in range(1, self.tree.n_nodes):
            toks[i] = self.vocab[best[self._depth[i] - 1, self.tree.ranks[i]]]
        return Draft(toks, self.tree)


# -- EAGLE -----------------------------------------------------------------------------------------
class EagleDrafter:
    """EAGLE (Li et al. 2024) with EAGLE-2's dynamic tree (Li et al. 2024b). The head reads pairs
    (target feature f_t, embedding of token t+1) through fc and one decoder layer (its own KV cache, the
    pairs of every token the target has read) and predicts f_{t+1}; tokens come from the target's head
    rows. Drafting: from the predicted feature of the root, `depth` rounds; each round feeds the
    `top_k` best frontier nodes (by the product of draft probabilities along their path) in one pass
    with the tree mask and takes `top_k` children of each; the `n_nodes - 1` best nodes overall form
    the tree the target verifies in one pass."""

    gives_q = False
    uses_features = True

    def __init__(self, target: Transformer, *, path: Path | None = None, depth: int = 4, top_k: int = 2,
                 n_nodes: int = 6, capacity: int | None = None, weight_type: str = "Q8_0"):
        if depth < 1 or top_k < 1 or n_nodes < 2:
            raise SpecError(f"EAGLE drafter: depth {depth}, top_k {top_k}, n_nodes {n_nodes}: expected >= 1, >= 1, >= 2")
        path = Path(path or weights_dir() / EAGLE_NPZ)
        z = _load_npz(path, "EAGLE")
        _check_vocab(target, str(z["vocabulary_sha256"]), path)
        self.vocab = z["vocab"].astype(np.int64)
        self.fc_w = z["fc.weight"].astype(np.float32)  # (D, 2D)
        self.fc_b = z["fc.bias"].astype(np.float32)  # (D,)
        tc = target.config
        n_ff = int(z["block.ffn_gate.weight"].shape[0])
        cfg = LlamaConfig(n_vocab=int(self.vocab.size), n_ctx=tc.n_ctx, d_model=tc.d_model, n_layer=1, n_ff=n_ff,
                          n_head=tc.n_head, n_kv_head=tc.n_kv_head, rope_base=tc.rope_base, rms_eps=tc.rms_eps)
        head = head_rows(target, self.vocab, "eagle")
        norm = lambda a: QTensor(name="n", type_name="F32", n_rows=1, n_cols=tc.d_model,  # noqa: E731
                                 raw=np.ascontiguousarray(a, dtype=np.float32).reshape(1, -1))
        # a "vocabulary" of the N drafting ids: the head is tied to it; inputs come as rows, never token ids
        tensors = {"token_embd.weight": head,
                   "output_norm.weight": norm(z["output_norm.weight"]),
                   "blk.0.attn_norm.weight": norm(z["block.attn_norm.weight"]),
                   "blk.0.ffn_norm.weight": norm(z["block.ffn_norm.weight"])}
        for n in LAYER_TENSORS:
            tensors[f"blk.0.{n}.weight"] = _matrix(f"blk.0.{n}.weight", z[f"block.{n}.weight"], weight_type)
        self.net = Transformer(GGUFModel(path=path, config=cfg, tensors=tensors, tokenizer=target.tokenizer,
                                         tokens=target.gguf.tokens, bos_id=0, eos_id=0), backend=target.backend)
        self.target = target
        self.depth, self.top_k, self.n_nodes = depth, top_k, n_nodes
        self.k = depth
        self.name = f"eagle(depth {depth}, top-{top_k}, {n_nodes} nodes)"
        self.capacity = capacity or tc.n_ctx
        self.tree = chain(n_nodes - 1)  # the largest tree it drafts has n_nodes nodes (for the caller's room check)
        self.reset()

    def reset(self) -> None:
        room = self.capacity + self.depth * self.top_k  # the context's pairs plus one tree's rows
        self.cache = KVCache(1, self.net.config.n_kv_head, room, self.net.config.head_dim)
        self.features = []  # target features of context tokens 0.., in order
        self.fed = 0  # pairs (f_i, x_{i+1}) in the head's cache: i = 0 .. fed - 1
        self._last = None  # (logits, feature) the head predicted for the token after the last pair

    def observe(self, features: np.ndarray) -> None:
        self.features.extend(np.array(features, np.float32))

    def _pairs(self, feats: np.ndarray, tokens: np.ndarray) -> np.ndarray:
        """fc([f ; embedding(x)]) for rows of features (M, D) and tokens (M,)."""
        x = np.concatenate([feats, self.target.embed(tokens)], axis=1)
        return x @ self.fc_w.T + self.fc_b

    def _feed(self, ctx: np.ndarray, n_pairs: int) -> None:
        """Run the pairs (f_i, x_{i+1}) for i in [fed, n_pairs) through the head (positions i + 1), after
        dropping any tree rows; keeps the last pair's output (the predicted feature of token n_pairs)."""
        self.cache.truncate(self.fed)
        lo = self.fed
        if n_pairs <= lo:
            return
        feats = np.stack(self.features[lo:n_pairs])
        lg = self.net.forward(self.cache, np.zeros(n_pairs - lo, np.int64), np.arange(lo + 1, n_pairs + 1),
                              inputs=self._pairs(feats, ctx[lo + 1:n_pairs + 1]))
        self._last = (lg[-1].copy(), self.net.last_hidden[-1].copy())
        self.fed = n_pairs

    def start(self, prompt) -> None:
        """The head's prefill: every pair of the prompt (the target's features of the prompt come first)."""
        prompt = np.asarray(prompt, dtype=np.int64)
        if prompt.size >= 2 and len(self.features) >= prompt.size - 1:
            self._feed(prompt, prompt.size - 1)

    def propose(self, context: np.ndarray, sampling: SamplingParams, rng) -> Draft:
        ctx = np.asarray(context, dtype=np.int64)
        n = ctx.size  # features known for tokens 0 .. n - 2; the root ctx[n - 1] is not yet read by the target
        if len(self.features) < n - 1 or n < 2 or n - 1 + self.depth * self.top_k > self.cache.capacity:
            return Draft(ctx[-1:].copy(), chain(0))
        if self.fed > n - 1:  # the context is not a continuation of what the head read: start over
            self.fed = 0
        self._feed(ctx, n - 1)
        root_logits, root_f = self._last
        base = self.cache.length  # = n - 1: tree rows go after it
        logp = _log_softmax(root_logits)
        # nodes: token, parent (-1 = root), score (sum of log-probs), feature of the parent, depth
        toks, parents, scores, depths = [], [], [], []
        top = np.argsort(-logp, kind="stable")[:self.top_k]
        frontier = []
        for t in top:
            toks.append(int(self.vocab[t])), parents.append(-1), scores.append(float(logp[t])), depths.append(1)
            frontier.append(len(toks) - 1)
        parent_feat = {-1: root_f}
        row_of = {}  # node -> its row in the head cache (rows after `base`)
        for d in range(1, self.depth):
            expand = sorted(frontier, key=lambda i: -scores[i])[:self.top_k]
            if not expand:
                break
            rows_before = len(row_of)
            mask = np.zeros((len(expand), rows_before + len(expand)), bool)
            for j, i in enumerate(expand):
                a = parents[i]
                while a >= 0:
                    mask[j, row_of[a]] = True
                    a = parents[a]
                mask[j, rows_before + j] = True
            pf = np.stack([parent_feat[parents[i]] for i in expand])
            out = self.net.forward(self.cache, np.zeros(len(expand), np.int64),
                                   np.array([n - 1 + depths[i] for i in expand]), mask, n_shared=base,
                                   inputs=self._pairs(pf, np.array([toks[i] for i in expand])))
            hid = self.net.last_hidden
            frontier = []
            for j, i in enumerate(expand):
                row_of[i] = rows_before + j
                parent_feat[i] = hid[j].copy()
                lp = _log_softmax(out[j])
                for t in np.argsort(-lp, kind="stable")[:self.top_k]:
                    toks.append(int(self.vocab[t])), parents.append(i), scores.append(scores[i] + float(lp[t]))
                    depths.append(d + 1)
                    frontier.append(len(toks) - 1)
        self.cache.truncate(base)
        keep = sorted(range(len(toks)), key=lambda i: (-scores[i], i))[:self.n_nodes - 1]
        keep_set = set(keep)
        for i in list(keep):  # a kept node's ancestors are kept (ties in score could drop one)
            a = parents[i]
            while a >= 0 and a not in keep_set:
                keep_set.add(a)
                a = parents[a]
        order = sorted(keep_set, key=lambda i: (depths[i], i))  # parents before children
        index = {i: j + 1 for j, i in enumerate(order)}
        par = [-1] + [index.get(parents[i], 0) for i in order]
        sib_rank, ranks = {}, [0]
        for i in order:  # siblings ranked by score (nodes were created best first within a parent)
            p = parents[i]
            ranks.append(sib_rank.get(p, 0))
            sib_rank[p] = ranks[-1] + 1
        tokens = np.array([int(ctx[-1])] + [toks[i] for i in order], np.int64)
        return Draft(tokens, Tree(parents=np.array(par, np.int64), ranks=np.array(ranks, np.int64)))


def _log_softmax(z: np.ndarray) -> np.ndarray:
    z = z.astype(np.float64)
    z = z - z.max()
    return z - np.log(np.exp(z).sum())
