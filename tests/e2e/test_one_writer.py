"""One writer per run: a run dir is held (fibexp.training.lock) by the process training it; the same
command launched again meanwhile says so in one line, creates no run, trains nothing, exits 0."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fibexp.errors import RunBusy
from fibexp.training import lock
from helpers.mlflow_runs import fibexp_runs

SLOW = "+trainer.callbacks=[{_target_:fibexp.training.faults.Sleep,seconds:3}]"  # the first outlasts the second's start


def test_a_held_run_dir_names_its_holder_and_is_free_once_released(tmp_path):
    run_dir = tmp_path / "runs" / "dense-s42-abc"
    assert lock.holder(run_dir) is None  # never held
    with lock.hold(run_dir):
        assert lock.holder(run_dir) == os.getpid()
        with pytest.raises(RunBusy) as busy:
            with lock.hold(run_dir):  # another open file: flock refuses it, in this process too
                pytest.fail("held twice")
        assert str(busy.value) == f"{run_dir} is being trained by pid {os.getpid()}"
        assert busy.value.pid == os.getpid()
    assert lock.holder(run_dir) is None
    with lock.hold(run_dir):  # released: taken again at once
        pass


def test_a_killed_holder_releases_the_run_dir(tmp_path):
    """kill -9 leaves the lock file behind, not the lock: a rerun is never blocked by a dead process."""
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time\nfrom fibexp.training import lock\n"
                               f"with lock.hold({str(tmp_path)!r}):\n    print('held', flush=True); time.sleep(60)"],
                              stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    assert lock.holder(tmp_path) == holder.pid
    holder.kill()
    holder.wait()
    assert lock.holder(tmp_path) is None and (tmp_path / lock.LOCK).is_file()


@pytest.mark.slow
def test_the_same_command_twice_at_once_trains_the_run_once(train_cli, tiny, cache_dir):
    out = train_cli.out
    cmd = [sys.executable, "-m", "fibexp.cli.train", *tiny, f"paths.output_dir={out}", f"paths.cache_dir={cache_dir}",
           "eval.aux=false", SLOW]
    first = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    while not (held := [d for d in out.glob("runs/*") if lock.holder(d)]) and first.poll() is None:
        assert time.monotonic() < deadline
        time.sleep(0.2)
    (run_dir,) = held
    second = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert first.poll() is None, "the first finished before the second reached the run dir"
    assert second.returncode == 0
    assert second.stderr.strip().splitlines() == [
        f"fibexp-train: cell dense is being trained by pid {first.pid} ({run_dir})"]
    _, err = first.communicate(timeout=600)
    assert first.returncode == 0, err[-3000:]
    client, runs = fibexp_runs(out)
    assert [r.info.status for r in runs] == ["FINISHED"]
    assert sorted(h.step for h in client.get_metric_history(runs[0].info.run_id, "train/loss")) == list(range(6))
    assert sorted(p.name for p in Path(run_dir, "checkpoints").iterdir()) == ["last.ckpt", "previous.ckpt"]
    assert lock.holder(run_dir) is None
