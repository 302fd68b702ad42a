"""Token streams of a corpus, prepared once: what the datamodule trains and evaluates on.

The embedded corpus keeps its one-file caches (`tokens.token_stream`). A Hugging Face corpus
is tokenized per (source, split) into uint16 shards of SHARD_TOKENS tokens under
`<cache_dir>/prepared/<tokenizer name>/<source>/<split>/` (the tokenizer name carries the
corpus fingerprint). Why shards: a Hub-scale source takes long to read, so a killed
preparation must not start over. Each shard is written to a temp file and renamed, then its
sidecar records its sha256 and the stream position after its last document; a restart
verifies the finished shards and resumes the stream from the last one. `done.json` closes a
(source, split); every load verifies the shards' sizes and digests, and a damaged shard is
dropped with the ones after it and prepared again.

Documents are tokenized in batches (the Rust tokenizers encode a batch on all cores), the
(source, split) units in parallel processes (`data.num_proc`), and a file lock makes a job
that starts while another prepares the same corpus wait for it instead of tokenizing too.
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import multiprocessing
import os
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import numpy as np
from tqdm import tqdm

from fibexp.data.spec import MAX_VOCAB
from fibexp.data.tokenizer import atomic_write_text, load_tokenizer
from fibexp.data.tokens import TokenStream, file_sha256, encode_documents, token_stream
from fibexp.errors import Refusal

log = logging.getLogger(__name__)

SPLITS = ("train", "heldout")
SHARD_TOKENS = 1 << 26  # 64M tokens = 128 MB per shard file
BATCH_DOCS = 512  # documents per encode_batch call


def token_streams(corpus, tokenizer, cache_dir: Path, num_proc: int | None = None) -> dict[tuple[str, str], TokenStream]:
    """{(domain, split): TokenStream} for every domain of the corpus, preparing what is missing."""
    if tokenizer.n_vocab > MAX_VOCAB:
        raise Refusal("data.tokenizer", f"{tokenizer.name} has {tokenizer.n_vocab} ids",
                      f"at most {MAX_VOCAB} (token files are uint16)")
    if not hasattr(corpus, "budget"):  # the embedded corpus
        return {(d, s): token_stream(corpus, tokenizer, d, s, cache_dir) for d in corpus.domains for s in SPLITS}
    root = Path(cache_dir) / "prepared" / tokenizer.name
    streams = {(d, s): _load(root, corpus, tokenizer, d, s) for d in corpus.domains for s in SPLITS}
    if any(v is None for v in streams.values()):
        with _lock(root / ".lock"):
            streams = {u: v or _load(root, corpus, tokenizer, *u) for u, v in streams.items()}  # another may have
            todo = [u for u, v in streams.items() if v is None]  # prepared them while we waited
            _prepare(corpus, tokenizer, cache_dir, root, todo, corpus.num_proc if num_proc is None else num_proc)
            for u in todo:
                streams[u] = _load(root, corpus, tokenizer, *u)
                if streams[u] is None:
                    raise RuntimeError(f"prepared {u[0]}/{u[1]} under {root} does not verify")
    return streams


@contextmanager
def _lock(path: Path):
    """POSIX record lock (works across nodes on NFS): one preparer per corpus and tokenizer."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as f:
        try:
            fcntl.lockf(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            log.warning("another process is preparing %s; waiting for it", path.parent)
            fcntl.lockf(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.lockf(f, fcntl.LOCK_UN)


def _expected(corpus, tokenizer, name: str, split: str) -> dict:
    return {"fingerprint": corpus.fingerprint, "tokenizer": tokenizer.name, "source": name, "split": split}


def _read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _shard_ok(folder: Path, meta: dict | None, expected: dict) -> str | None:
    """None when the shard its sidecar describes is intact, else why not."""
    if meta is None or any(meta.get(k) != v for k, v in expected.items()):
        return "without a valid sidecar"
    path = folder / meta["file"]
    if not path.is_file() or path.stat().st_size != 2 * meta["n_tokens"]:
        return "truncated or missing"
    if file_sha256(path) != meta["sha256"]:
        return "corrupt (sha256 mismatch)"
    return None


def _drop_from(folder: Path, k: int) -> None:
    (folder / "done.json").unlink(missing_ok=True)
    for p in folder.glob("*.u16"):
        if p.stem.isdigit() and int(p.stem) >= k:
            p.unlink(missing_ok=True)
            p.with_suffix(".json").unlink(missing_ok=True)


def _load(root: Path, corpus, tokenizer, name: str, split: str) -> TokenStream | None:
    """The prepared stream if done.json is there and every shard verifies, else None (a
    damaged shard and the ones after it are removed, so preparation resumes before it)."""
    folder = root / name / split
    expected = _expected(corpus, tokenizer, name, split)
    done = _read_json(folder / "done.json")
    if done is None or any(done.get(k) != v for k, v in expected.items()):
        return None
    for k, meta in enumerate(done["shards"]):
        problem = _shard_ok(folder, _read_json(folder / f"{k:05d}.json"), expected)
        if problem is not None:
            log.warning("prepared shard %s/%05d.u16 is %s; preparing it again", folder, k, problem)
            _drop_from(folder, k)
            return None
    shards = tuple((folder / m["file"], m["n_tokens"]) for m in done["shards"] if m["n_tokens"])
    return TokenStream(shards, done["n_tokens"], done["n_chars"])


LARGE_INPUT = 256 << 20  # bytes of local files above which num_proc=0 prepares in parallel


def _workers(corpus, units, num_proc: int) -> int:
    """num_proc, or (0) one process per unit and CPU when the input is large: a spawned
    process costs seconds to start, which small local corpora do not repay."""
    if not num_proc:
        parts = [p for s in corpus.sources for p in (s.main, *s.extra)]
        size = sum(os.path.getsize(f) for p in parts for f in p.files() if os.path.isfile(f))
        large = any(p.kind == "hub" or any("://" in f for f in p.files()) for p in parts) or size > LARGE_INPUT
        num_proc = (os.cpu_count() or 1) if large else 1
    return max(1, min(len(units), num_proc))


def _prepare(corpus, tokenizer, cache_dir, root: Path, units: list[tuple[str, str]], num_proc: int) -> None:
    if not units:
        return
    start = time.perf_counter()
    workers = _workers(corpus, units, num_proc)
    if workers <= 1:
        counts = [prepare_unit(corpus, tokenizer, root, name, split) for name, split in units]
    else:  # spawn: the parent may hold threads (torch, tokenizers) that fork would copy half-held
        with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
            jobs = [pool.submit(_unit_job, corpus, tokenizer.load_args, str(cache_dir), str(root), name, split, i)
                    for i, (name, split) in enumerate(units)]
            counts = [j.result() for j in jobs]
    seconds = time.perf_counter() - start
    log.info("prepared %d tokens of %s in %.1f s (%.0f tokens/s, %d process%s)", sum(counts),
             ", ".join(f"{n}/{s}" for n, s in units), seconds, sum(counts) / max(seconds, 1e-9), workers,
             "es" if workers > 1 else "")


def _unit_job(corpus, load_args, cache_dir: str, root: str, name: str, split: str, position: int) -> int:
    kind, vocab_size = load_args
    tokenizer = load_tokenizer(kind, corpus, vocab_size, Path(cache_dir))  # the cached one
    return prepare_unit(corpus, tokenizer, Path(root), name, split, position)


def _write_shard(folder: Path, k: int, ids: np.ndarray, meta: dict) -> dict:
    folder.mkdir(parents=True, exist_ok=True)
    name = f"{k:05d}.u16"
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(ids.tobytes())
        os.replace(tmp, folder / name)  # data first, sidecar last: no sidecar describes a partial file
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    meta = {**meta, "file": name, "n_tokens": int(len(ids)), "sha256": hashlib.sha256(ids.tobytes()).hexdigest()}
    atomic_write_text(folder / f"{k:05d}.json", json.dumps(meta, default=int))
    return meta


def prepare_unit(corpus, tokenizer, root: Path, name: str, split: str, position: int = 0) -> int:
    """Tokenize one (source, split) into shards, resuming after the last intact shard; returns
    the tokens tokenized by this call. Stops at the document that reaches the token budget."""
    folder = root / name / split
    expected = _expected(corpus, tokenizer, name, split)
    budget = corpus.budget(name, split)
    shards: list[dict] = []
    while (meta := _read_json(folder / f"{len(shards):05d}.json")) is not None:
        if _shard_ok(folder, meta, expected) is not None:
            break
        shards.append(meta)
    _drop_from(folder, len(shards))
    total = sum(m["n_tokens"] for m in shards)
    last = bool(shards) and shards[-1]["last"]
    if shards:
        log.info("%s/%s: resuming after %d prepared shard(s), %d tokens", name, split, len(shards), total)
    stream = corpus.stream(name, split, shards[-1]["state"] if shards else None)
    bar = tqdm(total=budget, initial=total, unit="tok", unit_scale=True, desc=f"preparing {name}/{split}",
               position=position, mininterval=1.0)
    new = 0
    pending: list[np.ndarray] = []
    pending_tokens = pending_chars = 0

    def flush(final: bool) -> None:
        nonlocal pending, pending_tokens, pending_chars
        ids = np.concatenate(pending) if pending else np.zeros(0, np.uint16)
        shards.append(_write_shard(folder, len(shards), ids, {
            **expected, "n_chars": pending_chars, "last": final, "state": None if final else stream.state()}))
        pending, pending_tokens, pending_chars = [], 0, 0

    docs: list[str] = []
    documents = iter(stream) if not last and budget != 0 else iter(())
    while not last:
        text = next(documents, None)
        if text is not None:
            docs.append(text)
            if len(docs) < BATCH_DOCS:
                continue
        if docs:
            ids, lengths = encode_documents(tokenizer, docs)
            if budget is not None and total + len(ids) >= budget:  # keep up to the document that reaches it
                keep = int(np.searchsorted(np.cumsum(lengths), budget - total)) + 1
                ids, docs, text = ids[: int(lengths[:keep].sum())], docs[:keep], None
            pending.append(ids)
            pending_tokens += len(ids)
            pending_chars += sum(map(len, docs))
            total, new = total + len(ids), new + len(ids)
            bar.update(len(ids))
            docs = []
        if text is None:
            flush(final=True)
            last = True
        elif pending_tokens >= SHARD_TOKENS:
            flush(final=False)
    bar.close()
    n_chars = sum(m["n_chars"] for m in shards)
    if budget and total < budget:
        log.warning("%s/%s: the source ran out at %d of its %d-token budget; training windows repeat more often",
                    name, split, total, budget)
    atomic_write_text(folder / "done.json", json.dumps({
        **expected, "n_tokens": total, "n_chars": n_chars, "budget": budget,
        "shards": [{"file": m["file"], "n_tokens": m["n_tokens"], "sha256": m["sha256"]} for m in shards]}, indent=1))
    return new
