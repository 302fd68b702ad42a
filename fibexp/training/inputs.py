"""A run as its checks found it: `check_inputs` refuses what cannot run and returns a `Run`,
the one object the rest of the job reads (fibexp.training.run), so that what the job derives from
its config (the cell, the config hash, the run name, the model's identity, the checkpoint to
resume, the tracking store and what it already holds of the run) is computed once, before data is
built or an MLflow run exists: by the checks before the run, handed on (fibexp.checks.checked), or
here where none ran in this process."""
from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from hydra.errors import InstantiationException
from omegaconf import DictConfig
from omegaconf.errors import OmegaConfBaseException

from fibexp import checkpoints
from fibexp.checkpoints import checkpoint_to_resume
from fibexp.checks import checked as handed, messages
from fibexp.data.sources import open_corpus
from fibexp.tasks import registry as tasks
from fibexp.tasks.task import Task
from fibexp.tracking import store, waiting
from fibexp.training import ddp

UNSET = object()  # `resume` not given: check_inputs decides which checkpoint to resume


@dataclass(frozen=True)
class Finished:
    """The run dir's MLflow run, already FINISHED with its checkpoint in place: the same command
    has nothing left to do (training on would only evaluate again and log every metric twice)."""

    run_id: str
    metrics: dict[str, float]
    url: str


@dataclass(frozen=True)
class Run:
    """One run, or one rank of it, checked. `lead`: rank 0, the only rank that opens the tracking
    store (`uri` and `experiment_id` are None on the others); `name`: the MLflow run name;
    `ident`: the run's identity (fibexp.config.identity); `shapes`: its model's parameter names and
    shapes, what a checkpoint must match; `corpus`: None for a task that reads
    none; `ckpt`: the checkpoint to resume, None to start; `finished`: the run's MLflow run when it
    is FINISHED already (rank 0)."""

    cfg: DictConfig
    dir: Path
    lead: bool
    cell: str
    config_hash: str
    name: str
    ident: dict
    shapes: dict
    task: Task
    model: torch.nn.Module
    corpus: Any
    uri: str | None
    experiment_id: str | None
    ckpt: Path | None = None
    finished: Finished | None = None

    @property
    def last_ckpt(self) -> Path:
        """Where the run saves the state it resumes from."""
        return self.dir / "checkpoints" / "last.ckpt"

    @property
    def model_ident(self) -> dict:
        """What a checkpoint of this run's model must match."""
        return checkpoints.model_identity(self.ident)

    @property
    def world(self) -> int:
        """The run's processes (DDP)."""
        return ddp.world_size(self.cfg)


def check_inputs(cfg: DictConfig, run_dir: Path, lead: bool = True, resume=UNSET) -> Run:
    """What can refuse the run, before data is built or a run is created: the validation pass
    (fibexp.checks.preflight) checked all of it before Hydra made the run dir and handed on what
    it learned of the config; the job checks its files again, as a defence (files change), the
    config too where no check ran in this process (the ranks and launchers that start it
    directly), and returns what it learned as the `Run`. Rank 0 calls it holding the run dir's
    lock: picking the checkpoint may move an unreadable one aside, which only the run dir's one
    writer may do; `resume` is the checkpoint rank 0 chose, for the ranks it starts. The store
    comes last: a run refused on its config, checkpoint or data leaves none behind."""
    try:
        checked = handed.taken(cfg)
        task = tasks.build(cfg)
        pl.seed_everything(cfg.seed, workers=True, verbose=False)  # before the weights are drawn; quiet: a refusal is one line
        model = task.build_model()
        shapes = checked.shapes or checkpoints.shapes_of(model)
        if resume is UNSET:
            resume = checkpoints.checkpoint_to_resume(cfg.ckpt_path, run_dir, shapes,
                                                      checkpoints.model_identity(checked.ident), lead)
        corpus = open_corpus(cfg.data, Path(cfg.paths.cache_dir)) if task.uses_corpus else None
        if corpus is not None:
            corpus.verify()
        output_dir = Path(cfg.paths.output_dir)
        uri = experiment_id = finished = None
        if lead:
            uri = store.resolve_uri(cfg.logger.tracking_uri, output_dir)
            experiment_id = store.ensure_experiment(uri, cfg.logger.experiment, output_dir / "mlartifacts",
                                                    cfg.logger.outage_wait_s)
            if resume and not ddp.external() and (found := store.finished_run(
                    waiting.Client(uri, cfg.logger.outage_wait_s), run_dir, experiment_id)) is not None:
                finished = Finished(found.info.run_id, dict(found.data.metrics),
                                    store.ui_url(experiment_id, store.ui_base(uri), found.info.run_id))
    except InstantiationException as e:
        raise messages.instantiation_refusal(e) from None
    except OmegaConfBaseException as e:  # e.g. an interpolation that does not resolve
        raise messages.omegaconf_refusal(e, sys.argv[1:]) from None
    return Run(cfg=cfg, dir=run_dir, lead=lead, cell=checked.cell, config_hash=checked.config_hash, name=checked.name,
               ident=checked.ident, shapes=shapes, task=task, model=model, corpus=corpus, uri=uri,
               experiment_id=experiment_id, ckpt=resume, finished=finished)

