"""How a sweep reads its jobs' states when sacct and squeue disagree (fibexp.sweep.scheduler):
canned answers of both, as Slurm prints them, through the one function that runs them."""
from __future__ import annotations

import subprocess

import pytest

from fibexp.sweep import scheduler


def answers(monkeypatch, sacct: str | None, squeue: str | None, squeue_rc: int = 0, squeue_err: str = ""):
    """sacct / squeue print these (None: the command fails: accounting off, controller down)."""
    def run(cmd):
        if cmd[0] == "sacct":
            return subprocess.CompletedProcess(cmd, 1 if sacct is None else 0, sacct or "",
                                               "sacct: error: Slurm accounting storage is disabled")
        if squeue is None:
            return subprocess.CompletedProcess(cmd, 1, "", "squeue: error: Unable to contact slurm controller")
        return subprocess.CompletedProcess(cmd, squeue_rc, squeue, squeue_err)

    monkeypatch.setattr(scheduler, "_run", run)


def said(found: dict) -> dict:
    return {j: (s.state, s.requeues, s.source) for j, s in found.items()}


def test_the_queue_decides_while_a_job_is_in_it_and_sacct_lags(monkeypatch):
    answers(monkeypatch,
            sacct="7_0|PENDING|None\n7_1|REQUEUED|None\n7_1|RUNNING|None\n7_2|COMPLETED|None\n",
            squeue="7_0|RUNNING|None\n7_1|PENDING|BeginTime\n")
    found = scheduler.states(["7_0", "7_1", "7_2"])
    assert said(found) == {"7_0": ("RUNNING", 0, "squeue"),  # sacct still says PENDING: it runs
                           "7_1": ("PENDING", 1, "squeue"),  # requeued again; sacct's count kept
                           "7_2": ("COMPLETED", 0, "sacct")}  # left the queue: sacct's terminal state
    assert found["7_1"].reason == "BeginTime" and not found["7_0"].ended and found["7_2"].ended


def test_agreeing_answers_are_sacct_s_and_a_cancelled_job_still_completing_has_ended(monkeypatch):
    answers(monkeypatch, sacct="8_0|RUNNING|None\n8_1|CANCELLED by 0|None\n",
            squeue="8_0|RUNNING|None\n8_1|COMPLETING|None\n")
    found = scheduler.states(["8_0", "8_1"])
    assert said(found) == {"8_0": ("RUNNING", 0, "sacct"), "8_1": ("CANCELLED", 0, "sacct")}
    assert found["8_1"].ended


def test_a_job_gone_from_the_queue_that_sacct_still_calls_running_is_gone(monkeypatch):
    answers(monkeypatch, sacct="9_0|RUNNING|None\n", squeue="", squeue_rc=1,
            squeue_err="slurm_load_jobs error: Invalid job id specified")
    assert said(scheduler.states(["9_0", "9_1"])) == {"9_0": ("GONE", 0, "squeue"), "9_1": ("GONE", 0, "squeue")}


def test_one_side_unavailable(monkeypatch):
    answers(monkeypatch, sacct=None, squeue="10_[1-2%1]|PENDING|JobArrayTaskLimit\n10_0|RUNNING|None\n")
    assert said(scheduler.states(["10_0", "10_1", "10_2", "10_3"])) == {
        "10_0": ("RUNNING", 0, "squeue"), "10_1": ("PENDING", 0, "squeue"), "10_2": ("PENDING", 0, "squeue"),
        "10_3": ("GONE", 0, "squeue")}
    answers(monkeypatch, sacct="11_0|RUNNING|None\n11_1|FAILED|None\n", squeue=None)  # the controller does not answer
    assert said(scheduler.states(["11_0", "11_1", "11_2"])) == {
        "11_0": ("RUNNING", 0, "sacct"), "11_1": ("FAILED", 0, "sacct"), "11_2": ("GONE", 0, "sacct")}


@pytest.mark.parametrize("stdout, expected", [("MaxArraySize            = 1001\n", 1001), ("", None)])
def test_max_array_size(monkeypatch, stdout, expected):
    monkeypatch.setattr(scheduler, "_run", lambda cmd: subprocess.CompletedProcess(cmd, 0, stdout, ""))
    assert scheduler.max_array_size() == expected
