"""The fibexp sweeper as a user meets it: `fibexp-train -m --config-dir sweeps --config-name NAME`.
Grids expand to the intended cells, a bad cell is refused before anything runs, one failing
cell does not stop the others, the summary and exit code tell the truth, every cell is a
child of one parent run in MLflow, and a relaunch runs only what has not FINISHED."""
from __future__ import annotations

import os
import re
import sys
import subprocess
import time
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from mlflow.tracking import MlflowClient

from fibexp import sweep
from fibexp.config import identity
from helpers.cli import refused
from helpers.sweeps import CONF, REPO, SWEEPS, expand, value, write_sweep

VARIANTS = ["fib_fixed", "fib_learned", "fib_stagger", "fib_coprime", "pow2_stagger"]
CRASH = "[{_target_:fibexp.training.faults.Crash,at_step:2}]"


def test_table1_expands_to_its_22_cells():
    cells, composed = expand("table1", ["scale=smoke"])
    assert len(cells) == 22
    got = {(value(c, "attention"), value(c, "attention.window")) for c in cells}
    expected = {(v, str(w)) for v in VARIANTS for w in (6, 8, 10, 12)} | {("pow2_fixed", "8"), ("dense", None)}
    assert got == expected
    assert all(value(c, "scale") == "smoke" for c in cells)
    # Every cell is a different experiment: distinct run names and config hashes.
    assert len({identity.config_hash(cfg) for cfg in composed}) == 22
    assert len({identity.run_name(cfg) for cfg in composed}) == 22
    assert {identity.cell(cfg) for cfg in composed} >= {"dense", "sparse/pow2/fixed/W8", "sparse/fib/learned/W12"}


@pytest.mark.parametrize("name, n", [("seeds", 15), ("hypercube", 147), ("main", 15)])
def test_other_sweeps_expand(name, n):
    cells, _ = expand(name, ["scale=smoke"], compose_cells=False)
    assert len(cells) == n and len({tuple(c) for c in cells}) == n


def distinct_models(cells: list[list[str]]) -> list[list[str]]:
    """One cell per model variant (seed and learning rate dropped): what can fail validation."""
    out = {}
    for c in cells:
        out.setdefault(tuple(o for o in c if o.split("=")[0] not in ("seed", "optim.lr")), c)
    return list(out.values())


@pytest.mark.parametrize("name", ["main", "table1", "seeds", "hypercube", "hypercube_w64", "hierarchy", "dynamics",
                                  pytest.param("reproduce", marks=pytest.mark.slow)])
def test_every_cell_of_a_sweep_validates_at_its_default_scale(name):
    """The documented command `fibexp-train -m --config-dir sweeps --config-name NAME` must not
    be refused by the sweeper's own check of every cell."""
    cells, composed = expand(name, ["paths.root=."], compose_cells=False)
    with initialize_config_dir(str(SWEEPS), version_base="1.3"):
        loader = GlobalHydra.instance().config_loader()
        master = compose(name, overrides=[f"hydra.searchpath=[file://{CONF}]", "paths.root=."],
                         return_hydra_config=True)
        HydraConfig.instance().set_config(master)
        sweep.composed_and_checked(distinct_models(cells), master, loader)  # a Refusal fails the test


def test_command_line_overrides_apply_to_every_cell_and_win_over_the_grid():
    cells, composed = expand("table1", ["scale=smoke", "seed=7", "attention.window=16"])
    # The window grid collapses: one cell per variant (W16), pow2_fixed W16, dense.
    assert len(cells) == 7
    assert all(value(c, "seed") == "7" and value(c, "attention.window") == "16" for c in cells)
    assert {value(c, "attention") for c in cells} == {*VARIANTS, "pow2_fixed", "dense"}
    for cfg in composed:
        assert cfg.seed == 7 and cfg.trainer.max_steps == 8  # smoke
        if cfg.attention.kind.value == "sparse":
            assert cfg.attention.window == 16
    seeds, _ = expand("seeds", ["scale=smoke", "seed=7"], compose_cells=False)
    assert len(seeds) == 5 and all(value(c, "seed") == "7" for c in seeds)


def runs(out: Path) -> tuple[MlflowClient, list]:
    db = out / "mlflow.db"
    if not db.exists():
        return None, []
    client = MlflowClient(f"sqlite:///{db}")
    exp = client.get_experiment_by_name("fibexp")
    return client, ([] if exp is None else client.search_runs([exp.experiment_id]))


def test_a_bad_cell_is_refused_before_any_job_runs(tmp_path, cache_dir, monkeypatch, capsys):
    out = tmp_path / "outputs"
    err = refused(["-m", "--config-dir", str(SWEEPS), "--config-name", "main", "scale=smoke", f"paths.output_dir={out}",
                   f"paths.cache_dir={cache_dir / 'never'}", "attention.window=-1"], monkeypatch, capsys)
    assert "attention.window" in err
    assert not (cache_dir / "never").exists()
    assert runs(out)[1] == []  # no parent run, no child run (not even a store)


def isolation_sweep(directory: Path, crash: bool) -> None:
    """A small sweep of our own: two cells that train, one that raises at step 2."""
    failing = f"\n        trainer.callbacks: '{CRASH}'" if crash else ""
    write_sweep(directory, "isolation", f"      - attention: dense,fib_fixed\n      - attention: fib_stagger{failing}\n")


SUMMARY = re.compile(r"^Sweep (isolation-[0-9a-f]{8}): (\d+) finished, (\d+) skipped, (\d+) failed$", re.M)


def summary(stdout: str) -> tuple[str, tuple[int, int, int], dict[str, tuple[str, str]]]:
    """(sweep id, (finished, skipped, failed), {run name: (status, run id)}) from the printout."""
    (m,) = SUMMARY.finditer(stdout)
    lines = {}
    for line in stdout[m.end():].splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[0] in ("finished", "skipped", "failed", "duplicate"):
            lines[parts[1]] = (parts[0], parts[2])
    return m.group(1), tuple(int(g) for g in m.groups()[1:]), lines


@pytest.mark.slow
def test_failure_isolation_summary_parent_run_and_relaunch(tmp_path, cache_dir):
    sweeps, out = tmp_path / "sweeps", tmp_path / "outputs"
    sweeps.mkdir()
    isolation_sweep(sweeps, crash=True)

    def launch():
        cmd = [sys.executable, "-m", "fibexp.cli.train", "-m", "--config-dir", str(sweeps), "--config-name", "isolation",
               f"paths.output_dir={out}", f"paths.cache_dir={cache_dir}", "trainer.threads=1"]
        t = time.monotonic()
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=REPO,
                              env={**os.environ, "PYTHONUNBUFFERED": "1"})
        print(f"launch: {time.monotonic() - t:.1f} s, exit {proc.returncode}")
        return proc

    first = launch()
    assert first.returncode == 1, first.stderr[-3000:]
    sweep_id, counts, lines = summary(first.stdout)
    assert counts == (2, 0, 1), first.stdout
    assert {k: s for k, (s, _) in lines.items()} == {
        "dense-s42": "finished", "sparse-fib-fixed-W8-s42": "finished", "sparse-fib-stagger-W8-s42": "failed"}
    assert "1 cell(s) failed" in first.stderr
    assert "(RuntimeError: deliberate failure at step 2" in next(
        line for line in first.stdout.splitlines() if line.strip().startswith("failed")), "the summary says why"

    client, found = runs(out)
    parents = [r for r in found if r.data.tags.get("fibexp.sweep_parent") == "true"]
    children = [r for r in found if r not in parents]
    assert len(parents) == 1 and len(children) == 3
    parent = parents[0]
    assert parent.data.tags["fibexp.sweep"] == sweep_id and parent.info.status == "FAILED"
    assert (parent.data.tags["fibexp.finished"], parent.data.tags["fibexp.skipped"],
            parent.data.tags["fibexp.failed"]) == ("2", "0", "1")
    for r in children:
        assert r.data.tags["mlflow.parentRunId"] == parent.info.run_id
        assert r.data.tags["fibexp.sweep"] == sweep_id
        assert lines[r.info.run_name][1] == r.info.run_id  # the summary names the run
    status = {r.info.run_name: r.info.status for r in children}
    assert status == {"dense-s42": "FINISHED", "sparse-fib-fixed-W8-s42": "FINISHED",
                      "sparse-fib-stagger-W8-s42": "FAILED"}
    failed = next(r for r in children if r.info.status == "FAILED")
    traceback = Path(client.download_artifacts(failed.info.run_id, "traceback.txt", str(tmp_path)))
    assert "deliberate failure" in traceback.read_text()
    for r in children:
        if r.info.status == "FINISHED":
            assert {f"val/loss/{s}" for s in ("drama", "prose")} <= set(r.data.metrics)

    # The bug is fixed (the callback is not part of the cell's identity: same config hash):
    # the same command runs only the failed cell, under the same parent run.
    isolation_sweep(sweeps, crash=False)
    second = launch()
    assert second.returncode == 0, second.stderr[-3000:]
    sweep_id2, counts, lines = summary(second.stdout)
    assert sweep_id2 == sweep_id and counts == (1, 2, 0), second.stdout
    assert lines["dense-s42"][0] == lines["sparse-fib-fixed-W8-s42"][0] == "skipped"
    assert lines["sparse-fib-stagger-W8-s42"][0] == "finished"
    client, found = runs(out)
    assert len(found) == 5  # parent + 3 first-launch children + 1 new child
    (parent,) = [r for r in found if r.data.tags.get("fibexp.sweep_parent") == "true"]
    assert parent.info.status == "FINISHED" and parent.data.tags["fibexp.failed"] == "0"
    new = {r.info.run_id for r in found} - {r.info.run_id for r in children} - {parent.info.run_id}
    (new_run,) = [r for r in found if r.info.run_id in new]
    assert new_run.info.run_name == "sparse-fib-stagger-W8-s42" and new_run.info.status == "FINISHED"
    assert new_run.data.tags["mlflow.parentRunId"] == parent.info.run_id
    assert lines["sparse-fib-stagger-W8-s42"][1] == new_run.info.run_id
    # The parent names every cell's run and carries the sweep's report (all three cells, the
    # two skipped ones included, although they were run under the first launch).
    assert set(parent.data.tags["fibexp.runs"].split(",")) == {lines[n][1] for n in lines}
    assert "report.md" in {a.path for a in client.list_artifacts(parent.info.run_id)}
    md = Path(client.download_artifacts(parent.info.run_id, "report.md", str(tmp_path))).read_text()
    assert all(cell in md for cell in ("## Claims", "dense", "fib fixed", "fib stagger")), md[:2000]

    # Everything finished: a relaunch runs nothing and creates no run.
    third = launch()
    assert third.returncode == 0, third.stderr[-3000:]
    assert summary(third.stdout)[1] == (0, 3, 0), third.stdout
    assert len(runs(out)[1]) == 5
