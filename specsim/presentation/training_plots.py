"""Plots of a drafter training run (`specsim decoder train`): loss curves and held-out accuracy, from the
curves recorded in its training.json. Plot functions take (ax, curves) and return artists."""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only; never a window
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

LABELS = {"draft_model": "distilled draft model", "medusa": "Medusa heads", "eagle": "EAGLE head"}


def _smooth(y: np.ndarray, n: int = 20) -> np.ndarray:
    if y.size < n:
        return y
    return np.convolve(y, np.ones(n) / n, mode="valid")


def loss_curve(ax, curve: dict, *, title: str = ""):
    """Training loss per step (thin) and its running mean over 20 steps (thick)."""
    steps = np.array([s for s, _ in curve["train_loss"]])
    loss = np.array([v for _, v in curve["train_loss"]])
    arts = ax.plot(steps, loss, lw=0.5, alpha=0.4, color="C0")
    sm = _smooth(loss)
    arts += ax.plot(steps[steps.size - sm.size:], sm, lw=1.8, color="C0", label="training (20-step mean)")
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    return arts


def heldout_accuracy(ax, curve: dict, *, title: str = "", what: str = "position"):
    """Held-out top-1 agreement with the target's argmax at each evaluation; one line per head / depth."""
    steps = [e["step"] for e in curve["heldout"]]
    acc = np.array([np.atleast_1d(e["top1"]) for e in curve["heldout"]], dtype=float)
    arts = []
    for j in range(acc.shape[1]):
        label = f"{what} {j + 1}" if acc.shape[1] > 1 else "next token"
        arts += ax.plot(steps, acc[:, j], marker="o", ms=3, label=label)
    ax.set_ylim(0, 1)
    ax.set_xlabel("step")
    ax.set_ylabel("held-out top-1 = target argmax")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return arts


def training_figures(summary: dict, file) -> list[Path]:
    """One PNG per drafter (loss and held-out accuracy side by side); `file(name)` gives each path."""
    paths = []
    what = {"draft_model": "position", "medusa": "head", "eagle": "depth"}
    for key, curve in summary["curves"].items():
        fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.8))
        loss_curve(a, curve, title=f"{LABELS.get(key, key)}: training loss")
        heldout_accuracy(b, curve, title=f"{LABELS.get(key, key)}: held-out accuracy", what=what.get(key, "position"))
        fig.tight_layout()
        path = file(f"{key}.png")
        fig.savefig(path, dpi=110)
        plt.close(fig)
        paths.append(path)
    return paths
