"""Quiet logs: the third-party notices a user cannot act on are gone (each triggered here the way
the library emits it), every other warning still shows, and a run says where it goes and what
it measured in one line each, in a log file and on a terminal."""
from __future__ import annotations

import logging
import os
import pty
import subprocess
import sys
import warnings
from types import SimpleNamespace

import pytest

from fibexp.training import logs

NOISE = ("litlogger", "LeafSpec", "weights_only", "`srun` command is available", "GPU available", "TPU available",
         "Epoch 0/-2", "`Trainer.fit` stopped", "Creating initial MLflow database tables", "Updating database tables",
         "Pre-processing sequences", "Tokenize words", "Count pairs", "Compute merges")


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
    assert not [m for m in seen if "litlogger" in m or "GPU available" in m or "TPU available" in m], seen
    assert "Restoring states from the checkpoint path at x.ckpt" in seen


def test_the_onnx_exporter_s_empty_attribute_note_is_dropped(quieted):
    onnx_ir = pytest.importorskip("onnx_ir")
    from onnx_ir import _convenience

    collect = Collect()
    ir_log = logging.getLogger(_convenience.__name__)
    ir_log.addHandler(collect)
    try:
        _convenience._infer_attribute_type([])  # what torch.onnx.export meets on every empty attribute list
        ir_log.warning("a warning that stays")
    finally:
        ir_log.removeHandler(collect)
    assert onnx_ir and collect.messages == ["a warning that stays"]


def test_mlflow_s_notes_on_a_new_store_are_dropped(quieted, tmp_path):
    from mlflow.tracking import MlflowClient

    collect = Collect()
    db_log = logging.getLogger("mlflow.store.db.utils")
    db_log.addHandler(collect)
    try:
        MlflowClient(f"sqlite:///{tmp_path}/new.db").search_experiments()  # builds the store's tables
        db_log.info("a note that stays")
    finally:
        db_log.removeHandler(collect)
    assert collect.messages == ["a note that stays"]


def test_one_line_at_start_and_end(caplog):
    caplog.set_level(logging.INFO, logger="fibexp.run")
    run = SimpleNamespace(cell="sparse/fib/stagger/W8", uri="sqlite:///o/mlflow.db", dir="o/runs/x")
    start = logs.run_started(run, "abc")
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
    """The acceptance test of fibexp-train's wiring: quiet() before the Trainer, and the two lines;
    into a log (stdout and stderr are files): no progress bar redrawn line after line either."""
    proc = train_cli(env={k: v for k, v in os.environ.items() if not k.startswith("SLURM_")})
    said = proc.stdout + proc.stderr
    noisy = [line for line in said.splitlines() if any(n in line for n in NOISE)]
    assert not noisy, noisy
    assert "tokenizing " not in said  # tqdm's bar is for terminals
    assert "run dense: store sqlite:///" in said and "run dense finished: val/ppl " in said
    assert "Training " in proc.stdout  # Lightning's bar, named for what a max_steps run does


def _on_a_terminal(cmd: list[str], env: dict) -> str:
    """What a command writes to a terminal (a pseudo-terminal as its stdin, stdout and stderr)."""
    main, sub = pty.openpty()
    proc = subprocess.Popen(cmd, stdin=sub, stdout=sub, stderr=sub, env=env, close_fds=True)
    os.close(sub)
    out = []
    while True:
        try:
            chunk = os.read(main, 1 << 16)
        except OSError:  # EIO: the command has exited and closed the terminal
            break
        if not chunk:
            break
        out.append(chunk)
    os.close(main)
    assert proc.wait(timeout=600) == 0, b"".join(out).decode(errors="replace")[-3000:]
    return b"".join(out).decode(errors="replace")


@pytest.mark.slow
def test_a_first_run_on_a_terminal_prints_no_third_party_noise(tmp_path, tiny):
    """On a terminal, with a fresh cache (the BPE tokenizer is trained): its trainer's bars, which
    counted an iterator of unknown length and wrote a line per redraw, are gone; the run's own lines
    and Lightning's bar remain."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "MLFLOW_", "HYDRA_"))}
    said = _on_a_terminal([sys.executable, "-m", "fibexp.cli.train", *tiny, "eval.aux=false",
                           f"paths.output_dir={tmp_path / 'outputs'}", f"paths.cache_dir={tmp_path / 'cache'}"], env)
    noisy = [line for line in said.replace("\r", "\n").splitlines() if any(n in line for n in NOISE)]
    assert not noisy, noisy[:5]
    assert "training the BPE tokenizer (512 ids) on drama, prose" in said
    assert "run dense finished: val/ppl " in said and "Training " in said
