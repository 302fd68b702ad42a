"""A run that passes the memory estimate but outgrows its limit while training ends in one line
naming the key to lower, exit 2, its MLflow run FAILED with that line as its reason: no traceback,
no kernel kill, no swap."""
from __future__ import annotations

import mlflow

GUARD = "+trainer.callbacks=[{_target_:fibexp.training.memory_guard.MemoryGuard,limit_gb:0.1}]"


def test_a_run_past_its_memory_limit_ends_failed_in_one_line(train_cli):
    proc = train_cli("trainer.accelerator=cpu", GUARD, check=False)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    line = proc.stderr.strip().splitlines()[-1]
    assert line.startswith("fibexp-train: error: data.batch_size: 2; allowed: a size whose run fits in memory: "
                           "this run held "), line
    assert "against a limit of 102 MiB (limit_gb=0.1); lower data.batch_size, model.seq_len" in line
    client = mlflow.MlflowClient(f"sqlite:///{train_cli.out}/mlflow.db")
    runs = client.search_runs([client.get_experiment_by_name("fibexp").experiment_id])
    assert [r.info.status for r in runs] == ["FAILED"]
    assert runs[0].data.tags["fibexp.failure"] == "fibexp.errors.OutOfMemory: " + line[len("fibexp-train: error: "):]
