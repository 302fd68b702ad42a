"""`sweep.max_failures=N`: a sweep whose cells keep failing stops after N failed cells instead of
running to the end. Each failed cell leaves a marker in the sweep's home (`failed/<launch index>`),
written by the process that saw it fail (the sweep's own for the local launcher, the cell's job for
submitit's); the N-th writes `failfast.txt`, the one line that says the sweep was cut. Then the
waiting launchers start no further cell and a SLURM job cancels its sweep's pending array tasks
(`scancel --state=PENDING`), so the closing job (or the waiting sweep) summarises what ran: the
cells never started are `pending`, and the same command runs them. Torch- and MLflow-free: it runs
in every job."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

FAILED = "failed"
CUT = "failfast.txt"


def reset(home: Path) -> None:
    """A new launch of the sweep counts its own failures: the previous launch's markers go."""
    for marker in (Path(home) / FAILED).glob("*"):
        marker.unlink(missing_ok=True)
    (Path(home) / CUT).unlink(missing_ok=True)


def failed(home: Path) -> set[int]:
    """The launch indices of the cells that failed so far."""
    return {int(p.name) for p in (Path(home) / FAILED).glob("*") if p.name.isdigit()}


def cut(home: Path) -> str | None:
    """The line saying the sweep was stopped by sweep.max_failures, or None."""
    path = Path(home) / CUT
    return path.read_text().strip() if path.is_file() else None


def record(home: Path, index: int, max_failures: int | None, cells: int) -> bool:
    """Cell `index` failed: its marker written; whether the sweep is now cut (N failures reached)."""
    if not max_failures:
        return False
    folder = Path(home) / FAILED
    folder.mkdir(parents=True, exist_ok=True)
    (folder / str(index)).touch()
    count = len(failed(home))
    if count < max_failures:
        return False
    if not (Path(home) / CUT).is_file():
        tmp = Path(home) / f".{CUT}.{os.getpid()}"
        tmp.write_text(f"sweep stopped after {count} failed cell(s) (sweep.max_failures={max_failures}): "
                       f"no further cell of the {cells} started; the same command runs the rest\n")
        os.replace(tmp, Path(home) / CUT)
    return True


def cancel_pending(arrays: list[str]) -> None:
    """Cancel the sweep's array tasks still waiting in the queue (running ones go on)."""
    if arrays:
        subprocess.run(["scancel", "--state=PENDING", *sorted(set(arrays))], capture_output=True, timeout=30)
