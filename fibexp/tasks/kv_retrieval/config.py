"""kv_retrieval's keys (id ranges, distractors, the distance range and its bands) and what it asks
of the model: causal mixing and room for the key at the farthest distance."""
from __future__ import annotations

from dataclasses import dataclass, field

from fibexp.errors import refuse
from fibexp.tasks.config import SyntheticConf


@dataclass
class KVRetrievalConf(SyntheticConf):
    name: str = "kv_retrieval"
    filler_tokens: int = 256  # ids [0, filler)
    key_tokens: int = 256  # ids [filler, filler + keys)
    value_tokens: int = 256  # ids [filler + keys, filler + keys + values)
    distractors: int = 4  # distractor key-value bigrams per example
    min_distance: int = 16
    max_distance: int = 900
    bands: list[int] = field(default_factory=lambda: [16, 64, 128, 256, 512, 900])  # band edges, logged as band<lo>_<hi>

    def __post_init__(self):
        super().__post_init__()
        if self.distractors < 1:
            refuse("task.distractors", self.distractors, "an integer >= 1")
        for key in ("filler_tokens", "key_tokens", "value_tokens"):
            if getattr(self, key) < self.distractors + 1:
                refuse(f"task.{key}", getattr(self, key), f">= task.distractors + 1 = {self.distractors + 1}")
        if not 1 <= self.min_distance <= self.max_distance:
            refuse("task.min_distance", self.min_distance, f"1 <= min_distance <= task.max_distance={self.max_distance}")
        b = self.bands
        if len(b) < 2 or any(lo >= hi for lo, hi in zip(b, b[1:])) or b[0] > self.min_distance or b[-1] < self.max_distance:
            refuse("task.bands", b, f"increasing edges from <= {self.min_distance} to >= {self.max_distance}")

    @classmethod
    def task_vocab(cls, cfg) -> int:
        t = cfg.task
        return int(t.filler_tokens) + int(t.key_tokens) + int(t.value_tokens)

    @classmethod
    def groups(cls, cfg) -> tuple[str, ...]:
        """band<lo>_<hi> per pair of task.bands edges (band j covers [edges[j], edges[j+1]), the
        last one includes its upper edge)."""
        b = [int(x) for x in cfg.task.bands]
        return tuple(f"band{lo}_{hi}" for lo, hi in zip(b, b[1:]))

    @classmethod
    def check(cls, cfg) -> None:
        super().check(cfg)
        t, far, k = int(cfg.model.seq_len), int(cfg.task.max_distance), int(cfg.task.distractors)
        need = max(far + 2, 4 * (k + 2))
        if t < need:
            refuse("model.seq_len", t, f">= {need} for task=kv_retrieval (the key sits at T - 2 - d for d up "
                   f"to task.max_distance={far}, with room for {k} distractor bigrams)")
