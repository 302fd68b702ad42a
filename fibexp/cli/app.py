"""How every Hydra entry point meets its user: the validation pass added as a Hydra callback, and
any refusal (ours, or Hydra's composition errors) printed as one line
`<prog>: error: <key>: <value>; allowed: ...` with exit code 2."""
from __future__ import annotations

import os
import sys
from typing import Any, Callable

from hydra.errors import HydraException
from omegaconf.errors import OmegaConfBaseException

from fibexp.config import messages
from fibexp.errors import Refusal, RefusalExit, first_line
from fibexp.training import preflight


def run_cli(prog: str, hydra_main: Callable[[], Any], conf_dir: str, machine: bool = True) -> Any:
    """Run a `@hydra.main` function with `Preflight` and print any refusal as one line, exit 2."""
    argv = list(sys.argv[1:])
    if not {"-sc", "--shell-completion"} & set(argv):
        sys.argv += ["+hydra.callbacks.fibexp_preflight._target_=fibexp.training.preflight.Preflight",
                     f"+hydra.callbacks.fibexp_preflight.machine={str(machine).lower()}"]
    previous = os.environ.get("HYDRA_FULL_ERROR")
    os.environ["HYDRA_FULL_ERROR"] = "1"  # Hydra re-raises what it would print as a multi-line report
    preflight.reset()
    try:
        return hydra_main()
    except (RefusalExit, Refusal) as e:
        line = first_line(e)
    except (HydraException, OmegaConfBaseException) as e:
        line = None if preflight.job_started() else messages.hydra_line(e, argv, conf_dir)
        if line is None:
            raise
    finally:
        if previous is None:
            os.environ.pop("HYDRA_FULL_ERROR", None)
        else:
            os.environ["HYDRA_FULL_ERROR"] = previous
    print(f"{prog}: error: {line}", file=sys.stderr)
    sys.exit(2)
