"""The MLflow UI as a user meets it, in a real browser: `make ui` serves a temporary store on a
free port (and records where), a 3-seed 2x2 smoke grid runs into it, and headless Debian chromium,
driven over the DevTools protocol, opens the links the sweep printed: the seed groups at 1,600 px
(each group's mean and 95% interval, the headline columns in the viewport), the cells at 1,366 px,
and a run's own page in the model-training layout. Screenshots go to outputs/ui/ (printed)."""
from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from fibexp.report.stats import mean_interval
from helpers import browser, servers

ROOT = Path(__file__).resolve().parents[2]
SHOTS = ROOT / "outputs" / "ui"
CHROMIUM = "/usr/bin/chromium"
GRID = ["attention=fib_fixed,fib_stagger", "attention.window=4,8", "seed=42,43,44"]


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
def make_ui(tmp_path):
    """`make ui MLFLOW_PORT=<free>` in a scratch project folder (its outputs/ is the store): the base URL."""
    if not shutil.which("make"):
        pytest.skip("needs make")
    port = servers.free_port()
    proc = subprocess.Popen(["make", "-s", "-C", str(tmp_path), "-f", str(ROOT / "Makefile"), "-o", ".venv/.installed",
                             "ui", f"BIN={Path(sys.executable).parent}", f"MLFLOW_PORT={port}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        servers.wait_healthy(base, proc)
        yield base
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)


@pytest.fixture
def grid(make_ui, tmp_path, cache_dir):
    """A 2x2 grid at 3 seeds, smoke scale, into make_ui's store, with no MLFLOW_* in the shell:
    (tracking URI, experiment id, what the sweep printed)."""
    out = tmp_path / "outputs"
    cmd = [sys.executable, "-m", "fibexp.cli.train", "-m", *GRID, "+scale=smoke", "trainer.threads=1",
           f"paths.output_dir={out}", f"paths.cache_dir={cache_dir}"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    uri = f"sqlite:///{out}/mlflow.db"
    return uri, MlflowClient(uri).get_experiment_by_name("fibexp").experiment_id, proc.stdout + proc.stderr


HEADERS = """JSON.stringify({right: document.querySelector('.ag-body-viewport').getBoundingClientRect().right,
  heads: Object.fromEntries([...document.querySelectorAll('.ag-header-cell[col-id]')].map(e => {
    const r = e.getBoundingClientRect(); return [e.getAttribute('col-id'), [r.left, r.right]]; }))})"""
# the run names whose text runs past their link (drawn cut off)
CUT_NAMES = """JSON.stringify([...document.querySelectorAll('.ag-cell a')].filter(a => {
  const text = document.createRange(); text.selectNodeContents(a);
  return text.getBoundingClientRect().right > a.getBoundingClientRect().right + 1; }).map(a => a.innerText))"""
ASSISTANT_OPEN = "localStorage.getItem('mlflow.assistant.panelOpen_v1') === 'true'"


def in_view(shown: dict) -> list[str]:
    """The column ids whose header lies wholly inside the grid's viewport."""
    return [c for c, (left, right) in shown["heads"].items() if right <= shown["right"] + 1 and left >= 0]


def sig4(x: float) -> str:
    return f"{x:.4g}"


@pytest.mark.slow
def test_seed_groups_cells_and_a_run_page_in_a_browser(chromium, grid, make_ui):
    import json

    uri, exp_id, printed = grid
    client = MlflowClient(uri)
    assert client.get_experiment(exp_id).tags.get("mlflow.experimentKind") == "custom_model_development"
    runs = client.search_runs([exp_id])
    cells = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    assert len(cells) == 12 and all(r.data.tags.get("mlflow.note.content") for r in cells)
    # every link the sweep printed points at the UI `make ui` serves, without any export
    seeds_url = re.search(r"^Seed groups in the UI: (\S+)$", printed, re.M).group(1)
    run_urls = re.findall(r"compare: (\S+)", printed)
    assert len(run_urls) == 12 and all(u.startswith(make_ui + "/#/") for u in [seeds_url, *run_urls])
    # each group's mean and 95% interval of mean_ppl_1x, as the claims report computes them
    expected = {}
    for cell in {r.data.tags["fibexp.cell"] for r in cells}:
        m, lo, hi = mean_interval([r.data.metrics["mean_ppl_1x"] for r in cells if r.data.tags["fibexp.cell"] == cell])
        expected[cell] = f"{cell} · mean_ppl_1x {sig4(m)} [{sig4(lo)}, {sig4(hi)}]"
    assert {r.data.tags["fibexp.seed_group"] for r in cells} == set(expected.values())
    assert sorted(len(line.split(";")) for line in re.findall(r"^  sparse/fib/\S+ \(3 seeds\): .*$", printed, re.M)) \
        == [4] * 4  # the printed table: 1x, 2x, 4x means and the 4x change, per group

    async def look(page):
        seen = {}
        await page.open(seeds_url, "document.querySelector('.ag-header-cell')")
        seen["assistant_first_load"] = await page.js(ASSISTANT_OPEN)
        await page.js("localStorage.setItem('mlflow.assistant.panelOpen_v1', 'false')")  # closed once, as a user does
        await page.open(seeds_url, "document.body.innerText.includes('Group: ')")
        seen["seeds_text"] = await page.js("document.body.innerText")
        seen["seeds"] = json.loads(await page.js(HEADERS))
        await page.screenshot(SHOTS / "seed-groups-1600.png")
        await page.call("Emulation.setDeviceMetricsOverride", width=1366, height=900, deviceScaleFactor=1, mobile=False)
        cells_url = seeds_url.replace("viewStateShareKey=fibexp-seeds", "viewStateShareKey=fibexp")
        await page.open(cells_url, "document.querySelector('.ag-header-cell')")
        seen["cells_text"] = await page.js("document.body.innerText")
        seen["cells"] = json.loads(await page.js(HEADERS))
        seen["cut"] = json.loads(await page.js(CUT_NAMES))
        await page.screenshot(SHOTS / "runs-1366.png")
        await page.open(run_urls[0], "document.body.innerText.includes('Model metrics')")
        seen["run_text"] = await page.js("document.body.innerText")
        await page.screenshot(SHOTS / "run-page.png")
        return seen

    seen = browser.session(chromium, look, width=1600, height=1000)
    print("screenshots:", *sorted(str(p) for p in SHOTS.glob("*.png")), sep="\n  ")

    # 1,600 px, grouped: one row per group named with its mean and interval, the cell and the means in view
    for label in expected.values():
        assert f"Group: {label}" in seen["seeds_text"], label
    shown = in_view(seen["seeds"])
    for column in ("attributes.`Run Name`", "params.`attention.base`", "params.`attention.schedule`",
                   "params.`attention.window`", "metrics.`mean_ppl_1x`", "metrics.`mean_ppl_2x`",
                   "metrics.`mean_ppl_4x`"):
        assert column in shown, (column, seen["seeds"])
    assert "duration" not in shown and "(average)" in seen["seeds_text"]
    # 1,366 px, cells: name, base, schedule, window, seed and the 1x mean on screen before Duration
    shown = in_view(seen["cells"])
    for column in ("attributes.`Run Name`", "params.`attention.base`", "params.`attention.schedule`",
                   "params.`attention.window`", "params.`seed`", "metrics.`mean_ppl_1x`"):
        assert column in shown, (column, seen["cells"])
    assert "duration" not in shown and "attributes.`Description`" not in seen["cells"]["heads"]
    for r in cells:  # every cell's full name, nested under the expanded parent, drawn uncut
        assert r.info.run_name in seen["cells_text"], r.info.run_name
    assert not [name for name in seen["cut"] if name.startswith("sparse-")], seen["cut"]
    # the printed link opens that run's page in the model-training layout, not GenAI's
    run = client.get_run(run_urls[0].split("/runs/")[1].split("?")[0])
    assert run.info.run_name in seen["run_text"] and "Model metrics" in seen["run_text"]
    assert "Evaluation runs" not in seen["run_text"]
    print(f"assistant panel open on a fresh browser's first load: {seen['assistant_first_load']}")
    assert (SHOTS / "seed-groups-1600.png").stat().st_size > 20_000
