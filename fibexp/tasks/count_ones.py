"""Paper B's reachability task: n = model.seq_len fair random bits; the answer, the number of
ones (n + 1 classes), is read at position 0 only. A mixer succeeds only if every position's bit
reaches position 0, which for a hypercube wiring depends on which cube dimensions its layers
visit (rot visits all of them in log2 n layers; fixed visits one). Reading at position 0 needs
every later position, so the wiring is the non-causal one (i <- i XOR k) and dense attention is
the bidirectional all-to-all control."""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from fibexp.science import wiring
from fibexp.tasks.base import IGNORE, SyntheticConf, SyntheticTask, refuse, value

HELDOUT_SHARE = 4  # the 2^n possible inputs must be >= 4x the held-out set (training draws avoid it)


@dataclass
class CountOnesConf(SyntheticConf):
    name: str = "count_ones"


class CountOnes(SyntheticTask):
    name = "count_ones"
    schema = CountOnesConf
    causal = False

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

    def draw(self, g, n):
        x = torch.randint(0, 2, (n, int(self.cfg.model.seq_len)), generator=g)
        y = torch.full_like(x, IGNORE)
        y[:, 0] = x.sum(1)
        return {"x": x, "y": y}
