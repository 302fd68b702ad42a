"""A detached SLURM sweep (`hydra/launcher=slurm`, the default `hydra.launcher.wait=false`) on the
local single-node Slurm: the command submits and returns, the jobs run the code copied at
submission whatever happens to the user's tree afterwards, a last job closes the parent, and
`fibexp-sweep` follows (status, wait, list) and stops (cancel) it from another process; a job the
scheduler requeues resumes on the copied code too."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from fibexp.config import schema

pytestmark = pytest.mark.cluster

REPO = Path(schema.CONF_DIR).parent
SLURM = ["hydra/launcher=slurm", "hydra.launcher.partition=debug", "hydra.launcher.timeout_min=10",
         "hydra.launcher.cpus_per_task=1", "hydra.launcher.mem_gb=2"]
CELLS = ["attention=dense,fib_fixed", "+scale=smoke", "eval.aux=false"]


@pytest.fixture
def tree(tmp_path) -> Path:
    """The user's tree: a copy of the package, so that the test may break it after submission."""
    dest = tmp_path / "tree"
    for part in ("fibexp", "hydra_plugins/fibexp_launchers", "hydra_plugins/fibexp_schemas",
                 "hydra_plugins/fibexp_sweeper", "conf"):
        shutil.copytree(REPO / part, dest / part, ignore=shutil.ignore_patterns("__pycache__"))
    return dest


def run(tree: Path, *args: str, timeout: float = 300, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", *args], cwd=tree, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "PYTHONPATH": str(tree), "PYTHONUNBUFFERED": "1", **(env or {})})


def sweep_cli(tree: Path, out: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return run(tree, "fibexp.cli.sweep", "--output-dir", str(out), *args, timeout=timeout)


def submit(tree: Path, out: Path, cache: Path, *extra: str, cells: list[str] = CELLS,
           env: dict | None = None) -> tuple[subprocess.CompletedProcess, float, str]:
    t = time.monotonic()
    proc = run(tree, "fibexp.cli.train", "-m", *cells, *SLURM, f"paths.output_dir={out}",
               f"paths.cache_dir={cache}", *extra, env=env)
    took = time.monotonic() - t
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    n = len(cells[0].split("=")[1].split(","))
    (sweep_id,) = re.findall(rf"^Sweep (train-[0-9a-f]{{8}}): {n} cell\(s\) submitted as Slurm array", proc.stdout,
                             re.M)
    return proc, took, sweep_id


def squeue(*jobs: str) -> list[str]:
    res = subprocess.run(["squeue", "-h", "-r", "-o", "%i %T", "-j", ",".join(jobs)], capture_output=True, text=True)
    return res.stdout.split("\n")[:-1]


def sacct_states(job: str) -> list[str]:
    """A job's states, its requeues included (`sacct -D`)."""
    res = subprocess.run(["sacct", "-n", "-X", "-P", "-D", "-o", "State", "-j", job], capture_output=True, text=True,
                         timeout=30)
    return res.stdout.split()


def runs(out: Path):
    client = MlflowClient(f"sqlite:///{out}/mlflow.db")
    found = client.search_runs([client.get_experiment_by_name("fibexp").experiment_id])
    (parent,) = [r for r in found if r.data.tags.get("fibexp.sweep_parent") == "true"]
    return client, parent, [r for r in found if r is not parent]


def test_a_detached_sweep_returns_at_once_runs_its_submitted_code_and_closes_itself(
        slurm_cluster, smoke_cache, tree, out):
    # --hold: every job waits in the queue until released, so the tree is broken before any starts
    proc, took, sweep_id = submit(tree, out, smoke_cache, "+hydra.launcher.additional_parameters.hold=true")
    print(f"detached submission: command to exit 0 in {took:.1f} s")
    home = Path(re.search(r"^  home: +(\S+)$", proc.stdout, re.M).group(1))
    assert "submitted as Slurm array" in proc.stdout and ", at most 64 at once; closing job" in proc.stdout
    for cmd in ("status", "wait", "cancel"):
        assert f"  {cmd}: " in proc.stdout and f"fibexp-sweep {cmd} {sweep_id}" in proc.stdout
    jobs = sorted({p.name.split("_")[0] for p in (home / ".submitit").glob("*_submission.sh")}, key=int)
    assert len(jobs) == 2  # the cells' array and the closing job
    assert "#SBATCH --dependency=afterany:" + jobs[0] in (home / ".submitit" / f"{jobs[1]}_submission.sh").read_text()
    assert all(line.endswith("PENDING") for line in squeue(*jobs)) and len(squeue(*jobs)) == 3

    # the user edits the tree after submission: run.py no longer imports, the model config is broken
    run_py = tree / "fibexp" / "training" / "run.py"
    run_py.write_text("raise RuntimeError('edited after submission')\n" + run_py.read_text())
    (tree / "conf" / "model" / "tiny.yaml").write_text("n_layers: not-a-number\n")
    (code,) = (home / "code").iterdir()
    assert "edited after submission" not in (code / "fibexp" / "training" / "run.py").read_text()
    for job in jobs:  # every job, the closing one too, sees the code it runs (for its run's tag fibexp.code)
        assert f"export FIBEXP_CODE=none+{code.name.split('-')[1]}\n" in (home / ".submitit" / f"{job}_submission.sh"
                                                                           ).read_text()

    shim = tree.parent / "no-accounting"  # a cluster whose sacct is disabled
    shim.mkdir()
    (shim / "sacct").write_text("#!/bin/sh\necho 'sacct: error: Slurm accounting storage is disabled' >&2\nexit 1\n")
    (shim / "sacct").chmod(0o755)
    for path in (os.environ["PATH"], f"{shim}:{os.environ['PATH']}"):
        status = run(tree, "fibexp.cli.sweep", "--output-dir", str(out), "status", sweep_id, env={"PATH": path})
        assert status.returncode == 0, status.stderr[-3000:]
        assert len(re.findall(r"PENDING \d+_\d", status.stdout)) == 2, status.stdout
        assert f"closed by job {jobs[1]} (PENDING" in status.stdout and "2 of 2 still queued or running" in status.stdout
        assert ("Slurm states from squeue" in status.stdout) == (path != os.environ["PATH"]), status.stdout

    subprocess.run(["scontrol", "release", *jobs], check=True, capture_output=True)
    waited = sweep_cli(REPO, out, "wait", sweep_id, "--poll-s", "1", timeout=400)
    assert waited.returncode == 0, waited.stdout[-3000:] + waited.stderr[-3000:]
    assert len(re.findall(r"^\[\d/2\] done  \S+ .* val ppl \d", waited.stdout, re.M)) == 2, waited.stdout
    assert "2 finished, 0 skipped, 0 failed" in waited.stdout

    client, parent, cells = runs(out)
    assert parent.info.status == "FINISHED" and parent.data.tags["fibexp.finished"] == "2"
    assert "report.md" in [a.path for a in client.list_artifacts(parent.info.run_id)]
    assert (home / "report.md").is_file() and "2 finished" in (home / "summary.txt").read_text()
    commit, diff = code.name.split("-")
    for r in cells:
        assert r.info.status == "FINISHED" and r.data.tags["fibexp.code"].startswith("none+")  # the tree has no git
        assert r.data.tags["fibexp.code"].endswith(diff)
    log = "".join(p.read_text() for p in (home / ".submitit").glob("*_log.err"))
    assert "edited after submission" not in log

    listed = sweep_cli(tree, out, "list")
    assert listed.returncode == 0 and re.search(rf"^{sweep_id} +FINISHED +2 cells  2 finished", listed.stdout, re.M), \
        listed.stdout
    again = sweep_cli(tree, out, "status", sweep_id)
    assert len(re.findall(r"FINISHED +COMPLETED \d+_\d +val ppl", again.stdout)) == 2, again.stdout


def test_cancel_stops_a_detached_sweep_its_cells_end_killed_and_the_same_command_resumes(
        slurm_cluster, smoke_cache, tree, out):
    longer = ["trainer.max_steps=200", "trainer.checkpoint_every_n_steps=20", "trainer.threads=1"]
    # not part of the cells' identity; slow enough that the other cell still trains while one is requeued
    slow = "+trainer.callbacks=[{_target_:fibexp.training.faults.Sleep,seconds:0.5}]"
    proc, _, sweep_id = submit(tree, out, smoke_cache, *longer, slow)
    deadline = time.monotonic() + 240
    while len(list(out.glob("runs/*/checkpoints/last.ckpt"))) < 2:
        assert time.monotonic() < deadline, "no checkpoint of both cells"
        time.sleep(0.5)

    # the user breaks the tree, then the scheduler requeues a cell's job: it resumes on the copied code
    run_py = tree / "fibexp" / "training" / "run.py"
    original = run_py.read_text()
    run_py.write_text("raise RuntimeError('edited after submission')\n" + original)
    array = proc.stdout.split("submitted as Slurm array ")[1].split()[0].strip(";,")
    ckpt = next(out.glob("runs/dense*/checkpoints/last.ckpt"))
    subprocess.run(["scontrol", "requeue", f"{array}_0"], check=True, capture_output=True, timeout=30)
    deadline = time.monotonic() + 240
    while sacct_states(f"{array}_0") != ["REQUEUED", "RUNNING"]:
        assert time.monotonic() < deadline, f"{array}_0 not running again after its requeue: {sacct_states(f'{array}_0')}"
        time.sleep(0.5)
    back = time.time()
    while ckpt.stat().st_mtime <= back:  # the requeued job trains on: a checkpoint written after it restarted
        assert time.monotonic() < deadline, f"{array}_0 wrote no checkpoint after its requeue: {sacct_states(f'{array}_0')}"
        time.sleep(0.5)
    run_py.write_text(original)

    t = time.monotonic()
    cancelled = sweep_cli(tree, out, "cancel", sweep_id)
    print(f"fibexp-sweep cancel: {time.monotonic() - t:.1f} s")
    assert cancelled.returncode == 0, cancelled.stdout[-3000:] + cancelled.stderr[-3000:]
    assert "0 finished, 0 skipped, 0 failed, 2 killed" in cancelled.stdout, cancelled.stdout
    assert f"stopped by SIGTERM" in cancelled.stdout and "resume with: fibexp-train -m attention=dense,fib_fixed" \
        in cancelled.stdout
    home = next((out / "sweeps").glob("????-??-??-*"))
    jobs = sorted({p.name.split("_")[0] for p in (home / ".submitit").glob("*_submission.sh")}, key=int)
    assert squeue(*jobs) == []
    _, parent, cells = runs(out)
    assert parent.info.status == "KILLED" and len(cells) == 2
    for r in cells:
        assert r.info.status == "KILLED" and 0 < int(r.data.tags["fibexp.stopped_step"]) < 200, r.data.tags

    # the user changes the code before resuming: the submission says which cells ran other code
    progress_py = tree / "fibexp" / "sweep" / "progress.py"
    progress_py.write_text(progress_py.read_text() + "\n# edited between the launches\n")
    again, _, same = submit(tree, out, smoke_cache, *longer)
    assert same == sweep_id
    (said,) = [line for line in again.stdout.splitlines() if "resume runs trained on other code" in line]
    assert said.startswith(f"Sweep {sweep_id}: 2 cell(s) resume runs trained on other code") and "dense-s42 (ran none+" \
        in said, said
    waited = sweep_cli(tree, out, "wait", sweep_id, "--poll-s", "1", timeout=400)
    assert waited.returncode == 0 and "2 finished, 0 skipped, 0 failed" in waited.stdout, waited.stdout[-3000:]
    client, parent, resumed = runs(out)
    assert parent.info.status == "FINISHED"
    assert {r.info.run_id for r in resumed} == {r.info.run_id for r in cells}  # each into its own run
    for r in resumed:
        assert sorted(m.step for m in client.get_metric_history(r.info.run_id, "train/loss")) == list(range(200))


def test_a_relaunch_while_a_detached_sweep_is_on_the_cluster_is_refused(slurm_cluster, smoke_cache, out):
    _, _, sweep_id = submit(REPO, out, smoke_cache, "+hydra.launcher.additional_parameters.hold=true")
    twin = run(REPO, "fibexp.cli.train", "-m", *CELLS, *SLURM, f"paths.output_dir={out}",
               f"paths.cache_dir={smoke_cache}")
    assert twin.returncode == 2 and len(twin.stderr.strip().splitlines()) == 1, twin.stderr[-2000:]
    assert twin.stderr.startswith(f"fibexp-train: error: sweep: {sweep_id}; allowed: one launch at a time: it is on "
                                  "the cluster")
    assert len(list((out / "sweeps").rglob("*_submission.sh"))) == 2  # nothing more submitted


THREE = ["attention=dense,fib_fixed,fib_stagger", "+scale=smoke", "eval.aux=false"]


def sacct(*arrays: str) -> dict[str, str]:
    """Each array task's state (tasks cancelled while pending are one record, `123_[1-2%1]`)."""
    res = subprocess.run(["sacct", "-n", "-P", "-X", "-o", "JobID,State", "-j", ",".join(arrays)], capture_output=True,
                         text=True, check=True)
    found = {}
    for line in res.stdout.splitlines():
        job, state = line.split("|")[:2]
        m = re.fullmatch(r"(\d+)_\[(\d+)-(\d+)(?:%\d+)?\]", job)
        for task in ([f"{m[1]}_{i}" for i in range(int(m[2]), int(m[3]) + 1)] if m else [job]):
            found[task] = state.split()[0]
    return found


def test_max_failures_stops_a_detached_sweep_and_array_parallelism_runs_one_cell_at_a_time(
        slurm_cluster, smoke_cache, out):
    crash = "+trainer.callbacks=[{_target_:fibexp.training.faults.Crash,at_step:1}]"
    proc, _, sweep_id = submit(REPO, out, smoke_cache, crash, "sweep.max_failures=1",
                               "hydra.launcher.array_parallelism=1", cells=THREE)
    assert "3 cell(s) submitted as Slurm array" in proc.stdout and ", at most 1 at once; closing job" in proc.stdout
    home = Path(re.search(r"^  home: +(\S+)$", proc.stdout, re.M).group(1))
    array = min((p.name.split("_")[0] for p in (home / ".submitit").glob("*_submission.sh")), key=int)
    assert "#SBATCH --array=0-2%1" in (home / ".submitit" / f"{array}_submission.sh").read_text()

    waited = sweep_cli(REPO, out, "wait", sweep_id, "--poll-s", "1", timeout=300)
    assert waited.returncode == 1, waited.stdout[-3000:] + waited.stderr[-3000:]
    assert f"Sweep {sweep_id}: 0 finished, 0 skipped, 1 failed, 2 pending" in waited.stdout, waited.stdout
    assert "sweep stopped after 1 failed cell(s) (sweep.max_failures=1): no further cell of the 3 started" \
        in waited.stdout
    states = sacct(array)
    assert sorted(states.values()) == ["CANCELLED", "CANCELLED", "COMPLETED"], states  # the failed cell's job ends 0
    _, parent, cells = runs(out)
    assert len(cells) == 1 and cells[0].info.status == "FAILED"  # the two others never started
    assert parent.info.status == "FAILED" and parent.data.tags["fibexp.pending"] == "2"
    assert parent.data.tags["fibexp.cut"].startswith("sweep stopped after 1 failed cell(s)")


def test_a_sweep_over_max_array_size_is_submitted_as_several_arrays_that_all_finish(
        slurm_cluster, smoke_cache, tmp_path, out):
    shim = tmp_path / "small-arrays"  # a cluster whose MaxArraySize is 2
    shim.mkdir()
    real = shutil.which("scontrol")
    (shim / "scontrol").write_text(f'#!/bin/sh\nif [ "$1 $2" = "show config" ]; then "{real}" "$@" | '
                                   f'sed "s/^MaxArraySize *=.*/MaxArraySize            = 2/"; '
                                   f'else exec "{real}" "$@"; fi\n')
    (shim / "scontrol").chmod(0o755)
    path = {"PATH": f"{shim}:{os.environ['PATH']}"}
    proc, _, sweep_id = submit(REPO, out, smoke_cache, cells=THREE, env=path)
    (arrays,) = re.findall(r"submitted as Slurm array (\d+, \d+), at most", proc.stdout)
    arrays = arrays.split(", ")
    waited = sweep_cli(REPO, out, "wait", sweep_id, "--poll-s", "1", timeout=300)
    assert waited.returncode == 0 and "3 finished, 0 skipped, 0 failed" in waited.stdout, waited.stdout[-3000:]
    # submitit submits an array of one as a plain job
    assert sacct(*arrays) == {f"{arrays[0]}_0": "COMPLETED", f"{arrays[0]}_1": "COMPLETED", arrays[1]: "COMPLETED"}
    status = sweep_cli(REPO, out, "status", sweep_id)
    assert len(re.findall(r"FINISHED +COMPLETED \d+(_\d)? +val ppl", status.stdout)) == 3, status.stdout
    _, parent, cells = runs(out)
    assert parent.info.status == "FINISHED" and len(cells) == 3
