"""Tokenizers trained on the frozen corpus's train split, cached per corpus fingerprint.

Two kinds: byte-level BPE (lossless, the default for language modelling) and a character
vocabulary (for bits-per-character baselines). Both reserve id 0 as the document separator.
Cache files are written atomically, and a cache file that does not load is rebuilt, because
a half-written or damaged cache must never stop (or silently change) a run.
"""
from __future__ import annotations

import json
import logging
import os
import tempfile
from pathlib import Path
from typing import Iterable, Iterator

import numpy as np
from tokenizers import Tokenizer as HFTokenizer
from tokenizers import decoders, models, pre_tokenizers, trainers

log = logging.getLogger(__name__)

KINDS = ("bpe", "char")
EOS = "<|endoftext|>"
UNK_CHAR = "\ufffd"  # what the char tokenizer decodes its unknown id to
MAX_VOCAB = 65536  # token ids are stored as uint16
_BPE_MIN_VOCAB = 257  # 256 byte symbols + the separator


class Tokenizer:
    """What the rest of fibexp needs from a tokenizer, whatever its kind."""

    def __init__(self, kind: str, name: str, n_vocab: int, encode_batch, decode):
        self.kind, self.name, self.n_vocab = kind, name, n_vocab
        self.eos_id = 0
        self._encode_batch, self._decode = encode_batch, decode

    def encode(self, text: str) -> list[int]:
        return self._encode_batch([text])[0]

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return self._encode_batch(texts)

    def decode(self, ids: Iterable[int]) -> str:
        return self._decode([int(i) for i in ids])

    def __repr__(self) -> str:
        return f"Tokenizer({self.name!r}, n_vocab={self.n_vocab})"


def load_tokenizer(kind: str, corpus, vocab_size: int, cache_dir: Path) -> Tokenizer:
    """Load the cached tokenizer for (kind, corpus, vocab_size), training it on first use."""
    if kind not in KINDS:
        raise ValueError(f"data.tokenizer must be one of {KINDS}, got {kind!r}")
    folder = Path(cache_dir) / "tokenizer"
    return (_load_bpe if kind == "bpe" else _load_char)(corpus, vocab_size, folder)


def atomic_write_text(path: Path, text: str) -> None:
    """Write via a unique temp file + os.replace, so readers never see a partial file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _first_line(e: Exception) -> str:
    return (str(e).splitlines() or [type(e).__name__])[0]


def _train_texts(corpus) -> Iterator[str]:
    for domain in corpus.domains:
        yield from corpus.documents(domain, "train")


# --- byte-level BPE -------------------------------------------------------------------------

def _train_bpe(corpus, vocab_size: int) -> HFTokenizer:
    tok = HFTokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[EOS],  # first special token -> id 0
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(_train_texts(corpus), trainer=trainer)
    return tok


def _load_bpe(corpus, vocab_size: int, folder: Path) -> Tokenizer:
    if not _BPE_MIN_VOCAB <= vocab_size <= MAX_VOCAB:
        raise ValueError(f"model.vocab_size={vocab_size} is outside {_BPE_MIN_VOCAB}..{MAX_VOCAB}: byte-level "
                         f"BPE needs 256 bytes + separator, and token ids are stored as uint16")
    name = f"bpe-{corpus.fingerprint}-{vocab_size}"
    path = folder / f"{name}.json"
    tok = None
    if path.exists():
        try:
            tok = HFTokenizer.from_file(str(path))
            if tok.token_to_id(EOS) != 0 or tok.get_vocab_size() > vocab_size:
                raise ValueError("unexpected vocabulary")
        except Exception as e:  # any unreadable cache is rebuilt, never trusted
            log.warning("tokenizer cache %s is unusable (%s); rebuilding", path, _first_line(e))
            tok = None
    if tok is None:
        tok = _train_bpe(corpus, vocab_size)
        atomic_write_text(path, tok.to_str())
    # Text that happens to contain "<|endoftext|>" is encoded as text: the round trip stays lossless.
    tok.encode_special_tokens = True

    def encode_batch(texts):
        return [e.ids for e in tok.encode_batch_fast(texts, add_special_tokens=False)]  # no offsets

    def decode(ids):
        return tok.decode(ids, skip_special_tokens=False)

    return Tokenizer("bpe", name, tok.get_vocab_size(), encode_batch, decode)


# --- characters -----------------------------------------------------------------------------

def _build_chars(corpus) -> str:
    seen: set[str] = set()
    for text in _train_texts(corpus):
        seen.update(text)
    return "".join(sorted(seen))


def _load_char(corpus, vocab_size: int, folder: Path) -> Tokenizer:
    # The ids do not depend on vocab_size (it is only an upper bound), so neither does the
    # name: every vocab_size shares one tokenizer file and one token cache.
    name = f"char-{corpus.fingerprint}"
    path = folder / f"{name}.json"
    chars = None
    if path.exists():
        try:
            meta = json.loads(path.read_text(encoding="utf-8"))
            if meta.get("fingerprint") != corpus.fingerprint or not isinstance(meta.get("chars"), str):
                raise ValueError("unexpected content")
            chars = meta["chars"]
        except Exception as e:
            log.warning("tokenizer cache %s is unusable (%s); rebuilding", path, _first_line(e))
    if chars is None:
        chars = _build_chars(corpus)
        atomic_write_text(path, json.dumps({"kind": "char", "fingerprint": corpus.fingerprint,
                                            "chars": chars}))
    n_vocab = len(chars) + 2
    if vocab_size < n_vocab:
        raise ValueError(f"model.vocab_size={vocab_size} is smaller than the {n_vocab} ids the char "
                         f"tokenizer needs (separator + unknown + {len(chars)} characters)")
    codes = np.array([ord(c) for c in chars], dtype=np.int64)  # sorted, as the string is
    table = ["<|endoftext|>", UNK_CHAR, *chars]

    def encode_one(text: str) -> list[int]:
        cps = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype="<u4").astype(np.int64)
        idx = np.searchsorted(codes, cps)
        hit = idx < len(codes)
        hit[hit] = codes[idx[hit]] == cps[hit]
        return np.where(hit, idx + 2, 1).tolist()

    def decode(ids):
        return "".join(table[i] if 0 <= i < n_vocab else UNK_CHAR for i in ids)

    return Tokenizer("char", name, n_vocab, lambda texts: [encode_one(t) for t in texts], decode)
