"""The probe as paper A's text describes it: key-value retrieval at distance d. Filler tokens;
a key K* at T - 2 - d with its value V* right after (so V* is d positions before the query);
distractor key-value bigrams elsewhere; K* again at T - 1 as the query. Trained with next-token
loss at the last position; scored by forced choice among the true and the distractor values
(chance 1 / (distractors + 1)), per distance band as well. d is drawn per example uniformly in
[task.min_distance, task.max_distance] (the coverage plan). Filler, keys and values come from
disjoint id ranges."""
from __future__ import annotations

import torch

from fibexp.tasks.synthetic import IGNORE, SyntheticTask


def band_of(d: int, edges: list[int]) -> int:
    """Band j covers [edges[j], edges[j+1]), the last one includes its upper edge."""
    for j in range(len(edges) - 1):
        if d < edges[j + 1]:
            return j
    return len(edges) - 2


class KVRetrieval(SyntheticTask):
    def draw(self, g, n):
        c = self.conf
        t, k = int(self.cfg.model.seq_len), int(c.distractors)
        f, nk, nv = int(c.filler_tokens), int(c.key_tokens), int(c.value_tokens)
        edges = list(c.bands)
        x = torch.randint(0, f, (n, t), generator=g)
        y = torch.full_like(x, IGNORE)
        group = torch.full_like(x, -1)
        choices = torch.empty(n, k + 1, dtype=torch.long)
        d = torch.randint(int(c.min_distance), int(c.max_distance) + 1, (n,), generator=g)
        for i in range(n):
            keys = f + torch.randperm(nk, generator=g)[: k + 1]
            vals = f + nk + torch.randperm(nv, generator=g)[: k + 1]
            start = t - 2 - int(d[i])
            x[i, start], x[i, start + 1], x[i, t - 1] = keys[0], vals[0], keys[0]
            taken = {start, start + 1, t - 1}
            for j in range(1, k + 1):
                while True:  # a free, non-overlapping slot for distractor bigram j
                    s = int(torch.randint(0, t - 2, (1,), generator=g))
                    if s not in taken and s + 1 not in taken:
                        break
                x[i, s], x[i, s + 1] = keys[j], vals[j]
                taken |= {s, s + 1}
            y[i, t - 1] = vals[0]
            group[i, t - 1] = band_of(int(d[i]), edges)
            choices[i] = vals[torch.randperm(k + 1, generator=g)]  # shuffled: a tie cannot favour the answer
        return {"x": x, "y": y, "group": group, "choices": choices}
