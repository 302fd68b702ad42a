"""No orphans: a rerun that cannot resume its run (no checkpoint reads, or the run dir is gone) ends
the old run FAILED with the reason, in one line, before it opens the new run; no run of the cell
is left RUNNING or KILLED (waiting for a resume that can never come)."""
from __future__ import annotations

import shutil
import signal
from pathlib import Path

import pytest

from helpers.mlflow_runs import fibexp_runs

PREEMPT = "+trainer.callbacks=[{_target_:fibexp.training.faults.Preempt,at_step:3}]"  # SIGKILL: left RUNNING
CTRL_C = "+trainer.callbacks=[{_target_:fibexp.training.faults.Signal,signum:2,at_step:3}]"  # KILLED


def rerun_replaces(train_cli, old, why: str):
    """The same command: a new run FINISHED, the old one FAILED with `why`, said in one line."""
    proc = train_cli("eval.aux=false")
    said = [line for line in (proc.stdout + proc.stderr).splitlines() if old.info.run_id in line]
    assert len(said) == 1 and why in said[0] and "now FAILED" in said[0], proc.stdout + proc.stderr[-3000:]
    client, runs = fibexp_runs(train_cli.out)
    by_id = {r.info.run_id: r for r in runs}
    ended = by_id.pop(old.info.run_id)
    (new,) = by_id.values()
    assert new.info.status == "FINISHED" and ended.info.status == "FAILED"
    failure = ended.data.tags["fibexp.failure"]
    assert failure.startswith("cannot be resumed: ") and why in failure
    assert ended.info.end_time <= new.info.start_time  # ended before the new run was opened
    return ended, new


@pytest.mark.slow
def test_a_run_whose_checkpoints_are_all_unreadable_is_failed_before_the_rerun_starts_over(train_cli):
    assert train_cli("eval.aux=false", PREEMPT, check=False).returncode == -signal.SIGKILL
    _, (old,) = fibexp_runs(train_cli.out)
    assert old.info.status == "RUNNING"  # what a killed process leaves
    ckpts = Path(old.data.tags["fibexp.run_dir"]) / "checkpoints"
    for ckpt in ckpts.glob("*.ckpt"):
        ckpt.write_bytes(ckpt.read_bytes()[:1000])
    rerun_replaces(train_cli, old, f"no readable checkpoint in {ckpts}")


@pytest.mark.slow
def test_a_run_whose_run_dir_was_deleted_is_failed_before_the_rerun_starts_over(train_cli):
    assert train_cli("eval.aux=false", CTRL_C, check=False).returncode == 128 + signal.SIGINT
    _, (old,) = fibexp_runs(train_cli.out)
    assert old.info.status == "KILLED"
    run_dir = Path(old.data.tags["fibexp.run_dir"])
    shutil.rmtree(run_dir)
    _, new = rerun_replaces(train_cli, old, "the run dir was deleted or moved")
    assert new.data.tags["fibexp.run_dir"] == str(run_dir)
