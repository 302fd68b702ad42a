"""What the checks learned of one config, handed on to its job in the same process, so that the
job does not compute it again: a single run's Hydra callback checks the config, builds the model
on the meta device and hands the `Checked` on; the job (fibexp.training.inputs) takes it. Where no
check ran in this process (a rank another process started, a launcher's job process), the job
checks the config itself (`of`)."""
from __future__ import annotations

import json
from dataclasses import dataclass

from omegaconf import DictConfig, OmegaConf

from fibexp.checks import rules
from fibexp.config import identity
from fibexp.config.schema import TrainConf

_handed: dict[str, Checked] = {}  # at most one: the run this process checked and is about to start


@dataclass(frozen=True)
class Checked:
    """One config, checked: `typed` its typed values; `cell`, `name`, `ident` and `config_hash` as
    fibexp.config.identity computes them; `shapes` its model's parameter names and shapes (from
    the meta model; None where the model was not built)."""

    typed: TrainConf
    cell: str
    name: str
    ident: dict
    config_hash: str
    shapes: dict[str, tuple] | None = None


def of(cfg: DictConfig, typed: TrainConf | None = None, shapes: dict[str, tuple] | None = None) -> Checked:
    """The config's rules (`typed`: passed already) and its identity, computed once."""
    typed = rules.validate(cfg) if typed is None else typed
    cell = identity.cell(cfg)
    ident = identity.identity(cfg)
    return Checked(typed=typed, cell=cell, name=identity.run_name(cfg, cell), ident=ident,
                   config_hash=identity.digest(ident), shapes=shapes)


def _key(cfg: DictConfig) -> str:
    """The config as composed, without its `hydra` node (the job's copy has none), unresolved."""
    return json.dumps({k: OmegaConf.to_container(v, resolve=False) if OmegaConf.is_config(v) else v
                       for k, v in cfg.items_ex(resolve=False) if k != "hydra"}, sort_keys=True, default=str)


def hand_on(cfg: DictConfig, checked: Checked) -> None:
    """Keep `checked` for the job of `cfg` that this process starts next."""
    _handed.clear()
    _handed[_key(cfg)] = checked


def taken(cfg: DictConfig) -> Checked:
    """What the checks of this process handed on for `cfg` (once), else `of(cfg)`: the config
    checked here."""
    found = _handed.pop(_key(cfg), None)
    return found if found is not None else of(cfg)
