"""Hugging Face `datasets` sources as a corpus: each source of `data.sources` is a domain.

Reading is streaming (`load_dataset(..., streaming=True)`), so a Hub dataset is read only as
far as its token budget reaches, never downloaded whole. Held-out text is taken by document
(or by file shard, or as one tail block), never by line, and deterministically from the
stream order, so no document is in both splits. A stream can be resumed right after any
document (`DocStream.state()`, built on datasets' `state_dict`): preparation continues where
a killed one stopped.

The fingerprint covers every source's dataset path, config, revision, the content of its
local data files, split, text fields, held-out rule and budgets, the weights and the
tokenizer: any change gives a new fingerprint, and the report never mixes fingerprints.
Data files that are URLs (or archives) are fetched and extracted once with datasets'
DownloadManager, then read as local files (their builder options, e.g. an encoding, apply).
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf

from fibexp.data.files import ARCHIVES, is_url, resolve_entry
from fibexp.data.corpus import CorpusError
from fibexp.data.spec import HELDOUT_RULES, get, parse_heldout
from fibexp.data.tokenizer import atomic_write_text, pretrained_identity

log = logging.getLogger(__name__)

FINGERPRINT_VERSION = 1
_HUB_ID = re.compile(r"^[\w.-]+/[\w.-]+$")
_COMMIT = re.compile(r"^[0-9a-f]{40}$")
_HASHES: dict[tuple, str] = {}  # (path, size, mtime) -> sha256, so one process hashes a file once


def _plain(value):
    return OmegaConf.to_container(value, resolve=True) if isinstance(value, (DictConfig, ListConfig)) else value


def _first_line(e: Exception) -> str:
    return f"{type(e).__name__}: {(str(e).splitlines() or [''])[0][:200]}"


def sha256_file(path: str) -> str:
    st = os.stat(path)
    memo = (path, st.st_size, st.st_mtime_ns)
    if memo not in _HASHES:
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 22), b""):
                h.update(block)
        _HASHES[memo] = h.hexdigest()
    return _HASHES[memo]


@dataclass(frozen=True)
class Part:
    """One dataset to stream: `datasets.load_dataset` arguments, validated and resolved."""

    key: str  # config key for error messages, e.g. data.sources[1] or data.sources[1].extra[0]
    path: str
    config: str | None
    data_files: Any  # None, (file, ...) or ((split, (file, ...)), ...): local files absolute
    split: str
    revision: str | None
    text_fields: tuple[str, ...]
    config_kwargs: tuple[tuple[str, Any], ...]
    kind: str  # "builder" (json, parquet, ... over data_files), "folder" (local) or "hub"

    def files(self) -> list[str]:
        if self.data_files is None:
            return []
        if self.data_files and isinstance(self.data_files[0], tuple):
            return [f for _, group in self.data_files for f in group]
        return list(self.data_files)

    def load_files(self):
        """data_files as load_dataset takes them."""
        if self.data_files and isinstance(self.data_files[0], tuple):
            return {split: list(group) for split, group in self.data_files}
        return None if self.data_files is None else list(self.data_files)

    def identity(self) -> dict:
        """What the fingerprint records: local files by content, everything else as written."""
        def ident(entry):
            return entry if is_url(entry) or self.kind == "hub" else sha256_file(entry)

        files = self.load_files()
        if isinstance(files, dict):
            files = {k: [ident(f) for f in v] for k, v in files.items()}
        elif files is not None:
            files = [ident(f) for f in files]
        if self.kind == "folder":
            root = Path(self.path)
            files = [[str(p.relative_to(root)), sha256_file(str(p))] for p in sorted(root.rglob("*"))
                     if p.is_file() and not any(x.startswith(".") for x in p.relative_to(root).parts)]
        return {"path": self.path if self.kind != "folder" else "<folder>", "config": self.config,
                "revision": self.revision, "split": self.split, "text_field": list(self.text_fields),
                "config_kwargs": {k: v for k, v in self.config_kwargs}, "data_files": files}

    def describe(self) -> dict:
        """load_dataset arguments, for the MLflow dataset source."""
        return {"path": self.path, "config_name": self.config, "data_files": self.load_files(),
                "split": self.split, "revision": self.revision}


def _resolve_entry(entry: str, key: str, local: bool) -> list[str]:
    return resolve_entry(entry, key) if local else [entry]


def _part(node, key: str, builders: set[str]) -> Part:
    path = str(get(node, "path"))
    files = _plain(get(node, "data_files"))
    if path in builders:
        kind = "builder"
        if not files:
            raise CorpusError(f"{key}.data_files: none for path {path}; allowed: files, globs or URLs to read")
    elif os.path.isdir(os.path.expanduser(path)):
        kind, path = "folder", os.path.abspath(os.path.expanduser(path))
    elif _HUB_ID.match(path) and not os.path.exists(path):
        kind = "hub"
    else:
        raise CorpusError(f"{key}.path: {path!r} is not a dataset; allowed: {', '.join(sorted(builders))} "
                          f"with data_files, a local folder, or a Hub id owner/name")
    local = kind == "builder"
    if isinstance(files, dict):
        resolved = tuple((str(k), tuple(f for e in ([v] if isinstance(v, str) else v)
                                        for f in _resolve_entry(e, key, local))) for k, v in files.items())
    elif files is not None:
        resolved = tuple(f for e in ([files] if isinstance(files, str) else files) for f in _resolve_entry(e, key, local))
    else:
        resolved = None
    tf = _plain(get(node, "text_field", "text"))
    kwargs = _plain(get(node, "config_kwargs")) or {}
    return Part(key, path, get(node, "config"), resolved, str(get(node, "split", "train")), get(node, "revision"),
                (tf,) if isinstance(tf, str) else tuple(tf), tuple(sorted(kwargs.items())), kind)


@dataclass(frozen=True)
class Source:
    index: int
    name: str
    weight: float
    main: Part
    extra: tuple[Part, ...]
    heldout: tuple  # parsed rule: ("every", n) | ("split", name) | ("shard",) | ("tail", f)
    heldout_text: str  # the rule as configured, for messages and records
    heldout_tokens: int
    max_chars: int

    @property
    def key(self) -> str:
        return f"data.sources[{self.index}]"


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
            main = _part(s, key, builders)
            extra = tuple(_part(p, f"{key}.extra[{j}]", builders) for j, p in enumerate(get(s, "extra") or []))
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
        raise CorpusError(f"unknown source {name!r}; allowed: {', '.join(self.domains)}")

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
            raise CorpusError(f"unknown split {split!r}; allowed: train, heldout")
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
                first = next(iter(_open(self, part, part.split, f"{part.key}.split")), None)
                if first is None:
                    raise CorpusError(f"{part.key}: {part.path} split {part.split!r} has no documents")
                _text(first, part)
            if next(self.documents(s.name, "heldout"), None) is None:
                raise CorpusError(f"{s.key}.heldout: {s.heldout_text} leaves no held-out text; allowed: "
                                  f"{HELDOUT_RULES}, or set heldout_split")
            if next(self.documents(s.name, "train"), None) is None:
                raise CorpusError(f"{s.key}: no training text is left once {s.heldout_text} is held out")
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
            log.warning("%s.revision: %s is not a commit (%s)", part.key, part.revision or "main", _first_line(e))


def _localized(corpus: HFCorpus, part: Part):
    """data_files for load_dataset; URLs and archives fetched/extracted once into the cache."""
    files = part.load_files()
    if part.kind != "builder" or not any(is_url(f) or f.endswith(ARCHIVES) for f in part.files()):
        return files
    import datasets

    cache = str(corpus.cache_dir / "downloads") if corpus.cache_dir else None
    manager = datasets.DownloadManager(download_config=datasets.DownloadConfig(cache_dir=cache))

    def expand(paths):
        out = []
        for p in paths:
            out += sorted(str(f) for f in Path(p).rglob("*") if f.is_file()) if os.path.isdir(p) else [p]
        return out

    try:
        got = manager.download_and_extract(files)
    except Exception as e:
        raise CorpusError(f"{part.key}.data_files: cannot fetch {part.files()[0]} ({_first_line(e)})") from None
    return {k: expand(v) for k, v in got.items()} if isinstance(got, dict) else expand(got)


def _open(corpus: HFCorpus, part: Part, split: str, key: str):
    """The streaming dataset of one part and split; one-line CorpusError naming `key`."""
    import datasets

    try:
        return datasets.load_dataset(part.path, part.config, data_files=_localized(corpus, part), split=split,
                                     revision=part.revision, streaming=True, **dict(part.config_kwargs))
    except CorpusError:
        raise
    except Exception as e:
        why = _first_line(e)
        if "split" in why.lower():
            raise CorpusError(f"{key}: cannot open {part.path} split {split!r} ({why}); allowed: a split "
                              f"the dataset has") from None
        raise CorpusError(f"{part.key}.path: cannot open {part.path} ({why}); allowed: a Hub dataset reachable "
                          f"from here (pinned revision, config) or readable local files") from None


def _text(example: dict, part: Part) -> str:
    values = []
    for f in part.text_fields:
        if f not in example:
            raise CorpusError(f"{part.key}.text_field: {f!r} is not a column of {part.path}; "
                              f"allowed: {', '.join(example)}")
        v = example[f]
        if v is not None and v != "":
            values.append(v if isinstance(v, str) else str(v))
    return "\n\n".join(values)


def _decoded(ds, part: Part):
    """The examples of a dataset; a file that is not text in its encoding ends the stream with a
    one-line CorpusError naming it (datasets raises the bare UnicodeDecodeError, no file named)."""
    it = iter(ds)
    while True:
        try:
            example = next(it)
        except StopIteration:
            return
        except UnicodeDecodeError as e:
            files = part.files()
            named = files[0] if len(files) == 1 else f"one of {', '.join(files[:3])}" + (" ..." if len(files) > 3 else "")
            raise CorpusError(f"{part.key}.data_files: {named} is not {e.encoding} ({e.reason}); allowed: text in "
                              f"{e.encoding}, or another encoding in config_kwargs: {{encoding: <name>}}") from None
        yield example


class DocStream:
    """Documents of one source and split, in stream order; `state()` after any document is
    where a new DocStream(..., state) starts again. Train = the extra parts, then the main
    dataset's documents that the held-out rule leaves; held-out = the rest (split "count":
    every main document, to size a tail block)."""

    def __init__(self, corpus: HFCorpus, source: Source, split: str, state: dict | None = None):
        self.corpus, self.source, self.split = corpus, source, split
        state = state or {}
        self._seg, self._raw = state.get("seg", 0), state.get("raw")
        self._docs, self._chars = state.get("docs", 0), state.get("chars", 0)
        self._ds = None

    def _segments(self) -> list[tuple[Any, Part, str]]:
        """(dataset or a thunk opening it, part, mode) in stream order."""
        s, main, rule = self.source, self.source.main, self.source.heldout
        c = self.corpus

        def opener(part, split, key):
            return lambda: _open(c, part, split, key)

        segs = []
        if self.split == "train":
            segs += [(opener(p, p.split, f"{p.key}.split"), p, "extra") for p in s.extra]
        if rule[0] == "shard" and self.split != "count":
            ds = _open(c, main, main.split, f"{main.key}.split")
            n = ds.num_shards
            if n < 2:
                raise CorpusError(f"{s.key}.heldout: last_shard needs >= 2 files in split {main.split!r}, "
                                  f"{main.path} has {n}; allowed: {HELDOUT_RULES}, or set heldout_split")
            shards = range(n - 1) if self.split == "train" else [n - 1]
            segs += [((lambda i=i: ds.shard(num_shards=n, index=i)), main, "all") for i in shards]
        elif rule[0] == "split" and self.split == "heldout":
            segs.append((opener(main, rule[1], f"{s.key}.heldout_split"), main, "all"))
        else:
            mode = "all" if rule[0] == "split" or self.split == "count" else self.split
            segs.append((opener(main, main.split, f"{main.key}.split"), main, mode))
        return segs

    def state(self) -> dict:
        raw = self._ds.state_dict() if self._ds is not None else self._raw
        return {"seg": self._seg, "raw": raw, "docs": self._docs, "chars": self._chars}

    def __iter__(self) -> Iterator[str]:
        s = self.source
        cap = s.max_chars
        segs = self._segments()
        boundary = None
        if s.heldout[0] == "tail" and self.split != "count":
            boundary = int(self.corpus.text_size(s) * (1 - s.heldout[1]))
        every = s.heldout[1] if s.heldout[0] == "every" else 0
        for k in range(self._seg, len(segs)):
            make, part, mode = segs[k]
            ds = make()
            if self._raw is not None:
                ds.load_state_dict(self._raw)
            self._seg, self._ds, self._raw = k, ds, None
            for example in _decoded(ds, part):
                text = _text(example, part)
                if mode == "extra":
                    if text:
                        yield text
                    continue
                i, start = self._docs, self._chars
                if cap:
                    if start >= cap:
                        return
                    text = text[: cap - start]
                self._docs, self._chars = i + 1, start + len(text)
                if every and mode in ("train", "heldout") and (i % every == every - 1) != (mode == "heldout"):
                    continue
                if boundary is not None and mode == "train":
                    if start >= boundary:
                        return
                    text = text[: boundary - start]
                elif boundary is not None and mode == "heldout":
                    if self._chars <= boundary:
                        continue
                    text = text[max(0, boundary - start):]
                if text:
                    yield text
            self._ds, self._raw = None, None
            self._seg = k + 1
