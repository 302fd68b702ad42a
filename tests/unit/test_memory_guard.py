"""The runtime memory guard: a run past its memory limit ends in one line naming the key to lower,
and one allocation past it fails at once (RLIMIT_DATA) instead of taking the machine into swap."""
from __future__ import annotations

import resource

import lightning.pytorch as pl
import pytest
import torch
from hydra import compose, initialize_config_dir
from hydra.core.hydra_config import HydraConfig

from fibexp.config import schema
from fibexp.checks.memory import GIB
from fibexp.errors import OutOfMemory
from fibexp.training.memory_guard import MemoryGuard, held_bytes

pytestmark = pytest.mark.usefixtures("one_thread")


class Tiny(pl.LightningModule):
    """One linear layer; `grab` bytes allocated in its second training step."""

    def __init__(self, grab: int = 0):
        super().__init__()
        self.layer, self.grab = torch.nn.Linear(4, 1), grab

    def training_step(self, batch, batch_idx):
        if self.grab and batch_idx == 1:
            self.held = torch.ones(self.grab // 4)
        return self.layer(batch[0]).sum()

    def train_dataloader(self):
        return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.ones(16, 4)), batch_size=2)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def _fit(module: pl.LightningModule, guard: MemoryGuard, tmp_path) -> None:
    pl.Trainer(max_steps=4, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
               enable_progress_bar=False, enable_model_summary=False, callbacks=[guard],
               default_root_dir=tmp_path).fit(module)


def test_a_run_past_its_limit_ends_in_one_line_naming_the_key(tmp_path):
    before = resource.getrlimit(resource.RLIMIT_DATA)
    values = {"data.batch_size": 4096, "model.seq_len": 256, "model.vocab_size": 8192, "model.d_model": 256,
              "model.n_layers": 4}
    with pytest.raises(OutOfMemory) as e:
        _fit(Tiny(), MemoryGuard(0.01, values, "trainer.memory_limit_gb"), tmp_path)
    line = str(e.value)
    assert "\n" not in line
    assert line.startswith("data.batch_size: 4096; allowed: a size whose run fits in memory: this run held ")
    assert "at step 0 against a limit of 10 MiB (trainer.memory_limit_gb=0.01)" in line
    assert e.value.held > e.value.limit == int(0.01 * GIB)
    assert resource.getrlimit(resource.RLIMIT_DATA) == before


def test_one_allocation_past_the_limit_fails_at_once_and_says_which_key(tmp_path):
    """2 GiB asked for with 0.5 GiB of headroom: the allocator refuses it (no swap, no kill), the
    exception carries the guard's line, and the process's data limit is as it was afterwards."""
    before = resource.getrlimit(resource.RLIMIT_DATA)
    limit_gb = held_bytes() / GIB + 0.5
    with pytest.raises((RuntimeError, MemoryError)) as e:
        _fit(Tiny(grab=2 * GIB), MemoryGuard(limit_gb), tmp_path)
    assert "can't allocate memory" in str(e.value) or isinstance(e.value, MemoryError)
    assert e.value.fibexp_line.startswith("data.batch_size: 2; allowed: a size whose run fits in memory")
    assert f"(limit_gb={limit_gb:g})" in e.value.fibexp_line
    assert resource.getrlimit(resource.RLIMIT_DATA) == before


def test_a_run_within_its_limit_trains_and_leaves_the_data_limit_as_it_was(tmp_path):
    before = resource.getrlimit(resource.RLIMIT_DATA)
    guard = MemoryGuard(held_bytes() / GIB + 1)
    _fit(Tiny(), guard, tmp_path)
    assert guard.limit is not None
    assert resource.getrlimit(resource.RLIMIT_DATA) == before


def _job_config(*overrides: str):
    with initialize_config_dir(config_dir=schema.CONF_DIR, version_base="1.3"):
        cfg = compose("train", overrides=list(overrides), return_hydra_config=True)
        HydraConfig.instance().set_config(cfg)  # paths resolve as in a job
    return cfg


def test_a_runs_guard_takes_its_limit_and_sizes_from_the_config():
    guard = MemoryGuard.of(_job_config("trainer.memory_limit_gb=3", "data.batch_size=64", "model.d_model=64"))
    assert guard.limit_gb == 3 and guard.source == "trainer.memory_limit_gb"
    assert guard.values["data.batch_size"] == 64 and guard.values["model.d_model"] == 64


def test_a_run_carries_one_guard_whether_or_not_its_config_names_one():
    from fibexp.training.memory_guard import guards

    cfg = _job_config("data.batch_size=24")
    assert guards(cfg, [MemoryGuard(2)]) == []
    (own,) = guards(cfg, [])
    assert own.limit_gb is None and own.values["data.batch_size"] == 24
