"""Paper A's mechanism probe, the marked shift-copy (as the authors' code generates it):
x_t = payload_t + marker_t * payloads, payload uniform in [0, payloads), marker uniform over the
distances; the target at t is the whole token x_{t-d}, d = distances[marker_t], scored wherever
t >= d. Every position says which distance it copies from, so a model must reach both distances
within one forward pass. What the probe asks of learned alpha: does it move to where the copies
are (alpha * rung = d), or stay near its start (paper A: "barely moves")? It logs the final alpha
of every layer, their range and the mean distance from where they started."""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from fibexp.tasks.base import IGNORE, SyntheticConf, SyntheticTask, refuse, value

ALPHA_INITS = ("uniform", "stagger")


@dataclass
class ShiftCopyConf(SyntheticConf):
    name: str = "shift_copy"
    payloads: int = 256  # payload ids per marker; vocabulary = payloads x len(distances)
    distances: list[int] = field(default_factory=lambda: [200, 350])  # copy distance of each marker
    alpha_init: str = "uniform"  # learned alpha's start: uniform (alpha 1) | stagger (sets attention.alpha_init)

    def __post_init__(self):
        super().__post_init__()
        if self.payloads < 2:
            refuse("task.payloads", self.payloads, "an integer >= 2")
        if not self.distances or min(self.distances) < 1 or len(set(self.distances)) != len(self.distances):
            refuse("task.distances", self.distances, "distinct integers >= 1")
        if self.alpha_init not in ALPHA_INITS:
            refuse("task.alpha_init", repr(self.alpha_init), ", ".join(ALPHA_INITS))


class ShiftCopy(SyntheticTask):
    name = "shift_copy"
    schema = ShiftCopyConf
    causal = True

    @property
    def group_names(self):
        return tuple(f"d{d}" for d in self.conf.distances)

    @classmethod
    def task_vocab(cls, cfg) -> int:
        return int(cfg.task.payloads) * len(cfg.task.distances)

    @classmethod
    def check(cls, cfg) -> None:
        super().check(cfg)
        t, far = int(cfg.model.seq_len), max(cfg.task.distances)
        if t <= far:
            refuse("model.seq_len", t, f"> {far} for task=shift_copy (task.distances up to {far} need "
                   "positions to copy to)")
        a, init = cfg.attention, cfg.task.alpha_init
        learned = value(a.kind) == "sparse" and a.schedule == "learned"
        if init != "uniform" and not learned:
            refuse("task.alpha_init", init, "uniform unless attention.schedule=learned (sparse): only "
                   "learned alpha has a start to choose")
        if learned and a.alpha_init != init:
            refuse("attention.alpha_init", a.alpha_init, f"{init} (task.alpha_init sets it for task=shift_copy)")

    def draw(self, g, n):
        t, p, k = int(self.cfg.model.seq_len), int(self.conf.payloads), len(self.conf.distances)
        x = torch.randint(0, p, (n, t), generator=g) + p * torch.randint(0, k, (n, t), generator=g)
        y, group = self.targets(x)
        return {"x": x, "y": y, "group": group}

    def targets(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """y_t = x_{t-d}, d = distances[marker_t], where t >= d (else IGNORE); group = the marker."""
        marker = x // int(self.conf.payloads)
        d = torch.tensor(list(self.conf.distances))[marker]
        pos = torch.arange(x.shape[1]).expand_as(x)
        valid = pos >= d
        src = torch.gather(x, 1, (pos - d).clamp(min=0))
        return torch.where(valid, src, IGNORE), torch.where(valid, marker, -1)

    def final_metrics(self, model, dm, initial_alphas, forward_context):
        """Final alpha of every layer with learned or static offsets; for learned alpha, the range
        over layers and the mean |alpha - its start|."""
        final = model.alphas()
        out = {f"alpha/layer_{l}": a for l, a in enumerate(final) if a is not None}
        moved = [(a, a0) for a, a0 in zip(final, initial_alphas) if a is not None and a0 is not None]
        if moved:
            alphas = [a for a, _ in moved]
            out["task/alpha_range"] = max(alphas) - min(alphas)
            out["task/alpha_shift"] = sum(abs(a - a0) for a, a0 in moved) / len(moved)
        return out
