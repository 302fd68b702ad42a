"""A trained run's tokenizer, as it was built for training (the cache under the run's
`paths.cache_dir`, rebuilt from the corpus if that cache is gone)."""
from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig

from fibexp.data.sources import open_corpus
from fibexp.data.tokenizer import Tokenizer, load_tokenizer


def run_tokenizer(cfg: DictConfig) -> Tokenizer:
    cache_dir = Path(cfg.paths.cache_dir)
    return load_tokenizer(cfg.data.tokenizer, open_corpus(cfg.data, cache_dir), int(cfg.model.vocab_size), cache_dir)
