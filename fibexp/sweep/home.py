"""A sweep's folder, `<output_dir>/sweeps/<date>-<sweep id>/`: its multirun config, the cells it
ran (links to their run folders, which stay in `<output_dir>/runs/` so that any sweep skips or
resumes them), its report and submitit's logs; and the lock that keeps a sweep from running twice
at once."""
from __future__ import annotations

import datetime
import fcntl
import os
from pathlib import Path

from omegaconf import OmegaConf

from fibexp.errors import Refusal


def home_of(output_dir: Path, sweep_id: str) -> Path:
    """The folder of an earlier launch of the same sweep (same id), else a new one dated today."""
    root = output_dir / "sweeps"
    found = sorted(root.glob(f"????-??-??-{sweep_id}")) if root.is_dir() else []
    return found[-1] if found else root / f"{datetime.date.today():%Y-%m-%d}-{sweep_id}"


class Lock:
    """One launch per sweep id: an exclusive flock on `sweeps/.locks/<id>.lock`, holding the pid.
    The kernel drops it when the process ends, however it ends."""

    def __init__(self, output_dir: Path, sweep_id: str):
        self.path = output_dir / "sweeps" / ".locks" / f"{sweep_id}.lock"
        self.sweep_id = sweep_id
        self.fd: int | None = None

    def acquire(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pid = os.read(fd, 32).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise Refusal("sweep", self.sweep_id, f"one launch at a time: it is running as pid {pid} "
                          f"(wait for it, or stop it: kill {pid})") from None
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        self.fd = fd

    def release(self) -> None:
        if self.fd is not None:
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = None


def write_config(home: Path, sweep_cfg, cells: list[list[str]], names: list[str], run_dirs: list[Path]) -> None:
    """multirun.yaml (resolved where it can be) and cells.yaml (each cell's overrides, name and run folder)."""
    home.mkdir(parents=True, exist_ok=True)
    try:
        text = OmegaConf.to_yaml(sweep_cfg, resolve=True)
    except Exception:  # an interpolation only a job can resolve: the config as composed
        text = OmegaConf.to_yaml(sweep_cfg)
    (home / "multirun.yaml").write_text(text)
    listing = [{"name": n, "overrides": " ".join(c), "run_dir": str(d)} for c, n, d in zip(cells, names, run_dirs)]
    (home / "cells.yaml").write_text(OmegaConf.to_yaml({"cells": listing}))


def link_cell(home: Path, name: str, run_dir: Path) -> None:
    """`cells/<name>` -> the cell's run folder (relative, so a moved outputs tree keeps its links)."""
    link = home / "cells" / name
    link.parent.mkdir(parents=True, exist_ok=True)
    target = os.path.relpath(run_dir, link.parent)
    if link.is_symlink() and os.readlink(link) == target:
        return
    if link.is_symlink():
        link.unlink()
    link.symlink_to(target, target_is_directory=True)
