"""Hugging Face `datasets` sources as a corpus: each source of `data.sources` is a domain.

Building one opens no dataset: its parts are checked and resolved from the config
(`fibexp.data.hf_parts`); reading streams them (`fibexp.data.hf_stream`), and a killed
preparation continues where it stopped. `verify` opens every dataset once.

The fingerprint covers every source's dataset path, config, revision, the content of its
local data files, split, text fields, held-out rule and budgets, the weights and the
tokenizer: any change gives a new fingerprint, and the report never mixes fingerprints.
"""
from __future__ import annotations

import hashlib
import json
import logging
import re
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from fibexp.data.corpus import CorpusError
from fibexp.data.hf_parts import Source, part_of
from fibexp.data.hf_stream import DocStream, error_line, open_part, text_of
from fibexp.data.spec import HELDOUT_RULES, get, parse_heldout
from fibexp.data.tokenizer import atomic_write_text, pretrained_identity

log = logging.getLogger(__name__)

FINGERPRINT_VERSION = 1
_COMMIT = re.compile(r"^[0-9a-f]{40}$")


@dataclass(frozen=True, eq=False)
class HFCorpus:
    """The sources of a `data.source=hf` config; cheap to build (no dataset is opened)."""

    sources: tuple[Source, ...]
    tokenizer: str
    train_tokens: int = 0
    num_proc: int = 0
    cache_dir: Path | None = None

    @classmethod
    def from_config(cls, data, cache_dir=None) -> HFCorpus:
        """Checks that need no network (paths, local files, the tokenizer) happen here."""
        from datasets.packaged_modules import _PACKAGED_DATASETS_MODULES

        builders = set(_PACKAGED_DATASETS_MODULES)
        sources = []
        for i, s in enumerate(get(data, "sources")):
            key = f"data.sources[{i}]"
            main = part_of(s, key, builders)
            extra = tuple(part_of(p, f"{key}.extra[{j}]", builders) for j, p in enumerate(get(s, "extra") or []))
            rule = parse_heldout(s, key)
            text = f"split:{rule[1]}" if rule[0] == "split" else str(get(s, "heldout", "every:10"))
            sources.append(Source(i, str(get(s, "name")), float(get(s, "weight", 1.0)), main, extra, rule, text,
                                  int(get(s, "heldout_tokens", 0)), int(get(s, "max_chars", 0))))
        corpus = cls(tuple(sources), str(data.tokenizer), int(get(data, "train_tokens", 0)),
                     int(get(data, "num_proc", 0)), Path(cache_dir) if cache_dir else None)
        corpus.fingerprint  # hashes local files and loads an hf: tokenizer: fails here, not mid-run
        return corpus

    # --- the reader interface ---------------------------------------------------------------
    @property
    def domains(self) -> tuple[str, ...]:
        return tuple(s.name for s in self.sources)

    @property
    def weights(self) -> dict[str, float]:
        """Share of training tokens per source (sums to 1)."""
        total = sum(s.weight for s in self.sources)
        return {s.name: s.weight / total for s in self.sources}

    def source(self, name: str) -> Source:
        for s in self.sources:
            if s.name == name:
                return s
        raise CorpusError("source", f"unknown {name!r}", ", ".join(self.domains))

    def budget(self, name: str, split: str) -> int | None:
        """Tokens to prepare for (source, split): None reads all of it. Training tokens are
        data.train_tokens split by weight, so the prepared shares are the weights."""
        s = self.source(name)
        if split == "heldout":
            return s.heldout_tokens or None
        return round(self.train_tokens * self.weights[name]) if self.train_tokens else None

    @cached_property
    def fingerprint(self) -> str:
        tok = pretrained_identity(self.tokenizer, self.cache_dir) if self.tokenizer.startswith("hf:") else self.tokenizer
        record = {"version": FINGERPRINT_VERSION, "tokenizer": tok, "train_tokens": self.train_tokens,
                  "sources": [{"name": s.name, "weight": round(self.weights[s.name], 12), "heldout": s.heldout_text,
                               "heldout_tokens": s.heldout_tokens, "max_chars": s.max_chars,
                               "main": s.main.identity(), "extra": [p.identity() for p in s.extra]}
                              for s in self.sources]}
        return hashlib.sha256(json.dumps(record, sort_keys=True).encode("utf-8")).hexdigest()[:12]

    def documents(self, domain: str, split: str) -> Iterator[str]:
        return iter(self.stream(domain, split))

    def stream(self, domain: str, split: str, state: dict | None = None) -> DocStream:
        if split not in ("train", "heldout"):
            raise CorpusError("split", f"unknown {split!r}", "train, heldout")
        return DocStream(self, self.source(domain), split, state)

    def verify(self) -> None:
        """Open every dataset once and check what only reading can tell: the text fields exist
        and the held-out rule leaves held-out text. Recorded under cache_dir, so later runs
        (jobs on nodes without internet) skip it."""
        marker = self.cache_dir / "prepared" / self.fingerprint / "sources.json" if self.cache_dir else None
        if marker is not None and marker.is_file():
            return
        for s in self.sources:
            for part in (*s.extra, s.main):
                first = next(iter(open_part(self, part, part.split, f"{part.key}.split")), None)
                if first is None:
                    raise CorpusError(part.key, f"{part.path} split {part.split!r} has no documents",
                                      "a split with documents")
                text_of(first, part)
            if next(self.documents(s.name, "heldout"), None) is None:
                raise CorpusError(f"{s.key}.heldout", f"{s.heldout_text} leaves no held-out text",
                                  f"{HELDOUT_RULES}, or set heldout_split")
            if next(self.documents(s.name, "train"), None) is None:
                raise CorpusError(s.key, f"no training text is left once {s.heldout_text} is held out",
                                  "a source with text left to train on (a smaller heldout)")
            _warn_unpinned(s)
        if marker is not None:
            atomic_write_text(marker, json.dumps({"fingerprint": self.fingerprint, "sources": [
                {"name": s.name, "main": s.main.identity(), "extra": [p.identity() for p in s.extra]}
                for s in self.sources]}, indent=1))

    @cached_property
    def _tail_sizes(self) -> dict[str, int]:
        return {}

    def text_size(self, source: Source) -> int:
        """Characters of the source's main dataset (at most max_chars): where tail:<f> cuts."""
        if source.name not in self._tail_sizes:
            n = 0
            for text in DocStream(self, source, "count"):
                n += len(text)
            self._tail_sizes[source.name] = n
        return self._tail_sizes[source.name]


def _warn_unpinned(source: Source) -> None:
    """A branch name lets the Hub content move under an unchanged fingerprint: name the commit."""
    for part in (*source.extra, source.main):
        if part.kind != "hub" or (part.revision and _COMMIT.match(part.revision)):
            continue
        try:
            from huggingface_hub import HfApi

            sha = HfApi().dataset_info(part.path, revision=part.revision or "main").sha
            log.warning("%s.revision: %s is not a commit; pin revision=%s to freeze this source",
                        part.key, part.revision or "main", sha)
        except Exception as e:  # informative only: opening the dataset already succeeded
            log.warning("%s.revision: %s is not a commit (%s)", part.key, part.revision or "main", error_line(e))
