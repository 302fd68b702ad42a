"""The task registry: every name pairs the config class Hydra composes against with the task a run
builds, the config half loads without torch, an unknown name is refused in one line, and a task's
accuracy groups are the ones its config declares."""
from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest
from hydra.core.config_store import ConfigStore

from fibexp.checks import rules
from fibexp.config import schema
from fibexp.errors import Refusal
from fibexp.tasks import registry
from fibexp.tasks.config import TaskConf
from fibexp.tasks.task import Task
from helpers.sweeps import compose_train

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name", sorted(registry.TASKS))
def test_each_name_pairs_its_schema_with_the_task_a_run_builds(name):
    config = registry.get(name)
    assert dataclasses.is_dataclass(config) and issubclass(config, TaskConf) and config.name == name
    schema.register()
    stored = ConfigStore.instance().load(f"task_{name}_schema.yaml").node
    assert stored.name == name and set(stored) == {f.name for f in dataclasses.fields(config)}
    impl = registry.implementation(name)
    assert issubclass(impl, Task) and not issubclass(impl, TaskConf)  # two classes, no spec half mixed in


def test_the_registry_and_every_task_config_load_without_torch():
    code = ("import sys, fibexp.tasks.registry as r; [r.get(n) for n in r.TASKS]; "
            "print(sorted(m for m in ('torch', 'lightning') if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "[]"


def test_an_unknown_task_is_refused_naming_the_registered_ones():
    with pytest.raises(Refusal) as e:
        registry.get("count_twos")
    assert str(e.value) == ("task.name: unknown 'count_twos'; allowed: lm, count_ones, shift_copy, kv_retrieval, "
                            "assoc_recall, graft")


@pytest.mark.parametrize("overrides, groups", [
    (["task=shift_copy", "model.seq_len=8", "task.distances=[2,3]", "task.payloads=4"], ("d2", "d3")),
    (["task=kv_retrieval", "model.seq_len=64", "task.min_distance=4", "task.max_distance=40", "task.bands=[4,16,41]",
      "task.filler_tokens=10", "task.key_tokens=10", "task.value_tokens=10"], ("band4_16", "band16_41")),
    (["task=count_ones", "attention=hypercube", "model.seq_len=16", "model.n_layers=4"], ()),
])
def test_a_task_scores_the_groups_its_config_declares(overrides, groups):
    cfg = compose_train(["paths.root=.", *overrides])
    rules.validate(cfg)
    task = registry.build(cfg)
    assert task.group_names == groups
    assert {f"task/acc/{g}" for g in groups} <= registry.get(cfg.task.name).metric_names(cfg)
    assert task.name == cfg.task.name and not task.uses_corpus  # what the run's dataset input is named after
    assert task.data_fingerprint(None) == f"synthetic/{cfg.task.name}/v1"
