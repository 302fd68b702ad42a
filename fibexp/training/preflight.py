"""The one validation pass of every entry point (`fibexp-train`, `fibexp-prepare`, each cell of a
sweep), before Hydra makes the run dir, any data is read or any MLflow run exists.

It runs in two halves, so that bad input is answered at once: first everything that needs no
torch, Lightning or MLflow (the config layer's rules, this machine's CUDA devices and SLURM job as
far as they are known without torch, the local data and tokenizer files, the outputs folder, the
tracking store, the checkpoint file to resume), and only when all of that passed, what needs
torch: the model built on the meta device (shapes and wiring, no memory, no compute), the
checkpoint read and compared with that model, CUDA itself, and the corpus opened as the job will.
Importing this module imports no torch.

Where it runs: `Preflight`, a Hydra callback the entry points add to their command line.
`on_run_start` sees the composed config before Hydra's run_job creates the run dir (and writes
.hydra/ and the job log into it); the run dir's path is computed from the config. `on_multirun_start`
composes and checks every cell of Hydra's basic sweeper before its first job (the fibexp sweeper
checks its own cells, `fibexp.sweep`). The job repeats its own checks (`fibexp.training.inputs.check_inputs`)
as a defence: files can change between the two. A run dir that already holds a saved config (a
finished or killed run of this config) keeps it: once every check passed, Hydra's save of `.hydra/`
is turned off for it, so no later launch rewrites a run's record, whatever it carries."""
from __future__ import annotations

import functools
import json
import glob
import importlib.util
import os
import re
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from hydra.errors import HydraException, InstantiationException
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf, read_write
from omegaconf.errors import OmegaConfBaseException

from fibexp.config import identity, memory, messages, rules
from fibexp.config.cells import expand
from fibexp.config.paths import cell_dir_of, check_checkpoint_file, hydra_paths, run_dir_of
from fibexp.config.paths import writable as _writable
from fibexp.config.schema import SAVED_SUBDIR, TrainConf, saved_subdir
from fibexp.data import files
from fibexp.errors import Refusal, RefusalExit, refuse
from fibexp.model.spec import Impl

_state = {"job_started": False}  # after this, an OmegaConf/Hydra error is a bug with a traceback, not bad input

MULTI_PROCESS_OK = ("auto", "ddp", "ddp_find_unused_parameters_true", "fsdp")  # strategies whose ranks fibexp, srun or torchrun start
SQLITE_HEADER = b"SQLite format 3\x00"


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


def _cuda(c: TrainConf) -> bool | None:
    """Whether the run trains on CUDA: True (gpu/cuda), False (cpu, or auto without a device), or
    None (auto where a device may be there: torch decides)."""
    a = c.trainer.accelerator
    if a in ("gpu", "cuda"):
        return True
    if a != "auto" or cuda_absent():
        return False
    return None


def _flex_allowed(c: TrainConf) -> str:
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
    if t.accelerator == "cpu" or (machine and t.accelerator == "auto" and _cuda(c) is False):
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


def _refusals(check):
    """Run `check`, turning Hydra's and OmegaConf's errors into the one-line Refusal."""
    @functools.wraps(check)
    def checked(*args, **kwargs):
        try:
            return check(*args, **kwargs)
        except InstantiationException as e:
            raise messages.instantiation_refusal(e) from None
        except OmegaConfBaseException as e:
            raise messages.omegaconf_refusal(e, sys.argv[1:]) from None
    return checked


@_refusals
def check_config(cfg: DictConfig, machine: bool = True) -> TrainConf:
    """Everything a composed config (with its `hydra` node) must pass that needs no torch: the typed
    values, their ranges and every `_target_` (`fibexp.config.rules`), the local data and tokenizer
    files, and with `machine` this machine's devices as far as they are known without torch (off
    where the job runs elsewhere: a sweep's cells, data preparation on a login node)."""
    HydraConfig.instance().set_config(cfg)  # ${hydra:...} (paths.root) resolves as in the job
    typed = rules.validate(cfg)
    if typed.attention.impl is Impl.flex and _cuda(typed) is False:
        refuse("attention.impl", "flex", _flex_allowed(typed))
    if "hydra" in cfg:
        check_allocation(cfg, typed, machine)
    if machine and typed.trainer.accelerator in ("gpu", "cuda") and cuda_absent():
        refuse("trainer.accelerator", typed.trainer.accelerator, "cpu, auto (no CUDA device on this machine)")
    if machine:
        check_accelerator(typed)
    uri, key = tracking_uri(cfg)
    if not rules.uri_ok(uri):
        refuse(key, uri, rules.URI_ALLOWED)
    if "hydra" in cfg:
        check_memory(cfg, typed, machine)
    files.check_sources(cfg.data)
    files.check_tokenizer(str(cfg.data.tokenizer))
    return typed


def check_accelerator(c: TrainConf) -> None:
    """Accelerators Lightning names but torch cannot use here: a TPU without torch_xla, MPS off macOS."""
    a = c.trainer.accelerator
    if (a == "tpu" and importlib.util.find_spec("torch_xla") is None) or (a == "mps" and sys.platform != "darwin"):
        refuse("trainer.accelerator", a, "cpu, gpu, cuda, auto (" + ("torch_xla is not installed here" if a == "tpu"
                                                                     else "MPS is Apple's, on macOS only") + ")")


def check_memory(cfg: DictConfig, c: TrainConf, machine: bool) -> None:
    """A CPU run's training step against the memory it gets (fibexp.config.memory): a single run
    or a local launcher's cells against this machine, a SLURM launcher's against its mem_gb."""
    launcher = cfg.hydra.get("launcher")
    slurm = launcher is not None and "Slurm" in str(launcher.get("_target_", ""))
    if _cuda(c) is not False or (slurm and launcher.get("gpus_per_node")):
        return  # a GPU's memory is torch's to tell
    local = not slurm and str(cfg.hydra.get("mode")).endswith("MULTIRUN")
    memory.check_memory(c, launcher, machine or local)


def tracking_uri(cfg: DictConfig) -> tuple[str, str]:
    """(the run's tracking URI, the key that chose it): logger.tracking_uri, else
    $MLFLOW_TRACKING_URI, else the sqlite store under paths.output_dir (as fibexp.tracking.store.resolve_uri)."""
    if cfg.logger.tracking_uri:
        return str(cfg.logger.tracking_uri), "logger.tracking_uri"
    if os.environ.get("MLFLOW_TRACKING_URI"):
        return os.environ["MLFLOW_TRACKING_URI"], "MLFLOW_TRACKING_URI"
    return f"sqlite:///{Path(cfg.paths.output_dir).resolve()}/mlflow.db", "paths.output_dir"


def check_store(cfg: DictConfig, timeout: float = 20.0) -> None:
    """The tracking store a run will write to, without MLflow: a sqlite file must be an SQLite
    database (it is never modified here) in a writable folder; a server must answer."""
    uri, key = tracking_uri(cfg)
    if uri.startswith("sqlite:///"):
        db = Path(uri[len("sqlite:///"):])
        _writable(db.parent, key, "the sqlite store's folder")
        if db.exists():
            try:
                with open(db, "rb") as f:
                    head = f.read(len(SQLITE_HEADER))
            except OSError as e:
                refuse(key, f"{uri} ({db} cannot be read: {e.strerror})", "a readable MLflow sqlite store")
            if head and head != SQLITE_HEADER:
                refuse(key, f"{uri} ({db} is not an SQLite database: it starts {head!r})",
                       "an MLflow sqlite store (fibexp leaves this file as it is), or another paths.output_dir")
    elif uri.startswith(("http://", "https://")):
        try:
            with urllib.request.urlopen(uri.rstrip("/") + "/health", timeout=timeout) as r:
                r.read()
        except (urllib.error.URLError, OSError, ValueError) as e:
            refuse(key, f"{uri} unreachable ({getattr(e, 'reason', e)})", "a running server (`make mlflow-server`), "
                   "or null for the local sqlite store")


@_refusals
def check_outside(cfg: DictConfig, run_dir: Path | None = None) -> None:
    """What a run will write to and resume from, without torch or MLflow: the outputs and cache
    folders, the tracking store, and the checkpoint file."""
    _writable(Path(cfg.paths.output_dir), "paths.output_dir", "runs/, mlflow.db and mlartifacts/ go there")
    _writable(Path(cfg.paths.cache_dir), "paths.cache_dir", "tokenizers and token caches go there")
    check_store(cfg)
    check_checkpoint_file(cfg, run_dir)


@_refusals
def check_built(cfg: DictConfig, typed: TrainConf, machine: bool = True, run_dir: Path | None = None):
    """What needs torch, once the torch-free checks passed: the model built on the meta device,
    CUDA, the devices Lightning counts, and with `run_dir` the checkpoint to resume (read and
    compared with that model) and the corpus (opened and verified as the job will)."""
    import torch

    from fibexp.tasks import registry as tasks
    from fibexp.training import ddp

    HydraConfig.instance().set_config(cfg)
    cuda = _cuda(typed)
    if cuda is None:
        cuda = torch.cuda.is_available()
    if typed.attention.impl is Impl.flex and not cuda:
        refuse("attention.impl", "flex", _flex_allowed(typed))
    if machine and typed.trainer.accelerator in ("gpu", "cuda") and not torch.cuda.is_available():
        refuse("trainer.accelerator", typed.trainer.accelerator, "cpu, auto (no CUDA device on this machine)")
    if machine and "hydra" in cfg and cuda and rules.processes_per_node(typed) is None:
        try:  # auto and -1: the GPUs Lightning counts here
            per_node = ddp.processes_per_node(typed.trainer.devices, typed.trainer.accelerator)
        except Exception:  # Lightning's own message comes at the Trainer
            per_node = None
        check_allocation(cfg, typed, machine, per_node)
    task = tasks.build(cfg)
    with torch.device("meta"):
        model = task.build_model(weights=False)
    if run_dir is not None:
        from fibexp.data.sources import open_corpus
        from fibexp.data.tokenizer import pretrained_identity
        from fibexp.training.checkpoints import model_identity
        from fibexp.training.inputs import checkpoint_to_resume

        checkpoint_to_resume(cfg.ckpt_path, run_dir, model, model_identity(identity.identity(cfg)), lead=False)
        if task.uses_corpus:
            corpus = open_corpus(cfg.data, Path(cfg.paths.cache_dir))
            corpus.verify()
            if str(cfg.data.tokenizer).startswith("hf:"):
                pretrained_identity(str(cfg.data.tokenizer), cfg.paths.cache_dir)
    return model


def preflight(cfg: DictConfig, machine: bool = True) -> None:
    """The checks of a composed config (with its `hydra` node) that need no run dir: the torch-free
    ones, then the model built on the meta device (a sweep's cells, `fibexp-prepare`)."""
    typed = check_config(cfg, machine)
    check_built(cfg, typed, machine)

def keep_saved_configs(config: DictConfig) -> None:
    """A relaunch of the basic sweeper over cells that ran before: Hydra's run_job saves each cell's
    .hydra/ before any callback of the job, so each cell's hydra.output_subdir is resolved there, in
    the job, to None where its run dir holds a saved config (fibexp.config.schema.saved_subdir); the
    launcher composes every cell with the sweep's hydra overrides, so one more is all it takes."""
    subdir = config.hydra.output_subdir
    with read_write(config.hydra.overrides):
        config.hydra.overrides.hydra.append(
            f"hydra.output_subdir=${{{SAVED_SUBDIR}:{json.dumps(str(subdir))}}}")


class Preflight(Callback):
    """Hydra callback running the validation pass on what Hydra composed, before it creates anything.
    `inputs`: also the outside world a run reads and writes (off for fibexp-prepare, which writes
    only its cache)."""

    def __init__(self, machine: bool = True, inputs: bool = True):
        self.machine, self.inputs = machine, inputs

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        try:
            typed = check_config(config, self.machine)
            run_dir = None
            if self.inputs:
                run_dir = _refusals(run_dir_of)(config)
                _refusals(hydra_paths)(config, run_dir)
                check_outside(config, run_dir)
            check_built(config, typed, self.machine, run_dir)
        except Refusal as e:
            raise RefusalExit(str(e)) from None
        saved = config.hydra.output_subdir
        if run_dir is not None and saved is not None and (run_dir / str(saved) / "config.yaml").is_file():
            with read_write(config.hydra):  # an existing run's saved config is its first launch's: never rewritten
                config.hydra.output_subdir = None

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        if not str(config.hydra.sweeper.get("_target_", "")).endswith("BasicSweeper"):
            return  # the fibexp sweeper composes and checks its cells itself (fibexp.sweep.run_sweep)
        loader = GlobalHydra.instance().config_loader()
        cells = expand([{}], list(config.hydra.overrides.task), loader)
        checked, saved = [], False
        for cell in cells:  # every cell's torch-free checks first, then what needs torch
            try:
                cfg = loader.load_sweep_config(config, cell)
                checked.append((cell, cfg, check_config(cfg, machine=False)))
                if self.inputs:
                    subdir = cfg.hydra.output_subdir
                    saved |= subdir is not None and saved_subdir(str(subdir), os.path.abspath(cell_dir_of(cfg))) is None
                    check_outside(cfg)
            except Refusal as e:
                raise RefusalExit(f"{e} [cell: {' '.join(cell)}]") from None
            except (HydraException, OmegaConfBaseException) as e:
                refusal = messages.hydra_refusal(e, cell) or messages.uncomposed(e)
                raise RefusalExit(f"{refusal} [cell: {' '.join(cell)}]") from None
        for cell, cfg, typed in checked:
            try:
                check_built(cfg, typed, machine=False)
            except Refusal as e:
                raise RefusalExit(f"{e} [cell: {' '.join(cell)}]") from None
        if saved and not str(config.hydra.output_subdir).startswith("${"):
            keep_saved_configs(config)

    def on_job_start(self, config: DictConfig, **kwargs: Any) -> None:
        _state["job_started"] = True


def job_started() -> bool:
    """Whether a job of this process has started: after that an OmegaConf or Hydra error is a bug,
    shown with its traceback, not bad input."""
    return _state["job_started"]


def reset() -> None:
    _state["job_started"] = False
