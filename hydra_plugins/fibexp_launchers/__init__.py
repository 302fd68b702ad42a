"""The launchers Hydra discovers (its plugins must live under `hydra_plugins`): Hydra's basic and
submitit's launchers, each with the mixin of `fibexp.sweep.launchers` that waits for every cell,
reports its start and end and stops it when the sweep is interrupted. The fibexp sweeper swaps
these in for the stock launchers (`LAUNCHERS`)."""
from __future__ import annotations

from hydra._internal.core_plugins.basic_launcher import BasicLauncher
from hydra_plugins.hydra_submitit_launcher.config import BaseQueueConf
from hydra_plugins.hydra_submitit_launcher.submitit_launcher import LocalLauncher, SlurmLauncher

from fibexp.sweep import launchers


class FibexpBasicLauncher(launchers.OneCellAtATime, BasicLauncher):
    """Hydra's basic launcher, each cell's start and end reported."""


class FibexpSlurmLauncher(launchers.SubmitAndReturn, SlurmLauncher):
    """submitit's SLURM launcher; `wait: false` submits and returns."""

    QUEUE_CONF = BaseQueueConf


class FibexpLocalLauncher(launchers.WaitForEveryJob, LocalLauncher):
    """submitit's local launcher, waiting for every cell."""

    QUEUE_CONF = BaseQueueConf


class FibexpCoresLauncher(launchers.CoreSlots, FibexpLocalLauncher):
    """submitit's local launcher, as many cells at once as this machine has cores for."""


LAUNCHERS = {f"{c.__module__}.{c.__name__}": f"{__name__}.{sub.__name__}"
             for c, sub in ((SlurmLauncher, FibexpSlurmLauncher), (LocalLauncher, FibexpLocalLauncher),
                            (BasicLauncher, FibexpBasicLauncher))}
