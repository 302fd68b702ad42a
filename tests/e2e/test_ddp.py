"""Several processes per run (DDP, gloo on CPU): the ranks split the global batch of the one
stream, a 2-process run ends as one FINISHED MLflow run with every metric logged once and the
held-out metrics of a single-process run of the same global batch, a rank that dies ends the job
FAILED with its reason, and allocations that cannot run are refused in one line before any run."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch
from hydra import compose, initialize_config_dir

from fibexp.checks import rules
from fibexp.config import schema
from fibexp.data.datamodule import RandomWindows
from fibexp.tasks import registry as tasks
from fibexp.tasks.synthetic import SyntheticData
from helpers.cli import refused
from helpers.mlflow_runs import fibexp_runs

DDP = ["trainer.devices=2", "trainer.strategy=ddp", "trainer.accelerator=cpu", "data.batch_size=4", "eval.aux=false"]
SINGLE = ["trainer.devices=1", "trainer.accelerator=cpu", "data.batch_size=4", "eval.aux=false"]


def _stream(n_tokens: int, path: Path) -> tuple[Path, int]:
    np.arange(n_tokens, dtype=np.uint16).tofile(path)  # token i is i: a window names its start
    return path, n_tokens


def _batches(ds, n):
    return [b for _, b in zip(range(n), iter(ds))]


def test_ranks_read_disjoint_shares_whose_union_is_the_single_process_stream(tmp_path):
    shards = [[_stream(5000, tmp_path / "a.bin"), _stream(3000, tmp_path / "b.bin")], [_stream(4000, tmp_path / "c.bin")]]
    args = (shards, [0.6, 0.4], 16, 8, 7)
    single = _batches(RandomWindows(*args, offset=3), 5)
    for world in (2, 4):
        per_rank = [_batches(RandomWindows(*args, offset=3, rank=r, world=world), 5) for r in range(world)]
        for step in range(5):
            xs = [per_rank[r][step][0] for r in range(world)]
            assert all(x.shape == (8 // world, 16) for x in xs)
            assert torch.equal(torch.cat(xs), single[step][0])  # the union, in order, is the same batch
            assert torch.equal(torch.cat([per_rank[r][step][1] for r in range(world)]), single[step][1])
    def rows(**kw):
        return Counter(tuple(x.tolist()) for b in _batches(RandomWindows(*args, **kw), 20) for x in b[0])

    halves = [rows(rank=r, world=2) for r in range(2)]
    assert halves[0] + halves[1] == rows() and sum(halves[0].values()) == 80  # each row read once, by one rank
    assert halves[0] != halves[1]
    with pytest.raises(ValueError, match="does not split over 3 ranks"):
        RandomWindows(*args, world=3)


def test_synthetic_task_ranks_split_the_same_stream():
    with initialize_config_dir(schema.CONF_DIR, version_base="1.3"):
        cfg = compose("train", overrides=["task=count_ones", "attention=hypercube", "model.seq_len=16",
                                          "model.n_layers=4", "task.heldout_examples=2048", "paths.root=."])
    rules.validate(cfg)
    dm = SyntheticData(tasks.build(cfg), batch_size=8, seed=5)
    single = _batches(dm.stream(offset=2), 4)
    halves = [_batches(dm.stream(offset=2, rank=r, world=2), 4) for r in range(2)]
    for step in range(4):
        for k in single[step]:
            assert torch.equal(torch.cat([halves[0][step][k], halves[1][step][k]]), single[step][k])
    assert not torch.equal(halves[0][0]["x"], halves[1][0]["x"])


SLURM_ONE_TASK = {"SLURM_JOB_ID": "77", "SLURM_JOB_NAME": "fibexp", "SLURM_NTASKS": "1", "SLURM_NTASKS_PER_NODE": "1",
                  "SLURM_NNODES": "1", "SLURM_PROCID": "0", "SLURM_LOCALID": "0", "SLURM_NODEID": "0"}


@pytest.mark.parametrize("overrides, env, expected", [
    (["trainer.strategy=ddp"], {},
     "trainer.strategy: ddp; allowed: auto with a single device (ddp needs trainer.devices >= 2 or trainer.num_nodes >= 2)"),
    (["trainer.num_nodes=2", "trainer.devices=1"], {},
     "trainer.num_nodes: 2; allowed: 1 outside a SLURM job (several nodes: hydra/launcher=slurm with -m, or srun "
     "inside an allocation)"),
    (["trainer.devices=2", "data.batch_size=3"], {},
     "data.batch_size: 3; allowed: a multiple of trainer.devices x trainer.num_nodes = 2 (the global batch, split "
     "evenly over the ranks)"),
    (["trainer.devices=2", "trainer.strategy=ddp_spawn"], {}, "trainer.strategy: ddp_spawn; allowed: auto, ddp, "),
    (["trainer.devices=2"], SLURM_ONE_TASK,
     "trainer.devices: 2; allowed: 1 in this SLURM job (SLURM_NTASKS_PER_NODE=1: one task per device, on every node)"),
    (["trainer.devices=1", "trainer.num_nodes=2", "data.batch_size=2"], SLURM_ONE_TASK,
     "trainer.num_nodes: 2; allowed: 1 in this SLURM job (SLURM_NNODES=1: one task per device, on every node)"),
])
def test_mismatched_allocations_are_refused_before_anything_exists(overrides, env, expected, tiny, tmp_path,
                                                                  monkeypatch, capsys):
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    out = tmp_path / "outputs"
    err = refused([*tiny, "trainer.accelerator=cpu", f"paths.output_dir={out}", f"paths.cache_dir={tmp_path / 'never'}",
                   *overrides], monkeypatch, capsys)
    assert err.startswith(f"fibexp-train: error: {expected}"), err
    assert not out.exists() and not (tmp_path / "never").exists()


def test_a_slurm_cell_whose_tasks_differ_from_its_devices_is_refused_before_submission(tiny, tmp_path, monkeypatch,
                                                                                     capsys):
    out = tmp_path / "outputs"
    err = refused(["-m", *tiny, "trainer.accelerator=cpu", f"paths.output_dir={out}", "hydra/launcher=slurm",
                   "trainer.devices=2", "data.batch_size=4", "hydra.launcher.tasks_per_node=1"], monkeypatch, capsys)
    assert err.startswith("fibexp-train: error: hydra.launcher.tasks_per_node: 1; allowed: 2 = trainer.devices"), err
    assert not out.exists()


def _launch(out: Path, cache_dir: Path, tiny, *overrides: str, env=None) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "fibexp.cli.train", *tiny, f"paths.output_dir={out}", f"paths.cache_dir={cache_dir}",
           *overrides]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})})


def _finish(proc: subprocess.Popen, timeout=600) -> tuple[int, str]:
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out + err


@pytest.mark.slow
def test_two_ranks_end_as_one_run_with_the_single_process_heldout_metrics(tmp_path, cache_dir, tiny):
    ddp_proc = _launch(tmp_path / "ddp", cache_dir, tiny, *DDP)
    one_proc = _launch(tmp_path / "one", cache_dir, tiny, *SINGLE)
    (code, said), (code1, said1) = _finish(ddp_proc), _finish(one_proc)
    assert code == 0, said[-4000:]
    assert code1 == 0, said1[-4000:]
    client, (run,) = fibexp_runs(tmp_path / "ddp")  # one run, not one per rank
    _, (single,) = fibexp_runs(tmp_path / "one")
    assert run.info.status == "FINISHED"
    assert run.data.params["trainer.devices"] == "2"
    for name in ("train/loss", "val/ppl/drama", "extrap/ppl_x4/prose", "perf/step_ms"):
        history = client.get_metric_history(run.info.run_id, name)
        steps = [h.step for h in history]
        assert len(steps) == len(set(steps)), (name, steps)  # logged once per step: by rank 0 alone
    assert sorted(h.step for h in client.get_metric_history(run.info.run_id, "train/loss")) == list(range(6))
    (run_dir,) = (tmp_path / "ddp" / "runs").iterdir()  # one run dir
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["last.ckpt", "previous.ckpt"]
    heldout = [k for k in single.data.metrics if k.startswith(("val/ppl/", "val/loss/", "extrap/", "val/pos_loss/"))]
    assert len(heldout) > 20 and set(heldout) <= set(run.data.metrics)
    for k in heldout:  # same global batch, same stream: the same model up to float summation order
        assert run.data.metrics[k] == pytest.approx(single.data.metrics[k], rel=1e-4, abs=1e-6), k
    assert run.data.metrics["train/loss"] == pytest.approx(single.data.metrics["train/loss"], rel=1e-4)
    assert "fibexp_preflight" not in said and "Could not append" not in said


@pytest.mark.slow
@pytest.mark.parametrize("fault, reason", [
    ("Crash,at_step:2,rank:1", "rank 1 of 2 failed: RuntimeError: deliberate failure at step 2"),
    ("Preempt,at_step:3,rank:1", "rank 1 of 2 died (SIGKILL)"),
])
def test_a_rank_that_dies_ends_the_job_failed_with_its_reason(fault, reason, tmp_path, cache_dir, tiny):
    out = tmp_path / "outputs"
    t0 = time.monotonic()
    code, said = _finish(_launch(out, cache_dir, tiny, *DDP,
                                 f"+trainer.callbacks=[{{_target_:fibexp.training.faults.{fault}}}]"), timeout=300)
    took = time.monotonic() - t0
    assert code != 0, said[-3000:]
    client, (run,) = fibexp_runs(out)
    assert run.info.status == "FAILED"
    assert run.data.tags["fibexp.failure"].startswith(reason), run.data.tags["fibexp.failure"]
    lasted = (run.info.end_time - run.info.start_time) / 1000
    assert lasted < 120, (lasted, took)  # rank 0 saw the dead rank; no collective timed out (trainer.collective_timeout_s)
    if "Preempt" in fault:  # the same command again (the requeue): the same run, on from the checkpoint
        code, said = _finish(_launch(out, cache_dir, tiny, *DDP))
        assert code == 0, said[-3000:]
        runs = fibexp_runs(out)[1]
        assert len(runs) == 1, ([(r.info.run_id, r.info.status) for r in runs], said[-3000:])
        (again,) = runs
        assert again.info.run_id == run.info.run_id and again.info.status == "FINISHED"
        steps = sorted(h.step for h in client.get_metric_history(run.info.run_id, "train/loss"))
        assert set(steps) == set(range(6)) and steps.count(0) == 1, steps  # resumed from the checkpoint, not step 0


@pytest.mark.slow
def test_a_rank_that_hangs_ends_the_job_at_the_collective_timeout(tmp_path, cache_dir, tiny):
    """A hung rank (alive, no progress) is not seen dying: rank 0 waits in its next collective
    for `trainer.collective_timeout_s`, then the run is FAILED with the collective's reason."""
    out = tmp_path / "outputs"
    code, said = _finish(_launch(out, cache_dir, tiny, *DDP, "trainer.collective_timeout_s=8",
                                 "+trainer.callbacks=[{_target_:fibexp.training.faults.Hang,at_step:2,rank:1}]"),
                         timeout=300)
    assert code != 0, said[-3000:]
    _, (run,) = fibexp_runs(out)
    assert run.info.status == "FAILED"
    lasted = (run.info.end_time - run.info.start_time) / 1000
    assert 8 <= lasted < 90, (lasted, run.data.tags.get("fibexp.failure"))
    assert "time" in run.data.tags["fibexp.failure"].lower(), run.data.tags["fibexp.failure"]


@pytest.mark.slow
def test_sigterm_to_rank_0_stops_every_rank_and_the_same_command_resumes(tmp_path, cache_dir, tiny):
    """A scheduler's SIGTERM to the job's first process (rank 0) ends the whole job: rank 0 stops
    at its step's end (Lightning's SIGTERMException) before it would broadcast the signal, and
    ends the ranks it started; the run is KILLED (not FAILED), no rank outlives the job, and the
    same command resumes it into the same run and step."""
    out = tmp_path / "outputs"
    code, said = _finish(_launch(out, cache_dir, tiny, *DDP, "+trainer.callbacks=[{_target_:fibexp.training.faults"
                                 ".Sleep,seconds:0.3},{_target_:fibexp.training.faults.Signal,at_step:4,rank:0}]"),
                         timeout=300)
    assert code == 128 + 15, said[-3000:]
    client, (run,) = fibexp_runs(out)
    assert run.info.status == "KILLED" and "fibexp.failure" not in run.data.tags, run.data.tags.get("fibexp.failure")
    left = subprocess.run(["pgrep", "-f", f"fibexp.cli.rank {run.data.tags['fibexp.run_dir']}"],
                          capture_output=True, text=True).stdout.split()
    assert not left, left
    code, said = _finish(_launch(out, cache_dir, tiny, *DDP))
    assert code == 0, said[-3000:]
    _, (again,) = fibexp_runs(out)
    assert again.info.run_id == run.info.run_id and again.info.status == "FINISHED"
    steps = sorted(h.step for h in client.get_metric_history(run.info.run_id, "train/loss"))
    assert set(steps) == set(range(6)), steps


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_two_nodes_under_slurm_train_one_run(tmp_path, cache_dir, tiny):
    """`trainer.num_nodes=2` as srun starts it on a two-node allocation (one task per node), played
    by two processes on this machine with the environment SLURM gives each task."""
    out, port = tmp_path / "outputs", str(_free_port())
    allocation = {"SLURM_JOB_ID": "4242", "SLURM_JOB_NAME": "fibexp", "SLURM_NTASKS": "2", "SLURM_NTASKS_PER_NODE": "1",
                  "SLURM_NNODES": "2", "SLURM_JOB_NUM_NODES": "2", "SLURM_NODELIST": "localhost", "SLURM_LOCALID": "0",
                  "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port}
    procs = [_launch(out, cache_dir, tiny, "trainer.num_nodes=2", "trainer.devices=1", "trainer.accelerator=cpu",
                     "data.batch_size=4", "eval.aux=false",
                     env={**allocation, "SLURM_PROCID": str(r), "SLURM_NODEID": str(r), "SLURM_STEP_ID": "0"})
             for r in range(2)]
    results = [_finish(p) for p in procs]
    for code, said in results:
        assert code == 0, said[-4000:]
    client, (run,) = fibexp_runs(out)  # one run: node 0's rank 0 alone opened it
    assert run.info.status == "FINISHED" and run.data.params["trainer.num_nodes"] == "2"
    steps = [h.step for h in client.get_metric_history(run.info.run_id, "train/loss")]
    assert sorted(steps) == list(range(6))
    (run_dir,) = (out / "runs").iterdir()
    assert (run_dir / "checkpoints" / "last.ckpt").is_file()


@pytest.mark.slow
def test_a_multirun_cell_trains_on_two_ranks_and_the_next_cell_starts_clean(tmp_path, cache_dir, tiny):
    """Hydra's local launcher runs cells in one process: a 2-rank cell, then a 1-process cell of the
    same identity (the device count is not part of it), which finds the run FINISHED and says so:
    one run, evaluated once, nothing left RUNNING."""
    out = tmp_path / "outputs"
    proc = subprocess.run([sys.executable, "-m", "fibexp.cli.train", "-m", *tiny, f"paths.output_dir={out}",
                           f"paths.cache_dir={cache_dir}", "trainer.accelerator=cpu", "data.batch_size=4",
                           "eval.aux=false", "trainer.devices=2,1", "hydra/sweeper=basic"],  # Hydra's own: both cells run
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    said = proc.stderr + proc.stdout
    assert said.count("finished: val/ppl") == 1
    client, (run,) = fibexp_runs(out)
    assert said.count(f"is already FINISHED ({run.info.run_id}): val/ppl") == 1
    assert run.info.status == "FINISHED"
    assert len(client.get_metric_history(run.info.run_id, "val/ppl/drama")) == 1
    assert sorted(h.step for h in client.get_metric_history(run.info.run_id, "train/loss")) == list(range(6))


@pytest.mark.slow
def test_a_two_rank_cell_under_the_submitit_local_launcher_ends_as_one_run(tmp_path, cache_dir, tiny):
    """hydra/launcher=cores (submitit's local executor: each cell a child process, as `make run`
    starts them): the cell's process is rank 0 and starts rank 1 itself; one FINISHED run, every
    step logged once, one run dir and checkpoint."""
    out = tmp_path / "outputs"
    proc = subprocess.run([sys.executable, "-m", "fibexp.cli.train", "-m", *tiny, f"paths.output_dir={out}",
                           f"paths.cache_dir={cache_dir}", "hydra/launcher=cores", "hydra.launcher.cpus_per_task=1",
                           *DDP], capture_output=True, text=True, timeout=600, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    client, runs = fibexp_runs(out)
    (run,) = [r for r in runs if "fibexp.cell" in r.data.tags]  # the cell, beside its sweep's parent
    assert run.info.status == "FINISHED" and run.data.params["trainer.devices"] == "2"
    assert sorted(h.step for h in client.get_metric_history(run.info.run_id, "train/loss")) == list(range(6))
    entries = sorted(d.name for d in (out / "runs").iterdir())
    run_dirs = [d for d in (out / "runs").iterdir() if (d / "mlflow_run.json").is_file()]
    assert len(run_dirs) == 1, entries  # one run dir beside the sweep's own files
    assert (run_dirs[0] / "checkpoints" / "last.ckpt").is_file(), entries
