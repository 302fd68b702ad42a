"""What a task is to training: the model it needs, its data, its loss and its evaluation, for one
run's config. `training.run` and the LightningModule only talk to this interface, so a new task is
one folder (config.py, task.py), one line in `fibexp.tasks.registry` and one yaml."""
from __future__ import annotations

import lightning.pytorch as pl
import torch
from hydra.utils import instantiate
from torch.utils.data import DataLoader

from fibexp.evals.evaluator import Evaluator
from fibexp.tasks import registry
from fibexp.tasks.config import TaskConf


class Task:
    """One task, for the run's config `cfg` (its `task.*` keys: `conf`); what the config alone
    says about it (name, vocabulary, checks, metrics) is its config class (`config`)."""

    def __init__(self, cfg):
        self.cfg = cfg
        self.conf = cfg.task

    @property
    def name(self) -> str:
        return str(self.conf.name)

    @property
    def config(self) -> type[TaskConf]:
        return registry.get(self.name)

    @property
    def uses_corpus(self) -> bool:
        return self.config.uses_corpus

    def build_model(self, weights: bool = True) -> torch.nn.Module:
        """The model the run trains: fibexp's LM from `model.*` unless the task brings its own
        (task=graft: a pretrained model). `weights` False: its shapes only (the meta-device check)."""
        return instantiate(self.cfg.model)

    def data_fingerprint(self, corpus) -> str:
        """What the `fibexp.corpus` tag says: runs with different data are never compared."""
        raise NotImplementedError

    def datamodule(self, corpus) -> pl.LightningDataModule:
        raise NotImplementedError

    def prepared(self, dm) -> None:
        """Checks that need the prepared data (e.g. the tokenizer's size); ValueError naming the key."""

    def loss(self, model, batch) -> tuple[torch.Tensor, int]:
        """Mean training loss of a batch and the number of tokens it fed the model."""
        raise NotImplementedError

    def evaluation(self, dm) -> tuple[Evaluator, list[DataLoader]]:
        """The held-out evaluation: its accumulator and the loaders Lightning's test loop runs."""
        raise NotImplementedError

    def final_metrics(self, model, dm, initial_alphas: list, forward_context) -> dict[str, float]:
        """Metrics measured after the held-out evaluation (aux evals, learned alpha, ...)."""
        return {}

    def figures(self, metrics: dict[str, float]) -> dict:
        """{artifact name: matplotlib figure} logged with the run."""
        return {}

    def objective(self, metrics: dict[str, float]) -> float:
        """The number a sweeper minimises."""
        raise NotImplementedError
