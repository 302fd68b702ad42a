"""Lightning callbacks selectable from the config (`trainer.callbacks`)."""
from __future__ import annotations

import os
import signal
import socket
import sys
import time

import lightning.pytorch as pl
import torch

from fibexp.errors import Refusal


def _here(trainer, rank) -> bool:
    """Whether a fault meant for global rank `rank` (None: every rank) fires in this process."""
    return rank is None or trainer.global_rank == int(rank)


class Preempt(pl.Callback):
    """Kill this process with SIGKILL once `at_step` steps are done and checkpointed, the way a
    scheduler preempts a job; for rehearsing resume (`+trainer.callbacks=[...]`, see README).
    `rank`: only that rank of a DDP run dies (None: each)."""

    def __init__(self, at_step: int, rank: int | None = None):
        self.at_step, self.rank = at_step, rank

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        last = os.path.join(trainer.default_root_dir, "checkpoints", "last.ckpt")
        if trainer.global_step >= self.at_step and os.path.exists(last) and _here(trainer, self.rank):
            os.kill(os.getpid(), signal.SIGKILL)


class Crash(pl.Callback):
    """Raise at `at_step`: a cell that fails, for rehearsing a sweep's failure isolation.
    `rank`: only that rank of a DDP run raises (None: each)."""

    def __init__(self, at_step: int, rank: int | None = None):
        self.at_step, self.rank = at_step, rank

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if trainer.global_step >= self.at_step and _here(trainer, self.rank):
            raise RuntimeError(f"deliberate failure at step {trainer.global_step} (fibexp.training.faults.Crash)")


class Hang(pl.Callback):
    """Stop making progress at `at_step` without dying (a deadlock, a stuck filesystem): in a DDP
    run the other ranks then wait in their next collective until `trainer.collective_timeout_s`.
    `rank`: only that rank hangs (None: each)."""

    def __init__(self, at_step: int, rank: int | None = None):
        self.at_step, self.rank = at_step, rank

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        while trainer.global_step >= self.at_step and _here(trainer, self.rank):
            time.sleep(1)


class KillMidCheckpoint(pl.Callback):
    """SIGKILL this process halfway through writing the first checkpoint after `at_step` steps, the
    way a job cut by the scheduler or a node failure stops mid-write; for rehearsing that the
    checkpoint in place survives (fibexp.checkpoints.SafeCheckpointIO)."""

    def __init__(self, at_step: int):
        self.at_step = at_step

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        io = trainer.strategy.checkpoint_io
        if trainer.global_step >= self.at_step and "_write" not in vars(io):
            def cut(checkpoint, f, write=io._write):
                write(checkpoint, f)
                f.flush()
                f.truncate(f.tell() // 2)  # half the bytes reached the disk
                f.flush()
                os.fsync(f.fileno())
                os.kill(os.getpid(), signal.SIGKILL)

            io._write = cut


class Hog(pl.Callback):
    """Allocate `gib` GiB at `at_step` and keep it: a cell that runs out of memory, for
    rehearsing what a sweep records when the scheduler kills a job past its memory limit."""

    def __init__(self, at_step: int, gib: float):
        self.at_step, self.gib, self._held = at_step, gib, []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if trainer.global_step >= self.at_step and not self._held:
            self._held.append(bytearray(int(self.gib * (1 << 30))))
            time.sleep(30)  # the scheduler samples memory about once a second


class Diverge(pl.Callback):
    """Fill the weights with NaN after step `at_step`, so the next training loss is NaN: a run
    that diverges, for rehearsing what a diverged run records (`+trainer.callbacks=[...]`)."""

    def __init__(self, at_step: int):
        self.at_step = at_step

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if trainer.global_step == self.at_step:
            with torch.no_grad():
                for p in pl_module.parameters():
                    p.fill_(float("nan"))


class Sleep(pl.Callback):
    """Sleep `seconds` after every training step: a run that lasts, for rehearsing what happens
    to it meanwhile (its tracking server stopped and restarted, a signal)."""

    def __init__(self, seconds: float):
        self.seconds = seconds

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        time.sleep(self.seconds)


class Rendezvous(pl.Callback):
    """Wait when training starts until `count` processes have arrived in `directory` (at most
    `timeout_s`): cells surely running at one instant, for rehearsing concurrent writes to one
    store, whatever else the machine is doing while they start."""

    def __init__(self, directory: str, count: int, timeout_s: float = 300):
        self.directory, self.count, self.timeout_s = directory, int(count), float(timeout_s)

    def on_train_start(self, trainer, pl_module):
        os.makedirs(self.directory, exist_ok=True)
        open(os.path.join(self.directory, f"{socket.gethostname()}-{os.getpid()}"), "w").close()
        deadline = time.monotonic() + self.timeout_s
        while len(os.listdir(self.directory)) < self.count and time.monotonic() < deadline:
            time.sleep(0.2)


class Signal(pl.Callback):
    """Send `signum` (e.g. 15, SIGTERM) to this process when the held-out evaluation starts, the
    way a scheduler stops a job in a long evaluation; for rehearsing how fast the run stops.
    With `at_step`: once that many training steps are done instead, on `rank` only (None: each),
    from Lightning's `hook`: `on_train_batch_end` (between steps), `on_train_batch_start` (the next
    step begun) or `on_before_optimizer_step` (mid-step), the places a Ctrl-C can land."""

    HOOKS = ("on_train_batch_end", "on_train_batch_start", "on_before_optimizer_step")

    def __init__(self, signum: int = signal.SIGTERM, at_step: int | None = None, rank: int | None = None,
                 hook: str = "on_train_batch_end"):
        if hook not in self.HOOKS:
            raise Refusal("hook", repr(hook), ", ".join(self.HOOKS))
        self.signum, self.at_step, self.rank, self.hook, self.sent = int(signum), at_step, rank, hook, False

    def _send(self):
        self.sent = True
        print(f"fibexp.training.faults.Signal: signal {self.signum} at {time.time():.3f}", file=sys.stderr, flush=True)
        os.kill(os.getpid(), self.signum)

    def _at(self, hook: str, trainer) -> None:
        if (hook == self.hook and self.at_step is not None and not self.sent and trainer.global_step >= self.at_step
                and _here(trainer, self.rank)):
            self._send()

    def on_test_start(self, trainer, pl_module):
        if self.at_step is None:
            self._send()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self._at("on_train_batch_end", trainer)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self._at("on_train_batch_start", trainer)

    def on_before_optimizer_step(self, trainer, pl_module, optimizer):
        self._at("on_before_optimizer_step", trainer)


class SignalTwice(pl.Callback):
    """Send `signum` once `at_step` steps are done, and again halfway through writing the checkpoint
    that follows (the one the stop saves): a user pressing Ctrl-C twice, for rehearsing that the
    second signal cuts neither the checkpoint nor the run's close."""

    def __init__(self, signum: int = signal.SIGINT, at_step: int = 1):
        self.signum, self.at_step, self.sent = int(signum), at_step, False

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if trainer.global_step < self.at_step or self.sent:
            return
        io = trainer.strategy.checkpoint_io

        def again(checkpoint, f, write=io._write):
            write(checkpoint, f)
            f.truncate(f.tell() // 2)  # half written when the second signal arrives
            print(f"fibexp.training.faults.SignalTwice: signal {self.signum} again mid-write", file=sys.stderr,
                  flush=True)
            os.kill(os.getpid(), self.signum)
            f.seek(0)
            write(checkpoint, f)

        io._write = again
        self.sent = True
        print(f"fibexp.training.faults.SignalTwice: signal {self.signum} at step {trainer.global_step}",
              file=sys.stderr, flush=True)
        os.kill(os.getpid(), self.signum)
