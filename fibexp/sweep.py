"""Sweep semantics, owned by the submitting process (before any job starts):
every cell is composed and validated; the MLflow store, experiment and a parent run exist;
cells that already FINISHED with the same resolved config (hash) are skipped; the rest are
launched (basic, submitit_local or submitit_slurm) and one failing cell does not stop the
others; a summary ends the sweep, non-zero if any cell failed. MLflow is the record of what
finished, so the summary is right even when a launcher loses track of a job."""
from __future__ import annotations

import hashlib
import logging
import sys
from pathlib import Path

from hydra.core.hydra_config import HydraConfig
from omegaconf import OmegaConf

from fibexp.report import render as report
from fibexp.config import cells as sweep_cells, identity
from fibexp.data.prepare import data_key, prepare
from fibexp.errors import JobDied, Refusal, first_line
from fibexp.tasks import spec as tasks
from fibexp.tracking import store
from fibexp.training import preflight

log = logging.getLogger("fibexp.sweep")


def _check(cell: list[str], cfg) -> None:
    """A cell's config must pass the validation pass of `fibexp-train` (its model built on the meta
    device: no memory, no compute; ${hydra:...} resolved per cell, as run_job does); the machine is
    not checked, the jobs may run elsewhere. A refusal names the cell and ends the sweep in one line
    before any job starts."""
    try:
        preflight.preflight(cfg, machine=False)
    except Refusal as e:
        raise Refusal.of(ValueError(f"{e} [cell: {' '.join(cell)}]")) from None


def _prepare_data(cells, composed) -> None:
    """Tokenize each distinct corpus once, here, before any job starts: otherwise every job of
    the sweep would prepare the same data at the same time (a file lock would make them wait)."""
    done = set()
    for cell, cfg in zip(cells, composed):
        if not tasks.get(cfg.task.name).uses_corpus or (key := data_key(cfg)) in done:
            continue
        done.add(key)
        HydraConfig.instance().set_config(cfg)
        try:
            prepare(cfg)
        except ValueError as e:
            raise Refusal.of(ValueError(f"{first_line(e)} [cell: {' '.join(cell)}]")) from None


def run_sweep(cells: list[list[str]], sweep_cfg, config_loader, launcher, max_batch_size=None):
    composed = sweep_cells.compose(sweep_cfg, cells, config_loader)  # = load_sweep_config per cell, faster
    for cell, cfg in zip(cells, composed):
        _check(cell, cfg)
    first = composed[0]
    uri = store.resolve_uri(first.logger.tracking_uri, Path(first.paths.output_dir))
    try:  # an unreachable store is refused before any data is prepared
        experiment_id = store.ensure_experiment(uri, first.logger.experiment, Path(first.paths.output_dir) / "mlartifacts")
    except store.TrackingError as e:
        raise Refusal.of(e) from None
    _prepare_data(cells, composed)
    hashes = [identity.config_hash(cfg) for cfg in composed]
    client = store.MlflowClient(uri)
    name = sweep_cfg.hydra.job.config_name
    sweep_id = f"{name}-{hashlib.sha256(' '.join(sorted(set(hashes))).encode()).hexdigest()[:8]}"
    parent = _parent_run(client, experiment_id, sweep_id, cells)

    todo, outcome, unique = [], {}, {}
    for cell, cfg, h in zip(cells, composed, hashes):
        if h in unique:
            outcome[tuple(cell)] = ("duplicate", unique[h])
            continue
        unique[h] = identity.run_name(cfg)
        done = store.find_runs(client, experiment_id, h, "FINISHED")
        if done:
            outcome[tuple(cell)] = ("skipped", done[0].info.run_id)
            log.info("skip %s: already FINISHED with the same config (run %s)", identity.run_name(cfg), done[0].info.run_id)
        else:
            todo.append((cell, cfg, h))
    log.info("sweep %s: %d cells, %d to run, %d already finished (parent run %s, %s)", sweep_id, len(cells),
             len(todo), len(cells) - len(todo), parent, uri)

    jobs = [cell + [f"sweep.id={sweep_id}", f"sweep.parent_run_id={parent}"] + _threads(sweep_cfg, cfg)
            for cell, cfg, _ in todo]
    batch = max_batch_size or len(jobs) or 1
    died: dict[int, JobDied] = {}
    for start in range(0, len(jobs), batch):
        try:
            returns = launcher.launch(jobs[start:start + batch], initial_job_idx=start)
        except Exception as e:  # a launcher without per-job outcomes: MLflow decides below
            log.error("launcher: %s: %s", type(e).__name__, str(e).splitlines()[0] if str(e) else "")
            returns = []
        died.update({start + i: r._return_value for i, r in enumerate(returns)
                     if isinstance(getattr(r, "_return_value", None), JobDied)})
    for i, (cell, cfg, h) in enumerate(todo):
        done = store.find_runs(client, experiment_id, h, "FINISHED")
        outcome[tuple(cell)] = ("finished", done[0].info.run_id) if done else \
            ("failed", _record_failure(client, experiment_id, h, died.get(i)))
    return _summarise(client, experiment_id, parent, sweep_id, cells, composed, outcome)


def _record_failure(client, experiment_id: str, h: str, died: JobDied | None) -> str | None:
    """The cell's job has ended without finishing it: a run its process left RUNNING (killed,
    out of memory, node lost) becomes FAILED with the scheduler's reason, so no run outlives
    its sweep as RUNNING and a relaunch reruns exactly this cell."""
    run_id = _last_run(client, experiment_id, h)
    if died is not None:
        log.error("cell %s: %s", h, died)
    if run_id and client.get_run(run_id).info.status == "RUNNING":
        reason = str(died) if died else "its job ended and left the run RUNNING"
        client.set_tag(run_id, "fibexp.failure", reason[:5000])
        client.log_text(run_id, reason + "\n", "failure.txt")
        client.set_terminated(run_id, "FAILED")
    return run_id


def _parent_run(client, experiment_id: str, sweep_id: str, cells) -> str:
    """One parent run per sweep definition, reused when the same sweep is launched again."""
    found = client.search_runs([experiment_id], f"tags.`fibexp.sweep` = '{sweep_id}' and tags.`fibexp.sweep_parent` = 'true'")
    if found:
        client.update_run(found[0].info.run_id, status="RUNNING")
        return found[0].info.run_id
    run = client.create_run(experiment_id, run_name=f"sweep-{sweep_id}",
                            tags={"fibexp.sweep": sweep_id, "fibexp.sweep_parent": "true"})
    client.log_text(run.info.run_id, OmegaConf.to_yaml({"cells": [" ".join(c) for c in cells]}), "sweep.yaml")
    return run.info.run_id


def _threads(sweep_cfg, cfg) -> list[str]:
    """Parallel launchers start many jobs on one machine or node: bound each job's threads."""
    if cfg.trainer.threads or "BasicLauncher" in sweep_cfg.hydra.launcher._target_:
        return []
    return [f"trainer.threads={sweep_cfg.hydra.launcher.get('cpus_per_task') or 1}"]


def _last_run(client, experiment_id: str, h: str) -> str | None:
    runs = store.find_runs(client, experiment_id, h)
    return runs[0].info.run_id if runs else None


def _failure(client, run_id: str | None) -> str:
    """Why a cell failed, in the summary line: the run's fibexp.failure tag (exception or scheduler reason)."""
    reason = client.get_run(run_id).data.tags.get("fibexp.failure", "") if run_id else ""
    return f"  ({reason.splitlines()[0][:200]})" if reason else ""


def _summarise(client, experiment_id: str, parent: str, sweep_id: str, cells, composed, outcome) -> dict:
    counts = {"finished": 0, "skipped": 0, "failed": 0, "duplicate": 0}
    lines = []
    for cell, cfg in zip(cells, composed):
        status, run_id = outcome[tuple(cell)]
        counts[status] += 1
        why = _failure(client, run_id) if status == "failed" else ""
        lines.append(f"  {status:<9} {identity.run_name(cfg):<32} {run_id or '-'}{why}")
    print(f"\nSweep {sweep_id}: " + ", ".join(f"{v} {k}" for k, v in counts.items() if v or k != "duplicate"))
    print("\n".join(lines))
    for k, v in counts.items():
        client.set_tag(parent, f"fibexp.{k}", str(v))
    run_ids = [run_id for status, run_id in outcome.values() if status != "duplicate" and run_id]
    client.set_tag(parent, "fibexp.runs", ",".join(run_ids))  # skipped cells carry another sweep's tag
    try:
        attached = report.attach_to_parent(client, experiment_id, sweep_id, parent, run_ids)
        print(f"Report of sweep {sweep_id}: {', '.join(attached)} attached to its parent run {parent}")
    except Exception as e:  # a finished sweep is not failed by its report
        log.error("report of sweep %s not attached: %s: %s", sweep_id, type(e).__name__, e)
    client.set_terminated(parent, "FAILED" if counts["failed"] else "FINISHED")
    if counts["failed"]:
        print(f"{counts['failed']} cell(s) failed: their MLflow runs hold the reason (tag fibexp.failure, "
              "traceback.txt or failure.txt)", file=sys.stderr)
        sys.exit(1)
    return counts
