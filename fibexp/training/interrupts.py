"""How a run stops when it is told to (Ctrl-C, a scheduler's SIGTERM): it saves last.ckpt at the
step it reached, so the same command resumes it without losing a step, and the run is KILLED
(stopped to be resumed), never FAILED and never left RUNNING.

Lightning turns a KeyboardInterrupt inside fit/test into `SystemExit(1)` after ignoring SIGINT for
good, and SIGTERM into its SIGTERMException: `signal_of` recognises both, `SaveOnStop` writes the
checkpoint from Lightning's `on_exception` (before its teardown, while the optimizer state is
there) and keeps a resumed run logging each step once, `ignoring` keeps a second signal from cutting
the save or the run's close."""
from __future__ import annotations

import contextlib
import logging
import signal
from collections.abc import Iterator
from pathlib import Path

import lightning.pytorch as pl
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.utilities.exceptions import SIGTERMException

log = logging.getLogger("fibexp.interrupts")
NAMES = {signal.SIGINT: "SIGINT", signal.SIGTERM: "SIGTERM"}


def signal_of(e: BaseException) -> int | None:
    """SIGINT (a KeyboardInterrupt, or the SystemExit Lightning raises in its place), SIGTERM
    (Lightning's SIGTERMException), or None when no signal stopped the run."""
    if isinstance(e, KeyboardInterrupt) or (isinstance(e, SystemExit) and isinstance(e.__context__, KeyboardInterrupt)):
        return signal.SIGINT
    if isinstance(e, SIGTERMException):
        return signal.SIGTERM
    return None


@contextlib.contextmanager
def ignoring(*signums: int) -> Iterator[None]:
    """`signums` ignored inside the block, their handlers restored after (outside the main thread,
    where signals cannot be handled, nothing changes)."""
    try:
        before = {s: signal.signal(s, signal.SIG_IGN) for s in signums}
    except ValueError:
        yield
        return
    try:
        yield
    finally:
        for s, handler in before.items():
            signal.signal(s, handler)


class PeriodicCheckpoint(ModelCheckpoint):
    """Lightning's periodic checkpoint, written as the step after the one it is due begins rather
    than inside that step's end hooks: by then the due step's metrics are logged, so a process
    killed at any instant (`kill -9`, a second Ctrl-C, preemption) resumes from a checkpoint whose
    steps are all in the store, and logs the rest once."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._due = None

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self._due = (outputs, batch, batch_idx)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if self._due is not None:
            due, self._due = self._due, None
            super().on_train_batch_end(trainer, pl_module, *due)


class SaveOnStop(pl.Callback):
    """Saves `path` (last.ckpt) when a signal stops fit or test: `saved_step` is the step it holds.
    One process only: in a multi-process job a save waits for every rank at a barrier, and a signal
    may reach one rank alone; there the periodic checkpoint is what a rerun resumes."""

    def __init__(self, path: Path):
        self.path, self.saved_step = path, None

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        """The step a resumed run logs at is the step it trains. Lightning restores its logging
        counter as if every checkpoint were written between steps: one saved by a signal that came
        as the next step began, or mid-step, would log every later step one too far (a step missing,
        one past max_steps). Each batch is one optimizer step here, so the two counters agree."""
        loop = trainer.fit_loop.epoch_loop
        if trainer.accumulate_grad_batches == 1 and loop._batches_that_stepped != trainer.global_step:
            loop._batches_that_stepped = trainer.global_step

    def on_exception(self, trainer, pl_module, exception):
        if signal_of(exception) is None or trainer.world_size > 1:
            return
        _flush_step_metrics(trainer)
        try:
            with ignoring(signal.SIGINT, signal.SIGTERM):  # the atomic write then completes
                trainer.save_checkpoint(self.path, weights_only=False)
            self.saved_step = trainer.global_step
        except Exception as e:  # e.g. stopped before the optimizer existed: the checkpoint in place stays
            log.warning("stopped at step %d, last.ckpt not saved: %s", trainer.global_step, e)


def _flush_step_metrics(trainer) -> None:
    """The metrics of the step just taken, when the signal came between the optimizer step and
    Lightning sending them to the logger (in on_train_batch_end, where callbacks and periodic
    checkpoints run): the checkpoint holds that step, so a resume would never log them. The two
    calls the training loop makes next."""
    progress = trainer.fit_loop.epoch_loop.batch_progress.current
    if not trainer.training or progress.processed <= progress.completed:
        return
    try:
        trainer._logger_connector.on_batch_end()
        trainer._logger_connector.update_train_step_metrics()
    except Exception as e:  # Lightning internals: a version that moved them loses one step's metrics, not the run
        log.warning("the metrics of step %d were not logged: %s", trainer.global_step, e)
