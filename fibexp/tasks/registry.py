"""Tasks by name: the implementations behind `task=<name>` (their specs: `fibexp.tasks.spec`)."""
from __future__ import annotations

from fibexp.tasks import spec
from fibexp.tasks.assoc_recall import AssocRecall
from fibexp.tasks.base import Task
from fibexp.tasks.count_ones import CountOnes
from fibexp.tasks.graft import Graft
from fibexp.tasks.kv_retrieval import KVRetrieval
from fibexp.tasks.lm import LanguageModelling
from fibexp.tasks.shift_copy import ShiftCopy

TASKS: dict[str, type[Task]] = {t.name: t for t in (LanguageModelling, CountOnes, ShiftCopy, KVRetrieval,
                                                        AssocRecall, Graft)}


def get(name: str) -> type[Task]:
    spec.get(name)  # unknown names are refused by the spec registry
    return TASKS[name]


def build(cfg) -> Task:
    """The task of a run's (validated) config."""
    return get(cfg.task.name)(cfg)
