"""Shared fixtures: a tiny training config and a token cache shared by the whole session; the
suite is hermetic: whatever MLFLOW_* / HYDRA_* a user's shell holds (a team's tracking server,
HYDRA_FULL_ERROR) reaches neither the tests nor the processes they start, and neither does a
SIGINT the shell ignores (`make test &` in a script: the tests rehearse Ctrl-C as a terminal sends
it). Under pytest-xdist each worker computes on one thread (tests/unit -n 3 on 2 cores: 76 s
instead of 138 s)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest


def pytest_configure(config: pytest.Config) -> None:
    for key in [k for k in os.environ if k.startswith(("MLFLOW_", "HYDRA_"))]:
        del os.environ[key]
    # A background job of a non-interactive shell starts with SIGINT ignored, and every process it
    # starts inherits that: the Ctrl-C tests would see runs that cannot be interrupted.
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    if os.environ.get("PYTEST_XDIST_WORKER"):
        import torch

        torch.set_num_threads(1)  # the workers already fill the cores: more threads only contend


@pytest.hookimpl(trylast=True)  # after tests/cluster's hook has put its tests in the slurm group
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The `longest` tests first, then the other `slow` ones, in collection order otherwise:
    pytest-xdist hands tests out in this order, so the long ones start early and the many short
    ones fill the end, instead of one long test (the smoke reproduction: 5 min alone, 16 min beside
    the other workers) starting late and running on after the other workers are done."""
    items.sort(key=lambda item: (item.get_closest_marker("longest") is None, item.get_closest_marker("slow") is None))
    for item in items:
        module = item.nodeid.split("::")[0]
        if item.get_closest_marker("xdist_group") is None and _uses_a_shared_fixture_of(module, item):
            item.add_marker(pytest.mark.xdist_group(module))


def _uses_a_shared_fixture_of(module: str, item: pytest.Item) -> bool:
    """A module- or session-scoped fixture defined in the test's own module (a benchmark, a trained
    run, a tracking server) is built once per worker that runs one of its tests: grouping the
    module on one worker builds it once instead of on every worker (bench: 31 s twice)."""
    info = getattr(item, "_fixtureinfo", None)  # None for items that are not test functions
    return info is not None and any(
        d.scope == "module" or (d.scope == "session" and d.baseid == module)
        for defs in info.name2fixturedefs.values() for d in defs)


# A model and data small enough that a run takes seconds on 2 cores.
TINY = ["model.n_layers=2", "model.d_model=32", "model.n_heads=2", "model.n_kv_heads=1", "model.seq_len=32",
        "model.vocab_size=512", "data.domains=[drama,prose]", "data.batch_size=2", "data.eval_tokens=1024",
        "trainer.max_steps=6", "trainer.checkpoint_every_n_steps=3", "trainer.log_every_n_steps=1",
        "optim.warmup_steps=2", "trainer.threads=1"]


@pytest.fixture
def tiny() -> list[str]:
    """The TINY overrides, as a fixture: test modules cannot import a conftest by name
    (tests/cluster has one too)."""
    return list(TINY)


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("cache")


@pytest.fixture
def train_cli(tmp_path, cache_dir):
    """Run `fibexp-train` as a user would; returns (CompletedProcess, output dir)."""
    out = tmp_path / "outputs"

    def run(*overrides: str, check: bool = True, env: dict | None = None):
        cmd = [sys.executable, "-m", "fibexp.cli.train", *TINY, f"paths.output_dir={out}",
               f"paths.cache_dir={cache_dir}", *overrides]
        proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **(env or {})}, timeout=600)
        if check and proc.returncode != 0:
            raise AssertionError(f"fibexp-train failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
        return proc

    run.out = out
    return run


@pytest.fixture(scope="module")
def store(request, tmp_path_factory):
    """A sqlite MLflow store for the test module; each case makes its own experiment in it."""
    from helpers.mlflow_runs import sqlite_store

    return sqlite_store(tmp_path_factory, request.module.__name__.rsplit(".", 1)[-1])


@pytest.fixture(scope="module")
def one_thread():
    """Tiny tensors: intra-op threads cost more than they save (and 2 cores are shared); use with
    `pytestmark = pytest.mark.usefixtures("one_thread")`."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def local_store(monkeypatch):
    """Runs started in-process go to their output folder's mlflow.db: no MLFLOW_TRACKING_URI an
    earlier test set in this process."""
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)


@pytest.fixture
def mlflow_server(tmp_path):
    """`make mlflow-server`'s command on a store of its own (helpers.servers.Server), started; the
    test may stop and start it again on the same port; stopped at the end."""
    from helpers import servers

    server = servers.Server(tmp_path / "mlflow-server")
    server.root.mkdir()
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def tiny_qwen3(tmp_path_factory) -> Path:
    """A random 4-layer Qwen3 folder (save_pretrained) to graft into, once per module."""
    from fibexp.cli.tiny_qwen import save_tiny_qwen3

    return save_tiny_qwen3(tmp_path_factory.mktemp("tiny-qwen3"), n_layers=4)
