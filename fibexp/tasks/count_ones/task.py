"""Paper B's reachability task: n = model.seq_len fair random bits; the answer, the number of
ones (n + 1 classes), is read at position 0 only. A mixer succeeds only if every position's bit
reaches position 0, which for a hypercube wiring depends on which cube dimensions its layers
visit (rot visits all of them in log2 n layers; fixed visits one). Reading at position 0 needs
every later position, so the wiring is the non-causal one (i <- i XOR k) and dense attention is
the bidirectional all-to-all control."""
from __future__ import annotations

import torch

from fibexp.tasks.synthetic import IGNORE, SyntheticTask


class CountOnes(SyntheticTask):
    def draw(self, g, n):
        x = torch.randint(0, 2, (n, int(self.cfg.model.seq_len)), generator=g)
        y = torch.full_like(x, IGNORE)
        y[:, 0] = x.sum(1)
        return {"x": x, "y": y}
