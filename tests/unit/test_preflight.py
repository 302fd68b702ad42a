"""The torch-free validation pass (fibexp.checks) and what it knows without asking
the libraries, held equal to what the libraries say: Lightning's accelerator, strategy, precision
and callback names, datasets' builders, the tracking URI a run resolves, CUDA's absence, the char
tokenizer's vocabulary of the embedded corpus; the file checks on the bytes that matter; and how
a run is located in the store (fibexp.deploy.restore) without torch."""
from __future__ import annotations

import os
import typing
from pathlib import Path

import pytest

from fibexp.checks import machine, outside, rules
from fibexp.data import files
from fibexp.deploy import restore
from fibexp.errors import Refusal


def test_lightning_names_are_lightning_s():
    import lightning.pytorch.callbacks as callbacks
    from lightning.fabric.connector import _PRECISION_INPUT_STR
    from lightning.pytorch.accelerators import AcceleratorRegistry
    from lightning.pytorch.strategies import StrategyRegistry

    assert set(rules.ACCELERATORS) == {"auto", "gpu", *AcceleratorRegistry.available_accelerators()}
    assert set(rules.STRATEGIES) == {"auto", *StrategyRegistry.available_strategies()}
    assert set(rules.PRECISIONS) == set(typing.get_args(_PRECISION_INPUT_STR))
    assert set(rules.LIGHTNING_CALLBACKS) == set(callbacks.__all__) - {"LambdaCallback"}


def test_builders_are_datasets_own():
    from datasets.packaged_modules import _PACKAGED_DATASETS_MODULES

    assert set(files.BUILDERS) == set(_PACKAGED_DATASETS_MODULES)


def test_fibexp_callbacks_declared_are_the_callbacks_of_their_modules():
    """The declared list of fibexp's callbacks (read without torch) is every Callback class of each module."""
    import importlib

    import lightning.pytorch as pl

    for name, declared in rules.FIBEXP_CALLBACKS.items():
        module = importlib.import_module(name)
        classes = {n for n, c in vars(module).items() if isinstance(c, type) and issubclass(c, pl.Callback)
                   and c.__module__ == name}
        assert set(declared) == classes, name


def test_the_rehearsal_table_lists_every_fault_callback_with_its_arguments():
    """docs/reliability.md's "Rehearsing failures" names each declared fault and exactly its arguments."""
    import importlib
    import inspect
    import re

    docs = (Path(__file__).resolve().parents[2] / "docs" / "reliability.md").read_text(encoding="utf-8")
    table = docs.split("## Rehearsing failures", 1)[1].split("\n## ", 1)[0]
    rows = dict(re.findall(r"^\| `(\w+)` \| ([^|]*) \|", table, re.M))
    faults = importlib.import_module("fibexp.training.faults")
    assert set(rows) == set(rules.FIBEXP_CALLBACKS["fibexp.training.faults"])
    for name, args in rows.items():
        params = list(inspect.signature(getattr(faults, name)).parameters)
        assert re.findall(r"`(\w+)`", args) == params, name


@pytest.mark.parametrize("configured, env", [(None, None), ("http://h:5000", None), (None, "sqlite:////x/y.db"),
                                             ("sqlite:////a.db", "http://other:5000")])
def test_the_tracking_uri_is_the_store_s(configured, env, monkeypatch, tmp_path):
    from omegaconf import OmegaConf

    from fibexp.tracking import store

    monkeypatch.chdir(tmp_path)
    if env:
        monkeypatch.setenv("MLFLOW_TRACKING_URI", env)
    else:
        monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    cfg = OmegaConf.create({"logger": {"tracking_uri": configured}, "paths": {"output_dir": "outputs"}})
    assert outside.tracking_uri(cfg)[0] == store.resolve_uri(configured, Path("outputs"))
    assert restore.store_uri(configured) == store.resolve_uri(configured, Path("outputs"))


def test_cuda_absent_never_contradicts_torch(monkeypatch):
    import torch

    if machine.cuda_absent():
        assert not torch.cuda.is_available()
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert machine.cuda_absent()


def test_the_char_vocabulary_file_is_the_corpus_s():
    """data/embedded/CHARS.json (what the config rule reads) holds each domain's training characters,
    as the char tokenizer collects them."""
    from fibexp.data.corpus import EmbeddedCorpus
    from fibexp.data.spec import DOMAINS, _embedded_chars, char_vocab
    from fibexp.data.tokenizer import _build_chars

    assert _embedded_chars() == {d: _build_chars(EmbeddedCorpus(domains=(d,))) for d in DOMAINS}
    assert char_vocab(DOMAINS) == len(_build_chars(EmbeddedCorpus())) + 2


def _refused(fn, *args) -> str:
    with pytest.raises(Refusal) as e:
        fn(*args)
    return str(e.value)


def test_text_files_are_checked_whole(tmp_path, monkeypatch):
    """Every byte is decoded, block by block, before any cache exists: a bad byte deep in a large
    file is named at its offset, a character cut by a block boundary is not a bad byte."""
    good = tmp_path / "good.txt"
    good.write_text("é" * 3000 + "\n", encoding="utf-8")
    files.check_text_file(str(good), "k", "text file")
    bad = tmp_path / "bad.txt"
    bad.write_bytes("é".encode() * 3000 + b"\xff" + b"ok\n")
    assert _refused(files.check_text_file, str(bad), "k", "text file") == (
        f"k: {bad} is not utf-8 (at byte 6000); allowed: a text file in utf-8 (another encoding: config_kwargs: "
        "{encoding: <name>})")
    files.check_text_file(str(bad), "k", "text file", "latin-1")  # any byte is latin-1
    monkeypatch.setattr(files, "BLOCK", 101)  # odd: blocks end inside two-byte characters
    files.check_text_file(str(good), "k", "text file")
    assert "is not utf-8 (at byte 6000)" in _refused(files.check_text_file, str(bad), "k", "text file")
    middle = tmp_path / "middle.txt"
    middle.write_bytes(b"a" * 2000 + b"\xff" + b"b" * 2000)
    assert "is not utf-8 (at byte 2000)" in _refused(files.check_text_file, str(middle), "k", "text file")
    tail = tmp_path / "tail.txt"
    tail.write_bytes(b"a" * 5000 + b"\xc3(" + b"b" * 50)
    assert "is not utf-8 (at byte 5000)" in _refused(files.check_text_file, str(tail), "k", "text file")
    cut = tmp_path / "cut.txt"
    cut.write_bytes(b"a" * 5000 + b"\xc3")  # the file ends inside a character
    assert "is not utf-8 (at byte 5000)" in _refused(files.check_text_file, str(cut), "k", "text file")
    nul = tmp_path / "nul.txt"
    nul.write_bytes(b"text\x00more")
    assert "is binary (a NUL byte at byte 4)" in _refused(files.check_text_file, str(nul), "k", "text file")


def test_a_folder_given_as_a_data_file_is_named_as_a_folder(tmp_path):
    assert _refused(files.resolve_entry, str(tmp_path), "data.sources[0]") == (
        f"data.sources[0].data_files: {tmp_path} is a folder; allowed: existing files, globs (e.g. {tmp_path}/*.jsonl) "
        "or URLs")


def test_json_files_parse_at_their_first_record(tmp_path):
    doc = tmp_path / "doc.json"
    doc.write_text('[\n {"text": "a"},\n {"text": "b"}\n]\n', encoding="utf-8")
    files.check_json_file(str(doc), "k", "json data file")
    spread = tmp_path / "spread.json"
    spread.write_text('{\n "data": [{"text": "a"}]\n}\n', encoding="utf-8")
    files.check_json_file(str(spread), "k", "json data file")
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"text": "a"\n{"text": "b"}\n', encoding="utf-8")
    files.check_json_file(str(broken), "k", "json data file")  # a document over lines: datasets decides
    cut = tmp_path / "cut.jsonl"
    cut.write_text('{"text": "a",}\n', encoding="utf-8")
    assert "line 1 is not JSON" in _refused(files.check_json_file, str(cut), "k", "json data file")


def test_a_sqlite_store_that_is_not_one_is_refused_and_left_alone(tmp_path, monkeypatch):
    from omegaconf import OmegaConf

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    db = tmp_path / "mlflow.db"
    db.write_bytes(b"\x00" * 100)
    cfg = OmegaConf.create({"logger": {"tracking_uri": None}, "paths": {"output_dir": str(tmp_path)}})
    line = _refused(outside.check_store, cfg)
    assert line.startswith(f"paths.output_dir: sqlite:///{db} ({db} is not an SQLite database: it starts ")
    assert db.read_bytes() == b"\x00" * 100
    db.write_bytes(b"")  # an empty file is a new sqlite database
    outside.check_store(cfg)


def test_locating_a_run_reads_the_store_and_never_creates_it(tmp_path, tmp_path_factory):
    from helpers.mlflow_runs import new_experiment, sqlite_store

    missing = tmp_path / "none.db"
    with pytest.raises(restore.RunNotFound, match="run: 'abc'; allowed: a run dir, a .ckpt file in one, or a run id"):
        restore.locate("abc", f"sqlite:///{missing}")
    assert not missing.exists()
    client = sqlite_store(tmp_path_factory, "locate")
    exp = new_experiment(client)
    run_dir = tmp_path / "run"
    (run_dir / "checkpoints").mkdir(parents=True)
    (run_dir / "checkpoints" / "last.ckpt").write_bytes(b"x")
    run = client.create_run(exp, run_name="dense-s42", tags={"fibexp.run_dir": str(run_dir), "fibexp.task": "lm"})
    client.set_terminated(run.info.run_id, "FINISHED")
    assert restore.locate(run.info.run_id, client.tracking_uri) == (
        run.info.run_id, client.tracking_uri, run_dir / "checkpoints" / "last.ckpt")
    found = restore.find_run(client.tracking_uri, run.info.run_id)
    assert found["status"] == "FINISHED" and found["tags"]["fibexp.task"] == "lm"
    restore.require_finished(run.info.run_id, client.tracking_uri, "x")
    client.delete_run(run.info.run_id)
    assert restore.find_run(client.tracking_uri, run.info.run_id) is None
    (tmp_path / "garbage.db").write_bytes(b"not sqlite at all" * 10)
    with pytest.raises(restore.RunNotFound, match="cannot be read"):
        restore.find_run(f"sqlite:///{tmp_path / 'garbage.db'}", "abc")


def test_a_sweep_s_parent_run_is_named_with_its_cells(tmp_path_factory):
    from helpers.mlflow_runs import new_experiment, sqlite_store

    client = sqlite_store(tmp_path_factory, "parent")
    exp = new_experiment(client)
    parent = client.create_run(exp, run_name="sweep-main-1", tags={"fibexp.sweep_parent": "true"}).info.run_id
    cells = [client.create_run(exp, run_name=name, tags={"mlflow.parentRunId": parent}).info.run_id
             for name in ("dense-s42", "sparse-fib-fixed-W4-s42")]
    with pytest.raises(restore.RunNotFound) as e:
        restore.locate(parent, client.tracking_uri)
    assert str(e.value) == (f"run: {parent} (a sweep's parent run, tag fibexp.sweep_parent); allowed: a cell's run "
                            f"id or its run dir; its cells: {cells[0]} (dense-s42), "
                            f"{cells[1]} (sparse-fib-fixed-W4-s42)")
    assert isinstance(e.value, Refusal) and (e.value.key, e.value.value) == (
        "run", f"{parent} (a sweep's parent run, tag fibexp.sweep_parent)")


def test_config_and_spec_layers_stay_torch_free():
    """The torch-free half imports no torch: the modules it loads, in a fresh interpreter."""
    import subprocess
    import sys

    code = ("import sys; import fibexp.checks.callback, fibexp.checks.preflight, fibexp.cli.app, fibexp.deploy.restore, "
            "fibexp.data.files; print(sorted(m for m in ('torch', 'lightning', 'mlflow', 'datasets') if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**os.environ})
    assert proc.stdout.strip() == "[]", proc.stderr


def test_the_reader_names_a_file_that_is_not_its_encoding(tmp_path):
    """The defence behind the pre-run check (a file can change after it): datasets' bare
    UnicodeDecodeError becomes one line naming the source and the file."""
    from omegaconf import OmegaConf

    from fibexp.data.corpus import CorpusError
    from fibexp.data.sources import open_corpus

    latin = tmp_path / "latin.txt"
    latin.write_bytes("caf\u00e9 au lait\nmore\n".encode("latin-1"))
    data = OmegaConf.create({"source": "hf", "tokenizer": "bpe", "sources": [
        {"name": "x", "path": "text", "data_files": str(latin), "heldout": "every:2"}]})
    with pytest.raises(CorpusError) as e:
        list(open_corpus(data, None).documents("x", "train"))
    assert str(e.value) == (f"data.sources[0].data_files: {latin} is not utf-8 (invalid continuation byte); allowed: "
                            "text in utf-8, or another encoding in config_kwargs: {encoding: <name>}")
    data.sources[0].config_kwargs = {"encoding": "latin-1"}
    assert list(open_corpus(data, None).documents("x", "train")) == ["caf\u00e9 au lait"]


def test_tracking_uris_are_those_mlflow_serves():
    for uri in (None, "sqlite:////tmp/x/mlflow.db", "sqlite:///mlflow.db", "http://host:5000", "https://h/x",
                "postgresql://u@h/db", "postgresql+psycopg2://u@h/db", "mysql://h/db", "mssql://h/db"):
        assert rules.uri_ok(uri), uri
    for uri in ("banana", "./mlruns", "/tmp/mlruns", "file:///tmp/mlruns", "file:/tmp/x", "ftp://example.invalid/x",
                "sqlite://", "sqlite:mlflow.db", "http://", "s3://bucket/x", "databricks"):
        assert not rules.uri_ok(uri), uri


def _typed(*overrides: str):
    from hydra import compose, initialize_config_dir

    from fibexp.config.schema import CONF_DIR

    with initialize_config_dir(CONF_DIR, version_base="1.3"):
        return rules.validate(compose("train", overrides=["paths.root=.", *overrides]))


def test_the_memory_estimate_names_the_size_that_grew():
    """A lower bound of a step's bytes: the tiny default fits anything; a size grown past the
    memory is named by key, against the SLURM job's mem_gb when there is one."""
    from omegaconf import OmegaConf

    from fibexp.checks import memory

    slurm = OmegaConf.create({"_target_": "hydra_plugins.hydra_submitit_launcher.submitit_launcher.SlurmLauncher",
                              "mem_gb": 1})
    memory.check_memory(_typed(), slurm, machine=True)
    small = memory.step_bytes(_typed())
    assert memory.step_bytes(_typed("data.batch_size=32")) > small  # grows with the batch
    for grown, key in (("data.batch_size=100000", "data.batch_size"), ("model.seq_len=1000000", "model.seq_len"),
                       ("model.d_model=100000", "model.d_model"), ("model.n_layers=100000", "model.n_layers")):
        line = _refused(memory.check_memory, _typed(grown, "data.eval_tokens=0"), slurm, False)
        assert line.startswith(f"{key}: {grown.split('=')[1]}; allowed: a size whose training step fits in memory"), line
        assert line.endswith("against 1.0 GiB (hydra.launcher.mem_gb=1)"), line
    memory.check_memory(_typed("data.batch_size=100000"), None, machine=False)  # where it runs is not known
    total, _ = memory.machine_bytes()
    assert 0 < total <= os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def test_a_pseudo_filesystem_is_no_outputs_folder(tmp_path):
    from fibexp.config import paths

    assert paths.filesystem_of(Path("/proc/self")) == "proc"
    assert "/proc/fibexp (/proc is on the kernel's proc filesystem)" in _refused(
        paths.writable, Path("/proc/fibexp"), "paths.output_dir", "runs go there")
    paths.writable(tmp_path / "a" / "b", "paths.output_dir", "runs go there")
    assert not (tmp_path / "a").exists()


def test_refused_values_stay_on_one_short_line():
    line = str(Refusal("logger.run_name", "a\nb\x1b" + "x" * 1000, "a name"))
    assert "\n" not in line and line.startswith("logger.run_name: a\\nb\\x1b" + "x" * 10)
    assert "... (1,004 characters); allowed: a name" in line and len(line) < 500
