"""Another process holds the local sqlite store locked (`BEGIN EXCLUSIVE`, as a `sqlite3` shell
inside a transaction does) for longer than MLflow's busy timeout (20 s, fixed in MLflow): a run
that starts meanwhile waits, saying so in one line; a run in training goes on, its tracking calls
wait in its journal. Both end FINISHED with every step logged once. A lock that outlasts
logger.outage_wait_s ends the run in one line, exit 75."""
from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from fibexp.tracking import journal

BUSY_S = 20  # MLflow's busy timeout: a call that meets the lock fails after this long, unless waited out
STEPS = 30


class Lock:
    """Another process holding `db` exclusively locked, from construction until `release()`."""

    def __init__(self, db: Path):
        self.proc = subprocess.Popen([sys.executable, "-c", "import sqlite3, sys\n"
                                      "con = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=60)\n"
                                      "con.execute('BEGIN EXCLUSIVE'); print('held', flush=True)\n"
                                      "sys.stdin.readline(); con.execute('COMMIT')", str(db)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout.readline().strip() == "held"
        self.since = time.monotonic()

    def release(self) -> float:
        """Seconds it was held."""
        self.proc.communicate("\n", timeout=30)
        return time.monotonic() - self.since


def start(cmd: list[str], tmp_path: Path) -> subprocess.Popen:
    """fibexp-train in the background, its stdout and stderr in files (a pipe nobody reads fills up)."""
    proc = subprocess.Popen(cmd, stdout=open(tmp_path / "stdout.txt", "w"), stderr=open(tmp_path / "stderr.txt", "w"))
    proc.output = lambda: ((tmp_path / "stdout.txt").read_text(), (tmp_path / "stderr.txt").read_text())
    return proc


def command(out: Path, cache: Path, tiny: list[str], *extra: str) -> list[str]:
    return [sys.executable, "-m", "fibexp.cli.train", *tiny, f"paths.output_dir={out}", f"paths.cache_dir={cache}",
            f"trainer.max_steps={STEPS}", "trainer.checkpoint_every_n_steps=10", "eval.aux=false", *extra]


def new_store(out: Path) -> str:
    """The store exists (its schema), as after a first run: there is a file to lock."""
    uri = f"sqlite:///{out}/mlflow.db"
    MlflowClient(uri).search_experiments()
    return uri


def finished_run(uri: str):
    """The one run of the store: FINISHED, every training step logged exactly once."""
    client = MlflowClient(uri)
    (run,) = client.search_runs([client.get_experiment_by_name("fibexp").experiment_id])
    assert run.info.status == "FINISHED"
    assert sorted(m.step for m in client.get_metric_history(run.info.run_id, "train/loss")) == list(range(STEPS))
    assert "val/ppl/drama" in run.data.metrics and "config.yaml" in {a.path for a in client.list_artifacts(run.info.run_id)}
    return run


@pytest.mark.slow
def test_a_run_started_while_the_store_is_locked_waits_for_it(tmp_path, cache_dir, tiny):
    out = tmp_path / "outputs"
    uri = new_store(out)
    lock = Lock(out / "mlflow.db")
    proc = start(command(out, cache_dir, tiny), tmp_path)
    waiting_line = f"fibexp-train: tracking store is locked ({out / 'mlflow.db'}): waiting up to 300 s for the process " \
                   "that holds it"
    deadline = time.monotonic() + 120
    while waiting_line not in proc.output()[1]:  # the run has met the lock (its tracking store's first call)
        assert proc.poll() is None and time.monotonic() < deadline, proc.output()[1][-3000:]
        time.sleep(0.2)
    time.sleep(BUSY_S - 3)  # with the first try's 5 s (sqlite's own timeout) past MLflow's busy timeout
    assert proc.poll() is None
    held = lock.release()
    assert proc.wait(timeout=120) == 0, proc.output()[1][-3000:]
    stdout, stderr = proc.output()
    print(f"lock held {held:.0f} s; the run waited and finished")
    assert [line for line in stderr.splitlines() if "tracking store" in line] == [waiting_line]
    assert "Traceback" not in stdout + stderr
    finished_run(uri)


@pytest.mark.slow
def test_a_run_in_training_goes_on_while_the_store_is_locked_and_logs_every_step(tmp_path, cache_dir, tiny):
    out = tmp_path / "outputs"
    uri = f"sqlite:///{out}/mlflow.db"
    proc = start(command(out, cache_dir, tiny, "+trainer.callbacks=[{_target_:fibexp.training.faults.Sleep,"
                         "seconds:0.5}]"), tmp_path)
    client, deadline = MlflowClient(uri), time.monotonic() + 120
    while True:  # a few steps in the store: the run is training
        assert proc.poll() is None and time.monotonic() < deadline, proc.output()[1][-3000:]
        exp = out.joinpath("mlflow.db").exists() and client.get_experiment_by_name("fibexp")
        runs = client.search_runs([exp.experiment_id]) if exp else []
        if runs and len(client.get_metric_history(runs[0].info.run_id, "train/loss")) >= 3:
            break
        time.sleep(0.3)
    run_dir = Path(runs[0].data.tags["fibexp.run_dir"])
    lock = Lock(out / "mlflow.db")
    time.sleep(BUSY_S - 5)
    pending, _ = journal.read_pending(run_dir / journal.JOURNAL)
    waiting = sorted(m[3] for e in pending if e["op"] == "batch" for m in e["metrics"] if m[0] == "train/loss")
    print(f"{len(pending)} calls, train/loss steps {waiting[:1]}..{waiting[-1:]} waiting in the journal")
    assert proc.poll() is None and len(waiting) >= 10  # training went on meanwhile
    time.sleep(7)  # past MLflow's busy timeout: the journal's sender has met it
    held = lock.release()
    assert proc.wait(timeout=120) == 0, proc.output()[1][-3000:]
    stdout, stderr = proc.output()
    said = [line for line in stdout.splitlines() if "fibexp.tracking.journal" in line]
    print(f"lock held {held:.0f} s\n" + "\n".join(said))
    assert len(said) == 2 and "tracking store is locked" in said[0] and "training goes on" in said[0], said
    freed = re.search(r"tracking store free again after (\d+) s", said[1])
    assert freed and int(freed.group(1)) >= held - 5, said  # counted from the first try that met the lock
    assert "Traceback" not in stdout + stderr
    assert finished_run(uri).info.run_id == runs[0].info.run_id
    assert not (run_dir / journal.JOURNAL).exists()  # everything acknowledged


@pytest.mark.slow
def test_a_lock_that_outlasts_the_wait_ends_the_run_in_one_line_with_exit_75(tmp_path, cache_dir, tiny):
    out = tmp_path / "outputs"
    uri = new_store(out)
    lock = Lock(out / "mlflow.db")
    proc = subprocess.run(command(out, cache_dir, tiny, "logger.outage_wait_s=1"), capture_output=True, text=True,
                          timeout=120)
    lock.release()
    db = out / "mlflow.db"
    assert proc.returncode == 75, proc.stderr[-3000:]
    waited, error = proc.stderr.strip().splitlines()  # no traceback
    assert waited == f"fibexp-train: tracking store is locked ({db}): waiting up to 1 s for the process that holds it"
    assert error.startswith(f"fibexp-train: error: tracking store {db} locked by another process for ")
    assert "the same command again once it is free" in error
    assert MlflowClient(uri).get_experiment_by_name("fibexp") is None  # nothing was created
