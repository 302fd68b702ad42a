"""One run (or one Hydra multirun cell) from the composed config: `fibexp-train`'s work.

Order matters: every check that can refuse the run (config values, checkpoint, tracking
store, corpus) happens before data is built, a run is created or a step is taken: they make
the `Run` (fibexp.training.inputs) that everything after them reads."""
from __future__ import annotations

import contextlib
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
from lightning.pytorch.callbacks import ProgressBar
from lightning.pytorch.overrides.distributed import UnrepeatedDistributedSampler
from lightning.pytorch.plugins.environments import SLURMEnvironment
from lightning.pytorch.strategies import DDPStrategy
from omegaconf import DictConfig
from torch.utils.data import DataLoader

from fibexp import plots
from fibexp.errors import Refusal
from fibexp.tracking import journal, store, waiting
from fibexp.tracking.datasets import log_data_inputs, log_task_input
from fibexp.training import checkpoints, ddp, interrupts, lock, logs, memory_guard, record
from fibexp.training.inputs import UNSET, Run, check_inputs
from fibexp.training.lit import LitLM, stop_on_sigterm

log = logging.getLogger("fibexp.train")

def build_trainer(cfg: DictConfig, run_dir: Path, model_ident: dict, logger, own: list = (),
                  world: int = 1) -> pl.Trainer:
    """The Trainer of a run (the values its `Run` holds): checkpoints written with `model_ident`
    into the run dir, DDP across `world` processes. Under SLURM, submitit owns requeueing (it
    resubmits; we resume from last.ckpt), so Lightning's own SLURM auto-requeue is off."""
    t = cfg.trainer
    precision = t.precision or ("bf16-mixed" if torch.cuda.is_available() and t.accelerator != "cpu" else "32-true")
    every = interrupts.PeriodicCheckpoint(dirpath=run_dir / "checkpoints", every_n_train_steps=t.checkpoint_every_n_steps,
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
        callbacks=[every, *own, *memory_guard.guards(cfg, extra), *bar, *extra],
        log_every_n_steps=t.log_every_n_steps,
        default_root_dir=run_dir, val_check_interval=t.val_every_n_steps or None, check_val_every_n_epoch=None,
        limit_val_batches=1.0 if t.val_every_n_steps else 0, num_sanity_val_steps=0,
        plugins=[checkpoints.SafeCheckpointIO(model_ident),  # weights-only resume
                 *([SLURMEnvironment(auto_requeue=False)] if SLURMEnvironment.detect() else [])],
        enable_model_summary=False)


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
    checked = check_inputs(cfg, run_dir, lead)
    # rank 0 holds the run dir for the job before the checkpoints are looked at or a run is opened
    with lock.hold(run_dir) if lead else contextlib.nullcontext():
        resumed = checked.resuming(resume)
        if lead and resumed.ckpt and not ddp.external() and (done := _finished(resumed)) is not None:
            return done
        return _run(resumed)


def _finished(run: Run) -> float | None:
    """The objective of this run when its MLflow run is already FINISHED (said in one line), else None."""
    found = record.finished(run, waiting.Client(run.uri, run.cfg.logger.outage_wait_s))
    if found is None:
        return None
    metrics = found.data.metrics
    logs.already_finished(run.cell, found.info.run_id, metrics,
                          store.ui_url(run.experiment_id, store.ui_base(run.uri), found.info.run_id))
    return run.task.objective(metrics)


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
        run_id = record.open_run(run, client, task.data_fingerprint(run.corpus))
        if ranks:
            ranks.watch(lambda reason: record.failure(client, run_id, reason, ranks))
    try:  # from here on the run exists: whatever fails is recorded in it
        if run_id:
            if run.corpus is not None:  # the sources as MLflow dataset inputs, token counts as params
                log_data_inputs(client, run_id, run.corpus, dm)
            elif hasattr(task, "version"):  # a synthetic task: its generator (name, version, seeds)
                log_task_input(client, run_id, task, cfg.seed)
            logs.run_started(run.cell, uri, run_dir, run_id)
        logger = record.RunLogger(experiment_name=cfg.logger.experiment, tracking_uri=uri, run_id=run_id,
                                  client=client) if run.lead else False
        trainer = build_trainer(cfg, run_dir, run.model_ident, logger, [on_stop], run.world)
        trainer.fit(lit, datamodule=dm, ckpt_path=run.ckpt)
        trainer.save_checkpoint(run.last_ckpt, weights_only=False)  # full state: resumable
        if lit.diverged_step is not None:
            if trainer.is_global_zero:
                if ranks:
                    ranks.join(cfg.trainer.collective_timeout_s)
                record.divergence(client, run_id, lit.diverged_step)
                client.set_terminated(run_id, "FINISHED")
            return math.inf
        if trainer.is_global_zero and (step_ms := lit.step_ms()) is not None:
            record.log_metrics(client, run_id, {"perf/step_ms": step_ms}, trainer.global_step)
        lit.evaluator, loaders = task.evaluation(dm)
        trainer.test(lit, dataloaders=sharded(loaders, trainer), verbose=False)
        if trainer.is_global_zero:
            lit.model.eval()
            t0 = time.perf_counter()
            with stop_on_sigterm():  # after trainer.test: Lightning no longer listens for SIGTERM
                extra = task.final_metrics(lit.model, dm, initial_alphas, trainer.precision_plugin.forward_context)
            if extra:
                log.info("%d final metrics (e.g. %s) in %.2f s", len(extra), next(iter(extra)), time.perf_counter() - t0)
            record.log_metrics(client, run_id, extra, trainer.global_step)
            lit.eval_metrics.update(extra)
            for name, figure in task.figures(lit.eval_metrics).items():
                client.log_figure(run_id, figure, name)
                plots.close(figure)
            if ranks:
                ranks.join(cfg.trainer.collective_timeout_s)  # every rank ended well before the run is FINISHED
            client.set_terminated(run_id, "FINISHED")
            store.publish_view(client, experiment_id)
            logs.run_finished(run.cell, lit.eval_metrics, store.ui_url(experiment_id, store.ui_base(uri), run_id))
    except waiting.TryLater:
        raise  # the run's end, FINISHED or FAILED, is in its journal for fibexp-upload; or the store never freed
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

