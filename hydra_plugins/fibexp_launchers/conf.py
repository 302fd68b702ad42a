"""hydra/launcher=fibexp_slurm (conf/hydra/launcher/slurm.yaml builds on it): submitit's SLURM
launcher conf and whether the sweep waits for its jobs. No `from __future__ import annotations`
here: Hydra runs plugin modules before they are in sys.modules, where a dataclass with string
annotations cannot be built."""
from dataclasses import dataclass

from hydra.core.config_store import ConfigStore
from hydra_plugins.hydra_submitit_launcher.config import SlurmQueueConf


@dataclass
class FibexpSlurmConf(SlurmQueueConf):
    _target_: str = "hydra_plugins.fibexp_launchers.FibexpSlurmLauncher"
    wait: bool = False  # False: submit and return, a last job closes the sweep; True: wait for every job


ConfigStore.instance().store(group="hydra/launcher", name="fibexp_slurm", node=FibexpSlurmConf, provider="fibexp")
