"""The one validation pass of every entry point (`fibexp-train`, `fibexp-prepare`, each cell of a
sweep), before Hydra makes the run dir, any data is read or any MLflow run exists.

It runs in two halves, so that bad input is answered at once: first everything that needs no
torch, Lightning or MLflow (the config's values, this machine's CUDA devices and SLURM job as far
as they are known without torch, the local data and tokenizer files, the outputs folder, the
tracking store, the checkpoint file to resume: fibexp.checks.values, .machine, .outside), and only
when all of that passed, what needs torch (fibexp.checks.meta_model): the model built on the meta device
(shapes and wiring, no memory, no compute), the checkpoint read and compared with that model, CUDA
itself, and the corpus opened as the job will. Importing this module imports no torch.

Where it runs: `Preflight` (fibexp.checks.callback), a Hydra callback the entry points add to their
command line: `before_run` for a single run, before Hydra's run_job creates the run dir (the run
dir's path is computed from the config), `check_cells` for every cell of Hydra's basic sweeper
before its first job; the fibexp sweeper checks its own cells (`fibexp.sweep`). A single run's
checks hand what they learned on to its job (fibexp.checks.checked); the job checks its files
again (`fibexp.training.inputs.check_inputs`) as a defence: files can change between the two."""
from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

from hydra.core.global_hydra import GlobalHydra
from hydra.errors import HydraException
from omegaconf import DictConfig, read_write
from omegaconf.errors import OmegaConfBaseException

from fibexp.checks import checked as handed, messages
from fibexp.checks.meta_model import check_built
from fibexp.checks.outside import check_outside
from fibexp.checks.refusals import refusals
from fibexp.checks.values import check_config
from fibexp.config.overrides import expand
from fibexp.config.paths import cell_dir_of, hydra_paths, run_dir_of
from fibexp.config.schema import SAVED_SUBDIR, saved_subdir
from fibexp.errors import Refusal, RefusalExit


def preflight(cfg: DictConfig, machine: bool = True) -> None:
    """The checks of a composed config (with its `hydra` node) that need no run dir: the torch-free
    ones, then the model built on the meta device (a sweep's cells, `fibexp-prepare`)."""
    typed = check_config(cfg, machine)
    check_built(cfg, typed, machine)


def before_run(config: DictConfig, machine: bool = True, inputs: bool = True) -> Path | None:
    """A single run's checks, before Hydra creates its run dir: the config, then with `inputs` (a
    training run's) the run dir, folders, store and checkpoint file, then the model (and the
    checkpoint compared with it). With `inputs`, what they learned is handed on to the job
    (fibexp.checks.checked). Returns the run dir (None without `inputs`)."""
    typed = check_config(config, machine)
    if not inputs:  # fibexp-prepare: its job reads only the data
        check_built(config, typed, machine)
        return None
    run_dir = refusals(run_dir_of)(config)
    refusals(hydra_paths)(config, run_dir)
    check_outside(config, run_dir)
    known = refusals(handed.of)(config, typed)
    model = check_built(config, typed, machine, run_dir, known.ident)
    from fibexp.checkpoints import shapes_of  # torch is loaded by now

    handed.hand_on(config, dataclasses.replace(known, shapes=shapes_of(model)))
    return run_dir


def check_cells(config: DictConfig, inputs: bool = True) -> None:
    """Every cell of Hydra's basic sweeper, composed and checked before its first job: every cell's
    torch-free checks first, then what needs torch. A relaunch over cells that ran before keeps
    their saved configs (`keep_saved_configs`)."""
    loader = GlobalHydra.instance().config_loader()
    cells = expand([{}], list(config.hydra.overrides.task), loader)
    checked, saved = [], False
    for cell in cells:
        where = f" [cell: {' '.join(cell)}]"
        try:
            cfg = loader.load_sweep_config(config, cell)
            typed = check_config(cfg, machine=False)
            if inputs:
                subdir = cfg.hydra.output_subdir
                saved |= subdir is not None and saved_subdir(str(subdir), os.path.abspath(cell_dir_of(cfg))) is None
                check_outside(cfg)
        except Refusal as e:
            raise RefusalExit(str(e.within(where))) from None
        except (HydraException, OmegaConfBaseException) as e:
            raise RefusalExit(str((messages.hydra_refusal(e, cell) or messages.uncomposed(e)).within(where))) from None
        checked.append((where, cfg, typed))
    for where, cfg, typed in checked:
        try:
            check_built(cfg, typed, machine=False)
        except Refusal as e:
            raise RefusalExit(str(e.within(where))) from None
    if saved and not str(config.hydra.output_subdir).startswith("${"):
        keep_saved_configs(config)


def keep_saved_configs(config: DictConfig) -> None:
    """A relaunch of the basic sweeper over cells that ran before: Hydra's run_job saves each cell's
    .hydra/ before any callback of the job, so each cell's hydra.output_subdir is resolved there, in
    the job, to None where its run dir holds a saved config (fibexp.config.schema.saved_subdir); the
    launcher composes every cell with the sweep's hydra overrides, so one more is all it takes."""
    subdir = config.hydra.output_subdir
    with read_write(config.hydra.overrides):
        config.hydra.overrides.hydra.append(
            f"hydra.output_subdir=${{{SAVED_SUBDIR}:{json.dumps(str(subdir))}}}")


def keep_saved_config(config: DictConfig, run_dir: Path | None) -> None:
    """A run dir that already holds a saved config (a finished or killed run of this config) keeps
    it: once every check passed, Hydra's save of `.hydra/` is turned off for it, so no later launch
    rewrites a run's record, whatever it carries."""
    saved = config.hydra.output_subdir
    if run_dir is not None and saved is not None and (run_dir / str(saved) / "config.yaml").is_file():
        with read_write(config.hydra):
            config.hydra.output_subdir = None
