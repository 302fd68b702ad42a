"""Lightning callbacks selectable from the config (`trainer.callbacks`)."""
from __future__ import annotations

import os
import signal

import lightning.pytorch as pl


class Preempt(pl.Callback):
    """Kill this process with SIGKILL once `at_step` steps are done and checkpointed, the way a
    scheduler preempts a job; for rehearsing resume (`+trainer.callbacks=[...]`, see README)."""

    def __init__(self, at_step: int):
        self.at_step = at_step

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        last = os.path.join(trainer.default_root_dir, "checkpoints", "last.ckpt")
        if trainer.global_step >= self.at_step and os.path.exists(last):
            os.kill(os.getpid(), signal.SIGKILL)


class Crash(pl.Callback):
    """Raise at `at_step`: a cell that fails, for rehearsing a sweep's failure isolation."""

    def __init__(self, at_step: int):
        self.at_step = at_step

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if trainer.global_step >= self.at_step:
            raise RuntimeError(f"deliberate failure at step {trainer.global_step} (fibexp.callbacks.Crash)")
