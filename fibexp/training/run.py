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

from fibexp import checkpoints
from fibexp.tracking import journal, store, waiting
from fibexp.tracking.datasets import log_data_inputs, log_task_input
from fibexp.training import ddp, interrupts, lock, logs, memory_guard, record
from fibexp.training.inputs import UNSET, Run, check_inputs
from fibexp.training.lit import LitLM, stop_on_sigterm

log = logging.getLogger("fibexp.train")


def build_trainer(run: Run, logger, own: list = ()) -> pl.Trainer:
    """The Trainer of `run`: checkpoints written with its model's identity into its folder, DDP across
    its processes, `own` callbacks first. Under SLURM, submitit owns requeueing (it resubmits; we
    resume from last.ckpt), so Lightning's own SLURM auto-requeue is off."""
    cfg, t = run.cfg, run.cfg.trainer
    precision = t.precision or ("bf16-mixed" if torch.cuda.is_available() and t.accelerator != "cpu" else "32-true")
    every = interrupts.PeriodicCheckpoint(dirpath=run.dir / "checkpoints", every_n_train_steps=t.checkpoint_every_n_steps,
                                          save_last=True, save_top_k=0)
    extra = [instantiate(c) for c in t.callbacks]
    bar = [] if any(isinstance(c, ProgressBar) for c in extra) else [logs.progress_bar()]
    strategy = t.strategy
    if strategy in ("auto", "ddp", "ddp_find_unused_parameters_true") and run.world > 1:
        # a collective waiting for a rank that is gone raises after this long: the job ends
        strategy = DDPStrategy(timeout=timedelta(seconds=t.collective_timeout_s),
                               find_unused_parameters=strategy == "ddp_find_unused_parameters_true")
    return pl.Trainer(
        max_steps=t.max_steps, accelerator=t.accelerator, devices=t.devices, num_nodes=t.num_nodes,
        strategy=strategy, precision=precision, gradient_clip_val=cfg.optim.grad_clip, logger=logger,
        callbacks=[every, *own, *memory_guard.guards(cfg, extra), *bar, *extra],
        log_every_n_steps=t.log_every_n_steps,
        default_root_dir=run.dir, val_check_interval=t.val_every_n_steps or None, check_val_every_n_epoch=None,
        limit_val_batches=1.0 if t.val_every_n_steps else 0, num_sanity_val_steps=0,
        plugins=[checkpoints.SafeCheckpointIO(run.model_ident),  # weights-only resume
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
    (`fibexp.training.ddp`): rank 0 holds the run dir, checks, starts the other ranks where nothing
    else does, and alone opens and ends the MLflow run."""
    lead = ddp.rank() == 0
    run_dir = run_dir or Path(HydraConfig.get().runtime.output_dir)
    with lock.hold(run_dir) if lead else contextlib.nullcontext():
        checked_run = check_inputs(cfg, run_dir, lead, resume)
        if checked_run.finished is not None:
            logs.already_finished(checked_run)
            return checked_run.task.objective(checked_run.finished.metrics)
        return _train(checked_run)


def _train(run: Run) -> float:
    """Data, model and Trainer built; fitted, tested and evaluated; every number logged; the MLflow
    run ended FINISHED. Whatever leaves the `with` block early ends it too (`LiveRun`)."""
    cfg, task = run.cfg, run.task
    if cfg.trainer.threads:
        torch.set_num_threads(cfg.trainer.threads)
    initial_alphas = run.model.alphas()  # before any step (a resumed run rebuilds the model fresh, too)
    if cfg.trainer.compile:
        run.model.compile()  # in place: parameter names, alphas() and checkpoints are unchanged

    dm = task.datamodule(run.corpus)
    dm.prepare_data()  # an hf corpus's characters or a tokenizer known only once the text is read
    task.prepared(dm)
    o = cfg.optim
    lit = LitLM(run.model, task, o.lr, o.betas, o.weight_decay, o.warmup_steps, cfg.trainer.max_steps, o.min_lr_ratio)

    with LiveRun.open(run) as live:  # from here on the run exists: whatever ends it is recorded in it
        live.started(dm)
        trainer = live.fit(lit, dm)
        if lit.diverged_step is not None:
            live.diverged(lit.diverged_step)
            return math.inf
        if trainer.is_global_zero and (step_ms := lit.step_ms()) is not None:
            live.log({"perf/step_ms": step_ms})
        lit.evaluator, loaders = task.evaluation(dm)
        trainer.test(lit, dataloaders=sharded(loaders, trainer), verbose=False)
        if trainer.is_global_zero:  # the task's metrics beyond the test loop
            t0 = time.perf_counter()
            with stop_on_sigterm():  # after trainer.test: Lightning no longer listens for SIGTERM
                extra = task.final_metrics(lit.model.eval(), dm, initial_alphas,
                                           trainer.precision_plugin.forward_context)
            if extra:
                log.info("%d final metrics (e.g. %s) in %.2f s", len(extra), next(iter(extra)),
                         time.perf_counter() - t0)
            live.log(extra)
            lit.eval_metrics.update(extra)
            live.log_figures(task.figures(lit.eval_metrics))
            live.finish(lit.eval_metrics)
    return task.objective(lit.eval_metrics)


class LiveRun:
    """The live half of a run: its open MLflow run (`record`, rank 0 alone; None on the other
    ranks), the Trainer, the other ranks this process started, and the stop callback that saves
    last.ckpt on a signal. `with LiveRun.open(run) as live:` starts the ranks and creates or
    continues the MLflow run; `finish` (or `diverged`) ends it FINISHED; leaving the block by an
    exception ends it through `fail`: KILLED (stopped by a signal: resumable) or FAILED, said so.
    Leaving it in any way stops the other ranks and gives back the SIGINT handler Lightning took."""

    def __init__(self, run: Run):
        self.run = run
        starts_ranks = run.lead and run.world > 1 and not ddp.external()  # one machine: rank 0 starts the others
        self.ranks = ddp.Ranks(run.dir, run.world) if starts_ranks else None
        self.record: record.Record | None = None
        self.trainer: pl.Trainer | None = None
        self.on_stop = interrupts.SaveOnStop(run.last_ckpt)
        self.sigint = signal.getsignal(signal.SIGINT)  # Lightning ignores SIGINT for good after a Ctrl-C

    @classmethod
    def open(cls, run: Run) -> LiveRun:
        """The other ranks started, then (rank 0) the MLflow run created or continued; what fails
        here leaves no rank running."""
        live = cls(run)
        try:
            if live.ranks:
                live.ranks.start(run.cfg, run.ckpt)
            if run.lead:
                client = journal.client_for(run.uri, run.dir, journal=True, wait_s=run.cfg.logger.outage_wait_s)
                live.record = record.Record.open(run, client, run.task.data_fingerprint(run.corpus))
                if live.ranks:  # a rank that dies ends the run FAILED, naming it
                    live.ranks.watch(live._rank_died)
        except BaseException:
            live.close()
            raise
        return live

    def __enter__(self) -> LiveRun:
        return self

    def __exit__(self, kind, e, tb) -> None:
        try:
            # TryLater: the run's end, FINISHED or FAILED, is in its journal for fibexp-upload; or the store never freed
            if e is not None and not isinstance(e, waiting.TryLater) and (ctrl_c := self.fail(e)) is not None:
                raise ctrl_c from None
        finally:
            self.close()

    def started(self, dm) -> None:
        """The run's inputs logged and its start said (rank 0)."""
        run, rec = self.run, self.record
        if rec is None:
            return
        if run.corpus is not None:  # the sources as MLflow dataset inputs, token counts as params
            log_data_inputs(rec.client, rec.run_id, run.corpus, dm)
        elif hasattr(run.task, "version"):  # a synthetic task: its generator (name, version, seeds)
            log_task_input(rec.client, rec.run_id, run.task, run.cfg.seed)
        logs.run_started(run, rec.run_id)

    def fit(self, lit: LitLM, dm) -> pl.Trainer:
        """The Trainer built and fitted, then last.ckpt saved with the full state (resumable)."""
        run, rec = self.run, self.record
        logger = record.RunLogger(experiment_name=run.cfg.logger.experiment, tracking_uri=run.uri,
                                  run_id=rec.run_id, client=rec.client) if rec else False
        self.trainer = build_trainer(run, logger, [self.on_stop])
        self.trainer.fit(lit, datamodule=dm, ckpt_path=run.ckpt)
        self.trainer.save_checkpoint(run.last_ckpt, weights_only=False)
        return self.trainer

    def log(self, metrics: dict[str, float]) -> None:
        """`metrics` at the step reached (rank 0)."""
        self.record.log(metrics, self.trainer.global_step)

    def log_figures(self, figures: dict) -> None:
        self.record.log_figures(figures)

    def _joined(self) -> None:
        if self.ranks:
            self.ranks.join(self.run.cfg.trainer.collective_timeout_s)  # every rank ended before the run's end

    def diverged(self, step: int) -> None:
        """A diverged run ends FINISHED with its divergence recorded (rank 0)."""
        if self.trainer.is_global_zero:
            self._joined()
            self.record.diverged(step)
            self.record.end("FINISHED")

    def finish(self, metrics: dict[str, float]) -> None:
        """The run ends FINISHED once every rank has, and says its headline numbers (rank 0)."""
        run, rec = self.run, self.record
        self._joined()
        rec.end("FINISHED")
        store.publish_view(rec.client, run.experiment_id)
        logs.run_finished(run.cell, metrics, store.ui_url(run.experiment_id, store.ui_base(run.uri), rec.run_id))

    def fail(self, e: BaseException) -> KeyboardInterrupt | None:
        """The run ended by `e`: KILLED at the step reached when a signal stopped it (SIGTERM as
        Lightning's SIGTERMException, Ctrl-C as KeyboardInterrupt or Lightning's SystemExit in its
        place, submitit's requeue on USR2 as sys.exit), else FAILED with its traceback. Returns the
        KeyboardInterrupt to raise where Lightning turned a Ctrl-C into SystemExit (the caller, a
        sweep, sees the Ctrl-C), else None (`e` goes on)."""
        run, ranks, rec, on_stop = self.run, self.ranks, self.record, self.on_stop
        signum = interrupts.signal_of(e)
        stopped = signum is not None or isinstance(e, SystemExit)
        step = on_stop.saved_step if on_stop.saved_step is not None else \
            self.trainer.global_step if self.trainer else None
        if rec and not (ranks and ranks.recorded.is_set()):
            dead = ranks.reason() if ranks and not stopped else None  # rank 0 failed because another died
            with interrupts.ignoring(signal.SIGINT, signal.SIGTERM):  # a second signal does not cut the close
                try:
                    if stopped and step is not None:
                        rec.stopped(step)
                    elif not stopped:
                        said = traceback.format_exception_only(e)[-1].strip()
                        rec.failed(f"{dead} (rank 0: {said})" if dead else said, "".join(traceback.format_exception(e)))
                finally:  # a run never outlives its process as RUNNING
                    rec.end("KILLED" if stopped else "FAILED")
                    if ranks:
                        ranks.recorded.set()
        if signum is not None and run.lead:
            saved = "last.ckpt saved" if on_stop.saved_step is not None else "last.ckpt as last saved"
            print(f"fibexp-train: {run.cell} stopped by {interrupts.NAMES[signum]} at step {step}: run "
                  f"{rec.run_id if rec else None} is KILLED, {saved}; the same command resumes it",
                  file=sys.stderr, flush=True)
        e.fibexp_reported = signum is not None and run.lead  # the line is said: the entry point adds none
        if signum == signal.SIGINT and not isinstance(e, KeyboardInterrupt):
            ctrl_c = KeyboardInterrupt()
            ctrl_c.fibexp_reported = e.fibexp_reported
            return ctrl_c
        return None

    def _rank_died(self, reason: str) -> None:
        """From the ranks' watcher, when a rank died and rank 0 itself is stuck: FAILED with the reason."""
        if self.ranks.recorded.is_set():
            return
        self.ranks.recorded.set()
        try:
            self.record.failed(reason)
        finally:
            self.record.end("FAILED")

    def close(self) -> None:
        """The SIGINT handler given back; the other ranks stopped, and the process group with them."""
        with contextlib.suppress(ValueError):  # outside the main thread there is no handler to restore
            signal.signal(signal.SIGINT, self.sigint)
        if self.ranks:
            self.ranks.stop()
            if torch.distributed.is_initialized():  # the next cell of a multirun in this process starts clean
                torch.distributed.destroy_process_group()
