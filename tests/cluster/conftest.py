"""Fixtures for tests that need a real single-node Slurm on localhost.

`slurm_cluster` installs (if needed) and starts the cluster of tests/cluster/slurm.sh
once per session, exports SLURM_CONF for the clients (sbatch, sacct, submitit), and
stops it at the end only if this session started it.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from fibexp.config import schema
from fibexp.data.corpus import EmbeddedCorpus
from fibexp.tasks import registry as tasks

SCRIPT = Path(__file__).with_name("slurm.sh")
# apt-get install takes 20-40 s here; an offline or non-Debian box fails quickly.
INSTALL_TIMEOUT_S = float(os.environ.get("FIBEXP_SLURM_INSTALL_TIMEOUT", "300"))
START_TIMEOUT_S = 300.0


def pytest_configure(config: pytest.Config) -> None:
    # The lead also registers markers in pyproject.toml; avoid a duplicate entry.
    registered = {line.split(":", 1)[0].strip() for line in config.getini("markers")}
    if "cluster" not in registered:
        config.addinivalue_line(
            "markers",
            "cluster: needs a real single-node Slurm (root; tests/cluster/slurm.sh)",
        )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """One cluster for the whole session: under pytest-xdist (`--dist loadgroup`) every test that
    uses it runs on the same worker, so no two workers start or stop the daemons."""
    here = Path(__file__).parent
    for item in items:
        if here in Path(item.fspath).parents:
            item.add_marker(pytest.mark.xdist_group("slurm"))


def _script(*args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(SCRIPT), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _tail(text: str, lines: int = 20) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[Path]:
    """The running cluster's state dir; SLURM_CONF is set in os.environ meanwhile."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        pytest.skip("slurm_cluster needs root (it starts munged, mariadbd and Slurm)")
    try:
        installed = _script("install", timeout=INSTALL_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        pytest.skip(f"installing Slurm packages took over {INSTALL_TIMEOUT_S:.0f} s")
    if installed.returncode != 0:
        pytest.skip(
            "Slurm packages are not installed and could not be installed:\n"
            + _tail(installed.stderr)
        )

    # Someone else's cluster (a developer's, or another session) is left running.
    already_running = _script("status", timeout=60).returncode == 0
    started = _script("start", timeout=START_TIMEOUT_S)
    if started.returncode != 0:
        pytest.fail(f"tests/cluster/slurm.sh start failed:\n{_tail(started.stderr, 40)}")
    exports = [
        line.split("=", 1)[1]
        for line in started.stdout.splitlines()
        if line.startswith("export SLURM_CONF=")
    ]
    if not exports:
        pytest.fail(f"slurm.sh start printed no SLURM_CONF:\n{started.stdout}")
    slurm_conf = Path(exports[-1])

    previous = os.environ.get("SLURM_CONF")
    os.environ["SLURM_CONF"] = str(slurm_conf)
    try:
        yield slurm_conf.parent.parent  # <state dir>/etc/slurm.conf
    finally:
        if previous is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = previous
        if not already_running:
            stopped = _script("stop", timeout=120)
            if stopped.returncode != 0:
                print(f"slurm.sh stop failed:\n{_tail(stopped.stderr)}")


@pytest.fixture(scope="session")
def smoke_cache(cache_dir) -> Path:
    """Tokenizer and token streams of scale=smoke, built once here: otherwise every job of a
    sweep builds the same cache at the same time."""
    with initialize_config_dir(schema.CONF_DIR, version_base="1.3"):
        cfg = compose("train", overrides=["+scale=smoke", f"paths.cache_dir={cache_dir}", "paths.root=."])
    tasks.build(cfg).datamodule(EmbeddedCorpus(domains=tuple(cfg.data.domains))).prepare_data()
    return cache_dir


@pytest.fixture
def out(tmp_path) -> Iterator[Path]:
    """A fresh output dir (MLflow store, run dirs, submitit folder); the Slurm jobs submitted for it
    cancelled after."""
    out = tmp_path / "outputs"
    yield out
    jobs = {p.name.removesuffix("_submitted.pkl").split("_")[0] for p in (out / "sweeps").rglob("*_submitted.pkl")}
    if jobs:
        subprocess.run(["scancel", *sorted(jobs)], capture_output=True, timeout=30)
