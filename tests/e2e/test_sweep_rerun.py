"""`fibexp-sweep rerun`: a logged run trained again from the config the store holds, as a new run
linked to the old one; a sweep's parent id reruns its failed cells only; an unknown id is one line."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from helpers.mlflow_runs import fibexp_runs

REPO = Path(__file__).resolve().parents[2]
# a grid whose 2-step cell finishes and whose 4-step cell raises at step 3
GRID = ["-m", "trainer.max_steps=2,4", "+scale=smoke", "eval.aux=false", "trainer.threads=1", "hydra/launcher=local",
        "+trainer.callbacks=[{_target_:fibexp.training.faults.Crash,at_step:3}]"]


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", *args], cwd=REPO, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONUNBUFFERED": "1"})


def test_rerun_of_a_run_and_of_a_sweep_s_failed_cells(tmp_path, cache_dir):
    out = tmp_path / "outputs"
    uri = f"sqlite:///{out}/mlflow.db"
    sweep = cli("fibexp.cli.train", *GRID, f"paths.output_dir={out}", f"paths.cache_dir={cache_dir}",
                f"logger.tracking_uri={uri}")
    assert sweep.returncode == 1 and "1 finished, 0 skipped, 1 failed" in sweep.stdout, sweep.stdout[-3000:]
    client, found = fibexp_runs(uri)
    (parent,) = [r for r in found if r.data.tags.get("fibexp.sweep_parent") == "true"]
    (done,) = [r for r in found if r.info.status == "FINISHED" and r is not parent]
    (failed,) = [r for r in found if r.info.status == "FAILED" and r is not parent]

    again = cli("fibexp.cli.sweep", "--output-dir", str(out), "rerun", parent.info.run_id, "--tracking-uri", uri)
    assert again.returncode == 1, again.stdout[-3000:] + again.stderr[-3000:]
    (said,) = [line for line in again.stdout.splitlines() if line.startswith("rerun of ")]
    assert said.startswith(f"rerun of {failed.info.run_name} ({failed.info.run_id}, FAILED) as ") and "; code: " in said
    client, after = fibexp_runs(uri)
    (new,) = [r for r in after if r.info.run_id not in {f.info.run_id for f in found}]  # the failed cell only
    assert new.data.tags["fibexp.rerun_of"] == failed.info.run_id and new.info.status == "FAILED"
    assert new.data.tags["fibexp.config_hash"] == failed.data.tags["fibexp.config_hash"]
    assert "deliberate failure at step 3" in new.data.tags["fibexp.failure"]  # the same config: the same fault
    assert "fibexp.sweep" not in new.data.tags  # a rerun is no cell of the sweep

    again = cli("fibexp.cli.sweep", "--output-dir", str(out), "rerun", done.info.run_id, "--tracking-uri", uri)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    client, last = fibexp_runs(uri)
    (rerun,) = [r for r in last if r.data.tags.get("fibexp.rerun_of") == done.info.run_id]
    assert rerun.info.status == "FINISHED" and rerun.info.run_name == f"{done.info.run_name}-rerun-{done.info.run_id[:8]}"
    assert rerun.data.tags["fibexp.config_hash"] == done.data.tags["fibexp.config_hash"]
    assert Path(rerun.data.tags["fibexp.run_dir"]) != Path(done.data.tags["fibexp.run_dir"])
    for key in ("val/loss/drama", "val/loss/prose"):  # trained again, on the same config: the same numbers
        assert abs(rerun.data.metrics[key] - done.data.metrics[key]) < 1e-5, (key, rerun.data.metrics, done.data.metrics)
    assert f"rerun {rerun.info.run_id} of {done.info.run_id}: FINISHED" in again.stdout

    unknown = cli("fibexp.cli.sweep", "--output-dir", str(out), "rerun", "0" * 32, "--tracking-uri", uri)
    assert unknown.returncode == 2 and unknown.stdout == ""
    assert re.fullmatch(r"fibexp-sweep: error: run_id: '?0{32}'?; allowed: a run id of the store sqlite:///\S+\n",
                        unknown.stderr), unknown.stderr
    nowhere = tmp_path / "empty"
    no_store = cli("fibexp.cli.sweep", "--output-dir", str(nowhere), "rerun", done.info.run_id)
    assert no_store.returncode == 2 and no_store.stderr == (
        f"fibexp-sweep: error: --tracking-uri: sqlite:///{nowhere}/mlflow.db; allowed: an existing store (give "
        "--tracking-uri, or --output-dir of its runs)\n") and not nowhere.exists()
