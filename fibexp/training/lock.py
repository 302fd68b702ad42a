"""One writer per run: a process trains a run dir only while it holds `<run_dir>/.lock`.

Two launches of the same command (or of two sweeps sharing cells) would otherwise both resume the
same checkpoint, log into the same MLflow run and race on its files. The lock is `fcntl.flock`: the
kernel releases it when its holder dies however it dies (kill -9 included), so a stale lock never
blocks a rerun, and the pid written inside names the holder for the one-line message."""
from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Iterator
from pathlib import Path

from fibexp.errors import RunBusy

LOCK = ".lock"


def _open(run_dir: Path) -> int:
    run_dir.mkdir(parents=True, exist_ok=True)
    return os.open(run_dir / LOCK, os.O_RDWR | os.O_CREAT, 0o644)


def _pid(fd: int) -> int | None:
    """The pid written in the lock file; the holder writes it just after locking: wait a moment."""
    for _ in range(20):
        text = os.pread(fd, 32, 0).decode(errors="replace").strip()
        if text.isdigit():
            return int(text)
        time.sleep(0.05)
    return None


@contextlib.contextmanager
def hold(run_dir: Path) -> Iterator[None]:
    """Exclusive hold on `run_dir` for the block; RunBusy (naming the holder's pid) at once if another
    process holds it."""
    run_dir = Path(run_dir)
    fd = _open(run_dir)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise RunBusy(_pid(fd), run_dir) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        os.close(fd)  # releases the lock


def holder(run_dir: Path) -> int | None:
    """The pid of the live process holding `run_dir`, else None (never held, or its holder is gone)."""
    path = Path(run_dir) / LOCK
    if not path.is_file():
        return None
    fd = os.open(path, os.O_RDONLY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _pid(fd)
        return None
    finally:
        os.close(fd)
