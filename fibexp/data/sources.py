"""Where a run's text comes from, chosen by `data.source`: one reader interface
(`domains`, `documents(domain, split)`, `fingerprint`, `verify()`) whatever the source, so
tokenizers, token caches and the datamodule never need to know which one it is."""
from __future__ import annotations

from fibexp.data.corpus import EmbeddedCorpus

SOURCES = ("embedded",)


def open_corpus(data):
    """The corpus of a `data` config node; raises ValueError naming the key on bad input."""
    if data.source not in SOURCES:
        raise ValueError(f"data.source: unknown {data.source!r}; allowed: {', '.join(SOURCES)}")
    return EmbeddedCorpus(domains=tuple(data.domains))
