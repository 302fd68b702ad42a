"""The one validation pass of every entry point (`fibexp-train`, `fibexp-prepare`, each cell of a
sweep), before Hydra makes the run dir, any data is read or any MLflow run exists: the config
layer's rules, then what needs Lightning and torch (accelerators, strategies, precisions, CUDA),
then the model built on the meta device (shapes and wiring, no memory, no compute).

Where it runs: `Preflight`, a Hydra callback the entry points add to their command line.
`on_run_start` sees the composed config before Hydra's run_job creates the run dir (and writes
.hydra/ and the job log into it); `on_multirun_start` composes and checks every cell of Hydra's
basic sweeper before its first job (the fibexp sweeper checks its own cells, `fibexp.sweep`).
What needs the run dir or the outside world (the checkpoint to resume, the tracking store, the
corpus files) is checked by `fibexp.training.run.check_inputs` inside the job, still before any
data is built or any run is created."""
from __future__ import annotations

import sys
import typing
from typing import Any

import torch
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from hydra.errors import HydraException, InstantiationException
from hydra.experimental.callback import Callback
from hydra.utils import instantiate
from lightning.fabric.connector import _PRECISION_INPUT_STR
from lightning.pytorch.accelerators import AcceleratorRegistry
from lightning.pytorch.strategies import StrategyRegistry
from omegaconf import DictConfig
from omegaconf.errors import OmegaConfBaseException

from fibexp.config import messages, rules
from fibexp.config.cells import expand
from fibexp.config.schema import TrainConf
from fibexp.errors import Refusal, RefusalExit, first_line, refuse
from fibexp.model.spec import Impl

_state = {"job_started": False}  # after this, an OmegaConf/Hydra error is a bug with a traceback, not bad input


def _accelerators() -> tuple[str, ...]:
    return ("auto", "gpu", *sorted(AcceleratorRegistry.available_accelerators()))


def _strategies() -> tuple[str, ...]:
    return ("auto", *StrategyRegistry.available_strategies())


def _precisions() -> tuple[str, ...]:
    return typing.get_args(_PRECISION_INPUT_STR)


def on_cuda(c: TrainConf) -> bool:
    """Whether the run trains on CUDA: trainer.accelerator gpu/cuda, or auto where a GPU is present."""
    return c.trainer.accelerator in ("gpu", "cuda") or (c.trainer.accelerator == "auto" and torch.cuda.is_available())


# The rules that need Lightning's registries or torch, in the config layer's form (rules.Rule).
MACHINE_RULES: list[rules.Rule] = [
    ("attention.impl", "auto, gather, mask with trainer.accelerator={c.trainer.accelerator} (flex trains on CUDA only)",
     lambda c: c.attention.impl is not Impl.flex or on_cuda(c)),
    ("trainer.accelerator", ", ".join(_accelerators()), lambda c: c.trainer.accelerator in _accelerators()),
    ("trainer.strategy", ", ".join(_strategies()), lambda c: c.trainer.strategy in _strategies()),
    ("trainer.precision", "null (bf16-mixed on GPU, 32-true on CPU), " + ", ".join(_precisions()),
     lambda c: c.trainer.precision is None or c.trainer.precision in _precisions()),
]


def preflight(cfg: DictConfig, machine: bool = True) -> None:
    """Every check a composed config (with its `hydra` node) must pass before anything runs:
    the typed values and their ranges (`fibexp.config.rules`), the model built on the meta device
    (shapes and wiring, no memory, no compute), and with `machine` this machine's devices (off
    where the job runs elsewhere: a sweep's cells, data preparation on a login node)."""
    HydraConfig.instance().set_config(cfg)  # ${hydra:...} (paths.root) resolves as in the job
    try:
        typed = rules.validate(cfg)
        rules.check_rules(typed, MACHINE_RULES)
        with torch.device("meta"):
            instantiate(cfg.model)
        accelerator = cfg.trainer.accelerator
        if machine and accelerator in ("gpu", "cuda") and not torch.cuda.is_available():
            refuse("trainer.accelerator", accelerator, "cpu, auto (no CUDA device on this machine)")
    except InstantiationException as e:
        raise Refusal.of(e.__cause__ or e) from None
    except OmegaConfBaseException as e:
        raise Refusal.of(ValueError(messages.omegaconf_line(e, sys.argv[1:]))) from None
    except ValueError as e:
        raise Refusal.of(e) from None


class Preflight(Callback):
    """Hydra callback running `preflight` on what Hydra composed, before it creates anything."""

    def __init__(self, machine: bool = True):
        self.machine = machine

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        try:
            preflight(config, self.machine)
        except Refusal as e:
            raise RefusalExit(str(e)) from None

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        if not str(config.hydra.sweeper.get("_target_", "")).endswith("BasicSweeper"):
            return  # the fibexp sweeper composes and checks its cells itself (fibexp.sweep.run_sweep)
        loader = GlobalHydra.instance().config_loader()
        for cell in expand([{}], list(config.hydra.overrides.task), loader):
            try:
                preflight(loader.load_sweep_config(config, cell), machine=False)
            except Refusal as e:
                raise RefusalExit(f"{e} [cell: {' '.join(cell)}]") from None
            except (HydraException, OmegaConfBaseException) as e:
                raise RefusalExit(f"{messages.hydra_line(e, cell) or first_line(e)} [cell: {' '.join(cell)}]") from None

    def on_job_start(self, config: DictConfig, **kwargs: Any) -> None:
        _state["job_started"] = True


def job_started() -> bool:
    """Whether a job of this process has started: after that an OmegaConf or Hydra error is a bug,
    shown with its traceback, not bad input."""
    return _state["job_started"]


def reset() -> None:
    _state["job_started"] = False
