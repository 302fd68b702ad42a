"""What became of a launched cell, as MLflow and its run folder's lock say once its job has ended
(or the sweep was stopped): finished, busy, killed, pending or failed; a run its job left RUNNING
is closed here, so no run outlives its sweep as RUNNING."""
from __future__ import annotations

import logging
import time
from pathlib import Path

from fibexp.errors import JobDied
from fibexp.tracking import store
from fibexp.training.lock import holder

log = logging.getLogger("fibexp.sweep")


def cell_outcome(client, experiment_id: str, name: str, run_dir: Path, h: str, stopped, died: JobDied | None) -> tuple:
    """What became of a launched cell, as MLflow and its run folder's lock say: finished, busy
    (another process trains it), killed or pending (the sweep was stopped), else failed."""
    done = store.find_runs(client, experiment_id, h, "FINISHED")
    if done:
        return "finished", done[0].info.run_id
    if (pid := holder(run_dir)) is not None and stopped:
        pid = _released(run_dir, within_s=10)
    if pid is not None:
        log.info("cell %s is being trained by pid %s (%s)", name, pid, run_dir)
        return "busy", last_run(client, experiment_id, h)
    if stopped:
        run_id = close_killed(client, experiment_id, h, stopped.name)
        return ("killed" if run_id else "pending"), run_id
    return "failed", record_failure(client, experiment_id, h, died)


def _released(run_dir: Path, within_s: float) -> int | None:
    """The holder of `run_dir` after up to `within_s` for it to let go: a cell the stopped sweep has
    just killed may hold its run folder's lock for a moment (its last disk write), and would be
    taken for a cell that another process trains, its run left RUNNING."""
    deadline = time.monotonic() + within_s
    while (pid := holder(run_dir)) is not None and time.monotonic() < deadline:
        time.sleep(0.2)
    return pid


def close_killed(client, experiment_id: str, h: str, signal_name: str) -> str | None:
    """The newest run of a stopped cell, ended KILLED if its process could not (so nothing stays
    RUNNING); the rerun resumes it from its last checkpoint."""
    run_id = last_run(client, experiment_id, h)
    if run_id and client.get_run(run_id).info.status == "RUNNING":
        client.set_tag(run_id, "fibexp.stopped_by", f"the sweep's {signal_name}")
        client.set_terminated(run_id, "KILLED")
    return run_id


def record_failure(client, experiment_id: str, h: str, died: JobDied | None) -> str | None:
    """The cell's job has ended without finishing it: a run its process left RUNNING (killed,
    out of memory, node lost) becomes FAILED with the scheduler's reason, so no run outlives
    its sweep as RUNNING and a relaunch reruns exactly this cell."""
    run_id = last_run(client, experiment_id, h)
    if died is not None:
        log.error("cell %s: %s", h, died)
    if run_id and client.get_run(run_id).info.status == "RUNNING":
        reason = str(died) if died else "its job ended and left the run RUNNING"
        client.set_tag(run_id, "fibexp.failure", reason[:5000])
        client.log_text(run_id, reason + "\n", "failure.txt")
        client.set_terminated(run_id, "FAILED")
    return run_id


def last_run(client, experiment_id: str, h: str) -> str | None:
    runs = store.find_runs(client, experiment_id, h)
    return runs[0].info.run_id if runs else None
