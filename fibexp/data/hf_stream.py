"""Reading a source's documents (data.source=hf): every dataset is streamed
(`load_dataset(..., streaming=True)`), so a Hub dataset is read only as far as its token budget
reaches, never downloaded whole. Held-out text is taken by document (or by file shard, or as one
tail block), never by line, and deterministically from the stream order, so no document is in
both splits. A stream can be resumed right after any document (`DocStream.state()`, built on
datasets' `state_dict`). Data files that are URLs (or archives) are fetched and extracted once
with datasets' DownloadManager, then read as local files (their builder options apply)."""
from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from fibexp.data.corpus import CorpusError
from fibexp.data.files import ARCHIVES, is_url
from fibexp.data.hf_parts import Part, Source
from fibexp.data.spec import HELDOUT_RULES


def error_line(e: Exception) -> str:
    return f"{type(e).__name__}: {(str(e).splitlines() or [''])[0][:200]}"


def _localized(corpus, part: Part):
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
        raise CorpusError(f"{part.key}.data_files", f"cannot fetch {part.files()[0]} ({error_line(e)})",
                          "files, globs or URLs reachable from here") from None
    return {k: expand(v) for k, v in got.items()} if isinstance(got, dict) else expand(got)


def open_part(corpus, part: Part, split: str, key: str):
    """The streaming dataset of one part and split of `corpus` (an HFCorpus); one-line CorpusError
    naming `key`."""
    import datasets

    try:
        return datasets.load_dataset(part.path, part.config, data_files=_localized(corpus, part), split=split,
                                     revision=part.revision, streaming=True, **dict(part.config_kwargs))
    except CorpusError:
        raise
    except Exception as e:
        why = error_line(e)
        if "split" in why.lower():
            raise CorpusError(key, f"cannot open {part.path} split {split!r} ({why})",
                              "a split the dataset has") from None
        raise CorpusError(f"{part.key}.path", f"cannot open {part.path} ({why})", "a Hub dataset reachable "
                          "from here (pinned revision, config) or readable local files") from None


def text_of(example: dict, part: Part) -> str:
    """The document of one example: its text fields joined; a missing field is a CorpusError."""
    values = []
    for f in part.text_fields:
        if f not in example:
            raise CorpusError(f"{part.key}.text_field", f"{f!r} is not a column of {part.path}",
                              ", ".join(example))
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
            raise CorpusError(f"{part.key}.data_files", f"{named} is not {e.encoding} ({e.reason})", f"text in "
                              f"{e.encoding}, or another encoding in config_kwargs: {{encoding: <name>}}") from None
        yield example


class DocStream:
    """Documents of one source and split, in stream order; `state()` after any document is
    where a new DocStream(..., state) starts again. Train = the extra parts, then the main
    dataset's documents that the held-out rule leaves; held-out = the rest (split "count":
    every main document, to size a tail block)."""

    def __init__(self, corpus, source: Source, split: str, state: dict | None = None):
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
            return lambda: open_part(c, part, split, key)

        segs = []
        if self.split == "train":
            segs += [(opener(p, p.split, f"{p.key}.split"), p, "extra") for p in s.extra]
        if rule[0] == "shard" and self.split != "count":
            ds = open_part(c, main, main.split, f"{main.key}.split")
            n = ds.num_shards
            if n < 2:
                raise CorpusError(f"{s.key}.heldout", f"last_shard needs >= 2 files in split {main.split!r}, "
                                  f"{main.path} has {n}", f"{HELDOUT_RULES}, or set heldout_split")
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
                text = text_of(example, part)
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
