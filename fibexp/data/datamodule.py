"""LightningDataModule over the cached token streams.

Training: an endless stream of random (seq_len + 1)-token windows, the domain of each window
drawn from the mixture weights (data.mixture, or each source's weight for Hugging Face
sources: the paper's recipe); training length is bounded by
trainer.max_steps. Evaluation: the first eval_tokens tokens of each held-out set cut into
contiguous, non-overlapping windows (the papers' evaluation protocol), never sampled.

Reproducibility and resume: the batch of training step s is drawn from a generator seeded
by (seed, s) alone. data.batch_size is the global batch: with several ranks (DDP) rank r of n
reads rows [r*b/n, (r+1)*b/n) of that same batch, so the ranks together read exactly the
single-process stream, each row once. The stream starts at trainer.global_step when train_dataloader()
is called, which Lightning has already restored from the checkpoint on a resume; so a run
that is preempted and resumed sees exactly the batches an uninterrupted run sees, and ends
with the same weights (CPU). set_seed_offset() overrides the starting step.
"""
from __future__ import annotations

from pathlib import Path

import lightning.pytorch as pl
import numpy as np
import torch
from torch.utils.data import DataLoader, IterableDataset, TensorDataset, get_worker_info

from fibexp.data.shards import token_streams
from fibexp.data.spec import file_dtype
from fibexp.data.tokenizer import Tokenizer, load_tokenizer
from fibexp.data.tokens import TokenStream
from fibexp.errors import Refusal

SPLITS = ("train", "heldout")


class RandomWindows(IterableDataset):
    """Endless batches (x, y) of int64 [batch / world, seq_len] from random windows of the train
    streams; global batch s depends only on (seed, s), so a resumed stream is the same stream, and
    rank `rank` of `world` yields its contiguous share of rows of it.
    A stream stored as several shards draws uniformly among all windows that lie inside one
    shard (as if concatenated, less the few windows that would straddle two files).
    With several dataloader workers, worker w serves steps w, w + n, ... in order."""

    def __init__(self, shards: list[list[tuple[Path, int]]], weights: list[float], seq_len: int,
                 batch_size: int, seed: int, offset: int = 0, rank: int = 0, world: int = 1):
        if batch_size % world:
            raise Refusal("data.batch_size", f"{batch_size} (does not split over {world} ranks)",
                          "a multiple of trainer.devices x trainer.num_nodes")
        self.shards, self.seq_len, self.batch_size = shards, seq_len, batch_size
        self.weights = torch.tensor(weights, dtype=torch.float64)
        self.seed, self.offset, self.rank, self.world = seed, offset, rank, world

    def __iter__(self):
        info = get_worker_info()
        worker, n_workers = (info.id, info.num_workers) if info else (0, 1)
        span = self.seq_len + 1
        # Opened here, not in __init__, so spawned workers map the files instead of pickling them.
        streams = [[np.memmap(p, dtype=file_dtype(p), mode="r") for p, _ in shards] if w > 0 else []
                   for shards, w in zip(self.shards, self.weights.tolist())]
        # starts[d][j]: windows that begin in shards 0..j-1 of domain d (one shard: just its count)
        starts = [np.cumsum([0] + [max(n - span + 1, 0) for _, n in shards]) for shards in self.shards]
        step = self.offset + worker
        share = self.batch_size // self.world
        mine = range(self.rank * share, (self.rank + 1) * share)
        while True:
            # (seed, 0, step): the 0 stands where the rank stood before batches were split over ranks,
            # so a single-process stream is the one it always was
            state = np.random.SeedSequence([self.seed, 0, step]).generate_state(2)
            g = torch.Generator().manual_seed(int(state[0]) << 32 | int(state[1]))
            domains = torch.multinomial(self.weights, self.batch_size, replacement=True, generator=g).tolist()
            rows = []
            for i, d in enumerate(domains):  # every row's draw, so each rank's generator stays in step
                r = int(torch.randint(0, int(starts[d][-1]), (1,), generator=g))
                if i not in mine:
                    continue
                j = int(np.searchsorted(starts[d], r, side="right")) - 1
                start = r - int(starts[d][j])
                rows.append(torch.from_numpy(streams[d][j][start:start + span].astype(np.int64)))
            w = torch.stack(rows)
            yield w[:, :-1], w[:, 1:]
            step += n_workers


class TokenDataModule(pl.LightningDataModule):
    def __init__(self, corpus, tokenizer_kind: str, vocab_size: int, cache_dir: Path, seq_len: int,
                 batch_size: int, mixture: dict[str, float] | None = None, eval_tokens: int = 0,
                 seed: int = 0, num_workers: int = 0):
        super().__init__()
        self.corpus, self.tokenizer_kind, self.vocab_size = corpus, tokenizer_kind, vocab_size
        self.cache_dir, self.seq_len, self.batch_size = Path(cache_dir), seq_len, batch_size
        self.mixture, self.eval_tokens, self.seed = mixture, eval_tokens, seed
        self.num_workers = num_workers
        if mixture is not None:  # checked here so a bad config fails before any cache is built
            unknown = sorted(set(mixture) - set(corpus.domains))
            if unknown:
                raise Refusal("data.mixture", f"names unknown domains {unknown}",
                              f"weights of the corpus' domains {list(corpus.domains)}")
            if any(not float(w) >= 0 for w in mixture.values()) or sum(map(float, mixture.values())) <= 0:
                raise Refusal("data.mixture", dict(mixture), "weights >= 0 with a positive sum")
        self._seed_offset: int | None = None
        self._tokenizer: Tokenizer | None = None
        self._streams: dict[tuple[str, str], TokenStream] = {}

    # --- building ---------------------------------------------------------------------------
    def prepare_data(self) -> None:
        """Rank 0: build (or verify) the tokenizer and every token cache."""
        self._build()

    def setup(self, stage: str | None = None) -> None:
        """Every rank: load the caches prepare_data built."""
        self._build()

    def _build(self) -> None:
        if self._tokenizer is not None:
            return
        self.corpus.verify()  # fail fast (CorpusError) rather than cache or train on damaged text
        tok = load_tokenizer(self.tokenizer_kind, self.corpus, self.vocab_size, self.cache_dir)
        self._streams = token_streams(self.corpus, tok, self.cache_dir)
        self._tokenizer = tok
        self._weights = self._mixture_weights()

    def _mixture_weights(self) -> list[float]:
        domains = tuple(self.corpus.domains)
        if self.mixture is not None:
            weights = [float(self.mixture.get(d, 0.0)) for d in domains]  # unlisted domains: 0
        elif hasattr(self.corpus, "weights"):  # data.sources[i].weight
            weights = [self.corpus.weights[d] for d in domains]
        else:
            weights = [float(self._streams[d, "train"].n_tokens) for d in domains]
        span = self.seq_len + 1
        for d, w in zip(domains, weights):
            longest = max((n for _, n in self._streams[d, "train"].shards), default=0)
            if w > 0 and longest < span:
                raise Refusal("data.mixture", f"domain {d!r} has {longest} train tokens in its longest shard, "
                              f"fewer than model.seq_len + 1 = {span}", f"weight 0 for {d!r}")
        return weights

    # --- public views -----------------------------------------------------------------------
    @property
    def tokenizer(self) -> Tokenizer:
        self._build()
        return self._tokenizer

    @property
    def n_vocab(self) -> int:
        return self.tokenizer.n_vocab

    @property
    def streams(self) -> dict[tuple[str, str], TokenStream]:
        """{(domain, split): TokenStream} for every domain and split ("train", "heldout")."""
        self._build()
        return self._streams

    @property
    def heldout_names(self) -> list[str]:
        """Held-out sets in val_dataloader order: corpus domains with >= 1 window at seq_len."""
        return [d for d in self.corpus.domains if len(self._eval_ids(d)) > self.seq_len]

    def chars_per_token(self, domain: str) -> float:
        """Characters per token of the held-out set, from the whole stream (separators count as
        tokens, not characters); bits per char = mean nats per token / ln 2 / chars_per_token.
        Over an eval_tokens prefix this is the whole-stream ratio, an approximation."""
        s = self.streams[domain, "heldout"]
        return s.n_chars / max(s.n_tokens, 1)

    def set_seed_offset(self, offset: int) -> None:
        """Seed offset for the training sampler (default: trainer.global_step); call before
        train_dataloader() is built."""
        self._seed_offset = int(offset)

    # --- loaders ----------------------------------------------------------------------------
    def _eval_ids(self, domain: str) -> np.ndarray:
        ids = self.streams[domain, "heldout"].ids
        return ids[: self.eval_tokens] if self.eval_tokens > 0 else ids

    def heldout_windows(self, domain: str, length: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Contiguous, non-overlapping windows of the evaluated prefix: window j covers
        ids[j*length : (j+1)*length + 1]; incomplete tail dropped. int64 [n, length] each."""
        ids = self._eval_ids(domain)
        n = max(len(ids) - 1, 0) // length
        flat = torch.from_numpy(np.asarray(ids[: n * length + 1], dtype=np.int64))
        if n == 0:
            empty = torch.zeros(0, length, dtype=torch.int64)
            return empty, empty.clone()
        return flat[:-1].reshape(n, length), flat[1:].reshape(n, length)

    def train_dataloader(self) -> DataLoader:
        trainer = self.trainer
        offset = self._seed_offset if self._seed_offset is not None else (trainer.global_step if trainer else 0)
        rank, world = (trainer.global_rank, trainer.world_size) if trainer else (0, 1)
        shards = [list(self.streams[d, "train"].shards) for d in self.corpus.domains]
        ds = RandomWindows(shards, self._weights, self.seq_len, self.batch_size, self.seed, offset, rank, world)
        return DataLoader(ds, batch_size=None, num_workers=self.num_workers,
                          pin_memory=torch.cuda.is_available(),
                          persistent_workers=self.num_workers > 0)

    def val_dataloader(self) -> list[DataLoader]:
        """One loader per held-out set, in heldout_names order (dataloader_idx)."""
        return [DataLoader(TensorDataset(*self.heldout_windows(d, self.seq_len)),
                           batch_size=self.batch_size, shuffle=False)
                for d in self.heldout_names]
