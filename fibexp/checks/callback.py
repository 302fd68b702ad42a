"""The Hydra callback the entry points add to their command line (fibexp.cli.app): its hooks run
the checks (fibexp.checks.preflight) on what Hydra composed, before it creates anything, and turn
a refusal into the one-line exit. Imports no torch."""
from __future__ import annotations

from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from fibexp.checks import preflight
from fibexp.errors import Refusal, RefusalExit

_state = {"job_started": False}  # after this, an OmegaConf/Hydra error is a bug with a traceback, not bad input


class Preflight(Callback):
    """`machine`: check this machine's devices; `inputs`: also the outside world a run reads and
    writes (off for fibexp-prepare, which writes only its cache)."""

    def __init__(self, machine: bool = True, inputs: bool = True):
        self.machine, self.inputs = machine, inputs

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        try:
            run_dir = preflight.before_run(config, self.machine, self.inputs)
        except Refusal as e:
            raise RefusalExit(str(e)) from None
        preflight.keep_saved_config(config, run_dir)

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        if str(config.hydra.sweeper.get("_target_", "")).endswith("BasicSweeper"):
            preflight.check_cells(config, self.inputs)  # the fibexp sweeper checks its cells itself (fibexp.sweep)

    def on_job_start(self, config: DictConfig, **kwargs: Any) -> None:
        _state["job_started"] = True


def job_started() -> bool:
    """Whether a job of this process has started: after that an OmegaConf or Hydra error is a bug,
    shown with its traceback, not bad input."""
    return _state["job_started"]


def reset() -> None:
    _state["job_started"] = False
