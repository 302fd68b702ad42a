"""What each source of `data.sources` (data.source=hf) reads, checked and resolved from its
config without opening a dataset: its parts (the main dataset and any extra ones, as
`datasets.load_dataset` arguments, local files made absolute) and their identity for the
corpus fingerprint (local files by content, everything else as written)."""
from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf

from fibexp.data.corpus import CorpusError
from fibexp.data.files import is_url, resolve_entry
from fibexp.data.spec import get

_HUB_ID = re.compile(r"^[\w.-]+/[\w.-]+$")
_HASHES: dict[tuple, str] = {}  # (path, size, mtime) -> sha256, so one process hashes a file once


def _plain(value):
    return OmegaConf.to_container(value, resolve=True) if isinstance(value, (DictConfig, ListConfig)) else value


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


def part_of(node, key: str, builders: set[str]) -> Part:
    """One dataset of a source (its config `node`), checked: a packaged builder over data_files,
    a local folder or a Hub id; `key` names it in a one-line CorpusError."""
    path = str(get(node, "path"))
    files = _plain(get(node, "data_files"))
    if path in builders:
        kind = "builder"
        if not files:
            raise CorpusError(f"{key}.data_files", f"none for path {path}", "files, globs or URLs to read")
    elif os.path.isdir(os.path.expanduser(path)):
        kind, path = "folder", os.path.abspath(os.path.expanduser(path))
    elif _HUB_ID.match(path) and not os.path.exists(path):
        kind = "hub"
    else:
        raise CorpusError(f"{key}.path", f"{path!r} is not a dataset", f"{', '.join(sorted(builders))} "
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
