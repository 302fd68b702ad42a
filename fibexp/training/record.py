"""A run's MLflow record, written by rank 0 alone: `Record.open` creates (or continues) the MLflow
run with the contract's tags, params and resolved config; the `Record` then logs its metrics and
figures and ends it, with how it ended (diverged, stopped at a step, failed and why). The Lightning
logger leaves the run's end to fibexp.training.run, which decides it."""
from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lightning.pytorch.loggers import MLFlowLogger
from mlflow.entities import Metric
from omegaconf import OmegaConf

from fibexp import plots
from fibexp.config import identity
from fibexp.tracking import journal, store
from fibexp.training.inputs import Run

log = logging.getLogger("fibexp.train")


class RunLogger(MLFlowLogger):
    """Lightning ends the MLflow run when fit() returns, and marks it failed on any exception,
    a SLURM requeue's SIGTERM included. fibexp.training.run owns the run's end instead: FINISHED only with
    the full metric contract after the evaluation, KILLED when stopped to be resumed."""

    def __init__(self, *args, client=None, **kwargs):
        """`client`: the run's own (journaled for a server, see fibexp.tracking.journal), so that training
        metrics survive an outage too; with the run id known, no lookup at the first log."""
        super().__init__(*args, **kwargs)
        if client is not None:
            self._mlflow_client = client
            self._initialized = self._run_id is not None

    def finalize(self, status: str = "success") -> None:
        pass


@dataclass(frozen=True)
class Record:
    """A run's open MLflow run: the client that writes it (journaled for a server, see
    fibexp.tracking.journal) and its id."""

    client: Any
    run_id: str

    @classmethod
    def open(cls, run: Run, client, fingerprint: str) -> Record:
        """The MLflow run of this run dir: continued when resuming (the id is kept beside the
        checkpoints), else created with the contract's tags, flat params and resolved config.

        A run dir whose recorded run is not in the current store (the user switched
        MLFLOW_TRACKING_URI or logger.tracking_uri, or deleted the run) resumes from its checkpoint as
        a NEW run in the current store, tagged `fibexp.resumed_from=<old store>#<old run id>`, with one
        warning naming both. Continuing beats refusing: the checkpoint holds the whole training state,
        and the old store may be unreachable for good, so waiting on it would strand the run. The old
        run is never written to; the new run's metric history starts at the checkpoint's step."""
        cfg, run_dir, ckpt, experiment_id = run.cfg, run.dir, run.ckpt, run.experiment_id
        id_file = run_dir / journal.RUN_RECORD
        resumed_from = None
        if ckpt and (recorded := journal.recorded_run(run_dir)):
            run_id, old_uri = recorded["run_id"], recorded.get("tracking_uri", "an unrecorded store")
            if store.live_run(client, run_id, experiment_id) is not None:
                client.update_run(run_id, status="RUNNING")
                if old_uri != client.tracking_uri:  # the same store under another URI: note the working one
                    journal.record_run(run_dir, run_id, client.tracking_uri)
                return cls(client, run_id)
            resumed_from = f"{old_uri}#{run_id}"
            log.warning("run dir %s: its run %s of store %s is not a live run of experiment %s in store %s; resuming "
                        "from %s as a new run there, tagged fibexp.resumed_from", run_dir, run_id, old_uri,
                        cfg.logger.experiment, client.tracking_uri, ckpt)
        if not resumed_from:
            why = (f"no readable checkpoint in {run_dir / 'checkpoints'}" if id_file.exists()
                   else f"{id_file} is gone (the run dir was deleted or moved)")
            store.end_orphans(client, experiment_id, run.config_hash, run_dir, why)
        tags = {"fibexp.cell": run.cell, "fibexp.task": cfg.task.name, "fibexp.corpus": fingerprint,
                "fibexp.git_sha": store.git_sha(Path(cfg.paths.root)), "fibexp.eval_version": identity.EVAL_VERSION,
                "fibexp.config_hash": run.config_hash, "fibexp.run_dir": str(run_dir)}
        if resumed_from:
            tags["fibexp.resumed_from"] = resumed_from
        if code := os.environ.get("FIBEXP_CODE"):  # a SLURM sweep's job: the code copied at submission
            tags["fibexp.code"] = code
        if cfg.sweep.id:
            tags.update({"fibexp.sweep": cfg.sweep.id, "mlflow.parentRunId": cfg.sweep.parent_run_id})
        tags.update(store.ui_tags(run.cell, cfg.trainer.max_steps, fingerprint, cfg.seed, cfg.task.name,
                                  bool(cfg.sweep.id)))
        name = store.distinct_name(client, experiment_id, run.name, run.config_hash)
        run_id = client.create_run(experiment_id, run_name=name, tags=tags).info.run_id
        resolved = OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)
        resolved["model"].pop("attention")
        store.log_params(client, run_id, {**store.flatten(resolved), "model.n_params": str(run.model.n_params())})
        client.log_text(run_id, OmegaConf.to_yaml(resolved), "config.yaml")
        journal.record_run(run_dir, run_id, client.tracking_uri)
        return cls(client, run_id)

    def log(self, metrics: dict[str, float], step: int) -> None:
        now = int(time.time() * 1000)
        items = [Metric(k, float(v), now, step) for k, v in metrics.items()]
        for i in range(0, len(items), 500):
            self.client.log_batch(self.run_id, metrics=items[i:i + 500])

    def log_figures(self, figures: dict) -> None:
        for name, figure in figures.items():
            self.client.log_figure(self.run_id, figure, name)
            plots.close(figure)

    def diverged(self, step: int) -> None:
        """A diverged run is a result: tagged, its step logged, no evaluation; the caller ends it
        FINISHED (so a sweep counts it as done and a relaunch does not train it again)."""
        log.warning("run diverged at step %d: no evaluation (tag fibexp.diverged=true)", step)
        self.client.set_tag(self.run_id, "fibexp.diverged", "true")
        self.log({"train/diverged_step": step}, step)

    def stopped(self, step: int) -> None:
        """Stopped by a signal at `step`: the step a resume continues from."""
        self.client.set_tag(self.run_id, "fibexp.stopped_step", str(step))

    def failed(self, reason: str, trace: str | None = None) -> None:
        """Failed for `reason` (one line, the tag), with the traceback as an artifact when there is one."""
        if trace is not None:
            self.client.log_text(self.run_id, trace, "traceback.txt")
        self.client.set_tag(self.run_id, "fibexp.failure", reason[:5000])

    def end(self, status: str) -> None:
        """FINISHED, KILLED or FAILED."""
        self.client.set_terminated(self.run_id, status)

