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

import os
import sys
import typing
from typing import Any

import torch
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from hydra.errors import HydraException, InstantiationException
from hydra.experimental.callback import Callback
from lightning.fabric.connector import _PRECISION_INPUT_STR
from lightning.fabric.plugins.environments import SLURMEnvironment, TorchElasticEnvironment
from lightning.pytorch.accelerators import AcceleratorRegistry
from lightning.pytorch.strategies import StrategyRegistry
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from fibexp.config import messages, rules
from fibexp.config.cells import expand
from fibexp.config.schema import TrainConf
from fibexp.errors import Refusal, RefusalExit, first_line, refuse
from fibexp.model.spec import Impl
from fibexp.tasks import registry as tasks
from fibexp.training import ddp

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


MULTI_PROCESS_OK = ("auto", "ddp", "ddp_find_unused_parameters_true", "fsdp")  # strategies whose ranks fibexp, srun or torchrun start


def check_allocation(cfg: DictConfig, c: TrainConf, machine: bool) -> None:
    """Allocations that cannot run as asked, refused before any run exists: DDP on one process,
    a strategy that re-spawns processes, several nodes where nothing starts them (outside SLURM,
    or a sweep launcher other than slurm), and devices/nodes that differ from the SLURM job's
    tasks per node / nodes (the job this process runs in, or the one the slurm launcher submits)."""
    t = c.trainer
    per_node = rules.processes_per_node(c)
    if machine and per_node is None:
        try:
            per_node = ddp.processes_per_node(t.devices, t.accelerator)
        except Exception:  # Lightning's own message comes at the Trainer
            per_node = None
    world = None if per_node is None else per_node * t.num_nodes
    if world is not None and world > 1 and t.strategy not in MULTI_PROCESS_OK:
        refuse("trainer.strategy", t.strategy, f"{', '.join(MULTI_PROCESS_OK)} with trainer.devices x trainer.num_nodes = "
               f"{world} (fibexp starts each rank as a process of its own; spawn, fork and notebook strategies "
               "re-run the job in ways fibexp does not track)")
    if world == 1 and t.strategy.startswith("ddp"):
        refuse("trainer.strategy", t.strategy, "auto with a single device (ddp needs trainer.devices >= 2 or "
               "trainer.num_nodes >= 2)")
    launcher = str(OmegaConf.select(cfg, "hydra.launcher._target_", default="") or "")
    slurm_launcher = "Slurm" in launcher
    if machine and not slurm_launcher:
        if SLURMEnvironment.detect():
            for key, have, env in (("trainer.devices", per_node, "SLURM_NTASKS_PER_NODE"),
                                   ("trainer.num_nodes", t.num_nodes, "SLURM_NNODES")):
                job = os.environ.get(env, "").split("(")[0]
                if have is not None and job.isdigit() and int(job) != have:
                    refuse(key, str(getattr(t, key.split(".")[1])),
                           f"{job} in this SLURM job ({env}={job}: one task per device, on every node)")
        elif t.num_nodes > 1 and not TorchElasticEnvironment.detect():
            refuse("trainer.num_nodes", str(t.num_nodes), "1 outside a SLURM job (several nodes: "
                   "hydra/launcher=slurm with -m, or srun inside an allocation)")
    if not machine and t.num_nodes > 1 and not slurm_launcher and str(cfg.hydra.get("mode")).endswith("MULTIRUN"):
        refuse("trainer.num_nodes", str(t.num_nodes), "1 with this launcher (several nodes: hydra/launcher=slurm)")
    if slurm_launcher:
        lc = cfg.hydra.launcher
        for key, have, theirs in (("hydra.launcher.tasks_per_node", per_node, lc.get("tasks_per_node")),
                                  ("hydra.launcher.nodes", t.num_nodes, lc.get("nodes"))):
            if have is not None and theirs is not None and int(theirs) != have:
                what = "trainer.devices" if key.endswith("tasks_per_node") else "trainer.num_nodes"
                refuse(key, str(theirs), f"{have} = {what} (one task per device, on every node)")


def preflight(cfg: DictConfig, machine: bool = True) -> None:
    """Every check a composed config (with its `hydra` node) must pass before anything runs:
    the typed values and their ranges (`fibexp.config.rules`), the model built on the meta device
    (shapes and wiring, no memory, no compute), and with `machine` this machine's devices (off
    where the job runs elsewhere: a sweep's cells, data preparation on a login node)."""
    HydraConfig.instance().set_config(cfg)  # ${hydra:...} (paths.root) resolves as in the job
    try:
        typed = rules.validate(cfg)
        rules.check_rules(typed, MACHINE_RULES)
        if "hydra" in cfg:
            check_allocation(cfg, typed, machine)
        with torch.device("meta"):
            tasks.build(cfg).build_model(weights=False)
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
