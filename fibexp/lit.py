"""LightningModule around the LM: next-token loss, the paper's AdamW groups and LR schedule,
alpha and throughput logging, and the held-out evaluation as Lightning's test loop."""
from __future__ import annotations

import math
import time

import lightning.pytorch as pl
import torch
import torch.nn.functional as F
from torch import nn


def lr_lambda(warmup: int, total: int, floor: float):
    """Linear warmup to the peak, then cosine down to `floor` x peak at `total` steps."""

    def f(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        progress = min(1.0, (step - warmup) / max(1, total - warmup))
        return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * progress))

    return f


class LitLM(pl.LightningModule):
    def __init__(self, model: nn.Module, lr: float, betas, weight_decay: float, warmup_steps: int,
                 max_steps: int, min_lr_ratio: float):
        super().__init__()
        self.model = model
        self.opt = dict(lr=lr, betas=tuple(betas), weight_decay=weight_decay)
        self.schedule = (warmup_steps, max_steps, min_lr_ratio)
        self._t0: float | None = None

    def forward(self, ids):
        return self.model(ids)

    def nll(self, x, y) -> torch.Tensor:
        """Per-token negative log-likelihood [B, T] in fp32."""
        logits = self.model(x).float()
        return F.cross_entropy(logits.transpose(1, 2), y, reduction="none")

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = self.nll(x, y).mean()
        now = time.perf_counter()
        if self._t0 is not None:
            self.log("train/tokens_per_s", x.numel() / (now - self._t0), on_step=True)
        self._t0 = now
        self.log("train/loss", loss, on_step=True, prog_bar=True)
        self.log("train/lr", self.trainer.optimizers[0].param_groups[0]["lr"], on_step=True)
        if self.trainer.global_step % self.trainer.log_every_n_steps == 0:
            for layer, alpha in enumerate(self.model.alphas()):
                if alpha is not None:
                    self.log(f"alpha/layer_{layer}", alpha, on_step=True)
        return loss

    def validation_step(self, batch, batch_idx, dataloader_idx=0):
        x, y = batch
        self.log("val/loss", self.nll(x, y).mean(), add_dataloader_idx=True, batch_size=x.shape[0])

    def configure_optimizers(self):
        """AdamW; weight decay only on matrices (SPEC: not on params with dim < 2, incl. theta)."""
        params = [p for p in self.parameters() if p.requires_grad]
        groups = [{"params": [p for p in params if p.dim() >= 2]},
                  {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
        opt = torch.optim.AdamW(groups, **self.opt)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda(*self.schedule))
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}

    # --- final evaluation: held-out ppl at 1x/2x/4x the training length (SPEC "Evaluations") ---
    def set_eval_plan(self, plan: list[tuple[str, int]], chars_per_token: dict[str, float] | None = None):
        """plan[i] = (held-out set, length factor k) of test dataloader i."""
        self.eval_plan, self.chars_per_token = plan, chars_per_token

    def on_test_epoch_start(self):
        n = len(self.eval_plan)
        self._sums = torch.zeros(n, dtype=torch.float64, device=self.device)
        self._counts = torch.zeros(n, dtype=torch.float64, device=self.device)
        self._pos = {}

    def test_step(self, batch, batch_idx, dataloader_idx=0):
        x, y = batch
        nll = self.nll(x, y).double()
        self._sums[dataloader_idx] += nll.sum()
        self._counts[dataloader_idx] += nll.numel()
        if self.eval_plan[dataloader_idx][1] == 1:
            self._pos[dataloader_idx] = self._pos.get(dataloader_idx, 0) + nll.sum(0)

    def on_test_epoch_end(self):
        sums = self.trainer.strategy.reduce(self._sums, reduce_op="sum")
        counts = self.trainer.strategy.reduce(self._counts, reduce_op="sum")
        metrics = evaluation_metrics(self.eval_plan, (sums / counts).tolist(), self.chars_per_token)
        for i, pos in self._pos.items():
            pos = self.trainer.strategy.reduce(pos, reduce_op="sum") / (counts[i] / pos.numel())
            metrics.update(position_bins(self.eval_plan[i][0], pos.tolist()))
        self.eval_metrics = metrics
        for name, value in metrics.items():
            self.log(name, value, sync_dist=False)


def evaluation_metrics(plan, mean_nll, chars_per_token=None) -> dict[str, float]:
    """Contract names: val/ppl/<set> (training length), extrap/ppl_x<k>/<set>,
    extrap/rel_x<k>/<set> = ppl_xk / ppl_x1 - 1, and val/bpc/<set> for character runs."""
    out = {}
    ppl = {(s, k): math.exp(m) for (s, k), m in zip(plan, mean_nll)}
    for (s, k), m in zip(plan, mean_nll):
        out[f"extrap/ppl_x{k}/{s}"] = ppl[s, k]
        if (s, 1) in ppl:
            out[f"extrap/rel_x{k}/{s}"] = ppl[s, k] / ppl[s, 1] - 1
        if k == 1:
            out[f"val/ppl/{s}"] = ppl[s, k]
            out[f"val/loss/{s}"] = m
            if chars_per_token:
                out[f"val/bpc/{s}"] = m / math.log(2) / chars_per_token[s]
    return out


def position_bins(name: str, per_position: list[float], bins: int = 8) -> dict[str, float]:
    """Mean NLL per position in 8 contiguous bins, edges linspace(0, T - 1, 9) (SPEC)."""
    t = len(per_position)
    edges = [round(i * (t - 1) / bins) for i in range(bins + 1)]
    out = {}
    for j in range(bins):
        lo, hi = edges[j], (edges[j + 1] if j < bins - 1 else t)
        chunk = per_position[lo:hi] or per_position[lo:lo + 1]
        out[f"val/pos_loss/{name}/bin{j}"] = sum(chunk) / len(chunk)
    return out
