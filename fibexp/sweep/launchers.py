"""How fibexp launches a sweep's cells: launchers that wait for every cell of a sweep.

hydra-submitit-launcher 1.2 collects a job array's results one after another and raises at the
first job that ended without one (SIGKILL, out of memory, node failure): the cells still running
are then abandoned, and the sweep would summarise too early. `WaitForEveryJob` submits the same
array, then waits for every job until the scheduler reports a terminal state (so the wait is
bounded by the jobs' time limits), and returns a job that died as a failed `JobReturn` whose value
is a `JobDied` naming the scheduler's state and reason; `fibexp.sweep` records it in MLflow.
Every fibexp launcher (Hydra's basic one included, `OneCellAtATime`) reports each cell's start and
end to the sweep's `progress`, writes submitit's files into the sweep's folder (`sweep_home`), and
stops the cells it started when the sweep is interrupted (`stop_cells`). These are mixins: the
launcher classes Hydra discovers (`hydra_plugins.fibexp_launchers`) put them before Hydra's and
submitit's own launchers, which fibexp never imports."""
from __future__ import annotations

import contextlib
import logging
from copy import deepcopy
from dataclasses import replace
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Sequence

import psutil
from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn, JobStatus, filter_overrides
from omegaconf import OmegaConf

from fibexp.errors import JobDied

log = logging.getLogger(__name__)


def _reason(job) -> str:
    """The scheduler's words on a job that died, from its log; else its state."""
    try:
        text = job.stderr() or ""
    except OSError:
        text = ""
    from fibexp.sweep import scheduler  # at launch: --help and TAB never import it

    return scheduler.reason(text, str(job.state))


class OneCellAtATime:
    """Hydra's basic launcher (cells one after another, in the sweep's process), one cell at a time
    so that each start and end is reported."""

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        progress, returns = getattr(self, "progress", None), []
        for idx, overrides in enumerate(job_overrides, start=initial_job_idx):
            if progress:
                progress.started(idx)
            try:
                returns += super().launch([overrides], idx)
            finally:
                if progress:
                    progress.ended(idx)
            if _failed(self, returns[-1], idx):
                break  # sweep.max_failures reached: no further cell starts
        return returns


def _failed(launcher, ret: JobReturn, idx: int) -> bool:
    """A cell's return seen by the process that ran it: a failure counts towards sweep.max_failures
    (`fail_fast`: the sweep's home, N and its cell count); whether the sweep is now cut."""
    fail_fast = getattr(launcher, "fail_fast", None)
    if not fail_fast or ret.status != JobStatus.FAILED:
        return False
    from fibexp.sweep import failfast

    return failfast.record(Path(fail_fast[0]), idx, *fail_fast[1:])


class WaitForEveryJob:
    """submitit's launchers (local and SLURM): the cells' job array, then a wait for every job."""

    QUEUE_CONF = None  # the submitit plugin's BaseQueueConf (its generic keys): set by the Hydra plugin
    _POLL_S = 0.5
    _SWEEP_SIDE = ("jobs", "progress", "sweep_home")

    def __getstate__(self) -> dict:
        """What a job receives: submitit pickles the launcher into every job; the sweep's own state
        (its jobs' processes, the progress printer with its lock and MLflow client) stays here."""
        return {k: v for k, v in self.__dict__.items() if k not in self._SWEEP_SIDE}

    def __call__(self, sweep_overrides, job_dir_key, job_num, job_id, singleton_state) -> JobReturn:
        """In the job: the cell, then, if it failed and that makes sweep.max_failures, the sweep's
        array tasks still pending on SLURM cancelled (the waiting launchers start no further cell)."""
        ret = super().__call__(sweep_overrides, job_dir_key, job_num, job_id, singleton_state)
        if _failed(self, ret, job_num) and os.environ.get("SLURM_ARRAY_JOB_ID"):
            from fibexp.sweep import failfast, state

            arrays = [os.environ["SLURM_ARRAY_JOB_ID"]]
            with contextlib.suppress(OSError, ValueError):  # every array of a sweep split at MaxArraySize
                arrays += state.read(Path(self.fail_fast[0])).get("arrays") or []
            failfast.cancel_pending(arrays)
        return ret

    def _executor(self, setup: Sequence[str] = ()):
        import submitit

        home = getattr(self, "sweep_home", None)  # flat: a folder per job id would first be made as a literal %j
        folder = Path(home) / ".submitit" if home else self.params["submitit_folder"]
        executor = submitit.AutoExecutor(cluster=self._EXECUTOR, folder=folder,
                                         **{f"{self._EXECUTOR}_max_num_timeout": self.params[k]
                                            for k in ("max_num_timeout",) if k in self.params})
        common = set(OmegaConf.structured(self.QUEUE_CONF).keys())
        params = {k: v for k, v in self.params.items() if k not in ("submitit_folder", "max_num_timeout", "wait")}
        if setup:
            params["setup"] = [*(params.get("setup") or []), *setup]
        executor.update_parameters(**{k if k in common else f"{self._EXECUTOR}_{k}": v for k, v in params.items()})
        return executor

    def _jobs_args(self, job_overrides, initial_job_idx: int) -> list[tuple]:
        Path(str(self.config.hydra.sweep.dir)).mkdir(parents=True, exist_ok=True)
        jobs_args = []
        for idx, overrides in enumerate(job_overrides, start=initial_job_idx):
            log.info("\t#%d : %s", idx, " ".join(filter_overrides(overrides)))
            jobs_args.append((list(overrides), "hydra.sweep.dir", idx, f"job_id_for_{idx}", Singleton.get_state()))
        return jobs_args

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        executor = self._executor()
        jobs_args = self._jobs_args(job_overrides, initial_job_idx)
        self.jobs: dict[int, object] = {}  # launch index -> submitit job: what stop_cells stops
        self._submit(executor, jobs_args)
        self._wait([a[2] for a in jobs_args if a[2] in self.jobs])
        return [self._outcome(self.jobs[a[2]], overrides) if a[2] in self.jobs  # else never started: max_failures
                else JobReturn(overrides=list(overrides), status=JobStatus.UNKNOWN)
                for a, overrides in zip(jobs_args, job_overrides)]

    def _submit(self, executor, jobs_args: list[tuple]) -> None:
        """One job array, or several where the cluster's MaxArraySize is smaller than the sweep."""
        from fibexp.sweep import scheduler  # at launch: --help and TAB never import it

        size = scheduler.max_array_size() if self._EXECUTOR == "slurm" else None
        chunk = max(1, size or len(jobs_args) or 1)
        for start in range(0, len(jobs_args), chunk):
            part = jobs_args[start:start + chunk]
            with _ctrl_c_to_the_sweep_only():
                submitted = executor.map_array(self, *zip(*part))
            for args, job in zip(part, submitted):
                self.jobs[args[2]] = job

    def _report(self, idx: int, job) -> bool:
        """Report a job's start and end to the sweep's progress; whether it is done."""
        progress = getattr(self, "progress", None)
        done = job.done()
        if progress and (done or job.state not in ("PENDING", "REQUEUED", "UNKNOWN", "CONFIGURING")):
            progress.started(idx)
        if progress and done:
            progress.ended(idx)
        return done

    def _wait(self, indices: list[int]) -> None:
        waiting = list(indices)
        while waiting:
            waiting = [i for i in waiting if not self._report(i, self.jobs[i])]
            if waiting:
                time.sleep(self._POLL_S)

    def stop_cells(self, force: bool, wait_s: float) -> None:
        """SIGTERM to every unfinished cell (a local job's controller passes it on to the cell;
        SLURM: scancel, which signals the job's steps), wait up to `wait_s`, then SIGKILL what is
        left; `force`: SIGKILL at once."""
        jobs = [j for j in getattr(self, "jobs", {}).values() if not j.done()]
        if not force:
            # a local controller signalled before it started its cell forwards the signal to no one
            unreached = [j for j in jobs if getattr(j, "_process", None) is not None and not _cells(j)]
            for job in jobs:
                _signal_job(job, signal.SIGTERM)
            deadline = time.monotonic() + wait_s
            while time.monotonic() < deadline and any(not j.done() for j in jobs):
                for job in list(unreached):
                    if cells := _cells(job):  # started now: what the controller's forward would have done
                        unreached.remove(job)
                        for cell in cells:
                            with contextlib.suppress(psutil.Error):
                                cell.send_signal(signal.SIGTERM)
                time.sleep(0.2)
        for job in jobs:
            if not job.done():
                _signal_job(job, signal.SIGKILL)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and any(not j.done() for j in jobs):
            time.sleep(0.1)

    @staticmethod
    def _outcome(job, overrides) -> JobReturn:
        from submitit.core.utils import UncompletedJobError

        try:
            return job.results()[0]
        except UncompletedJobError as e:  # waited until the scheduler called it terminal
            died = JobDied(str(job.job_id), str(job.state), _reason(job))
            log.error("%s (%s)", died, str(e).splitlines()[0])
            ret = JobReturn(overrides=list(overrides), status=JobStatus.FAILED)
            ret.return_value = died
            return ret


class SubmitAndReturn(WaitForEveryJob):
    """SLURM. `wait: false` (the default of conf/hydra/launcher/slurm.yaml): the sweep submits and returns
    (`submit_detached`); `wait: true`: it waits for every job, as the local launchers do."""

    @property
    def detaches(self) -> bool:
        return not self.params.get("wait", False)

    def submit_detached(self, job_overrides: Sequence[Sequence[str]], closer, setup: Sequence[str],
                        name: str, code: tuple[Path, Path]) -> tuple[list[str], str]:
        """The cells' array(s), then `closer` (a callable) as one small job that starts once every
        cell's job has ended, however it ended (`afterany`); returns at once with the cells' job
        ids (launch order) and the closer's. `code`: (the tree's root, its copy): each job composes
        its config from the copy's conf/ and a copy of --config-dir."""
        self.jobs = {}
        jobs_args = self._jobs_args(job_overrides, 0)
        with self._configs_from(*code):
            self._submit(self._executor(setup), jobs_args)
        ids = [str(self.jobs[a[2]].job_id) for a in jobs_args]
        last = self._executor(setup)
        extra = dict(self.params.get("additional_parameters") or {})
        extra["dependency"] = "afterany:" + ":".join(sorted({i.split("_")[0] for i in ids}))
        last.update_parameters(name=name, cpus_per_task=1, gpus_per_node=None, tasks_per_node=1, nodes=1, mem_gb=2,
                               timeout_min=60, slurm_additional_parameters=extra)
        with _ctrl_c_to_the_sweep_only():
            job = last.submit(closer)
        return ids, str(job.job_id)

    @contextlib.contextmanager
    def _configs_from(self, root: Path, copy: Path):
        """While the jobs are pickled, the config loader they compose with searches the copy: the
        package's conf/ becomes the copy's, a --config-dir a copy of it in `copy`."""
        from hydra._internal.config_loader_impl import ConfigLoaderImpl

        search = deepcopy(self.hydra_context.config_loader.config_search_path)
        for e in search.config_search_path:
            path = e.path.removeprefix("file://")
            where = Path(path) if "://" not in path else None  # pkg:// and structured:// stay
            if where == root / "conf":
                e.path = str(copy / "conf")
            elif where and e.provider == "command-line" and where.is_dir():
                if not (copy / "config-dir").is_dir():
                    shutil.copytree(where, copy / "config-dir")
                e.path = str(copy / "config-dir")
        before = self.hydra_context
        self.hydra_context = replace(before, config_loader=ConfigLoaderImpl(config_search_path=search))
        try:
            yield
        finally:
            self.hydra_context = before


class CoreSlots(WaitForEveryJob):
    """submitit's local executor with as many cells at once as this machine has cores for
    `cpus_per_task` threads each (plain `submitit_local` starts every cell at once); a finished
    cell's slot goes to the next one (`hydra/launcher=cores`: `make run`, `make reproduce`)."""

    def _submit(self, executor, jobs_args: list[tuple]) -> None:
        slots = max(1, len(os.sched_getaffinity(0)) // max(1, self.params.get("cpus_per_task") or 1))
        pending, running = list(jobs_args), []
        fail_fast = getattr(self, "fail_fast", None)
        while pending or running:
            if fail_fast and pending:
                from fibexp.sweep import failfast

                if failfast.cut(Path(fail_fast[0])):
                    pending = []  # sweep.max_failures reached: no further cell starts
            while pending and len(running) < slots:
                args = pending.pop(0)
                with _ctrl_c_to_the_sweep_only():
                    self.jobs[args[2]] = executor.submit(self, *args)
                running.append(args[2])
            time.sleep(self._POLL_S)
            running = [i for i in running if not self._report(i, self.jobs[i])]


@contextlib.contextmanager
def _ctrl_c_to_the_sweep_only():
    """Jobs start with SIGINT and SIGHUP blocked (a child inherits the mask, and keeps it across
    exec): a terminal's Ctrl-C, and its SIGHUP when it is closed, go to its whole foreground process
    group, and submitit's local controller would die of them (SIGHUP also kills a cell outright,
    with no checkpoint). The sweep alone takes them and stops each cell with SIGTERM
    (`stop_cells`), which the controller forwards and the cell answers with a checkpoint and a
    KILLED run. A signal during the start reaches the sweep after."""
    before = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGHUP})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)


def _cells(job) -> list[psutil.Process]:
    """The processes a local job's controller started (its cell); none for a SLURM job."""
    process = getattr(job, "_process", None)
    with contextlib.suppress(psutil.Error):
        if process is not None:
            return psutil.Process(process.pid).children()
    return []


def _signal_job(job, signum: int) -> None:
    """A signal to a submitit job: a local job's controller (SIGTERM, which it forwards to its
    tasks) or its whole process tree (SIGKILL); a SLURM job through scancel."""
    process = getattr(job, "_process", None)
    if process is not None:
        with contextlib.suppress(psutil.Error):
            tree = psutil.Process(process.pid)
            targets = [tree] if signum != signal.SIGKILL else tree.children(recursive=True) + [tree]
            for p in targets:
                with contextlib.suppress(psutil.Error):
                    p.send_signal(signum)
    elif hasattr(job, "_cancel_command"):
        subprocess.call([job._cancel_command, *(["--signal=KILL"] if signum == signal.SIGKILL else []), str(job.job_id)])
