"""A run stopped by a signal (Ctrl-C's SIGINT, a scheduler's SIGTERM) saves last.ckpt at the step
it reached, is KILLED with `fibexp.stopped_step`, exits 130 / 143 after one line, and the same
command resumes it into the same run; inside its held-out evaluation it stops within seconds, far
inside SLURM's default 30 s grace (KillWait)."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from lightning.pytorch.utilities.exceptions import SIGTERMException

from fibexp.cli import train as cli_train
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
    assert run.data.tags["fibexp.stopped_step"] == "6"  # training was done: the evaluation is what resumes

    train_cli("eval.aux=false")  # the same command resumes: no step trained again, evaluation done
    _, (again,) = fibexp_runs(train_cli.out)
    assert again.info.run_id == run.info.run_id and again.info.status == "FINISHED"
    assert sorted(h.step for h in client.get_metric_history(run.info.run_id, "train/loss")) == list(range(6))
    assert "val/ppl/drama" in again.data.metrics


def stopped_run(out: Path, steps: int = 6):
    """(client, the one run, the step its last.ckpt holds) of a stopped run, checked as KILLED
    at a step before the end, with the checkpoint at the step it was tagged with."""
    client, (run,) = fibexp_runs(out)
    assert run.info.status == "KILLED" and "fibexp.failure" not in run.data.tags
    last = Path(run.data.tags["fibexp.run_dir"]) / "checkpoints" / "last.ckpt"
    step = torch.load(last, weights_only=True)["global_step"]
    assert int(run.data.tags["fibexp.stopped_step"]) == step < steps
    return client, run, step


def resumes_to_the_end(train_cli, client, run, *overrides: str):
    """The same command (less the fault) resumes into the same run, every step logged once."""
    train_cli("eval.aux=false", *overrides)
    _, (again,) = fibexp_runs(train_cli.out)
    assert again.info.run_id == run.info.run_id and again.info.status == "FINISHED"
    assert sorted(h.step for h in client.get_metric_history(run.info.run_id, "train/loss")) == list(range(6))


@pytest.mark.slow
def test_ctrl_c_in_training_saves_the_step_reached_and_the_same_command_resumes(train_cli, tiny, cache_dir):
    out = train_cli.out
    cmd = [sys.executable, "-m", "fibexp.cli.train", *tiny, f"paths.output_dir={out}", f"paths.cache_dir={cache_dir}",
           "eval.aux=false", "+trainer.callbacks=[{_target_:fibexp.training.faults.Sleep,seconds:1}]"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    while not list(out.glob("runs/*/checkpoints/last.ckpt")):  # training started: step 3 is checkpointed
        assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()[-3000:] if proc.poll() else ""
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)  # what Ctrl-C sends
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGINT, err[-3000:]
    client, run, step = stopped_run(out)
    assert step >= 3
    lines = [line for line in err.splitlines() if "SIGINT" in line or "KeyboardInterrupt" in line]
    assert lines == [f"fibexp-train: dense stopped by SIGINT at step {step}: run {run.info.run_id} is KILLED, "
                     "last.ckpt saved; the same command resumes it"] == err.strip().splitlines()[-1:]
    resumes_to_the_end(train_cli, client, run)


@pytest.mark.slow
def test_a_second_ctrl_c_during_the_save_cuts_neither_the_checkpoint_nor_the_close(train_cli):
    proc = train_cli("eval.aux=false", "+trainer.callbacks=[{_target_:fibexp.training.faults.SignalTwice,"
                     "signum:2,at_step:4}]", check=False)
    assert proc.returncode == 128 + signal.SIGINT, proc.stderr[-3000:]
    assert "again mid-write" in proc.stderr
    client, run, step = stopped_run(train_cli.out)
    assert step == 4
    resumes_to_the_end(train_cli, client, run)


@pytest.mark.slow
def test_ctrl_c_in_process_under_hydras_launcher_reaches_the_caller_after_the_run_is_killed(
        tmp_path, cache_dir, tiny, monkeypatch, capsys):
    """The basic launcher runs the cell in this process: the KeyboardInterrupt gets through Hydra to
    the entry point (exit 130, not Lightning's exit 1), the run already KILLED, SIGINT handled again."""
    out = tmp_path / "outputs"
    monkeypatch.setattr(sys, "argv", [
        "fibexp-train", "-m", *tiny, f"paths.output_dir={out}", f"paths.cache_dir={cache_dir}", "eval.aux=false",
        "hydra/sweeper=basic", "+trainer.callbacks=[{_target_:fibexp.training.faults.Signal,signum:2,at_step:4}]"])
    monkeypatch.chdir(tmp_path)  # the multirun's own dir
    with pytest.raises(SystemExit) as exit_:
        cli_train.main()
    assert exit_.value.code == 128 + signal.SIGINT
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # Lightning had set SIG_IGN
    _, run, step = stopped_run(out)
    assert step == 4
    assert f"stopped by SIGINT at step 4: run {run.info.run_id} is KILLED" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
@pytest.mark.parametrize("hook", ["on_train_batch_start", "on_before_optimizer_step", "on_train_batch_end"])
def test_a_signal_anywhere_in_a_step_resumes_with_every_step_logged_once(train_cli, hook, signum):
    """Wherever in a step the signal lands (the next step begun, mid-step, between steps), the resumed
    run logs steps 0..max_steps-1 exactly once and none past the end."""
    proc = train_cli("eval.aux=false", "+trainer.callbacks=[{_target_:fibexp.training.faults.Signal,"
                     f"signum:{int(signum)},at_step:3,hook:{hook}}}]", check=False)
    assert proc.returncode == 128 + signum, proc.stderr[-3000:]
    client, run, step = stopped_run(train_cli.out)
    # Ctrl-C stops where it lands; Lightning acts on SIGTERM once the step under way is done
    assert step == (3 if signum == signal.SIGINT or hook == "on_train_batch_end" else 4)
    resumes_to_the_end(train_cli, client, run)
    for name in ("train/lr", "train/tokens_per_s"):
        steps = sorted(h.step for h in client.get_metric_history(run.info.run_id, name))
        assert steps == sorted(set(steps)) and steps[-1] == 5, (name, steps)


@pytest.mark.slow
def test_the_same_command_on_a_finished_run_says_so_and_logs_nothing(train_cli):
    train_cli("eval.aux=false")
    client, (run,) = fibexp_runs(train_cli.out)
    before = {k: [(h.step, h.value) for h in client.get_metric_history(run.info.run_id, k)] for k in run.data.metrics}
    again = train_cli("eval.aux=false")
    _, (after,) = fibexp_runs(train_cli.out)
    assert after.info.run_id == run.info.run_id and after.info.status == "FINISHED"
    assert after.info.end_time == run.info.end_time
    assert {k: [(h.step, h.value) for h in client.get_metric_history(run.info.run_id, k)] for k in before} == before
    assert f"run dense is already FINISHED ({run.info.run_id}): " in again.stdout.strip().splitlines()[-1]
