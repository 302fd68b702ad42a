"""Open, check and tokenize a run's data once, with the same config as training (`fibexp-prepare`).

Why a separate step: on a cluster the Hub is read once from a node with internet, and the
22 jobs of a sweep then only read (and verify) the prepared shards under paths.cache_dir
instead of all tokenizing the same corpus at once. A sweep calls `prepare(cfg)` for every
distinct data config in the submitting process; a job that starts anyway waits on the
preparation's file lock.

It is fed a config its caller has validated (`fibexp-prepare`'s and the sweep's validation pass):
the data layer reads the config's keys, and leaves the config's rules to the layer above.
"""
from __future__ import annotations

import logging
import time
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from fibexp.data.shards import token_streams
from fibexp.data.sources import open_corpus
from fibexp.data.tokenizer import load_tokenizer
from fibexp.errors import refuse

log = logging.getLogger("fibexp.prepare")


def data_key(cfg: DictConfig) -> str:
    """What decides the prepared data (the sweep prepares each distinct one once)."""
    data = OmegaConf.to_container(cfg.data, resolve=True)
    keep = {k: data.get(k) for k in ("source", "domains", "tokenizer", "sources", "train_tokens")}
    return OmegaConf.to_yaml({**keep, "vocab_size": cfg.model.vocab_size, "cache_dir": str(cfg.paths.cache_dir)})


def prepare(cfg: DictConfig) -> dict[tuple[str, str], int]:
    """Check and prepare the data of a validated config; returns {(source, split): tokens}.
    Raises ValueError (one line, naming the key) on data that cannot be read, like fibexp-train."""
    cache_dir = Path(cfg.paths.cache_dir)
    start = time.perf_counter()
    corpus = open_corpus(cfg.data, cache_dir)
    corpus.verify()
    tokenizer = load_tokenizer(cfg.data.tokenizer, corpus, cfg.model.vocab_size, cache_dir)
    if tokenizer.n_vocab > cfg.model.vocab_size:
        refuse("model.vocab_size", f"{cfg.model.vocab_size} < the tokenizer's {tokenizer.n_vocab}",
               f">= {tokenizer.n_vocab}")
    streams = token_streams(corpus, tokenizer, cache_dir)
    counts = {key: s.n_tokens for key, s in streams.items()}
    log.info("corpus %s, tokenizer %s: %d tokens ready in %.1f s under %s", corpus.fingerprint, tokenizer.name,
             sum(counts.values()), time.perf_counter() - start, cache_dir)
    return counts
