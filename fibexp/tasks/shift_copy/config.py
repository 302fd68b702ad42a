"""shift_copy's keys (payloads, the copy distances, learned alpha's start) and what it asks of the
model: causal mixing, positions beyond the farthest distance, and learned alpha for a start other
than uniform."""
from __future__ import annotations

from dataclasses import dataclass, field

from fibexp.errors import refuse
from fibexp.tasks.config import SyntheticConf, value

ALPHA_INITS = ("uniform", "stagger")


@dataclass
class ShiftCopyConf(SyntheticConf):
    name: str = "shift_copy"
    payloads: int = 256  # payload ids per marker; vocabulary = payloads x len(distances)
    distances: list[int] = field(default_factory=lambda: [200, 350])  # copy distance of each marker
    alpha_init: str = "uniform"  # learned alpha's start: uniform (alpha 1) | stagger (sets attention.alpha_init)

    def __post_init__(self):
        super().__post_init__()
        if self.payloads < 2:
            refuse("task.payloads", self.payloads, "an integer >= 2")
        if not self.distances or min(self.distances) < 1 or len(set(self.distances)) != len(self.distances):
            refuse("task.distances", self.distances, "distinct integers >= 1")
        if self.alpha_init not in ALPHA_INITS:
            refuse("task.alpha_init", repr(self.alpha_init), ", ".join(ALPHA_INITS))

    @classmethod
    def task_vocab(cls, cfg) -> int:
        return int(cfg.task.payloads) * len(cfg.task.distances)

    @classmethod
    def groups(cls, cfg) -> tuple[str, ...]:
        """d<distance> per marker."""
        return tuple(f"d{d}" for d in cfg.task.distances)

    @classmethod
    def metric_names(cls, cfg) -> set[str]:
        """Also, for offset attention, where alpha went: its range over layers and mean shift."""
        sparse = value(cfg.attention.kind) == "sparse"
        return super().metric_names(cfg) | ({"task/alpha_range", "task/alpha_shift"} if sparse else set())

    @classmethod
    def check(cls, cfg) -> None:
        super().check(cfg)
        t, far = int(cfg.model.seq_len), max(cfg.task.distances)
        if t <= far:
            refuse("model.seq_len", t, f"> {far} for task=shift_copy (task.distances up to {far} need "
                   "positions to copy to)")
        a, init = cfg.attention, cfg.task.alpha_init
        learned = value(a.kind) == "sparse" and a.schedule == "learned"
        if init != "uniform" and not learned:
            refuse("task.alpha_init", init, "uniform unless attention.schedule=learned (sparse): only "
                   "learned alpha has a start to choose")
        if learned and a.alpha_init != init:
            refuse("attention.alpha_init", a.alpha_init, f"{init} (task.alpha_init sets it for task=shift_copy)")
