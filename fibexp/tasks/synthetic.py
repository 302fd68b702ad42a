"""What every synthetic task shares: examples (x, y) with y = -100 where nothing is scored,
optionally a per-position `group` (which accuracy it counts towards, e.g. the copy distance) and
`choices` (candidate ids for a forced choice at the last position), generated from a seed. Batches
are drawn from (seed, rank, step) alone, so a resumed run replays exactly the stream an
uninterrupted run sees; the held-out set is drawn once from its own seed, and training draws that
equal a held-out example are redrawn, so the two never overlap. Scored by accuracy (`Accuracy`)."""
from __future__ import annotations

import hashlib
from typing import ClassVar

import lightning.pytorch as pl
import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from fibexp.errors import Refusal
from fibexp.evals.evaluator import Evaluator, forced_choice
from fibexp.tasks.task import Task

IGNORE = -100  # target of positions that are not scored (torch's cross-entropy ignore_index)


def generator(*entropy: int) -> torch.Generator:
    """A generator seeded by a tuple of ints, mixed by SeedSequence: (seed, rank, step) of a
    training batch and (heldout_seed,) of the held-out set are independent streams."""
    state = np.random.SeedSequence(list(entropy)).generate_state(2)
    return torch.Generator().manual_seed(int(state[0]) << 32 | int(state[1]))


def row_keys(x: torch.Tensor) -> list[bytes]:
    """A stable 8-byte digest per example (Python's hash of bytes changes per process)."""
    rows = x.to(torch.int32).numpy()
    return [hashlib.blake2b(r.tobytes(), digest_size=8).digest() for r in rows]


class SyntheticTask(Task):
    """A task whose examples are generated from a seed: no files, no corpus."""

    version: ClassVar[int] = 1  # bump when the generation rule changes

    @property
    def group_names(self) -> tuple[str, ...]:
        """Suffixes of task/acc/<group>, as the task's config declares them."""
        return self.config.groups(self.cfg)

    def draw(self, g: torch.Generator, n: int) -> dict[str, torch.Tensor]:
        """n examples from generator g: {"x", "y"[, "group"][, "choices"]}, int64."""
        raise NotImplementedError

    def data_fingerprint(self, corpus) -> str:
        return f"synthetic/{self.name}/v{self.version}"

    def heldout(self) -> dict[str, torch.Tensor]:
        return self.draw(generator(int(self.conf.heldout_seed)), int(self.conf.heldout_examples))

    def chance(self, heldout: dict[str, torch.Tensor]) -> float:
        """Majority guess: the share of scored targets equal to the most frequent one; with a
        forced choice, 1 / the number of candidates (any fixed pick among shuffled ones)."""
        if "choices" in heldout:
            return 1.0 / heldout["choices"].shape[1]
        y = heldout["y"][heldout["y"] != IGNORE]
        return float(torch.bincount(y).max() / y.numel())

    def datamodule(self, corpus=None) -> "SyntheticData":
        return SyntheticData(self, int(self.cfg.data.batch_size), int(self.cfg.seed), int(self.cfg.data.num_workers))

    def loss(self, model, batch):
        x, y = batch["x"], batch["y"]
        logits = model(x).float()
        return F.cross_entropy(logits.flatten(0, 1), y.flatten(), ignore_index=IGNORE), x.numel()

    def evaluation(self, dm: "SyntheticData"):
        return Accuracy(self.group_names, self.chance(dm.heldout)), [dm.heldout_loader()]

    def objective(self, metrics):
        return 1.0 - metrics["task/acc"]


def predictions(logits: torch.Tensor, batch: dict) -> torch.Tensor:
    """Predicted id per position: the argmax over the vocabulary, or at the last position of a
    forced-choice example the candidate with the highest logit (one forward pass)."""
    if "choices" in batch:
        pred = torch.full(batch["y"].shape, IGNORE, dtype=torch.long, device=logits.device)
        pred[:, -1] = forced_choice(logits[:, -1], batch["choices"])
        return pred
    return logits.argmax(-1)


class Accuracy(Evaluator):
    """task/acc over every scored position of the held-out set, task/acc/<group> per group,
    task/chance (the held-out set's majority guess)."""

    def __init__(self, group_names: tuple[str, ...], chance: float):
        self.group_names, self.chance = group_names, chance
        self.counts = None

    def update(self, model, batch, loader_idx=0):
        logits = model(batch["x"]).float()
        scored = batch["y"] != IGNORE
        hit = (predictions(logits, batch) == batch["y"]) & scored
        n = len(self.group_names)
        if self.counts is None:
            self.counts = torch.zeros(2, n + 1, dtype=torch.float64, device=logits.device)
        self.counts[0, n] += hit.sum()
        self.counts[1, n] += scored.sum()
        if n:
            group = batch["group"].clamp(min=0)
            self.counts[0, :n] += torch.bincount(group[hit], minlength=n)[:n]
            self.counts[1, :n] += torch.bincount(group[scored], minlength=n)[:n]

    def compute(self, reduce):
        c = reduce(self.counts)
        n = len(self.group_names)
        out = {"task/acc": float(c[0, n] / c[1, n]), "task/chance": self.chance}
        for i, g in enumerate(self.group_names):
            if c[1, i] > 0:
                out[f"task/acc/{g}"] = float(c[0, i] / c[1, i])
        return out


class _Rows(torch.utils.data.Dataset):
    def __init__(self, tensors: dict[str, torch.Tensor]):
        self.tensors = tensors

    def __len__(self):
        return len(self.tensors["x"])

    def __getitem__(self, i):
        return {k: v[i] for k, v in self.tensors.items()}


def _stack(rows: list[dict]) -> dict[str, torch.Tensor]:
    return {k: torch.stack([r[k] for r in rows]) for k in rows[0]}


class TaskStream(IterableDataset):
    """Endless training batches: global batch s (data.batch_size examples) from generator(seed, 0, s);
    an example equal to a held-out one is replaced by a fresh draw from the same generator (still
    a function of s). Rank `rank` of `world` (DDP) yields its contiguous share of the rows, so the
    ranks together train on exactly the single-process stream, each example once.
    With several dataloader workers, worker w serves steps w, w + n, ... in order."""

    def __init__(self, task: SyntheticTask, batch_size: int, seed: int, exclude: set[bytes], offset: int = 0,
                 rank: int = 0, world: int = 1):
        if batch_size % world:
            raise Refusal("data.batch_size", f"{batch_size} (does not split over {world} ranks)",
                          "a multiple of trainer.devices x trainer.num_nodes")
        self.task, self.batch_size, self.seed, self.exclude = task, batch_size, seed, exclude
        self.offset, self.rank, self.world = offset, rank, world

    def batch(self, step: int) -> dict[str, torch.Tensor]:
        """This rank's share of global batch `step`."""
        share = self.batch_size // self.world
        full = self.global_batch(step)
        return {k: v[self.rank * share:(self.rank + 1) * share] for k, v in full.items()}

    def global_batch(self, step: int) -> dict[str, torch.Tensor]:
        # (seed, 0, step): the 0 stands where the rank stood before batches were split over ranks
        g = generator(self.seed, 0, step)
        batch = self.task.draw(g, self.batch_size)
        while True:
            bad = [i for i, k in enumerate(row_keys(batch["x"])) if k in self.exclude]
            if not bad:
                return batch
            fresh = self.task.draw(g, len(bad))
            for k in batch:
                batch[k][bad] = fresh[k]

    def __iter__(self):
        info = get_worker_info()
        worker, n_workers = (info.id, info.num_workers) if info else (0, 1)
        step = self.offset + worker
        while True:
            yield self.batch(step)
            step += n_workers


class SyntheticData(pl.LightningDataModule):
    """Training stream and held-out set of a synthetic task. The stream starts at
    trainer.global_step, which Lightning has restored from the checkpoint on a resume."""

    def __init__(self, task: SyntheticTask, batch_size: int, seed: int, num_workers: int = 0):
        super().__init__()
        self.task, self.batch_size, self.seed, self.num_workers = task, batch_size, seed, num_workers
        self._heldout: dict[str, torch.Tensor] | None = None
        self._keys: set[bytes] = set()

    def _build(self) -> None:
        if self._heldout is None:
            held = self.task.heldout()
            self._keys = set(row_keys(held["x"]))
            self._heldout = held

    def setup(self, stage: str | None = None) -> None:
        self._build()

    @property
    def heldout(self) -> dict[str, torch.Tensor]:
        """The fixed held-out set (task.heldout_examples examples from task.heldout_seed)."""
        self._build()
        return self._heldout

    def stream(self, offset: int = 0, rank: int = 0, world: int = 1) -> TaskStream:
        self._build()
        return TaskStream(self.task, self.batch_size, self.seed, self._keys, offset, rank, world)

    def heldout_loader(self) -> DataLoader:
        held = self.heldout
        per_batch = max(1, int(self.task.cfg.eval.batch_tokens) // held["x"].shape[1])
        return DataLoader(_Rows(held), batch_size=per_batch, shuffle=False, collate_fn=_stack)

    def val_dataloader(self) -> DataLoader:
        """The held-out set's loss during training (trainer.val_every_n_steps > 0)."""
        return self.heldout_loader()

    def train_dataloader(self) -> DataLoader:
        trainer = self.trainer
        ds = self.stream(trainer.global_step if trainer else 0, *((trainer.global_rank, trainer.world_size)
                                                                  if trainer else (0, 1)))
        return DataLoader(ds, batch_size=None, num_workers=self.num_workers,
                          persistent_workers=self.num_workers > 0)
