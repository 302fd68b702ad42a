"""Smoke test: a submitit job runs on the real local Slurm and is accounted."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

JOB_TIMEOUT_S = 120.0


def _sacct_state(job_id: str) -> str:
    out = subprocess.run(
        ["sacct", "-n", "-X", "-P", "-o", "State", "-j", job_id],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    ).stdout
    return out.strip()


@pytest.mark.cluster
def test_submitit_job_returns_value_and_is_completed(
    slurm_cluster: Path, tmp_path: Path
) -> None:
    submitit = pytest.importorskip("submitit")

    # Nested, so cloudpickle ships it by value: the job cannot import this test module.
    def multiply(a: int, b: int) -> int:
        return a * b

    # A fresh folder per test: job ids restart at 1 if the state dir is ever wiped,
    # and submitit would then find an old result under the same id.
    executor = submitit.AutoExecutor(folder=tmp_path / "%j", cluster="slurm")
    executor.update_parameters(timeout_min=5, slurm_partition="debug", cpus_per_task=1)
    job = executor.submit(multiply, 6, 7)

    # job.result() waits forever; bound it so a broken cluster fails the test instead.
    deadline = time.monotonic() + JOB_TIMEOUT_S
    while not job.done():
        if time.monotonic() > deadline:
            job.cancel(check=False)
            pytest.fail(f"job {job.job_id} not done after {JOB_TIMEOUT_S:.0f} s")
        time.sleep(0.5)
    assert job.result() == 42

    # slurmctld reports the end to slurmdbd asynchronously: allow a moment.
    deadline = time.monotonic() + 30
    while (state := _sacct_state(job.job_id)) != "COMPLETED" and time.monotonic() < deadline:
        time.sleep(0.5)
    assert state == "COMPLETED"
