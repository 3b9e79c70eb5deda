"""Training loops (torch, CPU). Deterministic for a seed and a thread count: seeded torch generator
for initialisation and batch order, torch.use_deterministic_algorithms, the same number of threads.
Matmuls run in bfloat16 under autocast (AMX/AVX512-BF16 where the CPU has them; weights and optimizer
state stay float32).

Targets are the teacher's top-K next-token probabilities restricted to the drafting vocabulary and
renormalised (sparse knowledge distillation); accuracy is top-1 agreement with the target's argmax."""
from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field

import numpy as np
import torch
from torch.nn import functional as F

from .nets import DraftLM, EagleHead, LayerShape, MedusaHeads
from .teacher import Records


@dataclass(frozen=True, slots=True, kw_only=True)
class Schedule:
    steps: int
    batch: int = 8  # windows per step
    lr: float = 1e-3
    warmup: int = 30
    weight_decay: float = 0.0
    eval_every: int = 50


@dataclass(frozen=True, slots=True, kw_only=True)
class Recipe:
    seed: int = 0
    n_threads: int = 2
    window: int = 256  # tokens per training window
    vocab_size: int = 8192  # drafting vocabulary: the ids the target most often predicts in training text
    draft_layers: int = 3
    draft_d_model: int = 256
    draft_n_head: int = 4
    draft_n_kv_head: int = 2
    draft_n_ff: int = 768
    medusa_heads: int = 4
    medusa_decay: float = 0.8  # loss weight of head k: decay ** (k - 1), as Medusa-1
    eagle_n_ff: int = 1536
    eagle_feature_weight: float = 1.0
    eagle_token_weight: float = 0.1  # EAGLE's w_cls
    eagle_noise: float = 0.1  # uniform feature noise U(-a, a) during training (EAGLE)
    eagle_unroll: int = 2  # passes per step; pass j > 1 reads the features pass j - 1 predicted
    n_eval_windows: int = 16  # held-out windows scored at each evaluation (a seeded mix of the kinds)
    # about ten passes over the ~150k training tokens; on 2 idle cores a step takes 0.5 s (draft model),
    # 0.8 s (Medusa) and 0.7 s (EAGLE), about 40 minutes for all three (the 40-step schedule the first
    # shipped weights had saw a quarter of one pass: 13 % held-out top-1)
    draft: Schedule = field(default_factory=lambda: Schedule(steps=1500, batch=4, lr=3e-3, warmup=50, eval_every=100))
    medusa: Schedule = field(default_factory=lambda: Schedule(steps=1200, batch=4, lr=3e-3, warmup=50, eval_every=100))
    eagle: Schedule = field(default_factory=lambda: Schedule(steps=1000, batch=4, lr=2e-3, warmup=40, eval_every=100))

    def to_dict(self) -> dict:
        return asdict(self)


def setup(recipe: Recipe) -> None:
    torch.set_num_threads(recipe.n_threads)
    torch.use_deterministic_algorithms(True)


def choose_vocabulary(rec: Records, size: int) -> np.ndarray:
    """The `size` ids the target predicts most often (argmax) on the training split, ties broken by how
    often they appear in its top-K, then by id; sorted ascending."""
    train = rec.sequences("train")
    rows = np.concatenate([np.arange(rec.seq_start[i], rec.seq_start[i + 1]) for i in train])
    top1 = np.bincount(rec.top_ids[rows, 0], minlength=1 << 17)
    anyk = np.bincount(rec.top_ids[rows].ravel(), minlength=1 << 17)
    order = np.lexsort((np.arange(top1.size), -anyk, -top1))
    return np.sort(order[:size]).astype(np.int64)


@dataclass
class Windows:
    """Training or held-out windows: tokens (W, L) int64, hidden (W, L, D) f32, target (W, L, K) probs
    over drafting-vocabulary indices (ids (W, L, K) int64, -1 outside), argmax (W, L) subset index or -1."""

    tokens: torch.Tensor
    hidden: torch.Tensor
    t_idx: torch.Tensor
    t_prob: torch.Tensor
    argmax: torch.Tensor

    def __len__(self):
        return self.tokens.shape[0]

    def take(self, idx):
        return Windows(self.tokens[idx], self.hidden[idx], self.t_idx[idx], self.t_prob[idx], self.argmax[idx])


def windows(rec: Records, split: str, vocab: np.ndarray, length: int, kinds: tuple = ()) -> Windows:
    """Cut the split's sequences into non-overlapping windows of `length` tokens (a shorter tail is dropped)."""
    sub = np.full(1 << 17, -1, np.int64)
    sub[vocab] = np.arange(vocab.size)
    starts = []
    for i in rec.sequences(split, kinds):
        a, b = int(rec.seq_start[i]), int(rec.seq_start[i + 1])
        starts += list(range(a, b - length + 1, length))
    rows = np.array(starts, np.int64)[:, None] + np.arange(length)  # (W, L)
    ids = sub[rec.top_ids[rows]]  # (W, L, K)
    p = np.exp(rec.top_logp[rows]) * (ids >= 0)
    p /= np.maximum(p.sum(-1, keepdims=True), 1e-12)
    return Windows(tokens=torch.from_numpy(rec.tokens[rows].astype(np.int64)),
                   hidden=torch.from_numpy(np.asarray(rec.hidden[rows.ravel()], np.float32).reshape(*rows.shape, -1)),
                   t_idx=torch.from_numpy(np.maximum(ids, 0)), t_prob=torch.from_numpy(p.astype(np.float32)),
                   argmax=torch.from_numpy(ids[:, :, 0]))


def kd_loss(logits, t_idx, t_prob):
    """Cross entropy of log_softmax(logits) (..., N) against sparse probabilities (..., K)."""
    logp = F.log_softmax(logits.float(), dim=-1)
    return -(torch.gather(logp, -1, t_idx) * t_prob).sum(-1).mean()


def top1(logits, argmax) -> tuple[int, int]:
    ok = argmax >= 0
    return int(((logits.argmax(-1) == argmax) & ok).sum()), int(ok.sum())


def _lr(s: Schedule, step: int) -> float:
    if step < s.warmup:
        return s.lr * (step + 1) / s.warmup
    return s.lr * 0.5 * (1 + math.cos(math.pi * (step - s.warmup) / max(1, s.steps - s.warmup)))


def _train(module, params, sched: Schedule, data: Windows, gen: torch.Generator, step_loss, evaluate,
           log, name: str) -> dict:
    """Generic loop: AdamW, linear warmup then cosine, grad-norm clip 1; returns the curves."""
    opt = torch.optim.AdamW(params, lr=sched.lr, weight_decay=sched.weight_decay)
    curve, evals = [], []
    order = torch.randperm(len(data), generator=gen)
    at, t0 = 0, time.perf_counter()
    for step in range(sched.steps):
        if at + sched.batch > len(order):
            order, at = torch.randperm(len(data), generator=gen), 0
        batch = data.take(order[at:at + sched.batch])
        at += sched.batch
        for g in opt.param_groups:
            g["lr"] = _lr(sched, step)
        module.train()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = step_loss(batch)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        curve.append((step, float(loss.detach())))
        if (step + 1) % sched.eval_every == 0 or step + 1 == sched.steps:
            module.eval()
            with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
                ev = evaluate()
            evals.append(dict(step=step + 1, **ev))
            log(f"{name}: step {step + 1}/{sched.steps} loss {float(loss.detach()):.3f} held-out {ev} "
                f"({time.perf_counter() - t0:.0f} s)")
    return dict(train_loss=curve, heldout=evals, seconds=time.perf_counter() - t0)


def _batches(data: Windows, size: int):
    for i in range(0, len(data), size):
        yield data.take(slice(i, i + size))


def train_draft(recipe: Recipe, target: LayerShape, train: Windows, held: Windows, embd, head, gen,
                log) -> tuple[DraftLM, dict]:
    """target: the target's layer shape (its rotary base and norm epsilon are shared)."""
    s = LayerShape(d_model=recipe.draft_d_model, n_head=recipe.draft_n_head, n_kv_head=recipe.draft_n_kv_head,
                   n_ff=recipe.draft_n_ff, rope_base=target.rope_base, rms_eps=target.rms_eps)
    model = DraftLM(s, recipe.draft_layers, embd, head)

    def step_loss(b):
        return kd_loss(model(b.tokens), b.t_idx, b.t_prob)

    def evaluate():
        tot_l, ok, n, nb = 0.0, 0, 0, 0
        for b in _batches(held, 16):
            lg = model(b.tokens)
            tot_l += float(kd_loss(lg, b.t_idx, b.t_prob))
            o, m = top1(lg, b.argmax)
            ok, n, nb = ok + o, n + m, nb + 1
        return dict(loss=round(tot_l / nb, 4), top1=round(ok / n, 4))

    params = [p for p in model.parameters() if p.requires_grad]
    return model, _train(model, params, recipe.draft, train, gen, step_loss, evaluate, log, "draft model")


def train_medusa(recipe: Recipe, train: Windows, held: Windows, head, gen, log) -> tuple[MedusaHeads, dict]:
    k_heads = recipe.medusa_heads
    model = MedusaHeads(train.hidden.shape[-1], k_heads, head)
    w = torch.tensor([recipe.medusa_decay ** k for k in range(k_heads)])

    def losses(b, acc=False):
        lg = model(b.hidden)  # (B, L, K, N)
        out, accs = [], []
        for k in range(1, k_heads + 1):  # head k at t predicts token t + 1 + k: the teacher's record at t + k
            lk = lg[:, :-k, k - 1]
            out.append(kd_loss(lk, b.t_idx[:, k:], b.t_prob[:, k:]))
            if acc:
                accs.append(top1(lk, b.argmax[:, k:]))
        return out, accs

    def step_loss(b):
        return sum(wk * lk for wk, lk in zip(w, losses(b)[0]))

    def evaluate():
        ok = np.zeros(k_heads)
        n = np.zeros(k_heads)
        lsum = np.zeros(k_heads)
        nb = 0
        for b in _batches(held, 8):
            ls, accs = losses(b, acc=True)
            lsum += [float(x) for x in ls]
            ok += [a for a, _ in accs]
            n += [m for _, m in accs]
            nb += 1
        return dict(loss=[round(float(x), 4) for x in lsum / nb], top1=[round(float(x), 4) for x in ok / n])

    return model, _train(model, list(model.parameters()), recipe.medusa, train, gen, step_loss, evaluate, log,
                         "medusa")


def train_eagle(recipe: Recipe, target: LayerShape, train: Windows, held: Windows, embd, head, gen,
                log) -> tuple[EagleHead, dict]:
    """target: the target's layer shape; the head's layer has its width and heads, `eagle_n_ff` wide."""
    from dataclasses import replace

    s = replace(target, n_ff=recipe.eagle_n_ff)
    model = EagleHead(s, embd, head)
    noise_gen = torch.Generator().manual_seed(recipe.seed + 1)

    def passes(b, n_pass, noise: float):
        """Pass 1 reads the true features f_t; pass j > 1 reads the features pass j - 1 predicted at t
        (its prediction of f_t from the pair (f_{t-1}, x_t)); pass j is scored on t + j .. as depth j."""
        feats = b.hidden[:, :-1]  # f_t for t = 0..L-2
        nxt = b.tokens[:, 1:]  # x_{t+1}
        pos = torch.arange(1, b.tokens.shape[1])
        out = []
        for j in range(n_pass):
            if noise:
                feats = feats + (torch.rand(feats.shape, generator=noise_gen) * 2 - 1) * noise
            f_hat, lg = model(feats, nxt, pos)  # f_hat[:, t] predicts f_{t+1}
            out.append((j, f_hat, lg))
            # next pass: at pair t use the prediction of f_t, i.e. f_hat[:, t - 1]; pair 0 keeps the true one
            feats = torch.cat([b.hidden[:, :1], f_hat[:, :-1].detach().float()], dim=1)
        return out

    def scored(b, j, f_hat, lg):
        # pass j's pair t (for t >= j) predicts f_{t+1} with j of its inputs predicted
        f_true, t_idx, t_prob, am = b.hidden[:, 1 + j:], b.t_idx[:, 1 + j:], b.t_prob[:, 1 + j:], b.argmax[:, 1 + j:]
        return f_hat[:, j:], lg[:, j:], f_true, t_idx, t_prob, am

    def step_loss(b):
        total = 0.0
        for j, f_hat, lg in passes(b, recipe.eagle_unroll, recipe.eagle_noise):
            fh, l2, ft, ti, tp, _ = scored(b, j, f_hat, lg)
            total = total + recipe.eagle_feature_weight * F.smooth_l1_loss(fh.float(), ft) \
                + recipe.eagle_token_weight * kd_loss(l2, ti, tp)
        return total

    def evaluate():
        depth = 4
        ok, n, fl = np.zeros(depth), np.zeros(depth), np.zeros(depth)
        nb = 0
        for b in _batches(held, 8):
            for j, f_hat, lg in passes(b, depth, 0.0):
                fh, l2, ft, ti, tp, am = scored(b, j, f_hat, lg)
                o, m = top1(l2, am)
                ok[j] += o
                n[j] += m
                fl[j] += float(F.smooth_l1_loss(fh.float(), ft))
            nb += 1
        return dict(feature_loss=[round(float(x), 4) for x in fl / nb], top1=[round(float(x), 4) for x in ok / n])

    return model, _train(model, list(model.parameters()), recipe.eagle, train, gen, step_loss, evaluate, log,
                         "eagle")
