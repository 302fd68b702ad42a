"""`fibexp-prepare`: open, check and tokenize a run's data once, with the same config as
`fibexp-train` (`fibexp-prepare +scale=paper`, `fibexp-prepare data=hf data.sources=...`).

Why a separate step: on a cluster the Hub is read once from a node with internet, and the
22 jobs of a sweep then only read (and verify) the prepared shards under paths.cache_dir
instead of all tokenizing the same corpus at once. A sweep calls `prepare(cfg)` for every
distinct data config in the submitting process; a job that starts anyway waits on the
preparation's file lock.
"""
from __future__ import annotations

import logging
import sys
import time
from pathlib import Path

import hydra
from omegaconf import DictConfig, OmegaConf

log = logging.getLogger("fibexp.prepare")
CONF_DIR = str(Path(__file__).resolve().parent.parent / "conf")
# fibexp.config (and so torch) is imported inside the functions: preparation processes are
# spawned and re-import this module, which must stay light.


def data_key(cfg: DictConfig) -> str:
    """What decides the prepared data (the sweep prepares each distinct one once)."""
    data = OmegaConf.to_container(cfg.data, resolve=True)
    keep = {k: data.get(k) for k in ("source", "domains", "tokenizer", "sources", "train_tokens")}
    return OmegaConf.to_yaml({**keep, "vocab_size": cfg.model.vocab_size, "cache_dir": str(cfg.paths.cache_dir)})


def prepare(cfg: DictConfig) -> dict[tuple[str, str], int]:
    """Check and prepare the data of a composed config; returns {(source, split): tokens}.
    Raises ValueError (one line, naming the key) on bad input, like fibexp-train."""
    from fibexp import config
    from fibexp.data.prepare import token_streams
    from fibexp.data.sources import open_corpus
    from fibexp.data.tokenizer import load_tokenizer

    config.validate(cfg)
    cache_dir = Path(cfg.paths.cache_dir)
    start = time.perf_counter()
    corpus = open_corpus(cfg.data, cache_dir)
    corpus.verify()
    tokenizer = load_tokenizer(cfg.data.tokenizer, corpus, cfg.model.vocab_size, cache_dir)
    if tokenizer.n_vocab > cfg.model.vocab_size:
        raise ValueError(f"model.vocab_size: {cfg.model.vocab_size} < the tokenizer's {tokenizer.n_vocab}; "
                         f"allowed: >= {tokenizer.n_vocab}")
    streams = token_streams(corpus, tokenizer, cache_dir)
    counts = {key: s.n_tokens for key, s in streams.items()}
    log.info("corpus %s, tokenizer %s: %d tokens ready in %.1f s under %s", corpus.fingerprint, tokenizer.name,
             sum(counts.values()), time.perf_counter() - start, cache_dir)
    return counts


@hydra.main(version_base="1.3", config_path=CONF_DIR, config_name="train")
def _main(cfg: DictConfig) -> None:
    from fibexp.validation import Refused

    try:
        counts = prepare(cfg)
    except ValueError as e:  # bad input, or a source that cannot be read: one line, exit 2
        raise Refused(str(e).splitlines()[0]) from None
    width = max(len(name) for name, _ in counts)
    for (name, split), n in counts.items():
        print(f"{name:<{width}}  {split:<7}  {n:>14,} tokens")


def main() -> None:
    """Hydra logs go under outputs/prepare/, not into a training run's directory. The config
    passes fibexp-train's validation pass first (fibexp.validation), the machine unchecked:
    data for GPU jobs is prepared on a node with internet, often without a GPU."""
    from fibexp import config, validation

    config.register()
    if not any(a.startswith("hydra.run.dir=") for a in sys.argv[1:]):
        sys.argv.append("hydra.run.dir=${paths.output_dir}/prepare")
    validation.run_cli("fibexp-prepare", _main, CONF_DIR, machine=False)


if __name__ == "__main__":
    main()
