"""A run as its checks found it: `check_inputs` refuses what cannot run and returns a `Run`,
the one object the rest of the job reads (fibexp.training.run), so that what the job derives from
its config (the cell, the config hash, the run name, the model's identity, the tracking store)
is computed once, before data is built or an MLflow run exists: by the checks before the run,
handed on (fibexp.checks.checked), or here where none ran in this process. The checkpoint to resume is
checked last (`Run.resuming`), once the run dir's lock is held: reading it may move an unreadable
file aside, which only the run dir's one writer may do."""
from __future__ import annotations

import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from hydra.core.hydra_config import HydraConfig
from hydra.errors import InstantiationException
from omegaconf import DictConfig
from omegaconf.errors import OmegaConfBaseException

from fibexp.checks import checked as handed
from fibexp.checks import checkpoints
from fibexp.checks.checkpoints import checkpoint_to_resume
from fibexp.config import messages
from fibexp.data.sources import open_corpus
from fibexp.tasks import registry as tasks
from fibexp.tasks.task import Task
from fibexp.tracking import store
from fibexp.training import ddp

UNSET = object()  # `resume` not given: check_inputs decides which checkpoint to resume


@dataclass(frozen=True)
class Run:
    """One run, or one rank of it, checked. `lead`: rank 0, the only rank that opens the tracking
    store (`uri` and `experiment_id` are None on the others); `name`: the MLflow run name;
    `ident`: the run's identity (fibexp.config.identity); `shapes`: its model's parameter names and
    shapes, what a checkpoint must match; `corpus`: None for a task that reads
    none; `ckpt`: the checkpoint to resume, None to start (set by `resuming`)."""

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

    def resuming(self, resume=UNSET) -> Run:
        """This run with the checkpoint it resumes from: `resume`, the one rank 0 chose (for the ranks
        it starts itself), else `checkpoint_to_resume` of the config's ckpt_path."""
        if resume is UNSET:
            resume = checkpoint_to_resume(self.cfg.ckpt_path, self.dir, self.shapes, self.model_ident, self.lead)
        return replace(self, ckpt=resume)


def check_inputs(cfg: DictConfig, run_dir: Path | None = None, lead: bool = True) -> Run:
    """What can refuse the run but its checkpoint (`Run.resuming`), before data is built or a run is
    created: the validation pass (fibexp.checks.preflight) checked all of it before Hydra made the
    run dir and handed on what it learned of the config; the job checks its files again, as a
    defence (files change), the config too where no check ran in this process (the ranks and
    launchers that start it directly), and returns what it learned as the `Run`. The store comes last: a run
    refused on its config or data leaves none behind."""
    try:
        checked = handed.taken(cfg)
        task = tasks.build(cfg)
        run_dir = run_dir or Path(HydraConfig.get().runtime.output_dir)
        pl.seed_everything(cfg.seed, workers=True, verbose=False)  # before the weights are drawn; quiet: a refusal is one line
        model = task.build_model()
        shapes = checked.shapes or checkpoints.shapes_of(model)
        corpus = open_corpus(cfg.data, Path(cfg.paths.cache_dir)) if task.uses_corpus else None
        if corpus is not None:
            corpus.verify()
        output_dir = Path(cfg.paths.output_dir)
        uri = experiment_id = None
        if lead:
            uri = store.resolve_uri(cfg.logger.tracking_uri, output_dir)
            experiment_id = store.ensure_experiment(uri, cfg.logger.experiment, output_dir / "mlartifacts",
                                                    cfg.logger.outage_wait_s)
    except InstantiationException as e:
        raise messages.instantiation_refusal(e) from None
    except OmegaConfBaseException as e:  # e.g. an interpolation that does not resolve
        raise messages.omegaconf_refusal(e, sys.argv[1:]) from None
    return Run(cfg=cfg, dir=run_dir, lead=lead, cell=checked.cell, config_hash=checked.config_hash, name=checked.name,
               ident=checked.ident, shapes=shapes, task=task, model=model, corpus=corpus, uri=uri,
               experiment_id=experiment_id)

