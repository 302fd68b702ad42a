"""`make reproduce`: one sweep (sweeps/reproduce.yaml) holding every claim's runs at each scale,
then one report. At scale=smoke it runs whole here and every claim gets a verdict; at cpu and
paper every cell validates and no cell is trained twice."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from fibexp.config import identity
from fibexp.hf.tiny import save_tiny_qwen3
from fibexp.report.ledger import CLAIMS
from helpers.sweeps import REPO, expand

IDS = [c.id for c in CLAIMS]


@pytest.fixture
def smoke_workdir(tmp_path, monkeypatch):
    """A working dir as `make reproduce SCALE=smoke` leaves it: the graft cells read
    outputs/tiny-qwen3, relative to it."""
    save_tiny_qwen3(tmp_path / "outputs" / "tiny-qwen3")
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.slow  # composing 111 cells: about a minute
def test_smoke_holds_every_claims_cells_each_once(smoke_workdir):
    cells, composed = expand("reproduce", ["scale=smoke"])
    assert len(cells) == 111
    assert len({identity.config_hash(c) for c in composed}) == 111  # no cell trained twice
    kinds = {identity.cell(c) for c in composed}
    assert {"dense", "sparse/fib/coprime/W8", "hypercube/warp", "hypercube/hybrid/hier", "dynamics/ph/T8",
            "hypercube/mixa"} <= kinds
    assert {c.task.name for c in composed} == {"lm", "count_ones", "assoc_recall", "graft"}
    # B13: k = 2, 4, 6 grafted (eq1) and fine-tuned (attention), 3 seeds each, and the unmodified model
    assert sorted(identity.cell(c) for c in composed if c.task.name == "graft") == sorted(
        [f"graft/{r}/k{k}" for r in ("eq1", "attention") for k in (2, 4, 6)] * 3 + ["graft/none"])
    assert not any(c.eval.aux for c in composed)  # no claim reads RULER or LEGO
    # B14: attention and the hybrid measured at int8 at the end of training, 2 lrs x 3 seeds each, and every graft cell
    assert sorted(identity.cell(c) for c in composed if c.eval.int8 and c.task.name != "graft") == \
        ["dense"] * 6 + ["hypercube/hybrid"] * 6
    assert all(c.eval.int8 for c in composed if c.task.name == "graft")


@pytest.mark.parametrize("scale, n", [("cpu", 92), ("paper", 22 + 21 + 11 + 147 + 18 + 108 + 90 + 31)])
def test_cpu_and_paper_scales_expand_to_their_cells(scale, n):
    """Their cells validate in test_sweep (cpu) and when the sweep starts; at paper scale the
    cells table1 and the seeds grid share (W = 12, seed 42) run once (the sweep's duplicates)."""
    cells, _ = expand("reproduce", [f"scale={scale}"], compose_cells=False)
    assert len(cells) == n and len({tuple(c) for c in cells}) == n


@pytest.mark.slow
@pytest.mark.longest
def test_smoke_reproduction_judges_every_claim(smoke_workdir, cache_dir):
    """The whole smoke reproduction, in-process cells (the cores launcher is tested in
    test_concurrency): every claim of the ledger gets a verdict, none insufficient."""
    out = smoke_workdir / "outputs"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "HYDRA_"))}
    train = [sys.executable, "-m", "fibexp.cli.train", "-m", "--config-dir", str(REPO / "sweeps"), "--config-name",
             "reproduce", "scale=smoke", "hydra/launcher=local", f"paths.output_dir={out}",
             f"paths.cache_dir={cache_dir}"]
    proc = subprocess.run(train, capture_output=True, text=True, timeout=1500, cwd=smoke_workdir, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "111 finished, 0 skipped, 0 failed" in proc.stdout
    report = [sys.executable, "-m", "fibexp.cli.report", "--claims", "--tracking-uri", f"sqlite:///{out / 'mlflow.db'}"]
    proc = subprocess.run(report, capture_output=True, text=True, timeout=300, cwd=REPO, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = {line.split()[0]: line for line in proc.stdout.splitlines() if line.split()[:1] and line.split()[0] in IDS}
    assert list(lines) == IDS, proc.stdout
    insufficient = [line for line in lines.values() if line.split()[1] == "insufficient"]
    assert not insufficient, "\n".join(insufficient)
