"""Paper B's grouped associative recall (§3.4, §6; the text gives no generator, so this is ours):
model.seq_len positions in groups of task.group_size. Every group but the last starts with its
label and ends with (group_size - 1) // 2 key-value pairs, each value right after its key (with
group_size 8: the label at offset 0, filler at 1, keys at 2, 4, 6: a value at an odd position is
one cube edge, bit 0, after its key); the last group is the
query: its label-of-interest at T - 2 and a key at T - 1, scored at T - 1 by the value that key
has in that group (argmax over the vocabulary; task/chance is the held-out majority guess, about
1 / task.value_tokens). task.difficulty sets how much the key alone says:
- easy: every key is unique in the sequence (plain associative recall; the label is redundant);
- medium: each group draws its keys from one pool of 2 x pairs, so a key recurs in about half
  the groups with other values;
- hard: every group holds the same keys (in its own order): only the label finds the value.
Groups are the units the hierarchy (attention.hierarchy) gates: with group_size 2^(b/2) (8 at
n = 64) each task group is one vertex of the coarse cube."""
from __future__ import annotations

import torch

from fibexp.tasks.assoc_recall.config import AssocRecallConf
from fibexp.tasks.synthetic import IGNORE, SyntheticTask


class AssocRecall(SyntheticTask):
    def draw(self, g, n):
        c = self.conf
        t, size, n_values = int(self.cfg.model.seq_len), int(c.group_size), int(c.value_tokens)
        groups, pairs, n_keys = AssocRecallConf.layout(self.cfg)
        content = groups - 1
        key0, value0 = groups, groups + n_keys
        filler = value0 + n_values
        pool = {"easy": n_keys, "medium": min(n_keys, 2 * pairs), "hard": pairs}[c.difficulty]
        x = torch.full((n, t), filler, dtype=torch.long)
        y = torch.full_like(x, IGNORE)

        def perms(*shape):  # a uniform random permutation along the last axis
            return torch.rand(*shape, generator=g).argsort(-1)

        chosen = perms(n, n_keys)[:, :pool]  # this example's key ids
        if c.difficulty == "easy":  # distinct keys everywhere
            keys = chosen.view(n, content, pairs)
        else:  # each group draws its own `pairs` keys from the pool
            keys = chosen.gather(1, perms(n, content, pool)[..., :pairs].reshape(n, -1)).view(n, content, pairs)
        values = torch.randint(0, n_values, (n, content, pairs), generator=g)
        labels = perms(n, groups)  # the label each group carries
        for j in range(content):
            at = j * size
            x[:, at] = labels[:, j]
            x[:, at + size - 2 * pairs: at + size: 2] = key0 + keys[:, j]  # keys at even offsets, the
            x[:, at + size - 2 * pairs + 1: at + size: 2] = value0 + values[:, j]  # value right after its key
        q = torch.randint(0, content, (n,), generator=g)
        p = torch.randint(0, pairs, (n,), generator=g)
        rows = torch.arange(n)
        x[:, t - 2], x[:, t - 1] = labels[rows, q], key0 + keys[rows, q, p]
        y[:, t - 1] = value0 + values[rows, q, p]
        return {"x": x, "y": y}

    def final_metrics(self, model, dm, initial_alphas, forward_context):
        from fibexp.model import census
        return census.metrics(model, dm.heldout["x"][:256], forward_context)
