"""Hugging Face `datasets` sources, offline: small local json/parquet files shaped like the
Hub datasets of paper A's mixture go through the real `load_dataset(..., streaming=True)`
paths. Token shares match the weights, held-out text is disjoint by document, preparation
resumes after a SIGKILL, the fingerprint follows every input, bad sources are refused with
the key, and a run logs the metric contract per source and its dataset inputs."""
from __future__ import annotations

import json
import logging
import re
import signal
import subprocess
import sys
import zipfile
from pathlib import Path

import datasets
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from omegaconf import OmegaConf

from fibexp.data import shards
from fibexp.data.datamodule import TokenDataModule
from fibexp.data.sources import open_corpus
from fibexp.data.spec import SourceConf
from fibexp.data.tokenizer import load_tokenizer

datasets.config.SLEEP_TIME_ON_THREADS_SHUTDOWN = 0  # else a 5 s pause when a stream closes

ROOT = Path(__file__).resolve().parents[2]
# Disjoint alphabets: with the char tokenizer a window's ids tell which source it came from.
ALPHABETS = {"web": "abcdefghijklm ", "stories": "nopqrstuvwxyz_", "math": "0123456789+=?~"}


def _texts(rng, alphabet, n, lo, hi):
    return ["".join(rng.choice(list(alphabet), size=int(rng.integers(lo, hi)))) for _ in range(n)]


def _jsonl(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict:
    """FineWeb-Edu-like json shards (text, id, url, score), TinyStories-like train/validation
    files, OpenMathInstruct-2-like parquet shards (problem, generated_solution) and MATH-like
    parquet (problem, solution). Every document is unique and spans several lines."""
    root = tmp_path_factory.mktemp("hf")
    rng = np.random.default_rng(0)
    out = {"root": root}
    web = []
    for k in range(3):
        texts = [f"{t[:20]}\n{t[20:]}" for t in _texts(rng, ALPHABETS["web"], 120, 60, 140)]
        _jsonl(root / f"web-{k}.jsonl", [{"text": t, "id": f"w{k}-{i}", "url": f"http://x/{k}/{i}", "score": 3.1}
                                         for i, t in enumerate(texts)])
        web.append(texts)
    out["web"] = web
    for split, n in (("train", 160), ("validation", 30)):
        texts = _texts(rng, ALPHABETS["stories"], n, 50, 110)
        _jsonl(root / f"stories-{split}.jsonl", [{"text": t} for t in texts])
        out[f"stories-{split}"] = texts
    math = []
    for k in range(2):
        p, s = _texts(rng, ALPHABETS["math"], 300, 10, 30), _texts(rng, ALPHABETS["math"], 300, 10, 30)
        pq.write_table(pa.table({"problem": p, "generated_solution": s, "expected_answer": ["4"] * 300}),
                       root / f"omi-{k}.parquet", row_group_size=64)
        math.append([f"{a}\n\n{b}" for a, b in zip(p, s)])
    out["math"] = math
    p, s = _texts(rng, ALPHABETS["math"], 100, 5, 20), _texts(rng, ALPHABETS["math"], 100, 5, 20)
    pq.write_table(pa.table({"problem": p, "solution": s, "level": ["Level 1"] * 100}), root / "competition.parquet")
    out["competition"] = [f"{a}\n\n{b}" for a, b in zip(p, s)]
    return out


def mix(files, **overrides) -> dict:
    """Paper A's mixture in miniature: last-shard, split and extra-part held-out rules."""
    r = files["root"]
    data = {"source": "hf", "tokenizer": "char", "mixture": None, "train_tokens": 30000, "num_proc": 1, "sources": [
        {"name": "web", "path": "json", "data_files": str(r / "web-*.jsonl"), "weight": 0.5, "heldout": "last_shard",
         "heldout_tokens": 4000},
        {"name": "stories", "path": "json", "weight": 0.2, "heldout_split": "validation",
         "data_files": {"train": str(r / "stories-train.jsonl"), "validation": str(r / "stories-validation.jsonl")}},
        {"name": "math", "path": "parquet", "data_files": [str(r / "omi-0.parquet"), str(r / "omi-1.parquet")],
         "text_field": ["problem", "generated_solution"], "weight": 0.3, "heldout": "last_shard",
         "extra": [{"path": "parquet", "data_files": str(r / "competition.parquet"),
                    "text_field": ["problem", "solution"]}]}]}
    data.update(overrides)
    base = OmegaConf.structured(SourceConf)  # the schema's defaults, as Hydra composes them
    data["sources"] = [OmegaConf.merge(base, s) for s in data["sources"]]
    return OmegaConf.create(data)


@pytest.fixture
def small_shards(monkeypatch):
    monkeypatch.setattr(shards, "SHARD_TOKENS", 2000)
    monkeypatch.setattr(shards, "BATCH_DOCS", 8)


def _prepared(corpus, cache, kind="char", vocab=64):
    tok = load_tokenizer(kind, corpus, vocab, cache)
    return tok, shards.token_streams(corpus, tok, cache)


def test_token_shares_match_the_weights(files, tmp_path, small_shards):
    corpus = open_corpus(mix(files), tmp_path)
    corpus.verify()
    tok, streams = _prepared(corpus, tmp_path)
    train = {n: streams[n, "train"].n_tokens for n in corpus.domains}
    total = sum(train.values())
    for name, w in corpus.weights.items():
        assert abs(train[name] / total - w) < 0.01, (name, train)  # prepared stream: whole documents
    assert len(streams["web", "train"].shards) > 3  # several shards, so the sampler below spans them

    dm = TokenDataModule(corpus, "char", 64, tmp_path, seq_len=8, batch_size=500, eval_tokens=0, seed=3)
    dm.prepare_data()
    dm.setup("fit")
    ids = {n: set(tok.encode(a)) for n, a in ALPHABETS.items()}
    ignore = {tok.eos_id, *tok.encode("\n")}  # separators; newlines are in web and (joined fields) math
    shard_bytes = [p.read_bytes() for n in corpus.domains for p, _ in streams[n, "train"].shards]
    seen = dict.fromkeys(ALPHABETS, 0)
    batches = iter(dm.train_dataloader())
    for step in range(80):  # 40,000 windows: the share's standard error is 0.25%
        x, y = next(batches)
        for row in x.tolist():
            (name,) = [n for n, s in ids.items() if set(row) - ignore <= s]
            seen[name] += 1
        if step == 0:  # a window is one contiguous slice of one shard
            for row in np.concatenate([x[:, :1].numpy(), y.numpy()], 1).astype(np.uint16):
                assert any(row.tobytes() in b for b in shard_bytes)
    for name, w in corpus.weights.items():
        assert abs(seen[name] / 40000 - w) < 0.01, seen


def test_heldout_is_disjoint_by_document(files, tmp_path):
    corpus = open_corpus(mix(files), tmp_path)
    docs = {(n, s): list(corpus.documents(n, s)) for n in corpus.domains for s in ("train", "heldout")}
    for n in corpus.domains:
        assert docs[n, "heldout"] and not set(docs[n, "train"]) & set(docs[n, "heldout"]), n
    web, math = files["web"], files["math"]
    assert docs["web", "heldout"] == web[2] and docs["web", "train"] == web[0] + web[1]  # the last file, whole
    assert docs["stories", "heldout"] == files["stories-validation"]
    assert docs["stories", "train"] == files["stories-train"]
    assert docs["math", "train"] == files["competition"] + math[0]  # extra part first, then the main dataset
    assert docs["math", "heldout"] == math[1]

    r = files["root"]
    every = mix(files, sources=[{"name": "web", "path": "json", "data_files": str(r / "web-0.jsonl")}])
    c = open_corpus(every, tmp_path)
    all_docs = web[0]
    assert list(c.documents("web", "heldout")) == all_docs[9::10]  # document i held out iff i % 10 == 9
    assert list(c.documents("web", "train")) == [d for i, d in enumerate(all_docs) if i % 10 != 9]

    tail = mix(files, sources=[{"name": "web", "path": "json", "data_files": str(r / "web-0.jsonl"),
                                "heldout": "tail:0.25", "max_chars": 5000}])
    c = open_corpus(tail, tmp_path)
    train, held = "".join(c.documents("web", "train")), "".join(c.documents("web", "heldout"))
    assert train + held == "".join(all_docs)[:5000] and len(held) == 1250  # one contiguous tail block


def test_enwik8_recipe_on_a_local_copy(tmp_path):
    """data=enwik8 as composed, on a fake enwik8.zip: the first max_chars Latin-1 characters
    (one per byte), the last 8% held out as one block, a character vocabulary."""
    raw = np.random.default_rng(1).integers(0, 256, 30000, dtype=np.uint8).tobytes().replace(b"\r", b"r")
    (tmp_path / "enwik8").write_bytes(raw)
    with zipfile.ZipFile(tmp_path / "enwik8.zip", "w") as z:
        z.write(tmp_path / "enwik8", "enwik8")
    cfg = _compose(["data=enwik8", f"data.sources.0.data_files={tmp_path / 'enwik8.zip'}",
                    "data.sources.0.max_chars=25000"])
    corpus = open_corpus(cfg.data, tmp_path / "cache")
    corpus.verify()
    train, held = list(corpus.documents("enwik8", "train")), list(corpus.documents("enwik8", "heldout"))
    assert [len(t) for t in train + held] == [23000, 2000]
    assert (train[0] + held[0]).encode("latin-1") == raw[:25000]
    tok, streams = _prepared(corpus, tmp_path / "cache", "char", 300)
    assert tok.n_vocab == len(set(raw[:23000])) + 2 and streams["enwik8", "heldout"].n_tokens == 2001


@pytest.mark.slow  # test-fast stays under 2 minutes (make test runs it)
def test_preparation_resumes_after_a_kill(files, tmp_path, small_shards, monkeypatch, caplog):
    data = mix(files)
    script = f"""
import os, signal, sys
from omegaconf import OmegaConf
from fibexp.data import shards
from fibexp.data.sources import open_corpus
from fibexp.data.tokenizer import load_tokenizer
shards.SHARD_TOKENS, shards.BATCH_DOCS = 2000, 8
write = shards._write_shard
def killed(folder, k, ids, meta):
    out = write(folder, k, ids, meta)
    if folder.name == "train" and k == 2:
        os.kill(os.getpid(), signal.SIGKILL)  # no cleanup, no finally: as a preempted node
    return out
shards._write_shard = killed
corpus = open_corpus(OmegaConf.create({OmegaConf.to_container(data)!r}), sys.argv[1])
shards.token_streams(corpus, load_tokenizer("char", corpus, 64, sys.argv[1]), sys.argv[1])
"""
    cache = tmp_path / "killed"
    proc = subprocess.run([sys.executable, "-c", script, str(cache)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    corpus = open_corpus(data, cache)
    tok = load_tokenizer("char", corpus, 64, cache)
    folder = cache / "prepared" / tok.name / "web" / "train"
    finished = {p.name: p.stat().st_mtime_ns for p in folder.glob("*.u16")}
    assert sorted(finished) == ["00000.u16", "00001.u16", "00002.u16"] and not (folder / "done.json").exists()

    written = []
    real = shards._write_shard
    monkeypatch.setattr(shards, "_write_shard", lambda f, k, *a: written.append((f.parent.name, f.name, k)) or real(f, k, *a))
    streams = shards.token_streams(corpus, tok, cache)
    assert {p.name: p.stat().st_mtime_ns for p in folder.glob("*.u16") if p.name in finished} == finished
    assert min(k for s, f, k in written if (s, f) == ("web", "train")) == 3  # finished shards not redone

    ref_corpus = open_corpus(data, tmp_path / "uninterrupted")
    _, ref = _prepared(ref_corpus, tmp_path / "uninterrupted")
    for key, s in ref.items():
        assert np.array_equal(streams[key].ids, s.ids) and streams[key].n_chars == s.n_chars, key

    shard = folder / "00001.u16"  # damaged on disk: found on load, prepared again from before it
    data_bytes = bytearray(shard.read_bytes())
    data_bytes[5] ^= 1
    shard.write_bytes(bytes(data_bytes))
    written.clear()
    with caplog.at_level(logging.WARNING):
        again = shards.token_streams(corpus, tok, cache)
    assert "corrupt" in caplog.text and min(k for s, f, k in written if s == "web") == 1
    assert np.array_equal(again["web", "train"].ids, ref["web", "train"].ids)


@pytest.mark.slow  # test-fast stays under 2 minutes (make test runs it)
def test_parallel_preparation_matches_sequential(files, tmp_path, small_shards):
    """data.num_proc=2: (source, split) pairs in spawned processes, the same bytes as one process."""
    web = mix(files).sources[:1]
    one = open_corpus(mix(files, sources=web), tmp_path / "one")
    two = open_corpus(mix(files, sources=web, num_proc=2), tmp_path / "two")
    _, a = _prepared(one, tmp_path / "one")
    _, b = _prepared(two, tmp_path / "two")
    for key in a:
        assert np.array_equal(a[key].ids, b[key].ids), key


def test_a_second_preparer_waits_for_the_lock(tmp_path):
    lock = tmp_path / ".lock"
    probe = ("import fcntl, sys\nf = open(sys.argv[1], 'a+')\n"
             "try:\n    fcntl.lockf(f, fcntl.LOCK_EX | fcntl.LOCK_NB)\nexcept OSError:\n    sys.exit(3)")
    with shards._lock(lock):
        assert subprocess.run([sys.executable, "-c", probe, str(lock)], timeout=60).returncode == 3
    assert subprocess.run([sys.executable, "-c", probe, str(lock)], timeout=60).returncode == 0


def _tokenizer_json(path: Path, texts) -> Path:
    """A pretrained-style tokenizer.json: <unk> <s> </s>, BOS added by its template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=300, special_tokens=["<unk>", "<s>", "</s>"],
                                                       initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    tok.save(str(path))
    return path


def test_pretrained_tokenizer_frames_documents(files, tmp_path):
    path = _tokenizer_json(tmp_path / "tokenizer.json", files["web"][0])
    corpus = open_corpus(mix(files, tokenizer=f"hf:{path}", train_tokens=0), tmp_path)
    tok, streams = _prepared(corpus, tmp_path, f"hf:{path}", 512)
    assert (tok.bos_id, tok.eos_id) == (1, 2) and tok.name.startswith("hf-") and tok.n_vocab <= 300
    ids = streams["stories", "heldout"].ids.tolist()
    docs = files["stories-validation"]
    expected = [i for d in docs for i in [1, *tok.encode(d), 2]]  # BOS + ids + EOS, concatenated
    assert ids == expected and tok.decode(tok.encode(docs[0])) == docs[0]
    other = _tokenizer_json(tmp_path / "other.json", files["web"][1])
    assert open_corpus(mix(files, tokenizer=f"hf:{other}", train_tokens=0), tmp_path).fingerprint != corpus.fingerprint


def test_fingerprint_follows_every_input(files, tmp_path):
    r = files["root"]
    base = mix(files)
    fp = open_corpus(base, tmp_path).fingerprint
    assert open_corpus(mix(files), tmp_path).fingerprint == fp and len(fp) == 12
    moved = tmp_path / "moved"  # the same bytes elsewhere: the same corpus
    moved.mkdir()
    for f in r.glob("*"):
        (moved / f.name).write_bytes(f.read_bytes())
    assert open_corpus(mix({**files, "root": moved}), tmp_path).fingerprint == fp
    edited = tmp_path / "edited"
    edited.mkdir()
    for f in r.glob("*"):
        (edited / f.name).write_bytes(f.read_bytes())
    (edited / "web-1.jsonl").write_text((r / "web-1.jsonl").read_text().replace("a", "b", 1))

    def changed(**source):
        d = mix(files)
        d.sources[0] = OmegaConf.merge(d.sources[0], source)
        return d

    tok = _tokenizer_json(tmp_path / "t.json", files["web"][0])
    variants = {
        "file content": mix({**files, "root": edited}),
        "path": changed(path="text"), "config": changed(config="other"), "revision": changed(revision="v2"),
        "split": changed(split="validation"), "text_field": changed(text_field="url"),
        "heldout rule": changed(heldout="every:10"), "heldout_split": changed(heldout="every:10", heldout_split="test"),
        "heldout_tokens": changed(heldout_tokens=1000), "max_chars": changed(max_chars=100),
        "weight": changed(weight=0.9), "options": changed(config_kwargs={"encoding": "latin-1"}),
        "extra": mix(files, sources=[*mix(files).sources[:2], {**OmegaConf.to_container(mix(files).sources[2]), "extra": []}]),
        "train_tokens": mix(files, train_tokens=1000), "tokenizer bpe": mix(files, tokenizer="bpe"),
        "tokenizer hf": mix(files, tokenizer=f"hf:{tok}"),
    }
    seen = {fp: "base"}
    for what, data in variants.items():
        new = open_corpus(data, tmp_path).fingerprint
        assert new not in seen, (what, seen.get(new))
        seen[new] = what


BAD = [
    (dict(path="jsn"), "data.sources[0].path: 'jsn' is not a dataset; allowed: "),
    (dict(data_files="/nonexistent/web.jsonl"), "data.sources[0].data_files: /nonexistent/web.jsonl does not exist"),
    (dict(text_field="body"), "data.sources[0].text_field: 'body' is not a column of json; allowed: text, id, url"),
    (dict(weight=-1.0), "data.sources[0].weight: -1.0; allowed: >= 0"),
    (dict(heldout="evry:10"), "data.sources[0].heldout: 'evry:10'; allowed: every:<n >= 2>"),
    (dict(heldout="every:500"), "data.sources[0].heldout: every:500 leaves no held-out text; allowed:"),
    (dict(data_files="WEB0"), "data.sources[0].heldout: last_shard needs >= 2 files in split 'train'"),
    (dict(heldout_split="validation"), "data.sources[0].heldout: 'last_shard' with heldout_split='validation'; "
                                       "allowed: one of the two"),
    (dict(heldout="every:10", heldout_split="validation"), "data.sources[0].heldout_split: cannot open json split "
                                                           "'validation'"),
    (dict(name="bad name"), "data.sources[0].name: 'bad name'; allowed: unique names"),
    (dict(name="stories"), "data.sources[1].name: 'stories'; allowed: unique names"),
]


@pytest.mark.parametrize("change, message", BAD)
def test_bad_sources_are_refused_naming_the_key(change, message, files, tmp_path):
    d = mix(files)
    if change.get("data_files") == "WEB0":
        change = {"data_files": str(files["root"] / "web-0.jsonl")}
    if change.get("name") == "stories":
        d.sources[1].name = "web"
        message = message.replace("'stories'", "'web'")
    else:
        d.sources[0] = OmegaConf.merge(d.sources[0], change)
    with pytest.raises(ValueError) as e:
        open_corpus(d, tmp_path).verify()
    text = str(e.value)
    assert text.startswith(message) and "allowed" in text and "\n" not in text


@pytest.mark.parametrize("data, message", [
    (dict(tokenizer="hf:/nonexistent/tokenizer.json"), "data.tokenizer: hf:/nonexistent/tokenizer.json cannot be loaded"),
    (dict(tokenizer="sentencepiece"), "data.tokenizer: unknown 'sentencepiece'; allowed: bpe, char, hf:"),
    (dict(mixture={"web": 1.0}), "data.mixture: {'web': 1.0}; allowed: null with data.source=hf"),
    (dict(sources=[]), "data.sources: []; allowed: "),
])
def test_bad_data_config_is_refused_naming_the_key(data, message, files, tmp_path):
    with pytest.raises(ValueError, match="^" + re.escape(message)):
        open_corpus(mix(files, **data), tmp_path)


def test_zero_weights_and_an_unreachable_hub_dataset_are_refused(files, tmp_path, monkeypatch):
    d = mix(files)
    for s in d.sources:
        s.weight = 0.0
    with pytest.raises(ValueError, match=r"^data.sources\[\*\].weight: all zero; allowed: >= 0"):
        open_corpus(d, tmp_path)
    import huggingface_hub.constants

    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)  # as a compute node without internet
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    d = mix(files)
    d.sources[0] = OmegaConf.merge(d.sources[0], {"path": "nobody/no-such-dataset", "data_files": None})
    with pytest.raises(ValueError, match=r"^data.sources\[0\].path: cannot open nobody/no-such-dataset"):
        open_corpus(d, tmp_path).verify()


def _compose(overrides, name="train"):
    from hydra import compose, initialize_config_dir

    from fibexp.checks import rules
    from fibexp.config import schema

    schema.register()
    conf, sweeps = ROOT / "conf", ROOT / "sweeps"
    primary, extra = (conf, sweeps) if name == "train" else (sweeps, conf)
    with initialize_config_dir(str(primary), version_base="1.3"):
        cfg = compose(name, overrides=[f"hydra.searchpath=[file://{extra}]", "paths.root=.", *overrides])
    rules.validate(cfg)
    return cfg


def test_paper_presets_compose_and_list_their_sources():
    cfg = _compose(["+scale=paper"])
    d = cfg.data
    assert d.source == "hf" and d.tokenizer == "hf:NousResearch/Llama-2-7b-hf" and cfg.model.vocab_size == 32768
    assert d.train_tokens == 13000 * 32 * 1024 == cfg.trainer.max_steps * d.batch_size * cfg.model.seq_len
    got = {s.name: (s.path, s.config, s.weight, s.heldout_split or s.heldout, s.heldout_tokens) for s in d.sources}
    assert got == {"fineweb_edu": ("HuggingFaceFW/fineweb-edu", "sample-10BT", 0.35, "last_shard", 500000),
                   "wikipedia": ("wikimedia/wikipedia", "20231101.en", 0.22, "last_shard", 500000),
                   "tinystories": ("roneneldan/TinyStories", None, 0.20, "validation", 500000),
                   "math": ("nvidia/OpenMathInstruct-2", None, 0.23, "last_shard", 500000)}
    (math,) = [s for s in d.sources if s.name == "math"]
    assert [(p.path, p.config) for p in math.extra] == [("EleutherAI/hendrycks_math", c) for c in (
        "algebra", "counting_and_probability", "geometry", "intermediate_algebra", "number_theory", "prealgebra",
        "precalculus")]
    assert all(len(p.revision) == 40 for s in d.sources for p in [s, *s.extra])  # commits, not branches
    assert list(math.text_field) == ["problem", "generated_solution"] and d.eval_tokens == 500000

    b = _compose(["scale=paper"], name="hypercube").data
    (s,) = b.sources
    assert (b.source, b.tokenizer, b.eval_tokens, s.name, s.path, s.max_chars, s.heldout) == (
        "hf", "char", 0, "enwik8", "text", 12_000_000, "tail:0.08")
    assert dict(s.config_kwargs) == {"encoding": "latin-1", "sample_by": "document"}
    for scale in ("cpu", "smoke"):  # laptops keep the embedded corpus
        c = _compose([f"scale={scale}"], name="hypercube").data
        assert (c.source, c.tokenizer) == ("embedded", "char")
        assert _compose([f"scale={scale}"], name="table1").data.source == "embedded"


def test_the_documented_cli_override_composes():
    cfg = _compose(["data=hf", "data.sources=[{name:a,path:json,data_files:/x/a.jsonl,weight:0.7},"
                    "{name:b,path:parquet,data_files:[/x/b1.parquet,/x/b2.parquet],weight:0.3,text_field:[q,a]}]"])
    a, b = cfg.data.sources
    assert (a.name, a.path, a.data_files, a.weight, a.heldout, a.split) == ("a", "json", "/x/a.jsonl", 0.7, "every:10", "train")
    assert list(b.data_files) == ["/x/b1.parquet", "/x/b2.parquet"] and list(b.text_field) == ["q", "a"]
    with pytest.raises(Exception, match="heldout_tokns"):
        _compose(["data=hf", "data.sources=[{name:a,path:json,data_files:/x/a.jsonl,heldout_tokns:5}]"])


def test_dataset_inputs_name_digest_source_and_counts(files, tmp_path):
    """What log_data_inputs sends (the end-to-end run below reads it back from the store)."""
    from fibexp.data.corpus import EmbeddedCorpus
    from fibexp.tracking.datasets import data_inputs, token_counts

    corpus = open_corpus(mix(files), tmp_path)
    dm = TokenDataModule(corpus, "char", 64, tmp_path, seq_len=8, batch_size=2)
    dm.prepare_data()
    counts = token_counts(dm)
    assert counts == {(n, s): dm.streams[n, s].n_tokens for n in corpus.domains for s in ("train", "heldout")}
    inputs = {d.name: d._to_mlflow_entity() for d in data_inputs(corpus, counts)}
    assert sorted(inputs) == sorted(corpus.domains) and {d.digest for d in inputs.values()} == {corpus.fingerprint}
    math = inputs["math"]
    assert math.source_type == "hugging_face" and json.loads(math.source)["data_files"] == [
        str(files["root"] / "omi-0.parquet"), str(files["root"] / "omi-1.parquet")]
    profile = json.loads(math.profile)
    assert profile["train_tokens"] == counts["math", "train"] and profile["weight"] == 0.3
    assert profile["extra"][0]["data_files"] == [str(files["root"] / "competition.parquet")]

    embedded = EmbeddedCorpus(domains=("drama", "code"))
    inputs = {d.name: d._to_mlflow_entity() for d in data_inputs(embedded, {("drama", "train"): 10})}
    assert sorted(inputs) == ["code", "drama"] and inputs["drama"].digest == embedded.fingerprint
    assert inputs["drama"].source_type == "local" and json.loads(inputs["drama"].source)["uri"].endswith(
        "drama.train.jsonl.xz") and json.loads(inputs["drama"].profile)["train_tokens"] == 10


@pytest.mark.slow
def test_a_run_on_hf_data_logs_the_contract_per_source_and_its_dataset_inputs(files, train_cli, tmp_path):
    from mlflow.tracking import MlflowClient

    r = files["root"]
    tok = _tokenizer_json(tmp_path / "tokenizer.json", files["web"][0] + files["stories-train"])
    sources = (f"[{{name:web,path:json,data_files:'{r}/web-*.jsonl',heldout:last_shard}},"
               f"{{name:stories,path:json,data_files:{{train:'{r}/stories-train.jsonl',validation:'{r}/stories-validation.jsonl'}},"
               f"heldout_split:validation,weight:0.5}}]")
    train_cli("data=hf", f"data.sources={sources}", f"data.tokenizer=hf:{tok}", "eval.aux=false",
              env={"HF_HUB_OFFLINE": "1"})
    client = MlflowClient(f"sqlite:///{train_cli.out}/mlflow.db")
    (run,) = client.search_runs([client.get_experiment_by_name("fibexp").experiment_id])
    assert run.info.status == "FINISHED"
    m = run.data.metrics
    for name in ("web", "stories"):
        for key in (f"val/ppl/{name}", f"val/loss/{name}", f"extrap/ppl_x4/{name}", f"extrap/rel_x2/{name}",
                    f"val/pos_loss/{name}/bin7"):
            assert np.isfinite(m[key]), key
        assert int(run.data.params[f"data.tokens.{name}.heldout"]) > 0
    inputs = {i.dataset.name: i.dataset for i in run.inputs.dataset_inputs}
    assert sorted(inputs) == ["stories", "web"]
    assert {d.digest for d in inputs.values()} == {run.data.tags["fibexp.corpus"]}
    assert json.loads(inputs["web"].source)["data_files"] == [str(r / f"web-{k}.jsonl") for k in range(3)]
