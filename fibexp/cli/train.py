"""`fibexp-train`: one run, or with -m a sweep of them, from conf/ and the command line."""
from __future__ import annotations

import signal
import sys

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from lightning.pytorch.utilities.exceptions import SIGTERMException
from omegaconf import DictConfig

from fibexp.cli.app import run_cli
from fibexp.config.schema import CONF_DIR, register
from fibexp.errors import Refusal, RefusalExit
from fibexp.training import logs
from fibexp.training.run import run

register()


@hydra.main(version_base="1.3", config_path=CONF_DIR, config_name="train")
def job(cfg: DictConfig) -> float:
    """One run; in a multirun a refusal fails the cell (recorded by the sweep), the others go on."""
    logs.quiet()
    try:
        return run(cfg)
    except Refusal as e:
        if HydraConfig.get().mode == RunMode.MULTIRUN:
            raise
        raise RefusalExit(str(e)) from None


def main() -> None:
    """`fibexp-train` and `python -m fibexp.cli.train`: bad input, Hydra's composition errors
    included, ends in one line `fibexp-train: error: <key>: <value>; allowed: ...`, exit 2,
    before anything is created (fibexp.cli.app)."""
    logs.quiet()  # before the validation pass, which already asks Lightning about SLURM
    try:
        run_cli("fibexp-train", job, CONF_DIR)
    except SIGTERMException:
        print("fibexp-train: stopped by SIGTERM: the run is KILLED; the same command resumes it from last.ckpt",
              file=sys.stderr)
        sys.exit(128 + signal.SIGTERM)


if __name__ == "__main__":
    main()
