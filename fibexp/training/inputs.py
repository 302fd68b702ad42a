"""A run as its checks found it: `check_inputs` refuses what cannot run and returns a `Run`,
the one object the rest of the job reads (fibexp.training.run), so that what the job derives from
its config (the cell, the config hash, the run name, the model's identity, the tracking store)
is computed once, before data is built or an MLflow run exists. The checkpoint to resume is
checked last (`Run.resuming`), once the run dir's lock is held: reading it may move an unreadable
file aside, which only the run dir's one writer may do."""
from __future__ import annotations

import logging
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

from fibexp.config import identity, messages, rules
from fibexp.data.sources import open_corpus
from fibexp.errors import Refusal
from fibexp.tasks import registry as tasks
from fibexp.tasks.task import Task
from fibexp.tracking import store
from fibexp.training import checkpoints, ddp

log = logging.getLogger("fibexp.train")

UNSET = object()  # `resume` not given: check_inputs decides which checkpoint to resume


@dataclass(frozen=True)
class Run:
    """One run, or one rank of it, checked. `lead`: rank 0, the only rank that opens the tracking
    store (`uri` and `experiment_id` are None on the others); `name`: the MLflow run name;
    `ident`: the run's identity (fibexp.config.identity); `corpus`: None for a task that reads
    none; `ckpt`: the checkpoint to resume, None to start (set by `resuming`)."""

    cfg: DictConfig
    dir: Path
    lead: bool
    cell: str
    config_hash: str
    name: str
    ident: dict
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
            resume = checkpoint_to_resume(self.cfg.ckpt_path, self.dir, self.model, self.model_ident, self.lead)
        return replace(self, ckpt=resume)


def check_inputs(cfg: DictConfig, run_dir: Path | None = None, lead: bool = True) -> Run:
    """What can refuse the run but its checkpoint (`Run.resuming`), before data is built or a run is
    created: the validation pass (fibexp.training.preflight) checked all of it before Hydra made the
    run dir; the job checks again, as a defence (files change) and for the ranks and launchers that
    start it directly, and returns what it learned as the `Run`. The store comes last: a run
    refused on its config or data leaves none behind."""
    try:
        rules.validate(cfg)
        cell = identity.cell(cfg)
        name = identity.run_name(cfg, cell)
        ident = identity.identity(cfg)
        config_hash = identity.digest(ident)
        task = tasks.build(cfg)
        run_dir = run_dir or Path(HydraConfig.get().runtime.output_dir)
        pl.seed_everything(cfg.seed, workers=True, verbose=False)  # before the weights are drawn; quiet: a refusal is one line
        model = task.build_model()
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
    return Run(cfg=cfg, dir=run_dir, lead=lead, cell=cell, config_hash=config_hash, name=name, ident=ident,
               task=task, model=model, corpus=corpus, uri=uri, experiment_id=experiment_id)


def checkpoint_to_resume(ckpt_path: str | None, run_dir: Path, model, model_ident: dict,
                         lead: bool = True) -> Path | None:
    """`ckpt_path` (the config's) None: the run dir's last.ckpt if any; 'last': it must exist; else
    the given file. The file is read weights-only (one that needs code to unpickle is refused by
    name, and its code never runs) and compared with this run's `model` and `model_ident` (one of
    another model is refused with what differs). The run dir's own last.ckpt, when unreadable
    (truncated, cut mid-copy), falls back to previous.ckpt with one warning, or starts over when
    neither reads (`checkpoints.resumable`); a file named by ckpt_path is refused when unreadable.
    `lead`: rank 0, which moves unreadable files aside (the other ranks decide the same without
    touching them)."""
    last = run_dir / "checkpoints" / "last.ckpt"
    if lead and last.parent.is_dir():
        for cut in last.parent.glob(".*.tmp"):  # a write that was cut (the process killed): never a checkpoint
            cut.unlink(missing_ok=True)
    if ckpt_path in (None, "last"):
        path, warning = checkpoints.resumable(last, move=lead)
        if warning and lead:
            log.warning(warning)
        if path is None:
            if ckpt_path == "last":
                raise Refusal("ckpt_path", f"last but no readable checkpoint at {last}",
                              "null, last, or an existing .ckpt")
            return None
    else:
        path = Path(ckpt_path)
        if not path.is_file():
            raise Refusal("ckpt_path", f"{ckpt_path} but no checkpoint at {path}", "null, last, or an existing .ckpt")
    state = checkpoints.read(path)
    shapes = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    checkpoints.check_model(state, path, shapes, model_ident)
    return path
