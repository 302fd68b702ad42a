"""A sweep stopped by its user (Ctrl-C: SIGINT to the terminal's whole process group), its
scheduler (SIGTERM to the sweep) or a closed terminal (SIGHUP to its whole process group) on each
local launcher: every cell it started checkpoints and
ends KILLED at the step it reached, the parent ends KILLED, one line says how to resume, the sweep
exits 130 / 143 / 129 within 30 s and leaves no process behind; the same command resumes the cut cells
into their own runs. A second Ctrl-C kills the cells at once and still leaves no run RUNNING. The same sweep launched twice at once trains each cell once."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers.mlflow_runs import fibexp_runs

ROOT = Path(__file__).resolve().parents[2]
STEPS = 12
GRID = ["attention=dense,fib_fixed,fib_stagger", f"trainer.max_steps={STEPS}"]
SLOW = "+trainer.callbacks=[{_target_:fibexp.training.faults.Sleep,seconds:1}]"


def _sweep(tiny, out: Path, cache_dir: Path, launcher: str, *extra: str) -> list[str]:
    return [sys.executable, "-m", "fibexp.cli.train", "-m", *tiny, *GRID, "eval.aux=false",
            f"hydra/launcher={launcher}", f"paths.output_dir={out}", f"paths.cache_dir={cache_dir}", *extra]


def _start(cmd: list[str]) -> subprocess.Popen:
    """In a process group of its own, as a shell starts a foreground job."""
    return subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, env={**os.environ, "PYTHONPATH": str(ROOT)})


def _group_empty(pgid: int, within_s: float) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.1)
    return False


@pytest.mark.slow
@pytest.mark.parametrize("launcher,signum,to", [
    ("cores", signal.SIGINT, "group"), ("cores", signal.SIGTERM, "sweep"),
    ("submitit_local", signal.SIGTERM, "sweep"), ("basic", signal.SIGINT, "group"), ("cores", signal.SIGINT, "twice"),
    ("basic", signal.SIGHUP, "group"), ("cores", signal.SIGHUP, "group"), ("submitit_local", signal.SIGHUP, "group")])
def test_an_interrupted_sweep_ends_killed_and_the_same_command_resumes(tmp_path, cache_dir, tiny,
                                                                     launcher, signum, to):
    out = tmp_path / "outputs"
    tiny = [o for o in tiny if not o.startswith("trainer.max_steps=")]
    proc = _start(_sweep(tiny, out, cache_dir, launcher, SLOW))
    deadline = time.monotonic() + 300
    while not list(out.glob("runs/*/checkpoints/last.ckpt")):  # a cell is training: step 3 is checkpointed
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[1][-3000:]
        time.sleep(0.1)
    sent = time.monotonic()
    (os.kill if to == "sweep" else os.killpg)(proc.pid, signum)
    if to == "twice":  # Ctrl-C again while the cells are stopping: they are killed at once
        time.sleep(0.5)
        os.killpg(proc.pid, signum)
    stdout, stderr = proc.communicate(timeout=60)
    took = time.monotonic() - sent
    print(f"{launcher} {signal.Signals(signum).name}: signal to exit {took:.1f} s")
    assert proc.returncode == 128 + signum, stderr[-3000:]
    assert took < 30
    assert _group_empty(proc.pid, within_s=5), "a process of the sweep outlived it"
    assert "Traceback" not in stderr, stderr[-3000:]
    name = signal.Signals(signum).name
    resume = [line for line in stderr.splitlines() if "resume with:" in line]
    assert len(resume) == 1 and resume[0].startswith("fibexp-train: sweep ") and f"stopped by {name}" in resume[0]
    assert resume == stderr.strip().splitlines()[-1:]

    client, runs = fibexp_runs(out)
    assert not [r for r in runs if r.info.status == "RUNNING"]
    (parent,) = [r for r in runs if r.data.tags.get("fibexp.sweep_parent") == "true"]
    cut = {r.info.run_name: r for r in runs if r is not parent}
    assert parent.info.status == "KILLED" and cut
    for run in cut.values():  # each stopped itself at a step, or (killed at once) was closed by the sweep
        assert run.info.status == "KILLED" and "fibexp.failure" not in run.data.tags
        if to == "twice":
            assert run.data.tags.get("fibexp.stopped_by") == "the sweep's SIGINT" or "fibexp.stopped_step" in run.data.tags
        else:
            assert 0 < int(run.data.tags["fibexp.stopped_step"]) < STEPS
    assert f"killed    {sorted(cut)[0]}" in stdout

    again = subprocess.run(_sweep(tiny, out, cache_dir, launcher), cwd=ROOT, capture_output=True, text=True,
                           timeout=600, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert again.returncode == 0, again.stderr[-3000:]
    assert "3 finished, 0 skipped, 0 failed" in again.stdout
    _, runs = fibexp_runs(out)
    assert not [r for r in runs if r.info.status not in ("FINISHED", "FAILED")]
    resumed = {r.info.run_name: r.info.run_id for r in runs if r.info.run_name in cut and r.info.status == "FINISHED"}
    if to == "twice":  # a cell killed before its first checkpoint starts over: its old run ended FAILED, said why
        for r in runs:
            if r.info.status == "FAILED":
                assert r.info.run_name in cut and r.data.tags["fibexp.failure"].startswith("cannot be resumed")
        resumed = {n: i for n, i in resumed.items() if i == cut[n].info.run_id}
        assert resumed, "no cell resumed its checkpoint"
    else:
        assert len(runs) == 4 and all(r.info.status == "FINISHED" for r in runs)
        assert resumed == {name: run.info.run_id for name, run in cut.items()}  # into their own runs
    for run_id in resumed.values():  # killed at once, a cell resumes its periodic checkpoint: steps after it twice
        steps = [h.step for h in client.get_metric_history(run_id, "train/loss")]
        assert (sorted(set(steps)) if to == "twice" else sorted(steps)) == list(range(STEPS))


@pytest.mark.slow
def test_the_same_sweep_launched_twice_at_once_trains_each_cell_once(tmp_path, cache_dir, tiny):
    out = tmp_path / "outputs"
    tiny = [o for o in tiny if not o.startswith("trainer.max_steps=")]
    cmd = _sweep(tiny, out, cache_dir, "basic")
    first, second = _start(cmd), _start(cmd)
    (_, err1), (_, err2) = first.communicate(timeout=600), second.communicate(timeout=600)
    assert sorted([first.returncode, second.returncode]) == [0, 2], err1[-2000:] + err2[-2000:]
    refused, winner = (err2, first) if second.returncode == 2 else (err1, second)
    assert len(refused.strip().splitlines()) == 1
    assert refused.startswith("fibexp-train: error: sweep: ") and refused.strip().endswith(
        f"one launch at a time: it is running as pid {winner.pid} (wait for it, or stop it: kill {winner.pid})")
    client, runs = fibexp_runs(out)
    cells = [r for r in runs if r.data.tags.get("fibexp.sweep_parent") != "true"]
    assert len(cells) == 3 and all(r.info.status == "FINISHED" for r in runs)
    for run in cells:
        assert sorted(h.step for h in client.get_metric_history(run.info.run_id, "train/loss")) == list(range(STEPS))
    assert not list(out.glob("runs/*/checkpoints/*-v1.ckpt"))
