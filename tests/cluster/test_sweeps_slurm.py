"""Sweeps through the real `hydra/launcher=slurm` (submitit_slurm) on the local single-node
Slurm: cells land as FINISHED child runs of one parent run, a failing cell is isolated and
recorded, a relaunch submits nothing for finished cells, and a job requeued mid-training
(`scontrol requeue`) resumes from its checkpoint into the same MLflow run and ends exactly
where an uninterrupted run ends; the same for a two-task DDP job."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from fibexp.config import schema
from helpers.sweeps import write_sweep

pytestmark = pytest.mark.cluster

REPO = Path(schema.CONF_DIR).parent
SETS = ("drama", "prose")  # scale=smoke's held-out sets
SLURM = ["hydra/launcher=slurm", "hydra.launcher.wait=true", "hydra.launcher.partition=debug", "hydra.launcher.timeout_min=10",
         "hydra.launcher.cpus_per_task=1", "hydra.launcher.mem_gb=2"]
CRASH = "[{_target_:fibexp.training.faults.Crash,at_step:2}]"
GOOD = {"dense": "dense-s42", "fib_fixed": "sparse-fib-fixed-W8-s42", "fib_stagger": "sparse-fib-stagger-W8-s42",
        "pow2_stagger": "sparse-pow2-stagger-W8-s42"}
BAD = "sparse-fib-coprime-W8-s42"  # the cell that crashes until its bug is fixed
LAUNCH_TIMEOUT_S = 300


def launch(sweeps: Path, name: str, out: Path, cache: Path, *overrides: str, wait: bool = True):
    """`fibexp-train -m --config-dir SWEEPS --config-name NAME ...` as a user runs it."""
    cmd = [sys.executable, "-m", "fibexp.cli.train", "-m", "--config-dir", str(sweeps), "--config-name", name,
           f"paths.output_dir={out}", f"paths.cache_dir={cache}", *overrides]
    kwargs = dict(stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
                  env={**os.environ, "PYTHONUNBUFFERED": "1"})
    if not wait:
        return subprocess.Popen(cmd, **kwargs)
    t = time.monotonic()
    proc = subprocess.run(cmd, timeout=LAUNCH_TIMEOUT_S, **kwargs)
    print(f"{name}: {time.monotonic() - t:.0f} s, exit {proc.returncode}")
    return proc


def summary(stdout: str, name: str):
    """(sweep id, (finished, skipped, failed), {run name: (status, run id)}) from the printout."""
    found = list(re.finditer(rf"^Sweep ({name}-[0-9a-f]{{8}}): (\d+) finished, (\d+) skipped, (\d+) failed$",
                             stdout, re.M))
    assert len(found) == 1, stdout[-3000:]
    m, lines = found[0], {}
    for line in stdout[m.end():].splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[0] in ("finished", "skipped", "failed", "duplicate"):
            lines[parts[1]] = (parts[0], parts[2])
    return m.group(1), tuple(int(g) for g in m.groups()[1:]), lines


def runs(out: Path):
    client = MlflowClient(f"sqlite:///{out}/mlflow.db")
    exp = client.get_experiment_by_name("fibexp")
    found = client.search_runs([exp.experiment_id]) if exp else []
    parents = [r for r in found if r.data.tags.get("fibexp.sweep_parent") == "true"]
    return client, parents, [r for r in found if r not in parents]


def submitted(out: Path) -> list[str]:
    """Slurm job ids (array tasks as <id>_<i>) that submitit submitted for this output dir."""
    return sorted(p.name.removesuffix("_submitted.pkl") for p in (out / "sweeps").rglob("*_submitted.pkl"))


def sacct(job: str, *args: str) -> list[str]:
    res = subprocess.run(["sacct", "-n", "-X", "-P", "-o", "State", "-j", job, *args],
                         capture_output=True, text=True, timeout=30)
    return res.stdout.split()


def test_sweep_isolates_a_failing_cell_and_a_relaunch_submits_only_what_did_not_finish(
        slurm_cluster, smoke_cache, tmp_path, out):
    sweeps = tmp_path / "sweeps"
    good = "      - attention: " + ",".join(GOOD) + "\n"
    write_sweep(sweeps, "cells", good + f"      - attention: fib_coprime\n        trainer.callbacks: '{CRASH}'\n")

    first = launch(sweeps, "cells", out, smoke_cache, *SLURM)
    assert first.returncode == 1, first.stderr[-3000:]
    sweep_id, counts, lines = summary(first.stdout, "cells")
    assert counts == (4, 0, 1), first.stdout[-3000:]  # with each failed cell's reason
    assert {n: s for n, (s, _) in lines.items()} == {**{n: "finished" for n in GOOD.values()}, BAD: "failed"}
    jobs = submitted(out)
    assert len(jobs) == 5  # one Slurm job per cell
    submission = next((out / "sweeps").rglob("*_submission.sh")).read_text()
    assert f"{sys.executable} -u -m submitit.core._submit" in submission  # the repo's own interpreter
    assert "#SBATCH --partition=debug" in submission and "#SBATCH --cpus-per-task=1" in submission
    assert "#SBATCH --array=0-4%5" in submission  # array_parallelism 64, which submitit caps at the array's size
    assert "; at most 64 cells at once (hydra.launcher.array_parallelism)" in first.stdout

    client, parents, children = runs(out)
    assert len(parents) == 1 and len(children) == 5
    parent = parents[0]
    assert parent.data.tags["fibexp.sweep"] == sweep_id and parent.info.status == "FAILED"
    assert [parent.data.tags[f"fibexp.{k}"] for k in ("finished", "skipped", "failed")] == ["4", "0", "1"]
    for r in children:
        assert r.data.tags["mlflow.parentRunId"] == parent.info.run_id and r.data.tags["fibexp.sweep"] == sweep_id
        assert lines[r.info.run_name][1] == r.info.run_id
        assert r.data.params["trainer.threads"] == "1"  # bounded to the job's cpus_per_task
    status = {r.info.run_name: r.info.status for r in children}
    assert status == {**{n: "FINISHED" for n in GOOD.values()}, BAD: "FAILED"}
    for r in children:
        if r.info.status == "FINISHED":
            assert {f"val/loss/{s}" for s in SETS} <= set(r.data.metrics)
    (failed,) = [r for r in children if r.info.status == "FAILED"]
    listed = [a.path for a in client.list_artifacts(failed.info.run_id)]
    assert "traceback.txt" in listed, (listed, failed.data.tags.get("fibexp.failure"))
    text = Path(client.download_artifacts(failed.info.run_id, "traceback.txt", str(tmp_path))).read_text()
    assert "deliberate failure" in text

    # The bug is fixed (the callback is not part of the cell's identity: same hash, same
    # sweep): the same command submits one job, for the cell that failed.
    write_sweep(sweeps, "cells", good + "      - attention: fib_coprime\n")
    second = launch(sweeps, "cells", out, smoke_cache, *SLURM)
    assert second.returncode == 0, second.stderr[-3000:]
    sweep_id2, counts, lines = summary(second.stdout, "cells")
    assert sweep_id2 == sweep_id and counts == (1, 4, 0)
    assert lines[BAD][0] == "finished" and all(lines[n][0] == "skipped" for n in GOOD.values())
    assert len(submitted(out)) == 6
    client, parents, children = runs(out)
    assert [p.info.run_id for p in parents] == [parent.info.run_id] and parents[0].info.status == "FINISHED"
    assert len(children) == 6
    (fixed,) = [r for r in children if r.info.run_id == lines[BAD][1]]
    assert fixed.info.status == "FINISHED" and fixed.data.tags["mlflow.parentRunId"] == parent.info.run_id

    # All finished: a relaunch submits nothing and creates no run.
    third = launch(sweeps, "cells", out, smoke_cache, *SLURM)
    assert third.returncode == 0, third.stderr[-3000:]
    assert summary(third.stdout, "cells")[1] == (0, 5, 0)
    assert len(submitted(out)) == 6
    assert len(runs(out)[2]) == 6
    for job in submitted(out):
        assert sacct(job) == ["COMPLETED"], job  # a crashed cell's job still ends COMPLETED: MLflow tells


def wait_for(predicate, timeout: float, what: str, proc=None):
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        if proc is not None and proc.poll() is not None:
            pytest.fail(f"the sweep exited ({proc.returncode}) before {what}:\n{proc.stderr.read()[-3000:]}")
        if time.monotonic() > deadline:
            pytest.fail(f"no {what} after {timeout:.0f} s")
        time.sleep(0.2)
    return value


def requeued_mid_training(sweep, reference, out: Path, checkpoint_timeout: float):
    """`scontrol requeue` the sweep's one Slurm job once its first checkpoint exists (mid-training),
    then wait for it and the uninterrupted reference sweep, both ending 0. Returns the job, the run
    record read right after the requeue, the run as it was then, and both sweeps' stdout."""
    try:
        ckpt = wait_for(lambda: next((out / "runs").glob("*/checkpoints/last.ckpt"), None), checkpoint_timeout,
                        "first checkpoint", sweep)
        (job,) = submitted(out)
        requeue = subprocess.run(["scontrol", "requeue", job], capture_output=True, text=True, timeout=30)
        assert requeue.returncode == 0, requeue.stderr
        record = (ckpt.parent.parent / "mlflow_run.json").read_text()
        client, _, (before,) = runs(out)
        steps_before = max(m.step for m in client.get_metric_history(before.info.run_id, "train/loss"))
        # mid-training; SIGTERM makes the run KILLED (stopped, to be resumed), never FAILED
        assert before.info.status in ("RUNNING", "KILLED") and steps_before < 199
        stdout, stderr = sweep.communicate(timeout=LAUNCH_TIMEOUT_S)
        ref_stdout, ref_stderr = reference.communicate(timeout=LAUNCH_TIMEOUT_S)
    finally:
        for p in (sweep, reference):
            if p.poll() is None:
                p.kill()
    assert sweep.returncode == 0, stderr[-3000:]
    assert reference.returncode == 0, ref_stderr[-3000:]
    return job, record, before, stdout, ref_stdout


def test_a_requeued_job_resumes_into_the_same_run_and_matches_an_uninterrupted_one(
        slurm_cluster, smoke_cache, tmp_path, out):
    sweeps = tmp_path / "sweeps"
    write_sweep(sweeps, "requeue", "      - attention: fib_fixed\n")
    # Long enough that the requeue lands mid-training; threads fixed so both runs compute alike.
    longer = ["trainer.max_steps=200", "trainer.checkpoint_every_n_steps=20", "trainer.threads=1"]

    sweep = launch(sweeps, "requeue", out, smoke_cache, *SLURM, *longer, wait=False)
    reference_out = tmp_path / "uninterrupted"
    reference = launch(sweeps, "requeue", reference_out, smoke_cache, "hydra/launcher=local", *longer, wait=False)
    job, record, before, stdout, ref_stdout = requeued_mid_training(sweep, reference, out, 240)
    assert summary(stdout, "requeue")[1] == (1, 0, 0)
    assert summary(ref_stdout, "requeue")[1] == (1, 0, 0)

    # Slurm restarted the same job; the second start resumed from the checkpoint.
    assert sacct(job, "-D") == ["REQUEUED", "COMPLETED"]
    log = "".join(p.read_text() for p in (out / "sweeps").rglob("*_log.*"))
    assert log.count("Starting with JobEnvironment") == 2
    assert "Restored all states from the checkpoint" in log

    client, parents, children = runs(out)
    assert len(children) == 1, [r.info.run_name for r in children]  # ONE run across the requeue
    (run,) = children
    assert run.info.run_id == before.info.run_id and run.info.run_id in record
    assert run.info.status == "FINISHED" and run.data.tags["mlflow.parentRunId"] == parents[0].info.run_id
    ref_client, _, (ref,) = runs(reference_out)
    assert ref.data.tags["fibexp.config_hash"] == run.data.tags["fibexp.config_hash"]  # the same cell

    steps = sorted({m.step for m in client.get_metric_history(run.info.run_id, "train/loss")})
    ref_steps = sorted({m.step for m in ref_client.get_metric_history(ref.info.run_id, "train/loss")})
    assert steps == ref_steps == list(range(200))
    for s in SETS:
        assert run.data.metrics[f"val/loss/{s}"] == pytest.approx(ref.data.metrics[f"val/loss/{s}"], rel=1e-6), s


KILL = "[{_target_:fibexp.training.faults.Preempt,at_step:3}]"  # SIGKILL itself after a checkpoint
HOG = "[{_target_:fibexp.training.faults.Hog,at_step:2,gib:3}]"  # past the job's 2 GB: Slurm kills it


def test_jobs_that_die_are_waited_for_recorded_failed_and_rerun_on_relaunch(
        slurm_cluster, smoke_cache, tmp_path, out):
    sweeps = tmp_path / "sweeps"
    good = "      - attention: dense,fib_fixed\n"
    faults = (f"      - attention: fib_stagger\n        trainer.callbacks: '{KILL}'\n"
              f"      - attention: pow2_stagger\n        trainer.callbacks: '{HOG}'\n")
    write_sweep(sweeps, "faults", good + faults)
    t0 = time.monotonic()
    first = launch(sweeps, "faults", out, smoke_cache, *SLURM)
    assert first.returncode == 1, first.stderr[-3000:]
    _, counts, lines = summary(first.stdout, "faults")
    assert counts == (2, 0, 2), first.stdout[-3000:]
    killed, hog = GOOD["fib_stagger"], GOOD["pow2_stagger"]
    assert lines[killed][0] == lines[hog][0] == "failed"
    jobs = submitted(out)
    for job in jobs:  # the sweep returned only once every job had ended
        assert sacct(job)[0] in ("COMPLETED", "FAILED", "CANCELLED", "OUT_OF_MEMORY"), (job, sacct(job))
    print(f"faulty sweep ended after {time.monotonic() - t0:.0f} s")

    client, parents, children = runs(out)
    status = {r.info.run_name: r.info.status for r in children}
    assert status == {GOOD["dense"]: "FINISHED", GOOD["fib_fixed"]: "FINISHED", killed: "FAILED", hog: "FAILED"}
    why = {r.info.run_name: r.data.tags.get("fibexp.failure", "") for r in children}
    assert "memory" in why[hog].lower(), why[hog]
    assert "without a result" in why[killed], why[killed]
    assert parents[0].info.status == "FAILED" and parents[0].data.tags["fibexp.failed"] == "2"

    # Relaunch with the faults gone (callbacks are not part of a cell's identity): exactly the
    # two failed cells run again; the killed one resumes its checkpoint into the same run.
    write_sweep(sweeps, "faults", good + "      - attention: fib_stagger,pow2_stagger\n")
    second = launch(sweeps, "faults", out, smoke_cache, *SLURM)
    assert second.returncode == 0, second.stderr[-3000:]
    _, counts, lines2 = summary(second.stdout, "faults")
    assert counts == (2, 2, 0)
    assert lines2[killed] == ("finished", lines[killed][1])
    assert len(submitted(out)) == len(jobs) + 2
    client, _, children = runs(out)
    assert all(r.info.status in ("FINISHED", "FAILED") for r in children)
    assert {r.info.run_name for r in children if r.info.status == "FINISHED"} == set(GOOD.values())


def test_a_two_task_ddp_job_is_requeued_and_resumes_into_one_run_that_matches_one_process(
        slurm_cluster, smoke_cache, tmp_path, out):
    """`trainer.devices=2` under hydra/launcher=slurm: one Slurm job of two tasks (tasks_per_node
    follows trainer.devices; srun starts the ranks), requeued mid-training (`scontrol requeue`):
    the job starts again, the ranks resume the checkpoint into the same MLflow run, every step is
    logged once, one run dir; the held-out metrics are those of one process with the same global
    batch."""
    sweeps = tmp_path / "sweeps"
    write_sweep(sweeps, "ddp", "      - attention: fib_fixed\n")
    longer = ["trainer.max_steps=200", "trainer.checkpoint_every_n_steps=20", "trainer.threads=1",
              "trainer.accelerator=cpu", "data.batch_size=4", "eval.aux=false"]
    two_tasks = [*(o for o in SLURM if not o.startswith("hydra.launcher.mem_gb")), "hydra.launcher.mem_gb=4",
                 "trainer.devices=2", "trainer.strategy=ddp"]
    sweep = launch(sweeps, "ddp", out, smoke_cache, *two_tasks, *longer, wait=False)
    reference_out = tmp_path / "one_process"
    reference = launch(sweeps, "ddp", reference_out, smoke_cache, "hydra/launcher=local", *longer, wait=False)
    job, _, before, stdout, _ = requeued_mid_training(sweep, reference, out, 300)
    assert summary(stdout, "ddp")[1] == (1, 0, 0)
    submission = next((out / "sweeps").rglob("*_submission.sh")).read_text()
    assert "#SBATCH --ntasks-per-node=2" in submission and "srun" in submission
    # the result is written before srun has ended both tasks: accounting says COMPLETED a moment later
    wait_for(lambda: sacct(job, "-D") == ["REQUEUED", "COMPLETED"], 60, "the job COMPLETED after its requeue")

    client, parents, children = runs(out)
    assert len(children) == 1, [r.info.run_name for r in children]  # one run across ranks and the requeue
    (run,) = children
    assert run.info.run_id == before.info.run_id and run.info.status == "FINISHED"
    assert run.data.params["trainer.devices"] == "2"
    assert len([d for d in (out / "runs").iterdir() if (d / "mlflow_run.json").is_file()]) == 1
    steps = [m.step for m in client.get_metric_history(run.info.run_id, "train/loss")]
    assert sorted(set(steps)) == list(range(200)) and steps.count(0) == 1, steps  # resumed, logged by rank 0 once
    _, _, (ref,) = runs(reference_out)
    assert ref.data.tags["fibexp.config_hash"] == run.data.tags["fibexp.config_hash"]
    for s in SETS:  # same global batch, same stream: the same model up to float summation order
        assert run.data.metrics[f"val/loss/{s}"] == pytest.approx(ref.data.metrics[f"val/loss/{s}"], rel=1e-4), s


def test_ctrl_c_on_a_slurm_sweep_cancels_its_jobs_and_the_cells_end_killed_then_resume(
        slurm_cluster, smoke_cache, tmp_path, out):
    """Ctrl-C reaches the sweep (the jobs run under Slurm, outside the terminal's process group):
    it cancels its jobs (scancel: SIGTERM, then SIGKILL after KillWait), each cell checkpoints and
    ends KILLED at the step it reached, the parent ends KILLED, one line says how to resume, exit
    130 within 30 s, no job left in the queue; the same command resumes each cell into its run."""
    sweeps = tmp_path / "sweeps"
    write_sweep(sweeps, "stop", "      - attention: dense,fib_fixed\n")
    longer = ["trainer.max_steps=200", "trainer.checkpoint_every_n_steps=20", "trainer.threads=1", "eval.aux=false"]
    cmd = [sys.executable, "-m", "fibexp.cli.train", "-m", "--config-dir", str(sweeps), "--config-name", "stop",
           f"paths.output_dir={out}", f"paths.cache_dir={smoke_cache}", *SLURM, *longer]
    sweep = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
                             start_new_session=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        wait_for(lambda: len(list((out / "runs").glob("*/checkpoints/last.ckpt"))) == 2, 240,
                 "both cells checkpointed", sweep)
        sent = time.monotonic()
        os.killpg(sweep.pid, signal.SIGINT)  # what Ctrl-C in its terminal sends
        stdout, stderr = sweep.communicate(timeout=60)
        took = time.monotonic() - sent
    finally:
        if sweep.poll() is None:
            sweep.kill()
    print(f"SIGINT to exit: {took:.1f} s")
    assert sweep.returncode == 130 and took < 30, stderr[-3000:]
    assert "Traceback" not in stderr and "resume with: fibexp-train -m" in stderr.strip().splitlines()[-1]
    for job in submitted(out):
        assert sacct(job)[0] in ("CANCELLED", "COMPLETED", "FAILED"), (job, sacct(job))
    client, (parent,), children = runs(out)
    assert parent.info.status == "KILLED" and len(children) == 2
    for run in children:
        assert run.info.status == "KILLED" and 0 < int(run.data.tags["fibexp.stopped_step"]) < 200, run.data.tags

    again = launch(sweeps, "stop", out, smoke_cache, *SLURM, *longer)
    assert again.returncode == 0, again.stderr[-3000:]
    assert summary(again.stdout, "stop")[1] == (2, 0, 0)
    client, _, resumed = runs(out)
    assert {r.info.run_id for r in resumed} == {r.info.run_id for r in children}  # into their own runs
    for run in resumed:
        assert run.info.status == "FINISHED"
        steps = [m.step for m in client.get_metric_history(run.info.run_id, "train/loss")]
        assert sorted(steps) == list(range(200)), run.info.run_name
