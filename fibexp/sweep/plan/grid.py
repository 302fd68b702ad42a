"""The cells of a sweep, as the sweep composes them (`fibexp.sweep.cells`) and checks them (the
torch-free rules, `fibexp.checks.rules`): new, or a duplicate of another cell (run once).
Whether one is FINISHED already is the tracking store's answer (`fibexp.sweep.plan.stored`)."""
from __future__ import annotations

import json
from dataclasses import dataclass

from hydra.core.hydra_config import HydraConfig
from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from fibexp.checks import messages, rules
from fibexp.config import identity
from fibexp.config.overrides import expand
from fibexp.errors import Refusal
from fibexp.sweep.cells import Composer

NEW, FINISHED, DUPLICATE = "new", "finished", "duplicate"


@dataclass
class Cell:
    overrides: list[str]
    cfg: DictConfig  # as the sweep composes it (with the hydra node; see `cells` for a model not at hand)
    name: str
    hash: str  # the config hash (a stand-in where the pretrained model is not at hand: `unknown`)
    status: str = NEW
    ref: str | None = None  # the FINISHED run's id, or the name of the cell this one duplicates
    unknown: str | None = None  # what cannot be known here (task.model not at hand), else None

    @property
    def line(self) -> str:
        ref = f" ({'run' if self.status == FINISHED else 'as'} {self.ref})" if self.ref else ""
        return f"  {self.status:<9} {self.name:<34} {' '.join(self.overrides)}{ref}"


def _offline_model_missing(e: Refusal) -> bool:
    """The refusal of a pretrained model (task=graft) that is not on this machine: the sweep
    needs it where its jobs start, the plan can go on without it."""
    return e.key == "task.model" and "cannot be loaded offline" in str(e.value)


SEED_RULES = [r for r in rules.RULES if r[0] == "seed"]


def _validate(cfg: DictConfig, checked: dict) -> None:
    """rules.validate(cfg), once per config up to its seed: no check reads the seed but its own
    range rule (a seed sweep of one config is checked once, then each seed's range)."""
    key = json.dumps({k: OmegaConf.to_container(cfg[k]) if OmegaConf.is_config(cfg[k]) else cfg[k]
                      for k in cfg if k not in ("hydra", "seed")}, sort_keys=True, default=str)
    if key not in checked:
        try:
            rules.validate(cfg)
            checked[key] = None
        except Refusal as e:
            checked[key] = e
    if checked[key] is not None:
        raise checked[key]
    rules.check_rules(cfg, SEED_RULES)


def cells(master: DictConfig, loader) -> list[Cell]:
    """Every cell of the sweep, composed and checked as the sweep checks it (without the model
    built on the meta device, which needs torch); a bad cell is refused in one line naming it.
    A pretrained model (task=graft) not at hand here leaves its cells checked without it."""
    grids = [dict(g) for g in master.hydra.sweeper.get("grids") or []] or [{}]
    overrides = expand(grids, list(master.hydra.overrides.task), loader)
    composer = Composer(master, loader)
    out, seen, hydra_set, checked = [], {}, None, {}
    for cell in overrides:
        where = f" [cell: {' '.join(cell)}]"
        try:
            cfg = composer(cell)
        except (HydraException, OmegaConfBaseException) as e:
            raise (messages.hydra_refusal(e, cell) or messages.uncomposed(e)).within(where) from None
        if hydra_set != (groups := composer.groups(cell)):  # ${hydra:runtime.cwd} resolves as in the job
            HydraConfig.instance().set_config(cfg)
            hydra_set = groups
        unknown = None
        try:
            _validate(cfg, checked)
        except Refusal as e:
            if not _offline_model_missing(e):
                raise e.within(where) from None
            unknown = f"task.model={cfg.task.model} is not at hand here (a local folder or the Hugging Face cache)"
        except OmegaConfBaseException as e:
            raise messages.omegaconf_refusal(e, cell).within(where) from None
        if unknown:  # a stand-in for the vocabulary its config.json would set, so the rest resolves
            cfg.model.vocab_size = 0
        h = identity.config_hash(cfg)
        c = Cell(cell, cfg, identity.run_name(cfg), h, unknown=unknown)
        if h in seen:
            c.status, c.ref = DUPLICATE, seen[h]
        else:
            seen[h] = c.name
        out.append(c)
    return out
