"""A run whose `mlflow server` goes away after it started: training goes on, its tracking calls
wait in the run dir's journal, and either the server comes back (the run ends FINISHED with every
metric) or the run ends with exit 75 and `fibexp-upload RUN_DIR` completes it later."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from fibexp.tracking import journal

STEPS = 60  # 0.5 s each (fibexp.training.faults.Sleep): about 30 s of training


def start_run(cmd: list[str], logs: Path) -> subprocess.Popen:
    """fibexp-train in the background, its stdout and stderr in files (a pipe nobody reads fills up)."""
    proc = subprocess.Popen(cmd, stdout=open(logs / "stdout.txt", "w"), stderr=open(logs / "stderr.txt", "w"),
                            text=True)
    proc.output = lambda: ((logs / "stdout.txt").read_text(), (logs / "stderr.txt").read_text())
    return proc


def command(out: Path, cache: Path, tiny: list[str], uri: str, sleep: float = 0.5) -> list[str]:
    return [sys.executable, "-m", "fibexp.cli.train", *tiny, f"paths.output_dir={out}", f"paths.cache_dir={cache}",
            f"logger.tracking_uri={uri}", f"trainer.max_steps={STEPS}", "trainer.checkpoint_every_n_steps=20",
            "eval.aux=false", f"+trainer.callbacks=[{{_target_:fibexp.training.faults.Sleep,seconds:{sleep}}}]"]


def wait_for_steps(uri: str, n: int, proc: subprocess.Popen, timeout: float = 90) -> str:
    """The run's id once its train/loss history on the server has `n` points."""
    client, deadline = MlflowClient(uri), time.time() + timeout
    while time.time() < deadline:
        assert proc.poll() is None, proc.output()[1][-3000:]
        exp = client.get_experiment_by_name("fibexp")
        runs = client.search_runs([exp.experiment_id]) if exp else []
        if runs and len(client.get_metric_history(runs[0].info.run_id, "train/loss")) >= n:
            return runs[0].info.run_id
        time.sleep(0.5)
    pytest.fail(f"no {n} train/loss points in {timeout} s")


def assert_complete(uri: str, run_id: str) -> None:
    client = MlflowClient(uri)
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED"
    history = client.get_metric_history(run_id, "train/loss")
    assert sorted(h.step for h in history) == list(range(STEPS))  # every step once, none twice
    m = run.data.metrics
    for s in ("drama", "prose"):
        for name in (f"val/ppl/{s}", f"val/loss/{s}", *(f"extrap/rel_x{k}/{s}" for k in (1, 2, 4))):
            assert name in m, name
    assert "perf/step_ms" in m and m["perf/tokens_per_s_eval"] > 0
    assert run.data.params["trainer.max_steps"] == str(STEPS)
    assert {"config.yaml", "ppl_vs_length.png"} <= {a.path for a in client.list_artifacts(run_id)}


def run_dir_of(out: Path) -> Path:
    (record,) = (out / "runs").glob("*/mlflow_run.json")
    return record.parent


@pytest.mark.slow
def test_server_stopped_and_restarted_during_a_run(mlflow_server, tmp_path, cache_dir, tiny):
    t0 = time.monotonic()
    stamp = lambda: f"{time.monotonic() - t0:5.1f} s"  # noqa: E731
    out = tmp_path / "outputs"
    proc = start_run(command(out, cache_dir, tiny, mlflow_server.uri), tmp_path)
    run_id = wait_for_steps(mlflow_server.uri, 3, proc)
    mlflow_server.stop()
    print(f"{stamp()} server stopped after train/loss step 3")
    time.sleep(20)
    assert proc.poll() is None  # still training
    pending, _ = journal.read_pending(run_dir_of(out) / journal.JOURNAL)
    print(f"{stamp()} {len(pending)} calls waiting in the journal")
    assert pending
    mlflow_server.start()
    print(f"{stamp()} server restarted")
    client = MlflowClient(mlflow_server.uri)
    while len(client.get_metric_history(run_id, "train/loss")) <= 3 and proc.poll() is None:
        time.sleep(0.2)
    seen = len(client.get_metric_history(run_id, "train/loss"))
    print(f"{stamp()} {seen} train/loss points on the server, run {'still training' if proc.poll() is None else 'ended'}")
    proc.wait(timeout=120)
    print(f"{stamp()} run exited {proc.returncode}")
    stdout, stderr = proc.output()
    assert proc.returncode == 0, stderr[-3000:]
    said = [line for line in stdout.splitlines() if "fibexp.tracking.journal" in line]
    print("\n".join(said))
    assert any("unreachable" in line for line in said) and any("back after" in line for line in said)
    assert_complete(mlflow_server.uri, run_id)
    assert not (run_dir_of(out) / journal.JOURNAL).exists()  # everything acknowledged


@pytest.mark.slow
def test_server_never_back_then_upload(mlflow_server, tmp_path, cache_dir, tiny):
    t0 = time.monotonic()
    stamp = lambda: f"{time.monotonic() - t0:5.1f} s"  # noqa: E731
    out = tmp_path / "outputs"
    proc = start_run(command(out, cache_dir, tiny, mlflow_server.uri, sleep=0.2) + ["logger.outage_wait_s=3"], tmp_path)
    run_id = wait_for_steps(mlflow_server.uri, 3, proc)
    mlflow_server.stop()
    print(f"{stamp()} server stopped for good")
    proc.wait(timeout=120)
    print(f"{stamp()} run exited {proc.returncode}")
    stdout, stderr = proc.output()
    assert proc.returncode == journal.EX_TEMPFAIL, stderr[-3000:]
    last = stderr.strip().splitlines()[-1]
    assert last.startswith("fibexp-train: error: tracking server") and "fibexp-upload" in last, stderr[-2000:]
    run_dir = run_dir_of(out)
    kept = run_dir / journal.JOURNAL
    pending, _ = journal.read_pending(kept)
    ops = [e["op"] for e in pending]
    assert ops[-1] == "terminate" and pending[-1]["status"] == "FINISHED"
    steps = sorted(m[3] for e in pending if e["op"] == "batch" for m in e["metrics"] if m[0] == "train/loss")
    assert steps and steps[-1] == STEPS - 1  # the last training steps are in the journal
    copy = tmp_path / "journal-before-upload.jsonl"
    shutil.copyfile(kept, copy)
    artifacts = tmp_path / "artifacts-before-upload"
    shutil.copytree(run_dir / journal.ARTIFACTS, artifacts)

    mlflow_server.start()
    print(f"{stamp()} server started again")
    upload = [sys.executable, "-m", "fibexp.cli.upload", str(run_dir)]  # the fibexp-upload script
    first = subprocess.run(upload, capture_output=True, text=True, timeout=120)
    print(f"{stamp()} uploaded: {first.stdout.strip()}")
    assert first.returncode == 0, first.stderr[-2000:]
    assert f"{len(pending)} tracking calls sent" in first.stdout
    assert_complete(mlflow_server.uri, run_id)
    assert not kept.exists()
    second = subprocess.run(upload, capture_output=True, text=True, timeout=120)
    assert second.returncode == 0 and "nothing to send" in second.stdout

    # Sending the same journal again (e.g. an upload that died before it could record what the
    # server acknowledged) adds nothing: MLflow keeps one row per (key, timestamp, step, value).
    shutil.copyfile(copy, kept)
    shutil.copytree(artifacts, run_dir / journal.ARTIFACTS)
    journal.upload(run_dir)
    assert_complete(mlflow_server.uri, run_id)
    assert json.loads((run_dir / "mlflow_run.json").read_text())["run_id"] == run_id
