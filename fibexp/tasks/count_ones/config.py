"""count_ones's keys (only the held-out set's) and what it asks of the model: non-causal wiring that
reaches position 0, n + 1 answer classes, and inputs enough that the held-out set stays a small
share of them."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

from fibexp.errors import refuse
from fibexp.science import wiring
from fibexp.tasks.config import SyntheticConf, value

HELDOUT_SHARE = 4  # the 2^n possible inputs must be >= 4x the held-out set


@dataclass
class CountOnesConf(SyntheticConf):
    name: str = "count_ones"

    causal: ClassVar[bool] = False

    @classmethod
    def task_vocab(cls, cfg) -> int:
        return int(cfg.model.seq_len) + 1  # answers 0..n; the bits are ids 0 and 1

    @classmethod
    def check(cls, cfg) -> None:
        kind = value(cfg.attention.kind)
        if kind not in ("dense", "hypercube"):
            refuse("attention.kind", kind, "dense, hypercube for task=count_ones (the answer is read at "
                   "position 0, which causal offset attention cannot reach from later positions)")
        super().check(cfg)
        if kind == "hypercube":
            wiring.cube_dims(int(cfg.model.seq_len))  # the cube's vertices are the positions: n = 2^b
        n, held = int(cfg.model.seq_len), int(cfg.task.heldout_examples)
        least = math.ceil(math.log2(HELDOUT_SHARE * held))
        if n < least:
            refuse("model.seq_len", n, f">= {least} for task=count_ones with task.heldout_examples={held} "
                   f"(the held-out inputs must stay a small share of the 2^n possible ones)")
