"""Paper A's mechanism probe, the marked shift-copy (as the authors' code generates it):
x_t = payload_t + marker_t * payloads, payload uniform in [0, payloads), marker uniform over the
distances; the target at t is the whole token x_{t-d}, d = distances[marker_t], scored wherever
t >= d. Every position says which distance it copies from, so a model must reach both distances
within one forward pass. What the probe asks of learned alpha: does it move to where the copies
are (alpha * rung = d), or stay near its start (paper A: "barely moves")? It logs the final alpha
of every layer, their range and the mean distance from where they started."""
from __future__ import annotations

import torch

from fibexp.tasks.synthetic import IGNORE, SyntheticTask


class ShiftCopy(SyntheticTask):
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
