"""Token caches of the embedded corpus: each (domain, split) encoded once into a flat uint16
file (uint32 for a pretrained vocabulary above 65,536 ids), memory-mapped after (Hugging Face sources are prepared into shards by `prepare`).

Every document is followed by the separator id (and preceded by BOS for tokenizers that have
one), so windows can cross document boundaries the way the paper's "concatenated token
stream" does. A JSON sidecar ties the file to the
corpus fingerprint and tokenizer, and carries its sha256: a cache that fails any check is
rebuilt (with one warning line), and builds go through a temp file + os.replace, so an
interrupted build never leaves a file that passes verification.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np
from tqdm import tqdm

from fibexp.data.spec import WIDE_VOCAB, file_dtype, token_dtype
from fibexp.data.tokenizer import atomic_write_text
from fibexp.errors import Refusal

log = logging.getLogger(__name__)

_BATCH_DOCS = 256  # documents per encode_batch call (BPE encodes a batch in parallel)


@dataclass(frozen=True)
class TokenStream:
    """A token stream stored as one or more uint16 (or uint32: .u32) files (shards), in stream order.
    n_chars: characters of document text encoded (separators excluded), for bits per char."""

    shards: tuple[tuple[Path, int], ...]  # (file, n_tokens); empty when there are no tokens
    n_tokens: int
    n_chars: int

    @property
    def path(self) -> Path | None:
        return self.shards[0][0] if self.shards else None

    @cached_property
    def ids(self) -> np.ndarray:
        """The whole stream, read-only: a memmap of the single shard, else the shards joined in
        memory (held-out sets; training windows read the shards themselves)."""
        parts = [np.memmap(p, dtype=file_dtype(p), mode="r") for p, n in self.shards if n]
        ids = parts[0] if len(parts) == 1 else (np.concatenate(parts) if parts else np.zeros(0, np.uint16))
        ids.flags.writeable = False
        return ids


def token_stream(corpus, tokenizer, domain: str, split: str, cache_dir: Path) -> TokenStream:
    """The cached token stream of (domain, split), built on first use or when the cache is bad."""
    if tokenizer.n_vocab > WIDE_VOCAB:
        raise Refusal("data.tokenizer", f"{tokenizer.name} has {tokenizer.n_vocab} ids",
                      f"at most {WIDE_VOCAB}, what token files hold (lower model.vocab_size)")
    wide = token_dtype(tokenizer.n_vocab) == "uint32"
    path = Path(cache_dir) / "tokens" / tokenizer.name / f"{domain}.{split}.{'u32' if wide else 'u16'}"
    meta_path = path.with_suffix(".json")
    expected = {"fingerprint": corpus.fingerprint, "tokenizer": tokenizer.name}
    problem = _check(path, meta_path, expected)
    if problem is None:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
    else:
        if problem != "missing":
            log.warning("token cache %s is %s; rebuilding", path, problem)
        meta = _build(corpus, tokenizer, domain, split, path, meta_path, expected)
    n = meta["n_tokens"]
    return TokenStream(((path, n),) if n else (), n, meta["n_chars"])


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            h.update(block)
    return h.hexdigest()


def _check(path: Path, meta_path: Path, expected: dict) -> str | None:
    """None when the cache is valid, else a short reason."""
    if not path.exists() and not meta_path.exists():
        return "missing"
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
        for key, value in expected.items():
            if meta.get(key) != value:
                return f"for another {key} ({meta.get(key)!r})"
        n, sha = int(meta["n_tokens"]), meta["sha256"]
        int(meta["n_chars"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        return f"without a valid sidecar ({type(e).__name__})"
    if not path.exists():
        return "missing its token file"
    size = np.dtype(file_dtype(path)).itemsize * n
    if path.stat().st_size != size:
        return f"truncated or oversized ({path.stat().st_size} bytes, expected {size})"
    if file_sha256(path) != sha:
        return "corrupt (sha256 mismatch)"
    return None


def encode_documents(tokenizer, docs: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """(ids, tokens per document) of documents, each framed as [bos] ids eos (bos only if the
    tokenizer has one); uint16, or uint32 for a vocabulary above 65,536 ids."""
    head = [] if tokenizer.bos_id is None else [tokenizer.bos_id]
    out, lengths = [], []
    for ids in tokenizer.encode_batch(docs):
        out += head
        out += ids
        out.append(tokenizer.eos_id)
        lengths.append(len(head) + len(ids) + 1)
    return np.asarray(out, dtype=token_dtype(tokenizer.n_vocab)), np.asarray(lengths, dtype=np.int64)


def _build(corpus, tokenizer, domain, split, path: Path, meta_path: Path, expected: dict) -> dict:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    h, n_tokens, n_chars = hashlib.sha256(), 0, 0

    def flush(f, docs):
        nonlocal n_tokens, n_chars
        ids = encode_documents(tokenizer, docs)[0] if docs else np.zeros(0, token_dtype(tokenizer.n_vocab))
        chunk = ids.tobytes()
        f.write(chunk)
        h.update(chunk)
        n_tokens += len(ids)
        n_chars += sum(map(len, docs))

    try:
        with os.fdopen(fd, "wb") as f:
            docs: list[str] = []
            for doc in tqdm(corpus.documents(domain, split), desc=f"tokenizing {domain}/{split}", unit="doc",
                            disable=None):  # a bar on a terminal; in a log, where each redraw is a line, none
                docs.append(doc)
                if len(docs) == _BATCH_DOCS:
                    flush(f, docs)
                    docs = []
            flush(f, docs)
        os.replace(tmp, path)  # data first, sidecar last: a stale sidecar fails the sha check
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    meta = {**expected, "domain": domain, "split": split, "n_tokens": n_tokens,
            "n_chars": n_chars, "sha256": h.hexdigest()}
    atomic_write_text(meta_path, json.dumps(meta, indent=1))
    return meta
