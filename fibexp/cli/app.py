"""How every Hydra entry point meets its user: the validation pass added as a Hydra callback, and
any refusal (ours, or Hydra's composition errors) printed as one line
`<prog>: error: <key>: <value>; allowed: ...` with exit code 2. Imports no torch: `--help`, TAB
completion and every refusal answer before torch or Lightning is imported."""
from __future__ import annotations

import os
import sys
from typing import Any, Callable

from hydra.core.config_store import ConfigStore
from hydra.errors import HydraException
from omegaconf.errors import OmegaConfBaseException

from fibexp.checks import callback, messages
from fibexp.errors import Refusal, RefusalExit, first_line, one_line


# Hydra's own help template (hydra/help/default.yaml) with the command's description as its header.
HELP_TEMPLATE = """${hydra.help.header}
== Configuration groups ==
Compose your configuration from those groups (group=option)

$APP_CONFIG_GROUPS

== Config ==
Override anything in the config (foo.bar=value)

$CONFIG

${hydra.help.footer}"""
HELP_FOOTER = """Bad input is refused in one line, `<prog>: error: <key>: <value>; allowed: ...`, exit code 2,
before anything is created (docs/cli.md). TAB completion: eval "$$(<prog> -sc install=bash)".
Hydra's own flags: --hydra-help (Hydra, https://hydra.cc)."""


def register_help(prog: str, description: str) -> None:
    """`--help` of a Hydra command: its description, the groups and the config (hydra/help=<prog>)."""
    ConfigStore.instance().store(group="hydra/help", name=prog, node={
        "app_name": prog, "header": description.strip() + "\n", "footer": HELP_FOOTER.replace("<prog>", prog) + "\n",
        "template": HELP_TEMPLATE})


def with_overrides(argv: list[str], ours: list[str]) -> list[str]:
    """`argv` with `ours` at the end of the user's run of overrides: Hydra's parser reads one run of
    them, so after a flag that follows it (`a=1 --cfg job`) an override at the very end would be
    refused as an unrecognized argument."""
    start = next((i for i, a in enumerate(argv) if a.startswith("~") or ("=" in a and not a.startswith("-"))), None)
    if start is None:
        return [*argv, *ours]
    end = next((i for i in range(start, len(argv)) if argv[i].startswith("-")), len(argv))
    return [*argv[:end], *ours, *argv[end:]]


def run_cli(prog: str, hydra_main: Callable[[], Any], conf_dir: str, machine: bool = True, inputs: bool = True,
            description: str = "") -> Any:
    """Run a `@hydra.main` function with `Preflight` and print any refusal as one line, exit 2.
    `machine`: check this machine's devices; `inputs`: the store, folders and checkpoint a run uses;
    `description`: the head of `--help`."""
    argv = list(sys.argv[1:])
    register_help(prog, description or prog)
    ours = [f"hydra/help={prog}"]
    if not {"-sc", "--shell-completion"} & set(argv):
        ours += ["+hydra.callbacks.fibexp_preflight._target_=fibexp.checks.callback.Preflight",
                 f"+hydra.callbacks.fibexp_preflight.machine={str(machine).lower()}",
                 f"+hydra.callbacks.fibexp_preflight.inputs={str(inputs).lower()}"]
    sys.argv[1:] = with_overrides(argv, ours)
    previous = os.environ.get("HYDRA_FULL_ERROR")
    os.environ["HYDRA_FULL_ERROR"] = "1"  # Hydra re-raises what it would print as a multi-line report
    callback.reset()
    try:
        return hydra_main()
    except (RefusalExit, Refusal) as e:
        line = first_line(e)
    except (HydraException, OmegaConfBaseException) as e:
        refusal = None if callback.job_started() else messages.hydra_refusal(e, argv, conf_dir)
        if refusal is None:
            raise
        line = str(refusal)
    except (MemoryError, RuntimeError) as e:  # an allocation the memory guard refused (fibexp.training.memory_guard)
        line = getattr(e, "fibexp_line", None)
        if line is None:
            raise
    finally:
        if previous is None:
            os.environ.pop("HYDRA_FULL_ERROR", None)
        else:
            os.environ["HYDRA_FULL_ERROR"] = previous
    print(f"{prog}: error: {one_line(line)}", file=sys.stderr)
    sys.exit(2)
