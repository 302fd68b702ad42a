"""Quiet logs: the third-party notices a user cannot act on are gone (each triggered here the way
the library emits it), every other warning still shows, and a run says where it goes and what
it measured in one line each."""
from __future__ import annotations

import logging
import os
import warnings

import pytest

from fibexp.training import logs

NOISE = ("litlogger", "LeafSpec", "weights_only", "`srun` command is available")


@pytest.fixture
def quieted(monkeypatch):
    """quiet() inside a warnings sandbox; the logging filters it adds are removed afterwards."""
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        logs.quiet()
        yield caught
    for name, _ in logs.NOISE_LOGS:
        logger = logging.getLogger(name)
        for f in [f for f in logger.filters if isinstance(f, logs._DropMessages)]:
            logger.removeFilter(f)


class Collect(logging.Handler):
    def __init__(self):
        super().__init__()
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


def test_known_warnings_are_silenced_and_others_are_not(quieted, monkeypatch):
    import torch.utils._pytree as pytree
    from lightning.fabric.plugins.environments import slurm

    pytree.LeafSpec()  # what Lightning's _tree_flatten builds on every step's output
    monkeypatch.setattr(slurm.shutil, "which", lambda name: "/usr/bin/srun")
    slurm.SLURMEnvironment._validate_srun_used()  # srun installed, no job: the hint
    warnings.warn("a real deprecation", FutureWarning)
    warnings.warn("a real user warning", UserWarning)
    shown = [str(w.message) for w in quieted]
    assert not [m for m in shown if "LeafSpec" in m or "srun" in m], shown
    assert "a real deprecation" in shown and "a real user warning" in shown


def test_srun_hint_stays_inside_a_slurm_job(monkeypatch):
    from lightning.fabric.plugins.environments import slurm

    monkeypatch.setenv("SLURM_JOB_ID", "7")
    monkeypatch.delenv("SLURM_JOB_NAME", raising=False)
    monkeypatch.setattr(slurm.shutil, "which", lambda name: "/usr/bin/srun")
    monkeypatch.setattr(slurm, "_is_srun_used", lambda: False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        logs.quiet()
        slurm.SLURMEnvironment._validate_srun_used()
    assert any("srun" in str(w.message) for w in caught)


def test_lightning_notices_are_dropped_and_other_lines_kept(quieted):
    import lightning.pytorch as pl

    handlers = {}
    for name, _ in logs.NOISE_LOGS:
        handlers[name] = Collect()
        logging.getLogger(name).addHandler(handlers[name])
    try:
        pl.Trainer(logger=False, accelerator="cpu", enable_progress_bar=False, enable_checkpointing=False,
                   enable_model_summary=False)  # builds the logger connector: the litlogger tip
        tips = logging.getLogger("lightning.pytorch.utilities.rank_zero")
        tips.info("Restoring states from the checkpoint path at x.ckpt")
    finally:
        for name, h in handlers.items():
            logging.getLogger(name).removeHandler(h)
    seen = [m for h in handlers.values() for m in h.messages]
    assert not [m for m in seen if "litlogger" in m], seen
    assert "Restoring states from the checkpoint path at x.ckpt" in seen


def test_one_line_at_start_and_end(caplog):
    caplog.set_level(logging.INFO, logger="fibexp.run")
    start = logs.run_started("sparse/fib/stagger/W8", "sqlite:///o/mlflow.db", "o/runs/x", "abc")
    metrics = {"val/ppl/drama": 300.0, "val/ppl/prose": 100.0, "extrap/rel_x1/drama": 0.0,
               "extrap/rel_x4/drama": 0.10, "extrap/rel_x4/prose": -0.02, "val/loss/drama": 5.7}
    end = logs.run_finished("sparse/fib/stagger/W8", metrics, "http://127.0.0.1:5000/#/experiments/1/runs")
    assert start == "run sparse/fib/stagger/W8: store sqlite:///o/mlflow.db (run abc), dir o/runs/x"
    assert end == ("run sparse/fib/stagger/W8 finished: val/ppl 200.00 (mean of 2 sets), ppl change at 4x length "
                   "+4.0%; compare: http://127.0.0.1:5000/#/experiments/1/runs")
    assert [r.getMessage() for r in caplog.records] == [start, end]
    assert logs.headline({"task/acc": 0.987, "train/loss": 0.1}) == "task/acc 0.987"
    assert logs.headline({}) == "no evaluation metrics"


@pytest.mark.slow
def test_a_training_run_prints_no_third_party_noise(train_cli):
    """The acceptance test of fibexp-train's wiring: quiet() before the Trainer, and the two lines."""
    proc = train_cli(env={k: v for k, v in os.environ.items() if not k.startswith("SLURM_")})
    noisy = [line for line in proc.stderr.splitlines() if any(n in line for n in NOISE)]
    assert not noisy, noisy
    said = proc.stdout + proc.stderr
    assert "run dense: store sqlite:///" in said and "run dense finished: val/ppl " in said
