"""submitit launchers that wait for every cell of a sweep.

hydra-submitit-launcher 1.2 collects a job array's results one after another and raises at the
first job that ended without one (SIGKILL, out of memory, node failure): the cells still running
are then abandoned, and the sweep would summarise too early. These subclasses submit the same
array, then wait for every job until the scheduler reports a terminal state (so the wait is
bounded by the jobs' time limits), and return a job that died as a failed `JobReturn` whose value
is a `JobDied` naming the scheduler's state and reason; `fibexp.sweep` records it in MLflow.
The fibexp sweeper swaps these in for the stock submitit launchers (`LAUNCHERS`)."""
from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Sequence

from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn, JobStatus, filter_overrides
from hydra_plugins.hydra_submitit_launcher.config import BaseQueueConf
from hydra_plugins.hydra_submitit_launcher.submitit_launcher import LocalLauncher, SlurmLauncher
from omegaconf import OmegaConf

from fibexp.errors import JobDied

log = logging.getLogger(__name__)


_CAUSES = ("memory", "limit", "time", "node", "preempt", "oom")


def _reason(job) -> str:
    """The scheduler's words on a job that died, from its log: the distinct Slurm lines, those
    naming a cause first (e.g. 'Exceeded job memory limit' before srun's 'task 0: Killed');
    else its state."""
    try:
        text = job.stderr() or ""
    except OSError:
        text = ""
    said = [l.strip().split(": ", 1)[-1] for l in text.splitlines() if l.startswith(("slurmstepd", "srun:"))]
    distinct = sorted(dict.fromkeys(said), key=lambda l: not any(c in l.lower() for c in _CAUSES))
    return " | ".join(distinct[:3])[:500] if distinct else f"no result file (state {job.state})"


class _WaitForEveryJob:
    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        import submitit

        executor = submitit.AutoExecutor(cluster=self._EXECUTOR, folder=self.params["submitit_folder"],
                                         **{f"{self._EXECUTOR}_max_num_timeout": self.params[k]
                                            for k in ("max_num_timeout",) if k in self.params})
        common = set(OmegaConf.structured(BaseQueueConf).keys())
        executor.update_parameters(**{k if k in common else f"{self._EXECUTOR}_{k}": v
                                      for k, v in self.params.items()
                                      if k not in ("submitit_folder", "max_num_timeout")})
        Path(str(self.config.hydra.sweep.dir)).mkdir(parents=True, exist_ok=True)
        jobs_args = []
        for idx, overrides in enumerate(job_overrides, start=initial_job_idx):
            log.info("\t#%d : %s", idx, " ".join(filter_overrides(overrides)))
            jobs_args.append((list(overrides), "hydra.sweep.dir", idx, f"job_id_for_{idx}", Singleton.get_state()))
        jobs = self._submit(executor, jobs_args)
        return [self._outcome(job, overrides) for job, overrides in zip(jobs, job_overrides)]

    def _submit(self, executor, jobs_args: list[tuple]) -> list:
        return executor.map_array(self, *zip(*jobs_args))

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


class FibexpSlurmLauncher(_WaitForEveryJob, SlurmLauncher):
    pass


class FibexpLocalLauncher(_WaitForEveryJob, LocalLauncher):
    pass


class FibexpCoresLauncher(FibexpLocalLauncher):
    """submitit's local executor with as many cells at once as this machine has cores for
    `cpus_per_task` threads each (plain `submitit_local` starts every cell at once); a finished
    cell's slot goes to the next one (`hydra/launcher=cores`: `make run`, `make reproduce`)."""

    def _submit(self, executor, jobs_args: list[tuple]) -> list:
        slots = max(1, len(os.sched_getaffinity(0)) // max(1, self.params.get("cpus_per_task") or 1))
        pending, running, jobs = list(jobs_args), [], []
        while pending or running:
            while pending and len(running) < slots:
                jobs.append(executor.submit(self, *pending.pop(0)))
                running.append(jobs[-1])
            time.sleep(0.5)
            running = [j for j in running if not j.done()]
        return jobs


LAUNCHERS = {f"{c.__module__}.{c.__name__}": f"{__name__}.{sub.__name__}"
             for c, sub in ((SlurmLauncher, FibexpSlurmLauncher), (LocalLauncher, FibexpLocalLauncher))}
