"""A trained run's tokenizer, as it was built for training (the cache under the run's
`paths.cache_dir`, rebuilt from the corpus if that cache is gone), and the check that a run has
finished before a command reads its last checkpoint and logs into it."""
from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig

from fibexp.data.sources import open_corpus
from fibexp.data.tokenizer import Tokenizer, load_tokenizer


def run_tokenizer(cfg: DictConfig) -> Tokenizer:
    cache_dir = Path(cfg.paths.cache_dir)
    return load_tokenizer(cfg.data.tokenizer, open_corpus(cfg.data, cache_dir), int(cfg.model.vocab_size), cache_dir)


def tokenizer_json(cfg: DictConfig, tokenizer: Tokenizer) -> str:
    """The `tokenizers` JSON of a run's BPE tokenizer (the cached file it was loaded from)."""
    if tokenizer.kind != "bpe":
        raise ValueError(f"data.tokenizer: {cfg.data.tokenizer}; allowed for a transformers export: bpe "
                         "(a `tokenizers` BPE; the char vocabulary and hf: tokenizers are not exported yet)")
    return (Path(cfg.paths.cache_dir) / "tokenizer" / f"{tokenizer.name}.json").read_text(encoding="utf-8")


def require_finished(run_id: str, tracking_uri: str, command: str) -> None:
    """Refuse a run that has not FINISHED: its last checkpoint may not be its final weights, and
    `command` logs into it (fibexp.training.restore.require_finished: no MLflow import)."""
    from fibexp.training.restore import require_finished as check

    check(run_id, tracking_uri, command)
