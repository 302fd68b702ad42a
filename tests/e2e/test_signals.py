"""A run signalled (SIGTERM, as a scheduler stops a job) inside its held-out evaluation stops
within seconds, far inside SLURM's default 30 s grace (KillWait), as KILLED, and resumes."""
from __future__ import annotations

import os
import re
import signal
import time

import pytest
from lightning.pytorch.utilities.exceptions import SIGTERMException

from fibexp.training.lit import stop_on_sigterm
from helpers.mlflow_runs import fibexp_runs

SIGNAL = "+trainer.callbacks=[{_target_:fibexp.training.faults.Signal,signum:15}]"


def test_sigterm_stops_an_evaluation_outside_lightning_at_once():
    before = signal.getsignal(signal.SIGTERM)
    t0 = time.monotonic()
    with pytest.raises(SIGTERMException):
        with stop_on_sigterm():
            os.kill(os.getpid(), signal.SIGTERM)
            while time.monotonic() - t0 < 10:  # a long pure-Python/torch loop
                sum(range(1000))
    assert time.monotonic() - t0 < 1
    assert signal.getsignal(signal.SIGTERM) is before  # restored


@pytest.mark.slow
def test_sigterm_in_the_evaluation_stops_the_run_killed_and_it_resumes(train_cli):
    # Lightning's flag is checked after every evaluation batch but the very last (its 6 loaders,
    # 2 held-out sets x 3 lengths, run as one sequence): the bound is one batch's forward.
    proc = train_cli("eval.aux=false", SIGNAL, check=False)
    ended = time.time()
    sent = float(re.search(r"fibexp.training.faults.Signal: signal 15 at ([0-9.]+)", proc.stderr).group(1))
    print(f"signal to exit: {ended - sent:.1f} s")
    assert ended - sent < 10, proc.stderr[-3000:]
    assert proc.returncode == 128 + signal.SIGTERM and "stopped by SIGTERM" in proc.stderr.splitlines()[-1]
    client, (run,) = fibexp_runs(train_cli.out)
    assert run.info.status == "KILLED" and "val/ppl/drama" not in run.data.metrics
    assert "fibexp.failure" not in run.data.tags  # stopped, not failed

    train_cli("eval.aux=false")  # the same command resumes: no step trained again, evaluation done
    _, (again,) = fibexp_runs(train_cli.out)
    assert again.info.run_id == run.info.run_id and again.info.status == "FINISHED"
    assert sorted(h.step for h in client.get_metric_history(run.info.run_id, "train/loss")) == list(range(6))
    assert "val/ppl/drama" in again.data.metrics
