"""assoc_recall's keys (group size, value ids, difficulty), the sequence's layout in groups and
what it asks of the model: causal mixing over a whole number of groups, the query's included."""
from __future__ import annotations

from dataclasses import dataclass

from fibexp.errors import refuse
from fibexp.tasks.config import SyntheticConf, census_metrics

DIFFICULTIES = ("easy", "medium", "hard")


@dataclass
class AssocRecallConf(SyntheticConf):
    name: str = "assoc_recall"
    group_size: int = 8  # positions per group (a label, then key-value pairs); model.seq_len a multiple
    value_tokens: int = 16  # value ids; chance ~ 1 / value_tokens
    difficulty: str = "medium"  # easy: keys unique | medium: a pool of 2 x pairs per group | hard: every group the same keys

    def __post_init__(self):
        super().__post_init__()
        if self.group_size < 3:
            refuse("task.group_size", self.group_size, "an integer >= 3 (a label and at least one key-value pair)")
        if self.value_tokens < 2:
            refuse("task.value_tokens", self.value_tokens, "an integer >= 2")
        if self.difficulty not in DIFFICULTIES:
            refuse("task.difficulty", repr(self.difficulty), ", ".join(DIFFICULTIES))

    @staticmethod
    def layout(cfg) -> tuple[int, int, int]:
        """(groups, pairs per group, key ids): the last group holds the query."""
        g = int(cfg.task.group_size)
        groups, pairs = int(cfg.model.seq_len) // g, (g - 1) // 2
        return groups, pairs, (groups - 1) * pairs

    @classmethod
    def task_vocab(cls, cfg) -> int:
        groups, _, keys = cls.layout(cfg)
        return groups + keys + int(cfg.task.value_tokens) + 1  # labels, keys, values, filler

    @classmethod
    def metric_names(cls, cfg) -> set[str]:
        """Also paper B's census of the trained model."""
        return super().metric_names(cfg) | census_metrics(cfg)

    @classmethod
    def check(cls, cfg) -> None:
        t, g = int(cfg.model.seq_len), int(cfg.task.group_size)
        if t % g or t // g < 2:
            refuse("model.seq_len", t, f"a multiple of task.group_size={g}, >= {2 * g} for task=assoc_recall "
                   "(at least one group of pairs and the query group)")
        super().check(cfg)
