"""Checkpoints cannot run code (ours, Lightning's resume, notebooks'/export's reads), a checkpoint
of another model is refused with what differs, and a run dir tracked in another store resumes as
a new run of the current store tagged with the original."""
from __future__ import annotations

import dataclasses
import json
import os
import shlex
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir
from mlflow.tracking import MlflowClient

from fibexp.config import identity, schema
from fibexp.deploy import restore
from fibexp import checkpoints
from fibexp.training import run as training_run
from fibexp.training.inputs import check_inputs
from fibexp.training.record import Record
from helpers.cli import refused
from helpers.mlflow_runs import fibexp_runs

PREEMPT = "+trainer.callbacks=[{_target_:fibexp.training.faults.Preempt,at_step:3}]"
SYSTEM = f"{os.system.__module__}.{os.system.__name__}"  # posix.system: what the payload calls


class Payload:
    """Unpickled, runs `touch marker`: the code a crafted checkpoint would smuggle in."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {shlex.quote(str(self.marker))}",)


def crafted(path: Path, marker: Path, **save) -> Path:
    torch.save({"state_dict": {}, "global_step": 0, "epoch": 0, "loops": Payload(marker)}, path, **save)
    return path


def test_a_checkpoint_that_would_run_code_is_refused_by_name_and_never_runs(tmp_path, cache_dir, tiny, monkeypatch,
                                                                           capsys):
    marker = tmp_path / "created-by-the-checkpoint"
    evil = crafted(tmp_path / "evil.ckpt", marker)
    out = tmp_path / "outputs"
    err = refused([*tiny, f"paths.output_dir={out}", f"paths.cache_dir={cache_dir / 'never'}", f"ckpt_path={evil}"],
                  monkeypatch, capsys)
    assert err == (f"fibexp-train: error: ckpt_path: {evil} needs {SYSTEM}, which a fibexp checkpoint never "
                   "contains; allowed: a .ckpt file written by fibexp-train (refusing to unpickle it)")
    with pytest.raises(checkpoints.CheckpointError, match=f"ckpt_path: .* needs {SYSTEM}"):
        checkpoints.SafeCheckpointIO().load_checkpoint(evil)  # Lightning's own resume reads through this
    with pytest.raises(checkpoints.CheckpointError, match=f"run: .* needs {SYSTEM}"):
        restore.load_weights(torch.nn.Linear(1, 1), evil)  # notebooks and fibexp-export
    assert not marker.exists()
    assert not (cache_dir / "never").exists() and not fibexp_runs(out)[1]
    torch.load(evil, weights_only=False)  # the payload is live: unpickled the unsafe way, it runs
    assert marker.exists()


@pytest.mark.parametrize("damage", ["truncated", "legacy pickle with a payload"])
def test_a_damaged_or_legacy_file_is_refused_in_one_line_without_unpickling(damage, tmp_path):
    marker = tmp_path / "created-by-the-checkpoint"
    path = tmp_path / "x.ckpt"
    if damage == "truncated":
        torch.save({"state_dict": {"model.w": torch.ones(64, 64)}, "global_step": 3}, path)
        path.write_bytes(path.read_bytes()[:2000])
    else:  # torch's pre-1.6 format is a bare pickle: nothing can be scanned before it runs
        crafted(path, marker, _use_new_zipfile_serialization=False)
    with pytest.raises(checkpoints.CheckpointError) as e:
        checkpoints.read(path)
    assert str(e.value).startswith(f"ckpt_path: {path} is not a readable checkpoint (") and "\n" not in str(e.value)
    assert not marker.exists()


@pytest.mark.slow
def test_resume_in_another_store_is_a_new_tagged_run_and_another_model_is_refused(train_cli, tmp_path, cache_dir,
                                                                                   tiny, monkeypatch, capsys):
    killed = train_cli(PREEMPT, check=False)  # SIGKILLed at step 3, right after last.ckpt
    assert killed.returncode != 0
    store_a = f"sqlite:///{train_cli.out.resolve()}/mlflow.db"
    client_a, (old,) = fibexp_runs(store_a)
    old_id = old.info.run_id
    history_a = [h.step for h in client_a.get_metric_history(old_id, "train/loss")]
    assert history_a == [0, 1, 2][:len(history_a)]  # the rest, if any, still in the run dir's journal

    store_b = f"sqlite:///{tmp_path / 'elsewhere' / 'mlflow.db'}"
    proc = train_cli(env={"MLFLOW_TRACKING_URI": store_b})  # the user switched stores, reran the command
    warned = [line for line in (proc.stdout + proc.stderr).splitlines() if "fibexp.resumed_from" in line]
    assert len(warned) == 1 and old_id in warned[0] and store_a in warned[0] and store_b in warned[0], warned
    assert "weights_only" not in killed.stdout + killed.stderr + proc.stdout + proc.stderr

    client_b, (new,) = fibexp_runs(store_b)
    assert new.info.status == "FINISHED" and new.info.run_id != old_id
    assert new.data.tags["fibexp.resumed_from"] == f"{store_a}#{old_id}"
    steps = [h.step for h in client_b.get_metric_history(new.info.run_id, "train/loss")]
    assert sorted(steps) == [3, 4, 5]  # training went on from the checkpoint to max_steps
    assert "val/loss/drama" in new.data.metrics
    run_dir = Path(new.data.tags["fibexp.run_dir"])
    assert json.loads((run_dir / "mlflow_run.json").read_text()) == {"run_id": new.info.run_id, "tracking_uri": store_b}
    again = client_a.get_run(old_id)  # the first store's run is untouched
    assert again.info.status == "RUNNING" and again.info.end_time == old.info.end_time
    assert again.data.tags == old.data.tags
    # the calls the killed process had not sent went to its own store, before the new run began
    assert sorted(h.step for h in client_a.get_metric_history(old_id, "train/loss")) == [0, 1, 2]

    last = run_dir / "checkpoints" / "last.ckpt"
    state = checkpoints.read(last)
    assert state[checkpoints.IDENTITY_KEY]["model"]["d_model"] == 32  # written by SafeCheckpointIO
    base = [*tiny, f"paths.output_dir={tmp_path / 'refused'}", f"paths.cache_dir={cache_dir / 'never'}"]
    err = refused([*base, "model.d_model=48", f"ckpt_path={last}"], monkeypatch, capsys)
    assert f"ckpt_path: {last} is from another model (checkpoint vs this run): model.d_model 32 vs 48, " in err
    assert "embed.weight [512, 32] vs [512, 48]" in err
    err = refused([*base, "attention=fib_fixed", f"ckpt_path={last}"], monkeypatch, capsys)
    assert "attention.kind dense vs sparse" in err
    del state[checkpoints.IDENTITY_KEY]  # a checkpoint written before the config was stored: shapes alone
    older = tmp_path / "older.ckpt"
    torch.save(state, older)
    err = refused([*base, "model.d_model=48", f"ckpt_path={older}"], monkeypatch, capsys)
    assert "is from another model (checkpoint vs this run): embed.weight [512, 32] vs [512, 48]" in err
    assert "model.d_model" not in err
    assert not (cache_dir / "never").exists() and not (tmp_path / "refused" / "mlflow.db").exists()


def test_a_live_run_is_continued_and_a_deleted_one_becomes_a_new_tagged_run(tmp_path, tiny, caplog):
    """Record.open on the run dir's record: the same store under another URI spelling continues
    the run; a run deleted from the store is replaced by a new one naming it."""
    with initialize_config_dir(schema.CONF_DIR, version_base="1.3"):
        cfg = compose("train", overrides=[*tiny, "paths.root=.", f"paths.output_dir={tmp_path}"])
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    run_dir = tmp_path / "runs" / "x"
    run = check_inputs(cfg, run_dir)  # nothing to resume: ckpt None
    assert run.ckpt is None and run.uri == uri
    assert (run.cell, run.name, run.config_hash) == (identity.cell(cfg), identity.run_name(cfg), identity.config_hash(cfg))
    client = MlflowClient(uri)
    resuming = dataclasses.replace(run, ckpt=run.last_ckpt)
    first = Record.open(run, client, "corpus").run_id
    record = run_dir / "mlflow_run.json"
    record.write_text(json.dumps({"run_id": first, "tracking_uri": f"sqlite:///{tmp_path}/./mlflow.db"}))
    assert Record.open(resuming, client, "corpus").run_id == first
    assert json.loads(record.read_text())["tracking_uri"] == uri  # the working spelling from now on
    client.delete_run(first)
    second = Record.open(resuming, client, "corpus").run_id
    assert second != first and client.get_run(second).data.tags["fibexp.resumed_from"] == f"{uri}#{first}"
    assert json.loads(record.read_text()) == {"run_id": second, "tracking_uri": uri}
    (warned,) = [r.getMessage() for r in caplog.records if "resumed_from" in r.getMessage()]
    assert first in warned and uri in warned
    io = training_run.build_trainer(run, logger=False).strategy.checkpoint_io  # what fit(ckpt_path=...) reads with
    assert isinstance(io, checkpoints.SafeCheckpointIO)
    assert io.ident == {"model": identity.identity(cfg)["model"], "attention": identity.identity(cfg)["attention"]}
