"""fibexp-train: train one run, or with -m a sweep of them, composed from conf/ and key=value overrides.

  fibexp-train attention=fib_stagger attention.window=4 trainer.max_steps=1000
  fibexp-train -m attention=dense,fib_fixed seed=42,43,44
  fibexp-train -m --config-dir sweeps --config-name main hydra/launcher=cores

Each run lands in paths.output_dir/runs/<run name>-<config hash>/ and in the MLflow store
(outputs/mlflow.db); the same command again resumes it from its last checkpoint."""
from __future__ import annotations

import math
import signal
import sys

import hydra
from omegaconf import DictConfig

from fibexp.cli.app import run_cli
from fibexp.config.schema import CONF_DIR, register
from fibexp.training import logs

register()


@hydra.main(version_base="1.3", config_path=CONF_DIR, config_name="train")
def job(cfg: DictConfig) -> float:
    """One run; in a multirun a refusal fails the cell (recorded by the sweep), the others go on.
    The job's modules (torch, Lightning, MLflow) are imported here, once the validation pass has
    passed: --help, TAB completion and refusals never pay for them."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    from fibexp.config.identity import cell
    from fibexp.errors import Refusal, RefusalExit, RunBusy
    from fibexp.training.run import run

    logs.quiet()
    try:
        return run(cfg)
    except RunBusy as e:  # another process trains this cell: not this one's work, and not an error
        print(f"fibexp-train: cell {cell(cfg)} is being trained by pid {e.pid or '?'} ({e.run_dir})",
              file=sys.stderr, flush=True)
        return math.nan
    except Refusal as e:
        if HydraConfig.get().mode == RunMode.MULTIRUN:
            raise
        raise RefusalExit(str(e)) from None


def _sigterm(e: BaseException) -> bool:
    """Lightning's SIGTERMException (only ever raised once Lightning is imported)."""
    lightning = sys.modules.get("lightning.pytorch.utilities.exceptions")
    return lightning is not None and isinstance(e, lightning.SIGTERMException)


def main() -> None:
    """`fibexp-train` and `python -m fibexp.cli.train`: bad input, Hydra's composition errors
    included, ends in one line `fibexp-train: error: <key>: <value>; allowed: ...`, exit 2,
    before anything is created (fibexp.cli.app)."""
    logs.quiet()
    try:
        run_cli("fibexp-train", job, CONF_DIR, description=__doc__)
    except KeyboardInterrupt as e:
        _stopped(e, signal.SIGINT)
    except SystemExit as e:  # Lightning's SIGTERMException is a SystemExit
        if not _sigterm(e):
            raise
        _stopped(e, signal.SIGTERM)


def _stopped(e: BaseException, signum: int) -> None:
    """Exit 128 + signum; the run said its own line (with its step) when one was open."""
    if not getattr(e, "fibexp_reported", False):
        print(f"fibexp-train: stopped by {signal.Signals(signum).name}; the same command resumes from last.ckpt",
              file=sys.stderr)
    sys.exit(128 + signum)


if __name__ == "__main__":
    main()
