"""This machine as far as it is known without torch: its CUDA devices, the SLURM job or torchrun
it runs in, and the allocation a config asks of it (devices, nodes, strategy, memory)."""
from __future__ import annotations

import glob
import importlib.util
import os
import re
import sys
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from fibexp.checks import memory, rules
from fibexp.config.schema import TrainConf
from fibexp.errors import refuse

MULTI_PROCESS_OK = ("auto", "ddp", "ddp_find_unused_parameters_true", "fsdp")  # strategies whose ranks fibexp, srun or torchrun start


def cuda_absent() -> bool:
    """Whether torch certainly sees no CUDA device here, known without importing torch: devices
    hidden (CUDA_VISIBLE_DEVICES empty or -1), no NVIDIA or ROCm device node, or a torch built
    without CUDA and ROCm. False means "maybe": torch decides, after the torch-free checks."""
    if os.environ.get("CUDA_VISIBLE_DEVICES", "unset").strip() in ("", "-1"):
        return True
    if not glob.glob("/dev/nvidia[0-9]*") and not os.path.exists("/dev/kfd"):
        return True
    spec = importlib.util.find_spec("torch")
    try:
        version = Path(spec.origin).with_name("version.py").read_text(encoding="utf-8")
    except (AttributeError, TypeError, OSError):
        return False
    return all(re.search(rf"^{name}\b[^=\n]*=\s*None\s*$", version, re.M) for name in ("cuda", "hip"))


def on_cuda(c: TrainConf) -> bool | None:
    """Whether the run trains on CUDA: True (gpu/cuda), False (cpu, or auto without a device), or
    None (auto where a device may be there: torch decides)."""
    a = c.trainer.accelerator
    if a in ("gpu", "cuda"):
        return True
    if a != "auto" or cuda_absent():
        return False
    return None


def flex_allowed(c: TrainConf) -> str:
    return f"auto, gather, mask with trainer.accelerator={c.trainer.accelerator} (flex trains on CUDA only)"


def _cpu_processes(t) -> int:
    """Processes trainer.devices means on CPU (Lightning: auto is 1, else a count >= 1)."""
    d = t.devices
    if d == "auto":
        return 1
    if isinstance(d, int) and not isinstance(d, bool) and d >= 1:
        return d
    if isinstance(d, str) and d.strip().isdigit() and int(d) >= 1:
        return int(d)
    refuse("trainer.devices", str(d), f"auto or a count >= 1 with trainer.accelerator={t.accelerator} on this "
           "machine (CPU processes; device indices and -1 are for GPUs)")


def _slurm_job() -> bool:
    """Lightning's SLURMEnvironment.detect(): inside a SLURM job that is not an interactive shell."""
    return "SLURM_NTASKS" in os.environ and os.environ.get("SLURM_JOB_NAME") not in ("bash", "interactive")


def _torchelastic() -> bool:
    """Lightning's TorchElasticEnvironment.detect() (torch.distributed.is_torchelastic_launched)."""
    return os.environ.get("TORCHELASTIC_RUN_ID") is not None


def check_allocation(cfg: DictConfig, c: TrainConf, machine: bool, per_node: int | None = None) -> None:
    """Allocations that cannot run as asked, refused before any run exists: DDP on one process,
    a strategy that re-spawns processes, several nodes where nothing starts them (outside SLURM,
    or a sweep launcher other than slurm), and devices/nodes that differ from the SLURM job's
    tasks per node / nodes (the job this process runs in, or the one the slurm launcher submits).
    `per_node`: the processes per node when torch had to count the devices."""
    t = c.trainer
    per_node = per_node or rules.processes_per_node(c)
    if t.accelerator == "cpu" or (machine and t.accelerator == "auto" and on_cuda(c) is False):
        per_node = _cpu_processes(t)
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
        if _slurm_job():
            for key, have, env in (("trainer.devices", per_node, "SLURM_NTASKS_PER_NODE"),
                                   ("trainer.num_nodes", t.num_nodes, "SLURM_NNODES")):
                job = os.environ.get(env, "").split("(")[0]
                if have is not None and job.isdigit() and int(job) != have:
                    refuse(key, str(getattr(t, key.split(".")[1])),
                           f"{job} in this SLURM job ({env}={job}: one task per device, on every node)")
        elif t.num_nodes > 1 and not _torchelastic():
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


def check_accelerator(c: TrainConf) -> None:
    """Accelerators Lightning names but torch cannot use here: a TPU without torch_xla, MPS off macOS."""
    a = c.trainer.accelerator
    if (a == "tpu" and importlib.util.find_spec("torch_xla") is None) or (a == "mps" and sys.platform != "darwin"):
        refuse("trainer.accelerator", a, "cpu, gpu, cuda, auto (" + ("torch_xla is not installed here" if a == "tpu"
                                                                     else "MPS is Apple's, on macOS only") + ")")


def check_memory(cfg: DictConfig, c: TrainConf, machine: bool) -> None:
    """A CPU run's training step against the memory it gets (fibexp.checks.memory): a single run
    or a local launcher's cells against this machine, a SLURM launcher's against its mem_gb."""
    launcher = cfg.hydra.get("launcher")
    slurm = launcher is not None and "Slurm" in str(launcher.get("_target_", ""))
    if on_cuda(c) is not False or (slurm and launcher.get("gpus_per_node")):
        return  # a GPU's memory is torch's to tell
    local = not slurm and str(cfg.hydra.get("mode")).endswith("MULTIRUN")
    memory.check_memory(c, launcher, machine or local)

