"""What Slurm says about a sweep's jobs, asked directly (a detached sweep has no submitit process
waiting on them): each job's state and how often it was requeued, from `sacct` and `squeue`
together (squeue decides while a job is in the queue, sacct once it has left: `_decide`); the cluster's
MaxArraySize; the reason a job died, from its log; signals to jobs through `scancel`."""
from __future__ import annotations

import dataclasses
import re
import subprocess
from pathlib import Path

TERMINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL", "PREEMPTED",
            "BOOT_FAIL", "DEADLINE", "GONE"}
_CAUSES = ("memory", "limit", "time", "node", "preempt", "oom")
_TIMEOUT_S = 30


@dataclasses.dataclass
class JobState:
    state: str  # Slurm's word (PENDING, RUNNING, COMPLETED, ...); GONE: left the queue, no accounting
    requeues: int = 0
    reason: str = ""  # Slurm's reason for a pending job (Dependency, Resources, ...)
    source: str = "sacct"

    @property
    def ended(self) -> bool:
        return self.state in TERMINAL


def _run(cmd: list[str]) -> subprocess.CompletedProcess | None:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired):
        return None


def _expand(job_id: str) -> list[str]:
    """`123_[0-2,5%4]` (a pending array's tasks, as Slurm folds them) -> 123_0, 123_1, 123_2, 123_5."""
    m = re.fullmatch(r"(\d+)_\[([^\]]+)\]", job_id)
    if not m:
        return [job_id]
    out = []
    for part in m.group(2).split("%")[0].split(","):
        lo, _, hi = part.partition("-")
        out += [f"{m.group(1)}_{i}" for i in range(int(lo), int(hi or lo) + 1)]
    return out


def _sacct(ids: list[str]) -> dict[str, JobState] | None:
    res = _run(["sacct", "-n", "-P", "-X", "-D", "-o", "JobID,State,Reason", "-j", ",".join(ids)])
    if res is None or res.returncode != 0:
        return None
    found: dict[str, JobState] = {}
    for line in res.stdout.splitlines():
        job, state, reason = (line.split("|") + ["", ""])[:3]
        for j in _expand(job):
            before = found.get(j)
            word = state.split()[0] if state else "UNKNOWN"  # "CANCELLED by 0"
            requeues = (before.requeues if before else 0) + (word == "REQUEUED")
            found[j] = JobState(word if word != "REQUEUED" else "PENDING", requeues, reason if reason != "None" else "")
    return found


def _squeue(ids: list[str]) -> dict[str, JobState] | None:
    """The jobs still in the queue; None when squeue cannot answer (an id it no longer knows is
    not in the queue: Slurm answers `Invalid job id specified` when none of them is)."""
    res = _run(["squeue", "-h", "-r", "-o", "%i|%T|%r", "-j", ",".join(ids)])
    if res is None or (res.returncode != 0 and "invalid job id" not in res.stderr.lower()):
        return None
    found = {}
    for line in res.stdout.splitlines() if res.returncode == 0 else []:
        job, state, reason = (line.split("|") + ["", ""])[:3]
        for j in _expand(job):
            found[j] = JobState(state, 0, reason if reason != "None" else "", "squeue")
    return found


def _decide(acct: JobState | None, queue: JobState | None, queue_answered: bool) -> JobState:
    """One job's state from what sacct (`acct`) and squeue (`queue`) say. squeue is slurmctld's
    own view; sacct reads the accounting database, which can be off, lag behind (a job it still
    calls PENDING runs, a requeued one it calls RUNNING waits) or not know a job yet. So:
    - a job in the queue has squeue's state (sacct's requeue count kept), unless it is COMPLETING
      and sacct already has how it ended: that state (the job is over; Slurm cleans up its steps);
    - a job that has left the queue has sacct's terminal state; with none (accounting off, or
      behind), GONE: it ended, the scheduler cannot say how;
    - squeue unavailable: sacct's state as it is (GONE where it has none)."""
    known = acct if acct and acct.state != "UNKNOWN" else None
    if queue is not None:
        if known and known.ended and queue.state == "COMPLETING":
            return known
        if known and known.state == queue.state:
            return dataclasses.replace(known, reason=queue.reason)  # the queue's reason is the current one
        return dataclasses.replace(queue, requeues=known.requeues if known else 0)
    if known and (known.ended or not queue_answered):
        return known
    return JobState("GONE", known.requeues if known else 0, "", "squeue" if queue_answered else "sacct")


def states(job_ids: list[str]) -> dict[str, JobState]:
    """Each job's state from sacct and squeue together (`_decide`); `source` says which decided."""
    ids = sorted({j for j in job_ids if j})
    if not ids:
        return {}
    arrays = sorted({j.split("_")[0] for j in ids})
    acct = _sacct(arrays) or {}
    queue = _squeue(arrays)
    return {j: _decide(acct.get(j), (queue or {}).get(j), queue is not None) for j in ids}


def queued(job_ids: list[str]) -> list[str]:
    """The jobs `squeue` still lists (a cancelled job stays there, COMPLETING, while Slurm kills
    its steps and runs the epilog, after `sacct` already calls it CANCELLED)."""
    arrays = sorted({j.split("_")[0] for j in job_ids if j})
    found = _squeue(arrays) if arrays else {}
    return sorted(found or {})


def max_array_size() -> int | None:
    """The cluster's MaxArraySize (`scontrol show config`): an array's indices stay below it."""
    res = _run(["scontrol", "show", "config"])
    m = re.search(r"^MaxArraySize\s*=\s*(\d+)", res.stdout if res and res.returncode == 0 else "", re.M)
    return int(m.group(1)) if m else None


def cancel(job_ids: list[str], signal: str | None = None) -> None:
    """scancel (Slurm sends SIGTERM, then SIGKILL after KillWait); `signal`: that signal only."""
    if job_ids:
        _run(["scancel", *([f"--signal={signal}"] if signal else []), *sorted(set(job_ids))])


def reason(stderr: str, state: str) -> str:
    """The scheduler's words on a job that died, from its log: the distinct Slurm lines, those
    naming a cause first (e.g. 'Exceeded job memory limit' before srun's 'task 0: Killed'); else
    its state."""
    said = [l.strip().split(": ", 1)[-1] for l in stderr.splitlines() if l.startswith(("slurmstepd", "srun:"))]
    distinct = sorted(dict.fromkeys(said), key=lambda l: not any(c in l.lower() for c in _CAUSES))
    return " | ".join(distinct[:3])[:500] if distinct else f"no result file (state {state})"


def log_of(folder: Path, job_id: str) -> str:
    """A submitit job's stderr (`<folder>/<id>_0_log.err`), empty when it has none yet."""
    path = Path(folder) / f"{job_id}_0_log.err"
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""
