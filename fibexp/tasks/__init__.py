"""Tasks by name: what a run trains on and how it is scored (see `base.Task`)."""
from __future__ import annotations

from fibexp.tasks.base import Task, TaskConf
from fibexp.tasks.count_ones import CountOnes
from fibexp.tasks.kv_retrieval import KVRetrieval
from fibexp.tasks.lm import LanguageModelling
from fibexp.tasks.shift_copy import ShiftCopy

TASKS: dict[str, type[Task]] = {t.name: t for t in (LanguageModelling, CountOnes, ShiftCopy, KVRetrieval)}


def get(name: str) -> type[Task]:
    if name not in TASKS:
        raise ValueError(f"task.name: unknown {name!r}; allowed: {', '.join(TASKS)}")
    return TASKS[name]


def build(cfg) -> Task:
    """The task of a run's (validated) config."""
    return get(cfg.task.name)(cfg)


__all__ = ["TASKS", "Task", "TaskConf", "build", "get"]
