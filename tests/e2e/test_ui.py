"""The MLflow UI as a user meets it, in a real browser: a smoke sweep fills a temporary store,
`make ui`'s server serves it, headless Debian chromium loads the experiment's runs page through
the link fibexp prints, and the rendered DOM holds the runs (children nested and visible under
the sweep's parent), the headline metric columns, and their values. The screenshot is kept as
outputs/ui/runs.png for the README."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from fibexp.tracking import store
from helpers import servers

ROOT = Path(__file__).resolve().parents[2]
SWEEPS = ROOT / "sweeps"
SCREENSHOT = ROOT / "outputs" / "ui" / "runs.png"
CHROMIUM = "/usr/bin/chromium"
# Flags that work as root on a closed network (no sandbox, no background connections).
FLAGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--window-size=3000,1000", "--virtual-time-budget=15000"]


def _apt(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    # waits for dpkg's lock while another install (the SLURM test cluster's, on the other worker) holds it
    return subprocess.run(["apt-get", "-o", "DPkg::Lock::Timeout=200", *args], capture_output=True, text=True,
                          timeout=timeout, env=env)


@pytest.fixture(scope="session")
def chromium() -> str:
    """Debian's chromium, installed with apt like the test cluster's SLURM packages."""
    if Path(CHROMIUM).exists():
        return CHROMIUM
    if not hasattr(os, "geteuid") or os.geteuid() != 0 or not shutil.which("apt-get"):
        pytest.skip("the browser test installs Debian's chromium with apt-get: needs root on Debian")
    try:
        done = _apt("install", "-y", "-q", "--no-install-recommends", "chromium")
        if done.returncode != 0:  # stale package lists: refresh once
            _apt("update", "-q")
            done = _apt("install", "-y", "-q", "--no-install-recommends", "chromium")
    except subprocess.TimeoutExpired:
        pytest.skip("apt-get install chromium took over 300 s")
    if done.returncode != 0 or not Path(CHROMIUM).exists():
        pytest.skip("chromium is not installed and apt cannot install it: "
                    + " ".join(done.stderr.strip().splitlines()[-2:]))
    return CHROMIUM


@pytest.fixture
def smoke_store(tmp_path, cache_dir) -> tuple[str, str]:
    """The main sweep at scale=smoke into a temporary store: (tracking URI, experiment id)."""
    out = tmp_path / "outputs"
    cmd = [sys.executable, "-m", "fibexp.cli.train", "-m", "--config-dir", str(SWEEPS), "--config-name", "main",
           "scale=smoke", "trainer.threads=1", f"paths.output_dir={out}",
           f"paths.cache_dir={cache_dir}"]
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    uri = f"sqlite:///{out}/mlflow.db"
    return uri, MlflowClient(uri).get_experiment_by_name("fibexp").experiment_id


@pytest.fixture
def ui_server(smoke_store, tmp_path):
    """`make ui`'s command (mlflow ui on the store, local only) on a free port."""
    uri, _ = smoke_store
    with servers.mlflow("ui", "--backend-store-uri", uri, cwd=tmp_path) as base:
        yield base


def render(browser: str, url: str, screenshot: Path | None = None) -> str:
    """The DOM after the page's scripts ran (and a screenshot), from a fresh browser profile."""
    with tempfile.TemporaryDirectory() as profile:
        flags = [browser, *FLAGS, f"--user-data-dir={profile}"]
        if screenshot is not None:
            screenshot.parent.mkdir(parents=True, exist_ok=True)
            subprocess.run([*flags, f"--screenshot={screenshot}", url], capture_output=True, timeout=60, check=True)
        return subprocess.run([*flags, "--dump-dom", url], capture_output=True, text=True, timeout=60,
                              check=True).stdout


@pytest.mark.slow
def test_runs_page_shows_nested_runs_and_metric_columns(chromium, smoke_store, ui_server):
    uri, exp_id = smoke_store
    client = MlflowClient(uri)
    experiment = client.get_experiment(exp_id)
    assert experiment.tags.get("mlflow.experimentKind") == "custom_model_development"
    assert "mlflow.sharedViewState.fibexp" in experiment.tags, "fibexp-train publishes the view at a run's end"
    runs = client.search_runs([exp_id])
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    assert len(children) == 15 and all(r.data.tags.get("mlflow.note.content") for r in children)

    dom = render(chromium, store.ui_url(exp_id, ui_server), SCREENSHOT)
    assert "Run Name" in dom and "Judges" not in dom  # the runs table in training mode, not GenAI's pages
    for r in runs:  # parent and its fifteen cells (3 LM, 2 count-ones, 3 seeds each), all rendered (the parent row is expanded)
        assert r.info.run_name in dom, r.info.run_name
    for column in ("mean_ppl_1x", "mean_ppl_2x", "mean_ppl_4x"):  # one number per length, on screen
        assert column in dom, column
    # the cell, as headers (the grid renders only the columns in view: at 2,200 px window and seed are cut)
    for param in ("attention.base", "attention.schedule", "attention.window", "seed"):
        assert f">{param}<" in dom, param
    dense = next(r for r in children if r.data.tags["fibexp.cell"] == "dense")
    assert repr(dense.data.metrics["mean_ppl_1x"]) in dom  # the dense cell's value in its column
    assert "dense · 8 steps" in dom  # the run's description
    assert SCREENSHOT.stat().st_size > 20_000
