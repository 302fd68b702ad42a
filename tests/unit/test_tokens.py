"""Tokenizer, token cache and datamodule on a tiny fake corpus (fast)."""
import json
import logging
from dataclasses import dataclass, field

import numpy as np
import pytest
import torch

from fibexp.data import tokenizer as tokenizer_mod
from fibexp.data import tokens as tokens_mod
from fibexp.data.datamodule import TokenDataModule
from fibexp.data.tokenizer import load_tokenizer
from fibexp.data.tokens import token_stream

WORDS = "the quick brown fox jumps over a lazy dog while kings and queens speak".split()


def _docs(rng, n, alphabet=None):
    if alphabet:
        return ["".join(rng.choice(list(alphabet), size=rng.integers(40, 120))) for _ in range(n)]
    return [" ".join(rng.choice(WORDS, size=rng.integers(20, 80))) + ".\n" for _ in range(n)]


@dataclass
class FakeCorpus:
    """Same shape as fibexp.data.corpus.EmbeddedCorpus."""

    docs: dict = field(default_factory=dict)  # {(domain, split): [str]}
    fingerprint: str = "0123456789ab"

    @property
    def domains(self):
        return tuple(dict.fromkeys(d for d, _ in self.docs))

    def verify(self):
        pass

    def documents(self, domain, split):
        yield from self.docs[domain, split]


@pytest.fixture
def corpus():
    rng = np.random.default_rng(0)
    docs = {("drama", "train"): _docs(rng, 40), ("drama", "heldout"): _docs(rng, 6),
            ("code", "train"): _docs(rng, 40, "def(x): return x+1\n"),
            ("code", "heldout"): _docs(rng, 6, "def(x): return x+1\n")}
    docs["drama", "train"][0] += " café ünïcödé ✓ <|endoftext|> tabs\tand  spaces  "
    return FakeCorpus(docs)


@pytest.fixture
def letters_digits():
    """Two domains with disjoint characters: a char id tells which domain it came from."""
    rng = np.random.default_rng(1)
    return FakeCorpus({(d, s): _docs(rng, 30, a) for d, a in (("letters", "abcdefgh"), ("digits", "0123456789"))
                       for s in ("train", "heldout")}, fingerprint="fedcba987654")


def test_bpe_round_trip_and_special_id(corpus, tmp_path):
    tok = load_tokenizer("bpe", corpus, 300, tmp_path)
    assert (tok.kind, tok.name, tok.eos_id) == ("bpe", "bpe-0123456789ab-300", 0)
    assert 257 <= tok.n_vocab <= 300
    assert (tmp_path / "tokenizer" / "bpe-0123456789ab-300.json").exists()
    for text in [*corpus.docs["drama", "train"][:3], "  leading spaces\r\n\tand ∑ unicode 🙂 <|endoftext|>", ""]:
        ids = tok.encode(text)
        assert tok.decode(ids) == text
        assert all(0 < i < tok.n_vocab for i in ids)  # the separator never comes from text


def test_tokenizer_built_once_deterministic_and_corrupt_json_rebuilt(corpus, tmp_path, monkeypatch, caplog):
    calls = []
    real = tokenizer_mod._train_bpe
    monkeypatch.setattr(tokenizer_mod, "_train_bpe", lambda *a: calls.append(1) or real(*a))
    load_tokenizer("bpe", corpus, 300, tmp_path)
    path = tmp_path / "tokenizer" / "bpe-0123456789ab-300.json"
    first = path.read_bytes()
    load_tokenizer("bpe", corpus, 300, tmp_path)
    assert len(calls) == 1
    path.write_bytes(first[: len(first) // 2])  # bad JSON
    with caplog.at_level(logging.WARNING):
        tok = load_tokenizer("bpe", corpus, 300, tmp_path)
    assert len(calls) == 2 and "rebuilding" in caplog.text
    assert path.read_bytes() == first  # training is deterministic
    assert tok.decode(tok.encode("the lazy dog")) == "the lazy dog"


def test_char_tokenizer(corpus, tmp_path):
    tok = load_tokenizer("char", corpus, 1000, tmp_path)
    chars = sorted(set("".join(corpus.docs["drama", "train"] + corpus.docs["code", "train"])))
    assert tok.n_vocab == len(chars) + 2 and tok.name == "char-0123456789ab"
    assert tok.encode(chars[0] + chars[-1]) == [2, len(chars) + 1]
    assert tok.encode("Z€") == [1, 1]  # not in the train split -> unknown
    assert tok.decode(tok.encode("the dog")) == "the dog"
    with pytest.raises(ValueError, match=rf"model.vocab_size.*{len(chars) + 2}"):
        load_tokenizer("char", corpus, 10, tmp_path)
    (tmp_path / "tokenizer" / "char-0123456789ab.json").write_text("{not json")
    assert load_tokenizer("char", corpus, 1000, tmp_path).encode("dog") == tok.encode("dog")


def test_bad_kind_and_vocab(corpus, tmp_path):
    with pytest.raises(ValueError, match=r"data.tokenizer.*bpe.*char"):
        load_tokenizer("sentencepiece", corpus, 300, tmp_path)
    with pytest.raises(ValueError, match="model.vocab_size"):
        load_tokenizer("bpe", corpus, 100, tmp_path)


def test_token_cache_built_once_and_rebuilt_when_damaged(corpus, tmp_path, monkeypatch, caplog):
    tok = load_tokenizer("bpe", corpus, 300, tmp_path)
    builds = []
    real = tokens_mod._build
    monkeypatch.setattr(tokens_mod, "_build", lambda *a: builds.append(1) or real(*a))
    s = token_stream(corpus, tok, "drama", "train", tmp_path)
    path = tmp_path / "tokens" / tok.name / "drama.train.u16"
    assert s.path == path and path.stat().st_size == 2 * s.n_tokens
    assert s.ids.dtype == np.uint16 and not s.ids.flags.writeable
    docs = corpus.docs["drama", "train"]
    assert s.n_chars == sum(map(len, docs))
    assert s.n_tokens == sum(len(tok.encode(d)) + 1 for d in docs)
    assert int(s.ids[-1]) == tok.eos_id and (s.ids == tok.eos_id).sum() == len(docs)
    meta = json.loads(path.with_suffix(".json").read_text())
    assert meta["fingerprint"] == corpus.fingerprint and meta["tokenizer"] == tok.name
    good = path.read_bytes()

    token_stream(corpus, tok, "drama", "train", tmp_path)
    assert len(builds) == 1

    damage = {"flipped": lambda b: b[:10] + bytes([b[10] ^ 1]) + b[11:], "truncated": lambda b: b[:-7]}
    for how, fn in damage.items():
        path.write_bytes(fn(good))
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            s2 = token_stream(corpus, tok, "drama", "train", tmp_path)
        assert "rebuilding" in caplog.text, how
        assert path.read_bytes() == good and s2.n_tokens == s.n_tokens
    path.with_suffix(".json").unlink()
    token_stream(corpus, tok, "drama", "train", tmp_path)
    assert len(builds) == 4 and path.read_bytes() == good
    assert not list(path.parent.glob("*.tmp"))


def _dm(corpus, tmp_path, **kw):
    args = dict(tokenizer_kind="bpe", vocab_size=300, cache_dir=tmp_path, seq_len=16, batch_size=4,
                eval_tokens=0, seed=7)
    dm = TokenDataModule(corpus, **{**args, **kw})
    dm.prepare_data()
    dm.setup("fit")
    return dm


def _batches(dm, n):
    it = iter(dm.train_dataloader())
    return [next(it) for _ in range(n)]


def test_heldout_windows_contiguous(corpus, tmp_path):
    dm = _dm(corpus, tmp_path, eval_tokens=200)
    assert dm.heldout_names == ["drama", "code"] and len(dm.val_dataloader()) == 2
    ids = torch.from_numpy(dm.streams["drama", "heldout"].ids[:200].astype(np.int64))
    for length in (16, 32, 64):
        x, y = dm.heldout_windows("drama", length)
        n = 199 // length
        assert x.shape == y.shape == (n, length) and x.dtype == torch.int64
        assert torch.equal(x.reshape(-1), ids[: n * length])  # reassembles the prefix
        assert torch.equal(y.reshape(-1), ids[1: n * length + 1])
    full = _dm(corpus, tmp_path, eval_tokens=0)
    assert full.heldout_windows("drama", 16)[0].shape[0] == (full.streams["drama", "heldout"].n_tokens - 1) // 16
    s = full.streams["drama", "heldout"]
    assert full.chars_per_token("drama") == pytest.approx(s.n_chars / s.n_tokens)
    xb, yb = next(iter(full.val_dataloader()[0]))
    assert xb.shape == (4, 16) and torch.equal(xb[0, 1:], yb[0, :-1])


def test_training_windows_reproducible(corpus, tmp_path):
    a, b = _batches(_dm(corpus, tmp_path), 5), _batches(_dm(corpus, tmp_path), 5)
    c = _batches(_dm(corpus, tmp_path, seed=8), 5)
    assert all(torch.equal(p[0], q[0]) and torch.equal(p[1], q[1]) for p, q in zip(a, b))
    assert not all(torch.equal(p[0], q[0]) for p, q in zip(a, c))
    x, y = a[0]
    assert x.shape == y.shape == (4, 16) and x.dtype == torch.int64 and torch.equal(x[:, 1:], y[:, :-1])
    dm = _dm(corpus, tmp_path)
    dm.set_seed_offset(2)  # a run resumed at step 2 continues the very same stream
    resumed = _batches(dm, 3)
    assert all(torch.equal(p[0], q[0]) and torch.equal(p[1], q[1]) for p, q in zip(a[2:], resumed))


def test_mixture_weights(letters_digits, tmp_path):
    dm = _dm(letters_digits, tmp_path, tokenizer_kind="char", vocab_size=64, mixture={"letters": 1.0, "digits": 0.0})
    tok = dm.tokenizer
    digit_ids = set(tok.encode("0123456789"))
    for x, _ in _batches(dm, 20):
        assert not digit_ids & set(x.reshape(-1).tolist())
    dm = _dm(letters_digits, tmp_path, tokenizer_kind="char", vocab_size=64, mixture={"letters": 3, "digits": 1})
    is_digit = [bool(digit_ids & set(w.tolist())) for x, _ in _batches(dm, 200) for w in x]
    assert 0.18 < np.mean(is_digit) < 0.32  # 1/4 expected; 800 windows
    for bad in ({"poetry": 1.0}, {"letters": 0.0}, {"letters": -1.0, "digits": 2.0}):
        with pytest.raises(ValueError, match="data.mixture"):
            TokenDataModule(letters_digits, "char", 64, tmp_path / "unused", 16, 4, mixture=bad)
    assert not (tmp_path / "unused").exists()  # rejected before any build
