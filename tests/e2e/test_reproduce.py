"""`make reproduce`: one sweep (sweeps/reproduce.yaml) holding every claim's runs at each scale,
planned first (`fibexp-plan`), then one report. At scale=smoke it runs whole here: the plan
announced every claim judgeable and every claim gets a verdict, each run logs exactly the metrics
its task declares, and the plan then finds every cell FINISHED. At cpu and paper `fibexp-plan`
shows, in seconds, the cells, every claim judgeable or not at this scale with the scale's reason,
and the price."""
from __future__ import annotations

import os
import re
import resource
import subprocess
import sys

import pytest
from hydra.core.global_hydra import GlobalHydra

from fibexp.config import identity
from fibexp.cli.tiny_qwen import save_tiny_qwen3
from fibexp.report.ledger import CLAIMS
from fibexp.sweep.cells import sweep_config
from fibexp.sweep.plan import grid
from helpers.mlflow_runs import fibexp_runs, undeclared_and_missing
from helpers.sweeps import REPO

IDS = [c.id for c in CLAIMS]
ENV = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "HYDRA_"))}


@pytest.fixture
def smoke_workdir(tmp_path, monkeypatch):
    """A working dir as `make reproduce SCALE=smoke` leaves it: the graft cells read
    outputs/tiny-qwen3, relative to it."""
    save_tiny_qwen3(tmp_path / "outputs" / "tiny-qwen3")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def fibexp_plan(*args: str, cwd=REPO) -> tuple[subprocess.CompletedProcess, float, dict[str, str]]:
    """`fibexp-plan --config-dir sweeps --config-name reproduce ARGS` as `make plan` runs it: the
    process, the CPU seconds it took (its wall time on an idle core; the suite's other workers
    share the cores) and the claim lines by id."""
    cmd = [sys.executable, "-m", "fibexp.cli.plan", "--config-dir", str(REPO / "sweeps"), "--config-name", "reproduce",
           *args]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=cwd, env=ENV)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    lines = {line.split()[0]: line for line in proc.stdout.splitlines()  # a claim's line; its power line apart
             if line.split()[:1] and line.split()[0] in IDS and line.split()[1:2] != ["power:"]}
    return proc, cpu, lines


def test_smoke_holds_every_claims_cells_each_once(smoke_workdir):
    master, loader = sweep_config("reproduce", ["scale=smoke"], str(REPO / "sweeps"))
    cells = grid.cells(master, loader)
    GlobalHydra.instance().clear()
    composed = [c.cfg for c in cells]
    assert len(cells) == 130 and not any(c.unknown for c in cells)  # the tiny Qwen3 is at hand
    assert len({c.hash for c in cells}) == 130  # no cell trained twice
    kinds = {identity.cell(c) for c in composed}
    assert {"dense", "sparse/fib/coprime/W8", "hypercube/warp", "hypercube/hybrid/hier", "dynamics/ph/T8",
            "hypercube/mixa"} <= kinds
    assert {c.task.name for c in composed} == {"lm", "count_ones", "assoc_recall", "graft"}
    # B13: k = 2, 4, 6 grafted (eq1) and fine-tuned (attention), 3 seeds each, and the unmodified model
    assert sorted(identity.cell(c) for c in composed if c.task.name == "graft") == sorted(
        [f"graft/{r}/k{k}" for r in ("eq1", "attention") for k in (2, 4, 6)] * 3 + ["graft/none"])
    assert not any(c.eval.aux for c in composed)  # no claim reads RULER or LEGO
    # B14: attention and the hybrid at window 64 measured at int8 at the end of training, 3 seeds each
    assert sorted(identity.cell(c) for c in composed if c.eval.int8 and c.task.name != "graft") == \
        ["dense"] * 3 + ["hypercube/hybrid"] * 3
    assert all(c.eval.int8 for c in composed if c.task.name == "graft")  # B14 on the graft, k = 0 included
    # B4, B5, B9 (paper B's window-256 claims) and B6: attn, hybrid, rot, warp at 2 lrs 8x apart, 3 seeds
    w256 = sorted((identity.cell(c), c.optim.lr) for c in composed if c.task.name == "lm" and c.model.seq_len == 256)
    assert w256 == sorted((cell, lr) for cell in ("dense", "hypercube/hybrid", "hypercube/rot", "hypercube/warp")
                          for lr in (0.004, 0.0005) for _ in range(3))


@pytest.mark.slow  # cpu calibrates its step times here (about 30 s on 2 idle cores)
@pytest.mark.parametrize("scale, cells", [("cpu", 143), ("paper", 496)])
def test_the_plan_of_cpu_and_paper_scales_judges_every_claim_they_serve_and_prices_them(tmp_path, scale, cells):
    proc, cpu_seconds, lines = fibexp_plan(f"scale={scale}", f"paths.output_dir={tmp_path}", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"plan of sweep reproduce scale={scale} paths.output_dir={tmp_path}: {cells} cells: {cells} new, " \
           "0 finished" in proc.stdout
    assert list(lines) == IDS
    served = {"cpu": set(IDS) - {"B4", "B5", "B9", "B13", "B14"}, "paper": set(IDS)}[scale]
    for cid, line in lines.items():
        if cid in served:
            assert line == f"{cid:<3} judgeable", line
        else:
            assert line.startswith(f"{cid:<3} not at this scale: "), line
    if scale == "cpu":  # the reason its sweep config declares
        assert "window 256" in lines["B4"] and "pretrained model" in lines["B13"]
    cost = next(line for line in proc.stdout.splitlines() if line.startswith("cost: "))
    if scale == "paper":  # every cell a GPU cell; the graft's Qwen3-0.6B is not in this machine's cache
        assert re.search(r"cost: 496 new cells, [0-9.e+]+ training FLOPs \(analytic\); [0-9.,]+ GPU-hours for 466 GPU "
                         r"cells at NVIDIA H100 SXM, bf16 dense peak 989 TFLOP/s x MFU 0.3 \(assumed\); not priced: 30 "
                         r"cells \(task.model=Qwen/Qwen3-0.6B: no config.json at hand\)", cost), cost
        assert cpu_seconds < 60, proc.stdout[-200:]  # the whole paper grid planned in under a minute of one core
    else:
        assert re.search(r"[0-9.]+ CPU-(hours|minutes) for 143 CPU cells on this machine, one cell at a time, training "
                         r"steps only \(step times: 143 from a 3-step calibration timed here\)", cost), cost


@pytest.mark.slow
@pytest.mark.longest
def test_smoke_reproduction_judges_every_claim(smoke_workdir, cache_dir):
    """The whole smoke reproduction, in-process cells (the cores launcher is tested in
    test_concurrency): the plan announces every claim judgeable, every claim of the ledger gets a
    verdict, none insufficient; every run logged what its task declares; a second plan finds
    every cell FINISHED."""
    out = smoke_workdir / "outputs"
    where = [f"paths.output_dir={out}", f"paths.cache_dir={cache_dir}"]
    proc, _, announced = fibexp_plan("scale=smoke", "hydra/launcher=local", *where, cwd=smoke_workdir)
    not_served = {"B13", "B14"}  # a tiny random Qwen3 says nothing about a pretrained graft
    assert proc.returncode == 0 and {i: line.split(":")[0] for i, line in announced.items()} == {
        i: f"{i:<3} not at this scale" if i in not_served else f"{i:<3} judgeable" for i in IDS}, proc.stdout
    assert re.search(r"^A4  power: 3 seeds \d+% for the paper's ", proc.stdout, re.M), proc.stdout  # no runs yet

    train = [sys.executable, "-m", "fibexp.cli.train", "-m", "--config-dir", str(REPO / "sweeps"), "--config-name",
             "reproduce", "scale=smoke", "hydra/launcher=local", *where]
    proc = subprocess.run(train, capture_output=True, text=True, timeout=1800, cwd=smoke_workdir, env=ENV)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "130 finished, 0 skipped, 0 failed" in proc.stdout
    report = [sys.executable, "-m", "fibexp.cli.report", "--claims", "--tracking-uri", f"sqlite:///{out / 'mlflow.db'}"]
    proc = subprocess.run(report, capture_output=True, text=True, timeout=300, cwd=REPO, env=ENV)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = {line.split()[0]: line for line in proc.stdout.splitlines() if line.split()[:1] and line.split()[0] in IDS}
    assert list(lines) == IDS, proc.stdout
    verdicts = {cid: line.split(None, 1)[1] for cid, line in lines.items()}  # a judged line may note other groups
    unjudged = [lines[cid] for cid, v in verdicts.items()
                if v.startswith("insufficient") or v.startswith("not at this scale") != (cid in not_served)]
    assert not unjudged, "\n".join(unjudged)

    client, runs = fibexp_runs(out)
    runs = [r for r in runs if "fibexp.cell" in r.data.tags]
    assert len(runs) == 130
    for r in runs:  # the metrics each task declares (its config, fibexp.tasks.registry), what the plan's stand-in runs carry
        assert undeclared_and_missing(client, r) == (set(), set()), r.info.run_name

    proc, _, _ = fibexp_plan("scale=smoke", "hydra/launcher=local", *where, cwd=smoke_workdir)
    assert proc.returncode == 0 and "130 cells: 0 new, 130 finished" in proc.stdout, proc.stdout[:2000]
