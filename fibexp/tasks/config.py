"""What every task is to the config layer: a dataclass of its `task.*` keys (Hydra's schema
`task_<name>_schema`), whose class methods say what the task asks of the rest of a run's config:
the vocabulary it sets, the model it needs and the metrics it logs. No torch: these run when a
config is composed, before anything is built; a task's torch half (`<task>/task.py`) reads them
through `fibexp.tasks.registry`."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from fibexp.errors import refuse

MIN_HELDOUT = 2048


def value(x):
    """An enum's value, or the value itself (typed configs hold enums, overrides strings)."""
    return getattr(x, "value", x)


def training_metrics(cfg) -> set[str]:
    """What every training run logs: Lightning's epoch, the training curve (its speed from the
    second step on, the median step time from the third), the learned or fixed alpha of every
    offset layer, and the evaluation's speed."""
    steps = int(cfg.trainer.max_steps)
    out = {"epoch", "perf/tokens_per_s_eval", "train/loss", "train/lr"}
    out |= {"train/tokens_per_s"} if steps >= 2 else set()
    out |= {"perf/step_ms"} if steps >= 3 else set()
    if value(cfg.attention.kind) == "sparse":
        out |= {f"alpha/layer_{layer}" for layer in range(int(cfg.model.n_layers))}
    return out


def census_metrics(cfg) -> set[str]:
    """fibexp.model.census: weights always, links unless a layer's links move (learned alpha),
    the coupling's effective partners for the dynamics variants."""
    a = cfg.attention
    out = {"model/weights"}
    if not (value(a.kind) == "sparse" and a.schedule == "learned"):
        out.add("model/links")
    if value(a.kind) == "dynamics":
        out |= {"attn/effective_partners", "attn/effective_partners_init"}
    return out


@dataclass
class TaskConf:
    """`task.*`: which task a run trains on. Each task extends it with its own typed keys; `name`'s
    default is the task's name."""

    name: str = "lm"

    uses_corpus: ClassVar[bool] = False  # reads the corpus (else its data is generated)

    @classmethod
    def vocab_size(cls, cfg) -> int:
        """model.vocab_size the task needs (the task yaml interpolates it; LM: the preset's)."""
        return int(cfg.model.vocab_size)

    @classmethod
    def check(cls, cfg) -> None:
        """Refuse a model or input the task cannot use, naming the key (before anything runs)."""

    @classmethod
    def metric_names(cls, cfg) -> set[str]:
        """The MLflow metrics a run of this (composed) config logs when it finishes without
        diverging, from the config alone: what the report can count on before the run exists.
        Not declared: the periodic validation loss (trainer.val_every_n_steps > 0), which no
        claim reads."""
        return training_metrics(cfg)


@dataclass
class SyntheticConf(TaskConf):
    """A task whose examples are generated from a seed: it sets the vocabulary and attention.causal,
    and is scored by accuracy on a fixed held-out set."""

    heldout_examples: int = 4096  # size of the fixed held-out set (>= 2048)
    heldout_seed: int = 918273  # the held-out set's own seed: every run of a task scores the same set

    causal: ClassVar[bool] = True  # what attention.causal must be

    def __post_init__(self):
        if self.heldout_examples < MIN_HELDOUT:
            refuse("task.heldout_examples", self.heldout_examples, f">= {MIN_HELDOUT}")

    @classmethod
    def check(cls, cfg) -> None:
        a = cfg.attention
        if bool(a.causal) != cls.causal:
            refuse("attention.causal", a.causal, f"{cls.causal} for task={cls.name}")
        need = cls.vocab_size(cfg)
        if int(cfg.model.vocab_size) < need:
            refuse("model.vocab_size", cfg.model.vocab_size,
                   f">= {need} for task={cls.name} (leave it unset: the task sets it)")

    @classmethod
    def task_vocab(cls, cfg) -> int:
        raise NotImplementedError

    @classmethod
    def groups(cls, cfg) -> tuple[str, ...]:
        """Suffixes of task/acc/<group>: which accuracy a scored position also counts towards."""
        return ()

    @classmethod
    def metric_names(cls, cfg) -> set[str]:
        """Training, the held-out accuracy (overall, per group) and its chance level."""
        return training_metrics(cfg) | {"task/acc", "task/chance"} | {f"task/acc/{g}" for g in cls.groups(cfg)}

    @classmethod
    def vocab_size(cls, cfg) -> int:
        return cls.task_vocab(cfg)
