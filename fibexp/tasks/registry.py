"""Tasks by name, registered once: `task=<name>`'s config class (its keys and rules, no torch: the
config layer, `--help` and refusals read it) and its implementation (data, loss, evaluation),
imported only when a run builds the task."""
from __future__ import annotations

from dataclasses import dataclass
from importlib import import_module

from fibexp.errors import refuse
from fibexp.tasks.assoc_recall.config import AssocRecallConf
from fibexp.tasks.config import TaskConf
from fibexp.tasks.count_ones.config import CountOnesConf
from fibexp.tasks.graft.config import GraftConf
from fibexp.tasks.kv_retrieval.config import KVRetrievalConf
from fibexp.tasks.lm.config import LMConf
from fibexp.tasks.shift_copy.config import ShiftCopyConf


@dataclass(frozen=True)
class Registered:
    config: type[TaskConf]
    implementation: str  # "module:class" of its fibexp.tasks.task.Task (imports torch)


TASKS: dict[str, Registered] = {r.config.name: r for r in (
    Registered(LMConf, "fibexp.tasks.lm.task:LanguageModelling"),
    Registered(CountOnesConf, "fibexp.tasks.count_ones.task:CountOnes"),
    Registered(ShiftCopyConf, "fibexp.tasks.shift_copy.task:ShiftCopy"),
    Registered(KVRetrievalConf, "fibexp.tasks.kv_retrieval.task:KVRetrieval"),
    Registered(AssocRecallConf, "fibexp.tasks.assoc_recall.task:AssocRecall"),
    Registered(GraftConf, "fibexp.tasks.graft.task:Graft"),
)}


def _registered(name: str) -> Registered:
    if name not in TASKS:
        refuse("task.name", f"unknown {name!r}", ", ".join(TASKS))
    return TASKS[name]


def get(name: str) -> type[TaskConf]:
    """The config class of task `name`: its schema, and the checks and declarations read from a config."""
    return _registered(name).config


def implementation(name: str) -> type:
    """The Task class of task `name` (its module imported now: torch)."""
    module, cls = _registered(name).implementation.split(":")
    return getattr(import_module(module), cls)


def build(cfg):
    """The task of a run's (validated) config."""
    return implementation(cfg.task.name)(cfg)
