"""What needs torch, once the torch-free checks passed: the model built on the meta device
(shapes and wiring, no memory, no compute), CUDA and the devices Lightning counts, and with a run
dir the checkpoint to resume (read and compared with that model) and the corpus (opened and
verified as the job will). The one module of fibexp.checks that imports torch, and only when a
check runs."""
from __future__ import annotations

from pathlib import Path

from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from fibexp.checks import machine as here, rules
from fibexp.checks.refusals import refusals
from fibexp.config import identity
from fibexp.config.schema import TrainConf
from fibexp.errors import refuse
from fibexp.model.spec import Impl


def processes_here(devices, accelerator: str) -> int:
    """How many processes `trainer.devices` means on this machine (Lightning's parsing)."""
    import torch
    from lightning.pytorch.accelerators import CPUAccelerator, CUDAAccelerator

    on_cuda = accelerator in ("gpu", "cuda") or (accelerator == "auto" and torch.cuda.is_available())
    if on_cuda:
        return len(CUDAAccelerator.parse_devices(devices) or [])
    return int(CPUAccelerator.parse_devices(devices))


@refusals
def check_built(cfg: DictConfig, typed: TrainConf, machine: bool = True, run_dir: Path | None = None,
                ident: dict | None = None):
    """The meta model of `cfg` (returned) and what needs torch around it; with `run_dir`, the
    checkpoint it resumes from compared with that model and `ident` (the run's identity, computed
    here when not given), and the corpus."""
    import torch

    from fibexp.tasks import registry as tasks

    HydraConfig.instance().set_config(cfg)
    cuda = here.on_cuda(typed)
    if cuda is None:
        cuda = torch.cuda.is_available()
    if typed.attention.impl is Impl.flex and not cuda:
        refuse("attention.impl", "flex", here.flex_allowed(typed))
    if machine and typed.trainer.accelerator in ("gpu", "cuda") and not torch.cuda.is_available():
        refuse("trainer.accelerator", typed.trainer.accelerator, "cpu, auto (no CUDA device on this machine)")
    if machine and "hydra" in cfg and cuda and rules.processes_per_node(typed) is None:
        try:  # auto and -1: the GPUs Lightning counts here
            per_node = processes_here(typed.trainer.devices, typed.trainer.accelerator)
        except Exception:  # Lightning's own message comes at the Trainer
            per_node = None
        here.check_allocation(cfg, typed, machine, per_node)
    task = tasks.build(cfg)
    with torch.device("meta"):
        model = task.build_model(weights=False)
    if run_dir is not None:
        from fibexp.checkpoints import checkpoint_to_resume, model_identity, shapes_of
        from fibexp.data.sources import open_corpus
        from fibexp.data.tokenizer import pretrained_identity

        ident = identity.identity(cfg) if ident is None else ident
        checkpoint_to_resume(cfg.ckpt_path, run_dir, shapes_of(model), model_identity(ident), lead=False)
        if task.uses_corpus:
            corpus = open_corpus(cfg.data, Path(cfg.paths.cache_dir))
            corpus.verify()
            if str(cfg.data.tokenizer).startswith("hf:"):
                pretrained_identity(str(cfg.data.tokenizer), cfg.paths.cache_dir)
    return model
