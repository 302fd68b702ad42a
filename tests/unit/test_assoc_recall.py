"""Grouped associative recall: the answer is the value the query's key has in the labelled group,
and the difficulty decides how much the key alone says."""
from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from fibexp.tasks.assoc_recall.config import AssocRecallConf
from fibexp.tasks.assoc_recall.task import AssocRecall
from fibexp.tasks.synthetic import IGNORE, generator


def _task(difficulty, n=64, size=8):
    return AssocRecall(OmegaConf.create(dict(
        task=dict(name="assoc_recall", group_size=size, value_tokens=16, difficulty=difficulty,
                  heldout_examples=2048, heldout_seed=1), model=dict(seq_len=n), seed=0, data=dict(batch_size=4))))


def _groups(row, size):
    """{label: {key: value}} of the content groups of one example."""
    out = {}
    for at in range(0, len(row) - size, size):
        n_pairs = (size - 1) // 2
        pairs = row[at + size - 2 * n_pairs: at + size]
        out[row[at]] = {pairs[i]: pairs[i + 1] for i in range(0, 2 * n_pairs, 2)}
    return out


@pytest.mark.parametrize("difficulty", ["easy", "medium", "hard"])
def test_answer_is_the_keys_value_in_the_labelled_group(difficulty):
    task = _task(difficulty)
    batch = task.draw(generator(7), 200)
    x, y = batch["x"].tolist(), batch["y"]
    assert (y[:, :-1] == IGNORE).all()
    key_groups = []
    for row, target in zip(x, y[:, -1].tolist()):
        groups = _groups(row, 8)
        label, key = row[-2], row[-1]
        assert groups[label][key] == target
        key_groups.append(sum(key in g for g in groups.values()))
    mean = sum(key_groups) / len(key_groups)
    # easy: the key is in one group; hard: in all 7; medium in between
    assert {"easy": mean == 1, "medium": 1 < mean < 7, "hard": mean == 7}[difficulty]


def test_same_seed_same_examples_and_vocab_covers_them():
    task = _task("hard")
    a, b = task.draw(generator(3), 50), task.draw(generator(3), 50)
    assert (a["x"] == b["x"]).all()
    assert int(a["x"].max()) < AssocRecallConf.task_vocab(task.cfg)
