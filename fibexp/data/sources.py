"""Where a run's text comes from, chosen by `data.source`: one reader interface
(`domains`, `documents(domain, split)`, `fingerprint`, `verify()`) whatever the source, so
tokenizers, token caches and the datamodule never need to know which one it is. `embedded`: the
frozen corpus shipped in the package; `hf`: Hugging Face `datasets` sources (fibexp.data.hf)."""
from __future__ import annotations

from fibexp.data.corpus import EmbeddedCorpus
from fibexp.data.hf import HFCorpus
from fibexp.data.spec import check_data


def open_corpus(data, cache_dir=None):
    """The corpus of a `data` config node; raises ValueError naming the key on bad input.
    `cache_dir` (paths.cache_dir) holds what an `hf` corpus keeps between runs: the copy of
    a Hub tokenizer, downloads, and the record that its sources were checked once, so jobs on
    nodes without internet need nothing but the prepared data."""
    check_data(data)
    if data.source == "embedded":
        return EmbeddedCorpus(domains=tuple(data.domains))
    return HFCorpus.from_config(data, cache_dir)
