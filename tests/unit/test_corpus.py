"""The shipped corpus is intact, fingerprinted, split by document and small enough to ship."""

import shutil

import pytest

from fibexp.data.corpus import CorpusError, EmbeddedCorpus
from fibexp.data.spec import DOMAINS


@pytest.fixture(scope="module")
def corpus():
    return EmbeddedCorpus()


@pytest.fixture(scope="module")
def texts(corpus):
    return {(d, s): list(corpus.documents(d, s)) for d in DOMAINS for s in ("train", "heldout")}


def test_manifest_verifies(corpus):
    corpus.verify()


def test_fingerprint_stable_and_domain_specific(corpus):
    fp = corpus.fingerprint
    assert len(fp) == 12 and int(fp, 16) >= 0
    assert EmbeddedCorpus().fingerprint == fp
    sub = EmbeddedCorpus(domains=("drama", "code"))
    assert sub.fingerprint != fp
    assert sub.fingerprint == EmbeddedCorpus(domains=("drama", "code")).fingerprint


def test_split_by_document(texts):
    for d in DOMAINS:
        train, held = texts[d, "train"], texts[d, "heldout"]
        assert held and len(train) >= 8 * len(held), d
        assert not set(held) & set(train), d  # no document in both splits
    # Plays and books are long: not even as a substring (a line-level split would fail this).
    # Scanning the other domains the same way is clean too but costs seconds.
    for d in ("drama", "prose"):
        joined = "\x00".join(texts[d, "train"])
        assert not any(h in joined for h in texts[d, "heldout"]), d


def test_corruption_names_file(tmp_path):
    root = tmp_path / "embedded"
    shutil.copytree(EmbeddedCorpus().root, root)
    target = root / "prose.heldout.jsonl.xz"
    data = bytearray(target.read_bytes())
    data[len(data) // 2] ^= 0xFF
    target.write_bytes(bytes(data))
    with pytest.raises(CorpusError, match="prose.heldout.jsonl.xz"):
        EmbeddedCorpus(root=root).verify()
    with pytest.raises(CorpusError, match="prose.heldout.jsonl.xz"):
        list(EmbeddedCorpus(root=root).documents("prose", "heldout"))
    EmbeddedCorpus(root=root, domains=("drama",)).verify()  # other domains unaffected
    (root / "drama.train.jsonl.xz").unlink()
    with pytest.raises(CorpusError, match="drama.train.jsonl.xz"):
        EmbeddedCorpus(root=root, domains=("drama",)).verify()


def test_unknown_names_list_allowed(corpus):
    with pytest.raises(CorpusError, match="drama, prose, encyclopedic, docs, code"):
        list(corpus.documents("poetry", "train"))
    with pytest.raises(CorpusError, match="train, heldout"):
        list(corpus.documents("drama", "test"))
    with pytest.raises(CorpusError, match="allowed: drama$"):
        list(EmbeddedCorpus(domains=("drama",)).documents("code", "train"))
    with pytest.raises(CorpusError, match="poetry"):
        EmbeddedCorpus(domains=("poetry",))


def test_shipped_size(corpus):
    assert sum(f.stat().st_size for f in corpus.root.iterdir()) <= 10.5e6
