"""`sweep.max_failures=N` on the launchers that wait in the sweep's process: after the N-th failed
cell no further cell starts, the summary says so in one line and lists the rest pending, and the
parent carries it (the SLURM side: tests/cluster/test_sweep_detached.py)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.mlflow_runs import fibexp_runs

REPO = Path(__file__).resolve().parents[2]
CRASH = "+trainer.callbacks=[{_target_:fibexp.training.faults.Crash,at_step:1}]"


@pytest.mark.parametrize("launcher", ["local", "cores"])
def test_max_failures_starts_no_further_cell(launcher, tmp_path, cache_dir):
    out = tmp_path / "outputs"
    one_at_a_time = [f"hydra.launcher.cpus_per_task={len(os.sched_getaffinity(0))}"] if launcher == "cores" else []
    proc = subprocess.run([sys.executable, "-m", "fibexp.cli.train", "-m", "attention=dense,fib_fixed,fib_stagger",
                           "+scale=smoke", "eval.aux=false", CRASH, "sweep.max_failures=1", f"hydra/launcher={launcher}",
                           *one_at_a_time, f"paths.output_dir={out}", f"paths.cache_dir={cache_dir}",
                           f"logger.tracking_uri=sqlite:///{out}/mlflow.db"],
                          cwd=REPO, capture_output=True, text=True, timeout=600, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    counts = next(i for i, line in enumerate(lines) if line.startswith("Sweep ") and line.endswith("2 pending"))
    assert lines[counts].endswith(": 0 finished, 0 skipped, 1 failed, 2 pending"), proc.stdout[-3000:]
    assert lines[counts + 1] == ("sweep stopped after 1 failed cell(s) (sweep.max_failures=1): no further cell of the "
                                 "3 started; the same command runs the rest")
    assert [line.split()[0] for line in lines[counts + 2:counts + 5]] == ["failed", "pending", "pending"]
    _, found = fibexp_runs(f"sqlite:///{out}/mlflow.db")
    (parent,) = [r for r in found if r.data.tags.get("fibexp.sweep_parent") == "true"]
    assert [r.info.status for r in found if r is not parent] == ["FAILED"]  # the other two never started
    assert parent.info.status == "FAILED" and parent.data.tags["fibexp.cut"].startswith("sweep stopped after 1")
