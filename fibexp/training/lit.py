"""LightningModule around the LM for any task: the task's loss, the paper's AdamW groups and LR
schedule, alpha and throughput logging, a stop on a non-finite loss (a diverged run is a result,
not a crash), and the task's held-out evaluation as Lightning's test loop."""
from __future__ import annotations

import contextlib
import logging
import math
import signal
import statistics
import time

import lightning.pytorch as pl
import torch
from lightning.pytorch.utilities.exceptions import SIGTERMException
from torch import nn

from fibexp.model.lm import param_groups

log = logging.getLogger("fibexp.lit")


def lr_lambda(warmup: int, total: int, floor: float):
    """Linear warmup to the peak, then cosine down to `floor` x peak at `total` steps."""

    def f(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        progress = min(1.0, (step - warmup) / max(1, total - warmup))
        return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * progress))

    return f


class LitLM(pl.LightningModule):
    def __init__(self, model: nn.Module, task, lr: float, betas, weight_decay: float, warmup_steps: int,
                 max_steps: int, min_lr_ratio: float):
        super().__init__()
        self.model, self.task = model, task
        self.opt = dict(lr=lr, betas=tuple(betas), weight_decay=weight_decay)
        self.schedule = (warmup_steps, max_steps, min_lr_ratio)
        self._t0: float | None = None
        self.step_seconds: list[float] = []  # wall time of each training step (start to next start)
        self.diverged_step: int | None = None  # the step whose training loss was NaN/inf
        self.evaluator = None  # set before trainer.test (the task's held-out evaluation)
        self.trainable = any(p.requires_grad for p in model.parameters())  # False: evaluation only (graft k=0)
        self.eval_metrics: dict[str, float] = {}

    def forward(self, ids):
        return self.model(ids)

    def training_step(self, batch, batch_idx):
        if self.diverged_step is not None or not self.trainable:  # restored diverged, or nothing to train
            self.trainer.should_stop = True
            return None
        loss, tokens = self.task.loss(self.model, batch)
        finite = self.trainer.strategy.reduce_boolean_decision(bool(torch.isfinite(loss)), all=True)
        if not finite:
            # Returning None skips backward and the optimizer step; every rank agrees (no hang).
            self.diverged_step = self.trainer.global_step
            self.trainer.should_stop = True
            log.warning("training loss is %s at step %d: stopping (diverged)", float(loss.detach()), self.diverged_step)
            return None
        now = time.perf_counter()
        if self._t0 is not None:
            self.step_seconds.append(now - self._t0)
            # every rank feeds as many tokens: the job's throughput
            self.log("train/tokens_per_s", tokens * self.trainer.world_size / (now - self._t0), on_step=True)
        self._t0 = now
        # the mean over ranks (DDP): the loss of the global batch, as a single process logs it
        self.log("train/loss", loss, on_step=True, prog_bar=True, sync_dist=self.trainer.world_size > 1)
        self.log("train/lr", self.trainer.optimizers[0].param_groups[0]["lr"], on_step=True)
        if self.trainer.global_step % self.trainer.log_every_n_steps == 0:
            for layer, alpha in enumerate(self.model.alphas()):
                if alpha is not None:
                    self.log(f"alpha/layer_{layer}", alpha, on_step=True)
        return loss

    def validation_step(self, batch, batch_idx, dataloader_idx=0):
        if self.diverged_step is None:
            loss, tokens = self.task.loss(self.model, batch)  # weighted by tokens (LM: windows of one length)
            self.log("val/loss", loss, add_dataloader_idx=True, batch_size=tokens, sync_dist=self.trainer.world_size > 1)

    def on_save_checkpoint(self, checkpoint):
        checkpoint["fibexp"] = {"diverged_step": self.diverged_step}

    def on_load_checkpoint(self, checkpoint):
        self.diverged_step = checkpoint.get("fibexp", {}).get("diverged_step")

    def configure_optimizers(self):
        """AdamW; weight decay only on matrices (model.lm.param_groups); none when nothing trains."""
        if not self.trainable:
            return None
        opt = torch.optim.AdamW(param_groups(self), **self.opt)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda(*self.schedule))
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}

    def step_ms(self) -> float | None:
        """Median training step time in ms, the first tenth of the steps left out (warm-up:
        allocator, length tables, first optimizer state)."""
        steps = self.step_seconds[max(1, len(self.step_seconds) // 10):]
        return 1000 * statistics.median(steps) if steps else None

    # --- final evaluation: the task's held-out protocol, summed over ranks ---
    def on_test_epoch_start(self):
        self._eval_t0, self._eval_tokens = time.perf_counter(), 0

    def test_step(self, batch, batch_idx, dataloader_idx=0):
        self._eval_tokens += (batch["x"] if isinstance(batch, dict) else batch[0]).numel()
        self.evaluator.update(self.model, batch, dataloader_idx)

    def on_test_epoch_end(self):
        def total(t):
            return self.trainer.strategy.reduce(t, reduce_op="sum")

        metrics = self.evaluator.compute(total)
        tokens = float(total(torch.tensor(float(self._eval_tokens), device=self.device)))  # every rank's
        metrics["perf/tokens_per_s_eval"] = tokens / (time.perf_counter() - self._eval_t0)
        self.eval_metrics = metrics
        # already reduced over the ranks: "max" keeps each value as it is (and rank 0's logger logs it once)
        for name, value in metrics.items():
            self.log(name, value, sync_dist=self.trainer.world_size > 1, reduce_fx="max")


@contextlib.contextmanager
def stop_on_sigterm():
    """SIGTERM raises Lightning's SIGTERMException at once inside the block (the run is then
    KILLED and resumes on requeue). For evaluations that run after `trainer.test`, where
    Lightning's handler is gone: there SIGTERM would kill the process outright (or, under
    submitit, be ignored until SLURM's SIGKILL). Only for pure computation: the exception may
    land between any two Python statements."""
    def stop(signum, frame):
        raise SIGTERMException

    try:
        previous = signal.signal(signal.SIGTERM, stop)
    except ValueError:  # not the main thread: signals cannot be handled here
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
