"""One run (or one Hydra multirun cell) from the composed config: `fibexp-train`'s work.

Order matters: every check that can refuse the run (config values, checkpoint, tracking
store, corpus) happens before data is built, a run is created or a step is taken: they make
the `Run` (fibexp.training.inputs) that everything after them reads."""
from __future__ import annotations

import contextlib
import json
import logging
import math
import signal
import sys
import time
import traceback
from datetime import timedelta
from pathlib import Path

import lightning.pytorch as pl
import torch
from hydra.core.hydra_config import HydraConfig
from hydra.utils import instantiate
from lightning.pytorch.callbacks import ModelCheckpoint, ProgressBar
from lightning.pytorch.loggers import MLFlowLogger
from lightning.pytorch.overrides.distributed import UnrepeatedDistributedSampler
from lightning.pytorch.plugins.environments import SLURMEnvironment
from lightning.pytorch.strategies import DDPStrategy
from mlflow.entities import Metric
from mlflow.exceptions import MlflowException
from omegaconf import DictConfig, OmegaConf
from torch.utils.data import DataLoader

from fibexp import plots
from fibexp.config import identity
from fibexp.errors import Refusal
from fibexp.tasks import registry as tasks
from fibexp.tracking import journal, store
from fibexp.tracking.datasets import log_data_inputs, log_task_input
from fibexp.training import checkpoints, ddp, interrupts, lock, logs
from fibexp.training.inputs import UNSET, Run, check_inputs
from fibexp.training.lit import LitLM, stop_on_sigterm

log = logging.getLogger("fibexp.train")

class RunLogger(MLFlowLogger):
    """Lightning ends the MLflow run when fit() returns, and marks it failed on any exception,
    a SLURM requeue's SIGTERM included. `run` owns the run's end instead: FINISHED only with
    the full metric contract after the evaluation, KILLED when stopped to be resumed."""

    def __init__(self, *args, client=None, **kwargs):
        """`client`: the run's own (journaled for a server, see fibexp.tracking.journal), so that training
        metrics survive an outage too; with the run id known, no lookup at the first log."""
        super().__init__(*args, **kwargs)
        if client is not None:
            self._mlflow_client = client
            self._initialized = self._run_id is not None

    def finalize(self, status: str = "success") -> None:
        pass


def datamodule(cfg: DictConfig, corpus=None):
    """The LightningDataModule of a run (the corpus only for tasks that read one)."""
    return tasks.build(cfg).datamodule(corpus)


def open_run(run: Run, client, fingerprint: str) -> str:
    """The MLflow run of this run dir: continued when resuming (the id is kept beside the
    checkpoints), else created with the contract's tags, flat params and resolved config.

    A run dir whose recorded run is not in the current store (the user switched
    MLFLOW_TRACKING_URI or logger.tracking_uri, or deleted the run) resumes from its checkpoint as
    a NEW run in the current store, tagged `fibexp.resumed_from=<old store>#<old run id>`, with one
    warning naming both. Continuing beats refusing: the checkpoint holds the whole training state,
    and the old store may be unreachable for good, so waiting on it would strand the run. The old
    run is never written to; the new run's metric history starts at the checkpoint's step."""
    cfg, run_dir, ckpt, experiment_id = run.cfg, run.dir, run.ckpt, run.experiment_id
    record = run_dir / "mlflow_run.json"
    resumed_from = None
    if ckpt and record.exists():
        recorded = json.loads(record.read_text())
        run_id, old_uri = recorded["run_id"], recorded.get("tracking_uri", "an unrecorded store")
        if _run_in_store(client, run_id, experiment_id):
            client.update_run(run_id, status="RUNNING")
            if old_uri != client.tracking_uri:  # the same store under another URI: note the working one
                record.write_text(json.dumps({"run_id": run_id, "tracking_uri": client.tracking_uri}))
            return run_id
        resumed_from = f"{old_uri}#{run_id}"
        log.warning("run dir %s: its run %s of store %s is not a live run of experiment %s in store %s; resuming "
                    "from %s as a new run there, tagged fibexp.resumed_from", run_dir, run_id, old_uri,
                    cfg.logger.experiment, client.tracking_uri, ckpt)
    if not resumed_from:
        why = (f"no readable checkpoint in {run_dir / 'checkpoints'}" if record.exists()
               else f"{record} is gone (the run dir was deleted or moved)")
        end_orphans(client, experiment_id, run.config_hash, run_dir, why)
    tags = {"fibexp.cell": run.cell, "fibexp.task": cfg.task.name, "fibexp.corpus": fingerprint,
            "fibexp.git_sha": store.git_sha(Path(cfg.paths.root)), "fibexp.eval_version": identity.EVAL_VERSION,
            "fibexp.config_hash": run.config_hash, "fibexp.run_dir": str(run_dir)}
    if resumed_from:
        tags["fibexp.resumed_from"] = resumed_from
    if cfg.sweep.id:
        tags.update({"fibexp.sweep": cfg.sweep.id, "mlflow.parentRunId": cfg.sweep.parent_run_id})
    tags.update(store.ui_tags(run.cell, cfg.trainer.max_steps, fingerprint, cfg.seed, cfg.task.name,
                                 bool(cfg.sweep.id)))
    run_id = client.create_run(experiment_id, run_name=run.name, tags=tags).info.run_id
    resolved = OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)
    resolved["model"].pop("attention")
    store.log_params(client, run_id, {**store.flatten(resolved), "model.n_params": str(run.model.n_params())})
    client.log_text(run_id, OmegaConf.to_yaml(resolved), "config.yaml")
    record.parent.mkdir(parents=True, exist_ok=True)
    record.write_text(json.dumps({"run_id": run_id, "tracking_uri": client.tracking_uri}))
    return run_id


def end_orphans(client, experiment_id: str, config_hash: str, run_dir: Path, why: str) -> list[str]:
    """End as FAILED, tagged `fibexp.failure` with `why`, the runs of this run dir that a new run is
    about to replace: still RUNNING (its process died) or KILLED (stopped to be resumed), but no
    longer resumable. Left open, they would show as running, or as waiting for a resume, forever.
    The run dir's lock is held: no live process is training any of them."""
    found = client.search_runs([experiment_id], f"tags.`fibexp.config_hash` = '{config_hash}'")
    ended = []
    for old in found:
        if old.data.tags.get("fibexp.run_dir") == str(run_dir) and old.info.status in ("RUNNING", "KILLED"):
            client.set_tag(old.info.run_id, "fibexp.failure", f"cannot be resumed: {why}")
            client.set_terminated(old.info.run_id, "FAILED")
            log.warning("run %s (%s) cannot be resumed: %s; it is now FAILED, and this run starts over as a new "
                        "run", old.info.run_id, old.info.status, why)
            ended.append(old.info.run_id)
    return ended


def _run_in_store(client, run_id: str, experiment_id: str) -> bool:
    """Whether `run_id` is a live run of this experiment in the client's store."""
    try:
        found = client.get_run(run_id)
    except MlflowException as e:
        if e.error_code == "RESOURCE_DOES_NOT_EXIST":
            return False
        raise
    return found.info.lifecycle_stage == "active" and found.info.experiment_id == experiment_id


def build_trainer(cfg: DictConfig, run_dir: Path, model_ident: dict, logger, own: list = (),
                  world: int = 1) -> pl.Trainer:
    """The Trainer of a run (the values its `Run` holds): checkpoints written with `model_ident`
    into the run dir, DDP across `world` processes. Under SLURM, submitit owns requeueing (it
    resubmits; we resume from last.ckpt), so Lightning's own SLURM auto-requeue is off."""
    t = cfg.trainer
    precision = t.precision or ("bf16-mixed" if torch.cuda.is_available() and t.accelerator != "cpu" else "32-true")
    every = ModelCheckpoint(dirpath=run_dir / "checkpoints", every_n_train_steps=t.checkpoint_every_n_steps,
                            save_last=True, save_top_k=0)
    extra = [instantiate(c) for c in t.callbacks]
    bar = [] if any(isinstance(c, ProgressBar) for c in extra) else [logs.progress_bar()]
    strategy = t.strategy
    if strategy in ("auto", "ddp", "ddp_find_unused_parameters_true") and world > 1:
        # a collective waiting for a rank that is gone raises after this long: the job ends
        strategy = DDPStrategy(timeout=timedelta(seconds=t.collective_timeout_s),
                               find_unused_parameters=strategy == "ddp_find_unused_parameters_true")
    return pl.Trainer(
        max_steps=t.max_steps, accelerator=t.accelerator, devices=t.devices, num_nodes=t.num_nodes,
        strategy=strategy, precision=precision, gradient_clip_val=cfg.optim.grad_clip, logger=logger,
        callbacks=[every, *own, *bar, *extra], log_every_n_steps=t.log_every_n_steps,
        default_root_dir=run_dir, val_check_interval=t.val_every_n_steps or None, check_val_every_n_epoch=None,
        limit_val_batches=1.0 if t.val_every_n_steps else 0, num_sanity_val_steps=0,
        plugins=[checkpoints.SafeCheckpointIO(model_ident),  # weights-only resume
                 *([SLURMEnvironment(auto_requeue=False)] if SLURMEnvironment.detect() else [])],
        enable_model_summary=False)


def log_metrics(client, run_id: str, metrics: dict[str, float], step: int) -> None:
    now = int(time.time() * 1000)
    items = [Metric(k, float(v), now, step) for k, v in metrics.items()]
    for i in range(0, len(items), 500):
        client.log_batch(run_id, metrics=items[i:i + 500])


def record_divergence(client, run_id: str, step: int) -> None:
    """A diverged run is a result: tagged, its step logged, no evaluation, FINISHED (so a sweep
    counts it as done and a relaunch does not train it again)."""
    log.warning("run diverged at step %d: no evaluation (tag fibexp.diverged=true)", step)
    client.set_tag(run_id, "fibexp.diverged", "true")
    log_metrics(client, run_id, {"train/diverged_step": step}, step)


def sharded(loaders: list, trainer: pl.Trainer) -> list:
    """Held-out loaders split over the ranks with every window evaluated exactly once (Lightning's
    own DistributedSampler pads with repeats): the sums the evaluator reduces are the
    single-process sums."""
    if trainer.world_size <= 1:
        return loaders
    return [DataLoader(dl.dataset, batch_size=dl.batch_size, collate_fn=dl.collate_fn, num_workers=dl.num_workers,
                       sampler=UnrepeatedDistributedSampler(dl.dataset, num_replicas=trainer.world_size,
                                                            rank=trainer.global_rank, shuffle=False))
            for dl in loaders]


def run(cfg: DictConfig, run_dir: Path | None = None, resume=UNSET) -> float:
    """One run; with trainer.devices x trainer.num_nodes > 1 this process is one rank of it
    (`fibexp.training.ddp`): rank 0 checks, starts the other ranks where nothing else does, and
    alone opens and ends the MLflow run."""
    lead = ddp.rank() == 0
    run_dir = run_dir or Path(HydraConfig.get().runtime.output_dir)
    cell = identity.cell(cfg)
    # rank 0 holds the run dir for the job, before the checkpoints are looked at or a run is opened
    with lock.hold(run_dir, cell) if lead else contextlib.nullcontext():
        checked = check_inputs(cfg, run_dir, lead, resume, cell)
        return _run(checked)


def _run(run: Run) -> float:
    cfg, task = run.cfg, run.task
    if cfg.trainer.threads:
        torch.set_num_threads(cfg.trainer.threads)
    initial_alphas = run.model.alphas()  # before any step (a resumed run rebuilds the model fresh, too)
    if cfg.trainer.compile:
        run.model.compile()  # in place: parameter names, alphas() and checkpoints are unchanged

    dm = task.datamodule(run.corpus)
    try:
        dm.prepare_data()  # an hf corpus's characters or a tokenizer known only once the text is read
        task.prepared(dm)
    except ValueError as e:
        raise Refusal.of(e) from None
    o = cfg.optim
    lit = LitLM(run.model, task, o.lr, o.betas, o.weight_decay, o.warmup_steps, cfg.trainer.max_steps, o.min_lr_ratio)

    ranks = None
    if run.lead and run.world > 1 and not ddp.external():  # one machine: rank 0 starts the others
        ranks = ddp.Ranks(run.dir, run.world)
        ranks.start(cfg, run.ckpt)
    try:
        return _train(run, dm, lit, initial_alphas, ranks)
    finally:
        if ranks:
            ranks.stop()
            if torch.distributed.is_initialized():  # the next cell of a multirun in this process starts clean
                torch.distributed.destroy_process_group()


def _train(run: Run, dm, lit: LitLM, initial_alphas, ranks) -> float:
    cfg, task, run_dir, uri, experiment_id = run.cfg, run.task, run.dir, run.uri, run.experiment_id
    client = run_id = trainer = None
    on_stop = interrupts.SaveOnStop(run.last_ckpt)
    sigint = signal.getsignal(signal.SIGINT)  # Lightning ignores SIGINT for good after a Ctrl-C: restored below
    if run.lead:
        client = journal.client_for(uri, run_dir, journal=True, wait_s=cfg.logger.outage_wait_s)  # survives an outage
        run_id = open_run(run, client, task.data_fingerprint(run.corpus))
        if ranks:
            ranks.watch(lambda reason: _record_failure(client, run_id, reason, ranks))
    try:  # from here on the run exists: whatever fails is recorded in it
        if run_id:
            if run.corpus is not None:  # the sources as MLflow dataset inputs, token counts as params
                log_data_inputs(client, run_id, run.corpus, dm)
            elif hasattr(task, "version"):  # a synthetic task: its generator (name, version, seeds)
                log_task_input(client, run_id, task, cfg.seed)
            logs.run_started(run.cell, uri, run_dir, run_id)
        logger = RunLogger(experiment_name=cfg.logger.experiment, tracking_uri=uri, run_id=run_id,
                           client=client) if run.lead else False
        trainer = build_trainer(cfg, run_dir, run.model_ident, logger, [on_stop], run.world)
        trainer.fit(lit, datamodule=dm, ckpt_path=run.ckpt)
        trainer.save_checkpoint(run.last_ckpt, weights_only=False)  # full state: resumable
        if lit.diverged_step is not None:
            if trainer.is_global_zero:
                if ranks:
                    ranks.join(cfg.trainer.collective_timeout_s)
                record_divergence(client, run_id, lit.diverged_step)
                client.set_terminated(run_id, "FINISHED")
            return math.inf
        if trainer.is_global_zero and (step_ms := lit.step_ms()) is not None:
            log_metrics(client, run_id, {"perf/step_ms": step_ms}, trainer.global_step)
        lit.evaluator, loaders = task.evaluation(dm)
        trainer.test(lit, dataloaders=sharded(loaders, trainer), verbose=False)
        if trainer.is_global_zero:
            lit.model.eval()
            t0 = time.perf_counter()
            with stop_on_sigterm():  # after trainer.test: Lightning no longer listens for SIGTERM
                extra = task.final_metrics(lit.model, dm, initial_alphas, trainer.precision_plugin.forward_context)
            if extra:
                log.info("%d final metrics (e.g. %s) in %.2f s", len(extra), next(iter(extra)), time.perf_counter() - t0)
            log_metrics(client, run_id, extra, trainer.global_step)
            lit.eval_metrics.update(extra)
            for name, figure in task.figures(lit.eval_metrics).items():
                client.log_figure(run_id, figure, name)
                plots.close(figure)
            if ranks:
                ranks.join(cfg.trainer.collective_timeout_s)  # every rank ended well before the run is FINISHED
            client.set_terminated(run_id, "FINISHED")
            store.publish_view(client, experiment_id)
            logs.run_finished(run.cell, lit.eval_metrics, store.ui_url(experiment_id, store.ui_base(uri)))
    except journal.TrackingUnavailable:
        raise  # the run's end, FINISHED or FAILED, is in its journal for fibexp-upload
    except BaseException as e:
        # SIGTERM (Lightning's SIGTERMException), Ctrl-C (KeyboardInterrupt, or Lightning's SystemExit
        # in its place) or submitit's requeue on USR2 (sys.exit): a run stopped to be resumed from
        # last.ckpt, not a failed one.
        signum = interrupts.signal_of(e)
        stopped = signum is not None or isinstance(e, SystemExit)
        step = on_stop.saved_step if on_stop.saved_step is not None else trainer.global_step if trainer else None
        if run_id and not (ranks and ranks.recorded.is_set()):
            dead = ranks.reason() if ranks and not stopped else None  # rank 0 failed because another died
            with interrupts.ignoring(signal.SIGINT, signal.SIGTERM):  # a second signal does not cut the close
                try:
                    if stopped and step is not None:
                        client.set_tag(run_id, "fibexp.stopped_step", str(step))
                    elif not stopped:
                        client.log_text(run_id, traceback.format_exc(), "traceback.txt")
                        said = traceback.format_exception_only(e)[-1].strip()
                        client.set_tag(run_id, "fibexp.failure", (f"{dead} (rank 0: {said})" if dead else said)[:5000])
                finally:  # a run never outlives its process as RUNNING
                    client.set_terminated(run_id, "KILLED" if stopped else "FAILED")
                    if ranks:
                        ranks.recorded.set()
        if signum is not None and run.lead:
            saved = "last.ckpt saved" if on_stop.saved_step is not None else "last.ckpt as last saved"
            print(f"fibexp-train: {run.cell} stopped by {interrupts.NAMES[signum]} at step {step}: run "
                  f"{run_id} is KILLED, {saved}; the same command resumes it", file=sys.stderr, flush=True)
        e.fibexp_reported = signum is not None and run.lead  # the line is said: the entry point adds none
        if signum == signal.SIGINT and not isinstance(e, KeyboardInterrupt):
            ctrl_c = KeyboardInterrupt()  # what Lightning turned into SystemExit: the caller (a sweep) sees the Ctrl-C
            ctrl_c.fibexp_reported = e.fibexp_reported
            raise ctrl_c from None
        raise
    finally:
        with contextlib.suppress(ValueError):  # outside the main thread there is no handler to restore
            signal.signal(signal.SIGINT, sigint)
    return task.objective(lit.eval_metrics)


def _record_failure(client, run_id: str, reason: str, ranks) -> None:
    """From rank 0's watcher, when a rank died and rank 0 itself is stuck: FAILED with the reason."""
    if ranks.recorded.is_set():
        return
    ranks.recorded.set()
    try:
        client.set_tag(run_id, "fibexp.failure", reason[:5000])
    finally:
        client.set_terminated(run_id, "FAILED")
