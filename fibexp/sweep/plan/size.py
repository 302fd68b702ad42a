"""A cell's model size from its config, without building it: fibexp's LM counted from its
config (`fibexp.model.cost`), a pretrained model (task=graft) from its config.json where it is
at hand, else None."""
from __future__ import annotations

import json

from omegaconf import DictConfig, OmegaConf

from fibexp.model import cost
from fibexp.tasks.graft.config import pretrained_file


def n_params(job: DictConfig) -> int | None:
    """Parameters of the cell's model: fibexp's LM counted from its config, a pretrained model's
    from its config.json where it is at hand, else None."""
    if job.task.name == "graft":
        conf = pretrained_config(job)
        return None if conf is None else cost.pretrained_params(conf)[0]
    m = OmegaConf.to_container(job.model, resolve=True)
    return cost.n_params(m, OmegaConf.to_container(job.attention, resolve=True, enum_to_str=True))


def flops_per_token(job: DictConfig) -> float | None:
    """Training FLOPs per token of the cell's model (None: a pretrained model not at hand)."""
    if job.task.name == "graft":
        conf = pretrained_config(job)
        return None if conf is None else cost.pretrained_flops_per_token(conf, int(job.model.seq_len))
    m = OmegaConf.to_container(job.model, resolve=True)
    return cost.train_flops_per_token(m, OmegaConf.to_container(job.attention, resolve=True, enum_to_str=True))


def pretrained_config(job: DictConfig) -> dict | None:
    path = pretrained_file(str(job.task.model), "config.json")
    return None if path is None else json.loads(path.read_text(encoding="utf-8"))
