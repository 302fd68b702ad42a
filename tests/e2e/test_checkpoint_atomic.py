"""Checkpoints survive being cut: written to a temporary file, fsynced and renamed over
last.ckpt, the one replaced kept as previous.ckpt; a run killed mid-write resumes from the
checkpoint in place; an unreadable last.ckpt falls back to previous.ckpt with one warning, and a
run starts over only when neither reads."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from fibexp import checkpoints
from helpers.mlflow_runs import fibexp_runs


def state(step: int) -> dict:
    return {"state_dict": {"model.w": torch.full((64, 64), float(step))}, "global_step": step}


def steps_of(path: Path) -> int:
    return checkpoints.read(path)["global_step"]


def test_each_save_is_atomic_and_keeps_the_one_it_replaces(tmp_path, monkeypatch):
    io = checkpoints.SafeCheckpointIO()
    last = tmp_path / "checkpoints" / "last.ckpt"
    io.save_checkpoint(state(3), last)
    assert sorted(p.name for p in last.parent.iterdir()) == ["last.ckpt"]
    synced = []
    monkeypatch.setattr(os, "fsync", lambda fd: synced.append(fd))
    io.save_checkpoint(state(6), last)
    assert len(synced) == 2  # the file's bytes, then the directory entry
    assert steps_of(last) == 6 and steps_of(last.with_name("previous.ckpt")) == 3
    assert sorted(p.name for p in last.parent.iterdir()) == ["last.ckpt", "previous.ckpt"]

    def cut(checkpoint, f):  # the write dies halfway
        f.write(b"PK\x03\x04 half a checkpoint")
        raise OSError("No space left on device")

    monkeypatch.setattr(io, "_write", cut)
    with pytest.raises(OSError, match="No space"):
        io.save_checkpoint(state(9), last)
    assert steps_of(last) == 6 and steps_of(last.with_name("previous.ckpt")) == 3  # both as they were
    assert sorted(p.name for p in last.parent.iterdir()) == ["last.ckpt", "previous.ckpt"]  # no temporary left


def test_an_unreadable_last_falls_back_to_previous_or_starts_over_when_none_reads(tmp_path):
    io = checkpoints.SafeCheckpointIO()
    last = tmp_path / "last.ckpt"
    io.save_checkpoint(state(3), last)
    io.save_checkpoint(state(6), last)
    assert checkpoints.resumable(last) == (last, None)
    last.write_bytes(last.read_bytes()[:1000])  # truncated
    path, warning = checkpoints.resumable(last, move=False)  # another rank: same decision, nothing moved
    assert path == tmp_path / "previous.ckpt" and last.exists()
    path, warning = checkpoints.resumable(last)
    assert path == tmp_path / "previous.ckpt" and steps_of(path) == 3
    assert "\n" not in warning and "last.ckpt is not a readable checkpoint" in warning
    assert warning.endswith("resuming from previous.ckpt (moved aside as last.ckpt.unreadable)")
    assert not last.exists() and (tmp_path / "last.ckpt.unreadable").exists()
    path.write_bytes(b"garbage")
    path, warning = checkpoints.resumable(last)
    assert path is None and "previous.ckpt is not a readable checkpoint" in warning and "starting over" in warning
    assert not (tmp_path / "previous.ckpt").exists()
    assert checkpoints.resumable(last) == (None, None)  # nothing left: a fresh start, no warning


def test_a_checkpoint_that_needs_code_is_refused_not_skipped(tmp_path):
    last = tmp_path / "last.ckpt"
    torch.save({"state_dict": {}, "global_step": 0, "x": Path("p")}, last)  # a global outside the allowlist
    with pytest.raises(checkpoints.CheckpointError, match="which a fibexp checkpoint never contains"):
        checkpoints.resumable(last)
    assert last.exists()


def _train(out: Path, cache_dir: Path, tiny, *overrides: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "fibexp.cli.train", *tiny, "trainer.max_steps=9", "eval.aux=false",
                           f"paths.output_dir={out}", f"paths.cache_dir={cache_dir}", *overrides],
                          capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_a_run_killed_during_a_checkpoint_write_resumes_from_the_one_in_place(tmp_path, cache_dir, tiny):
    out = tmp_path / "outputs"
    killed = _train(out, cache_dir, tiny, "+trainer.callbacks=[{_target_:fibexp.training.faults.KillMidCheckpoint,"
                                          "at_step:6}]")
    assert killed.returncode == -9, killed.stderr[-3000:]
    (run_dir,) = (out / "runs").iterdir()
    ckpts = run_dir / "checkpoints"
    assert steps_of(ckpts / "last.ckpt") == 3  # the step-6 write was cut; the step-3 file is whole
    assert [p.name for p in ckpts.glob(".*.tmp")], "the cut write left its temporary file"
    again = _train(out, cache_dir, tiny)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "not a readable checkpoint" not in again.stdout + again.stderr
    client, (run,) = fibexp_runs(out)
    assert run.info.status == "FINISHED"
    steps = sorted(h.step for h in client.get_metric_history(run.info.run_id, "train/loss"))
    assert steps.count(0) == 1 and steps.count(3) == 2 and steps[-1] == 8, steps  # on from step 3
    assert steps_of(ckpts / "last.ckpt") == 9 and not list(ckpts.glob(".*.tmp"))


@pytest.mark.slow
def test_a_truncated_last_ckpt_resumes_from_the_previous_one_with_one_warning(tmp_path, cache_dir, tiny):
    out = tmp_path / "outputs"
    killed = _train(out, cache_dir, tiny, "+trainer.callbacks=[{_target_:fibexp.training.faults.Preempt,at_step:7}]")
    assert killed.returncode == -9, killed.stderr[-3000:]
    (run_dir,) = (out / "runs").iterdir()
    last = run_dir / "checkpoints" / "last.ckpt"
    assert steps_of(last) == 6 and steps_of(last.with_name("previous.ckpt")) == 3
    last.write_bytes(last.read_bytes()[: last.stat().st_size // 3])
    again = _train(out, cache_dir, tiny)
    assert again.returncode == 0, again.stderr[-3000:]
    warned = [l for l in (again.stdout + again.stderr).splitlines() if "not a readable checkpoint" in l]
    assert len(warned) == 1 and "resuming from previous.ckpt" in warned[0], warned
    client, (run,) = fibexp_runs(out)
    assert run.info.status == "FINISHED"
    steps = sorted(h.step for h in client.get_metric_history(run.info.run_id, "train/loss"))
    assert steps.count(0) == 1 and steps.count(3) == 2 and steps[-1] == 8, steps  # on from step 3, same run
