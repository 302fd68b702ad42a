"""Tokenizers: trained on the corpus's train split and cached per corpus fingerprint, or
pretrained (`hf:`).

Byte-level BPE (lossless, the default for language modelling) and a character vocabulary (for
bits-per-character baselines) reserve id 0 as the document separator. `hf:<path or Hub id>`
loads a pretrained `tokenizers` file (the papers' Llama-2 vocabulary): documents are then
framed by its own BOS/EOS ids. Cache files are written atomically, and a cache file that does
not load is rebuilt, because a half-written or damaged cache must never stop (or silently
change) a run.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import tempfile
from functools import lru_cache
from pathlib import Path
from typing import Iterable, Iterator

import numpy as np
from tokenizers import Tokenizer as HFTokenizer
from tokenizers import decoders, models, pre_tokenizers, trainers

from fibexp.data.spec import BPE_MIN_VOCAB, MAX_VOCAB
from fibexp.errors import Refusal

log = logging.getLogger(__name__)

EOS = "<|endoftext|>"
HF_ALLOWED = "bpe, char, hf:<tokenizer.json, folder or Hub id[@revision]>"
_HF_EOS = ("</s>", "<|endoftext|>", "<|end_of_text|>", "<eos>", "<|eos|>")  # end-of-document pieces
_HF_BOS = ("<s>", "<|begin_of_text|>", "<bos>", "<|bos|>")
# Tokenizers learn from at most this many characters per domain: all of the embedded corpus,
# a sample of a Hub-scale source (BPE on 4 x 50M characters takes about a minute).
TRAIN_CHARS_PER_DOMAIN = 50_000_000
UNK_CHAR = "\ufffd"  # what the char tokenizer decodes its unknown id to


class Tokenizer:
    """What the rest of fibexp needs from a tokenizer, whatever its kind."""

    def __init__(self, kind: str, name: str, n_vocab: int, encode_batch, decode, eos_id: int = 0,
                 bos_id: int | None = None):
        self.kind, self.name, self.n_vocab = kind, name, n_vocab
        self.eos_id, self.bos_id = eos_id, bos_id  # every document: [bos] ids eos
        self._encode_batch, self._decode = encode_batch, decode
        self.load_args: tuple = ()  # (kind, vocab_size): how another process loads the same tokenizer

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
    folder = Path(cache_dir) / "tokenizer"
    if kind.startswith("hf:"):
        tok = _load_hf(kind, corpus, cache_dir)
    elif kind in ("bpe", "char"):
        tok = (_load_bpe if kind == "bpe" else _load_char)(corpus, vocab_size, folder)
    else:
        raise Refusal("data.tokenizer", f"unknown {kind!r}", HF_ALLOWED)
    tok.load_args = (kind, vocab_size)
    return tok


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
        left = TRAIN_CHARS_PER_DOMAIN
        for text in corpus.documents(domain, "train"):
            yield text[:left]
            left -= len(text)
            if left <= 0:
                break


# --- byte-level BPE -------------------------------------------------------------------------

def _train_bpe(corpus, vocab_size: int) -> HFTokenizer:
    tok = HFTokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[EOS],  # first special token -> id 0
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,  # its bars count an iterator of unknown length: a line per redraw, "n / 0"
    )
    log.info("training the BPE tokenizer (%d ids) on %s, once (cached per corpus)", vocab_size,
             ", ".join(corpus.domains))
    tok.train_from_iterator(_train_texts(corpus), trainer=trainer)
    return tok


def _load_bpe(corpus, vocab_size: int, folder: Path) -> Tokenizer:
    if not BPE_MIN_VOCAB <= vocab_size <= MAX_VOCAB:
        raise Refusal("model.vocab_size", vocab_size, f"{BPE_MIN_VOCAB}..{MAX_VOCAB} with data.tokenizer=bpe "
                      "(byte-level BPE needs 256 bytes + separator, and token ids are stored as uint16)")
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
        raise Refusal("model.vocab_size", vocab_size, f">= {n_vocab} with data.tokenizer=char on this "
                      f"corpus (the separator, the unknown character and its {len(chars)} characters)")
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


# --- pretrained (hf:) ------------------------------------------------------------------------

def _hf_error(spec: str, why: str) -> Refusal:
    return Refusal("data.tokenizer", f"{spec} cannot be loaded ({why})", HF_ALLOWED)


def _pretrained(spec: str, cache_dir: str | None) -> tuple[HFTokenizer, str]:
    """(tokenizer, sha256 of its JSON) for `hf:<local tokenizer.json or folder | Hub id[@rev]>`.
    A Hub tokenizer is copied into cache_dir on first load and read from there afterwards, so
    jobs on nodes without internet use the very vocabulary the data was prepared with."""
    local = Path(spec[3:]).expanduser()
    if local.is_dir():
        local = local / "tokenizer.json"
    stamp = (local.stat().st_mtime_ns, local.stat().st_size) if local.is_file() else None
    return _load_pretrained(spec, cache_dir, str(local), stamp)


@lru_cache(maxsize=8)
def _load_pretrained(spec: str, cache_dir: str | None, local: str, stamp) -> tuple[HFTokenizer, str]:
    """Memoised per file version (stamp), so an edited tokenizer.json is read again."""
    target = spec[3:]
    try:
        if stamp is not None:
            tok = HFTokenizer.from_file(str(local))
        elif re.fullmatch(r"[\w.-]+/[\w.-]+(@[\w./-]+)?", target):
            repo, _, revision = target.partition("@")
            copy = Path(cache_dir) / "tokenizer" / "hf" / f"{repo.replace('/', '--')}@{revision or 'main'}.json" \
                if cache_dir else None
            if copy is not None and copy.is_file():
                tok = HFTokenizer.from_file(str(copy))
            elif cached := _in_hub_cache(repo, revision):  # e.g. a model's, fetched before: read offline
                tok = HFTokenizer.from_file(cached)
            else:
                tok = HFTokenizer.from_pretrained(repo, revision=revision or "main")
                if copy is not None:
                    atomic_write_text(copy, tok.to_str())
        else:
            raise FileNotFoundError(f"no file {local} and not a Hub id owner/name")
    except Exception as e:  # the tokenizers and hub libraries raise many kinds
        raise _hf_error(spec, f"{type(e).__name__}: {_first_line(e)[:160]}") from None
    return tok, hashlib.sha256(tok.to_str().encode("utf-8")).hexdigest()


def _in_hub_cache(repo: str, revision: str) -> str | None:
    """The repo's tokenizer.json if the local Hugging Face cache already holds it (no network)."""
    from huggingface_hub import try_to_load_from_cache

    found = try_to_load_from_cache(repo, "tokenizer.json", revision=revision or None)
    return found if isinstance(found, str) else None


def pretrained_identity(spec: str, cache_dir=None) -> str:
    """What a corpus fingerprint records of an hf: tokenizer: the hash of its content."""
    return f"hf:{_pretrained(spec, str(cache_dir) if cache_dir else None)[1][:16]}"


def _special(tok: HFTokenizer, names) -> int | None:
    for name in names:
        i = tok.token_to_id(name)
        if i is not None:
            return i
    return None


def _load_hf(spec: str, corpus, cache_dir) -> Tokenizer:
    tok, digest = _pretrained(spec, str(cache_dir) if cache_dir else None)
    eos = _special(tok, _HF_EOS)
    if eos is None:
        raise _hf_error(spec, f"no end-of-document token among {', '.join(_HF_EOS)}")
    bos = _special(tok, _HF_BOS)

    def encode_batch(texts):
        return [e.ids for e in tok.encode_batch_fast(texts, add_special_tokens=False)]

    def decode(ids):
        return tok.decode(ids, skip_special_tokens=False)

    name = f"hf-{digest[:10]}-{corpus.fingerprint}"  # token caches are per corpus, like bpe/char
    return Tokenizer("hf", name, tok.get_vocab_size(with_added_tokens=True), encode_batch, decode, eos, bos)
