"""A CPU run that outgrows the memory it may hold ends in one line, FAILED, with its checkpoints as
they were: not killed by the kernel, and never by taking the machine into swap.

The estimate before a run (fibexp.checks.memory) is a lower bound; what a run really holds is seen
only while it trains. `MemoryGuard` reads the resident memory of this process and its children at
every batch and raises `OutOfMemory` (a Refusal: the run records it as its failure, the entry point
prints it as one line) once it passes the limit. A single step that would jump past the limit
between two reads is stopped by the kernel's data-size limit (RLIMIT_DATA) set for the time the
Trainer runs: the allocation fails at once (torch raises) instead of swapping, and the guard names
the key on the way out (`fibexp_line`)."""
from __future__ import annotations

import contextlib
import math
import resource
import time

import lightning.pytorch as pl
import psutil

from fibexp.checks.memory import GIB, grown, machine_bytes, sizes
from fibexp.errors import OutOfMemory

MARGIN = 0.05  # of the machine's memory, left to everything else on it when no limit is given
SLACK = 0.10  # of the limit: the data-size limit sits past it, so the per-batch read speaks first
CHILDREN_EVERY_S = 1.0  # children are read at most this often: listing them scans /proc (ms; a step of a tiny run is tens)


def held_bytes(process: psutil.Process | None = None) -> int:
    """Resident bytes of this process and its children (DataLoader workers, rank 0's other ranks)."""
    process = process or psutil.Process()
    total = process.memory_info().rss
    for child in process.children(recursive=True):
        with contextlib.suppress(psutil.Error):
            total += child.memory_info().rss
    return total


class Reader:
    """held_bytes at every batch for the cost of one read of this process: its children's share is
    read again at most every CHILDREN_EVERY_S."""

    def __init__(self):
        self.process, self.children, self.at = psutil.Process(), 0, -math.inf

    def __call__(self) -> int:
        own = self.process.memory_info().rss
        if time.monotonic() - self.at >= CHILDREN_EVERY_S:
            self.children, self.at = held_bytes(self.process) - own, time.monotonic()
        return own + self.children


def machine_limit() -> tuple[int, str]:
    """What this process may grow to on this machine: what it holds plus what is available, less
    a margin; the SLURM job's memory or the cgroup's limit where smaller."""
    vm = psutil.virtual_memory()
    here = held_bytes() + vm.available - int(MARGIN * vm.total)
    known, where = machine_bytes()
    return (known, where) if known < here else (here, "this machine's available memory")


def is_allocation_failure(e: BaseException) -> bool:
    """An allocation the data-size limit (or the machine) refused: MemoryError, or torch's CPU allocator."""
    return isinstance(e, MemoryError) or (isinstance(e, RuntimeError) and "can't allocate memory" in str(e))


class MemoryGuard(pl.Callback):
    """Ends the run with `OutOfMemory` once this process holds more than `limit_gb` GiB (None: the
    SLURM job's memory, else what this machine has available when training starts). `values`: the
    run's sizes ({key: value}, fibexp.checks.memory.sizes), to name the one to lower (without them,
    data.batch_size); `source`: the key that set `limit_gb`, as the line names it. A run's guard:
    `MemoryGuard.of(cfg)`; `+trainer.callbacks=[{_target_: fibexp.training.memory_guard.MemoryGuard,
    limit_gb: 4}]` adds one from the command line."""

    def __init__(self, limit_gb: float | None = None, values: dict | None = None, source: str = "limit_gb"):
        self.limit_gb, self.values, self.source = limit_gb, dict(values or {}), source
        self.limit, self.where = None, ""
        self._rlimit, self._batch, self._held = None, "?", Reader()

    @classmethod
    def of(cls, cfg) -> "MemoryGuard":
        """The guard of a run's config: its trainer.memory_limit_gb and sizes."""
        from omegaconf import OmegaConf

        from fibexp.config.schema import TrainConf

        typed = cfg if isinstance(cfg, TrainConf) else OmegaConf.to_object(
            OmegaConf.merge(TrainConf, OmegaConf.masked_copy(cfg, [k for k in cfg if k != "hydra"])))
        return cls(typed.trainer.memory_limit_gb, sizes(typed), "trainer.memory_limit_gb")

    def setup(self, trainer, pl_module, stage: str) -> None:
        if trainer.strategy.root_device.type != "cpu":
            return  # a GPU's memory is torch's to tell
        if self.limit_gb is not None:
            self.limit, self.where = int(self.limit_gb * GIB), f"{self.source}={self.limit_gb:g}"
        else:
            self.limit, self.where = machine_limit()
        self._cap_data()

    def _cap_data(self) -> None:
        """RLIMIT_DATA at what the process maps now plus its headroom (and SLACK): one allocation past
        the limit fails instead of swapping. Not set when the process holds more than its limit
        already (the first read ends the run) or a lower cap is there."""
        headroom = self.limit - held_bytes()
        if headroom <= 0:
            return
        soft, hard = resource.getrlimit(resource.RLIMIT_DATA)
        cap = psutil.Process().memory_info().data + headroom + int(SLACK * self.limit)
        if hard != resource.RLIM_INFINITY:
            cap = min(cap, hard)
        if soft == resource.RLIM_INFINITY or cap < soft:
            resource.setrlimit(resource.RLIMIT_DATA, (cap, hard))
            self._rlimit = (soft, hard)

    def _uncap(self) -> None:
        if self._rlimit is not None:
            resource.setrlimit(resource.RLIMIT_DATA, self._rlimit)
            self._rlimit = None

    def teardown(self, trainer, pl_module, stage: str) -> None:
        self._uncap()

    def check(self, step: int) -> None:
        if self.limit is None:
            return
        held = self._held()
        if held > self.limit:
            self._uncap()
            raise self.refusal(held, step)

    def refusal(self, held: int, step: int) -> OutOfMemory:
        key = grown(self.values) if self.values else "data.batch_size"
        return OutOfMemory(key, self.values.get(key, self._batch), held, self.limit, self.where, step)

    def on_exception(self, trainer, pl_module, exception: BaseException) -> None:
        """An allocation the data-size limit refused: the one line to say, carried by the exception."""
        self._uncap()
        if self.limit is not None and is_allocation_failure(exception):
            exception.fibexp_line = str(self.refusal(held_bytes(), trainer.global_step))

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        with contextlib.suppress(AttributeError, IndexError, KeyError, TypeError):
            self._batch = len(batch[0]) * trainer.world_size  # the global batch, when no sizes were given
        self.check(trainer.global_step)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.check(trainer.global_step)

    def on_validation_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0) -> None:
        self.check(trainer.global_step)

    def on_test_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0) -> None:
        self.check(trainer.global_step)


def guards(cfg, extra: list) -> list:
    """The guard a run's Trainer carries (`MemoryGuard.of(cfg)`), none where trainer.callbacks
    names one already."""
    return [] if any(isinstance(c, MemoryGuard) for c in extra) else [MemoryGuard.of(cfg)]
