"""The composed config's own checks, no torch: the typed values, their ranges and every `_target_`
(`fibexp.checks.rules`), the tracking URI's form, the local data and tokenizer files, and with a
`hydra` node what it asks of this machine (fibexp.checks.machine)."""
from __future__ import annotations

from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from fibexp.checks import machine as here, rules
from fibexp.checks.outside import tracking_uri
from fibexp.checks.refusals import refusals
from fibexp.config.schema import TrainConf
from fibexp.data import files
from fibexp.errors import refuse
from fibexp.model.spec import Impl


@refusals
def check_config(cfg: DictConfig, machine: bool = True) -> TrainConf:
    """Everything a composed config (with its `hydra` node) must pass that needs no torch: the typed
    values, their ranges and every `_target_` (`fibexp.checks.rules`), the local data and tokenizer
    files, and with `machine` this machine's devices as far as they are known without torch (off
    where the job runs elsewhere: a sweep's cells, data preparation on a login node)."""
    HydraConfig.instance().set_config(cfg)  # ${hydra:...} (paths.root) resolves as in the job
    typed = rules.validate(cfg)
    if typed.attention.impl is Impl.flex and here.on_cuda(typed) is False:
        refuse("attention.impl", "flex", here.flex_allowed(typed))
    if "hydra" in cfg:
        here.check_allocation(cfg, typed, machine)
    if machine and typed.trainer.accelerator in ("gpu", "cuda") and here.cuda_absent():
        refuse("trainer.accelerator", typed.trainer.accelerator, "cpu, auto (no CUDA device on this machine)")
    if machine:
        here.check_accelerator(typed)
    uri, key = tracking_uri(cfg)
    if not rules.uri_ok(uri):
        refuse(key, uri, rules.URI_ALLOWED)
    if "hydra" in cfg:
        here.check_memory(cfg, typed, machine)
    files.check_sources(cfg.data)
    files.check_tokenizer(str(cfg.data.tokenizer))
    return typed
