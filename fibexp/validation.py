"""The one validation pass of every entry point (`fibexp-train`, `fibexp-prepare`, each cell of a
sweep) and how its refusals reach the user: one line `<prog>: error: <key>: <value>; allowed: ...`
on stderr, exit code 2, before Hydra makes the run dir, any data is read or any MLflow run exists.

Where it runs: `Preflight`, a Hydra callback the entry points add to their command line.
`on_run_start` sees the composed config before Hydra's run_job creates the run dir (and writes
.hydra/ and the job log into it); `on_multirun_start` composes and checks every cell of Hydra's
basic sweeper before its first job (the fibexp sweeper checks its own cells, `fibexp.sweep`).
What needs the run dir or the outside world (the checkpoint to resume, the tracking store, the
corpus files) is checked by `fibexp.train.check_inputs` inside the job, still before any data is
built or any run is created; by then Hydra has written `.hydra/` and the job log into the run dir.

Hydra's own composition errors (unknown key, wrong type, unknown group option, parse errors)
are re-raised by Hydra under HYDRA_FULL_ERROR=1 (`run_cli` sets it) instead of being printed as
a multi-line report, and `hydra_line` rewrites them in the same one-line form."""
from __future__ import annotations

import dataclasses
import os
import re
import sys
import typing
from enum import Enum
from typing import Any, Callable

from hydra.errors import ConfigCompositionException, HydraException, MissingConfigException, OverrideParseException
from hydra.experimental.callback import Callback
from omegaconf import DictConfig
from omegaconf.errors import (ConfigAttributeError, ConfigKeyError, MissingMandatoryValue, OmegaConfBaseException,
                              ValidationError)

_state = {"job_started": False}  # after this, an OmegaConf/Hydra error is a bug with a traceback, not bad input


class BadInput(ValueError):
    """Refused input, already phrased as one line `<key>: <value>; allowed: ...`."""


class Refused(BaseException):
    """A refusal on its way out through Hydra, which turns an Exception raised by a callback into
    a warning and logs one raised by a job ("Error executing job ..."): a BaseException passes."""


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def preflight(cfg: DictConfig, machine: bool = True) -> None:
    """Every check a composed config (with its `hydra` node) must pass before anything runs:
    the typed values and their ranges (`config.validate`), the model built on the meta device
    (shapes and wiring, no memory, no compute), and with `machine` this machine's devices (off
    where the job runs elsewhere: a sweep's cells, data preparation on a login node)."""
    import torch
    from hydra.core.hydra_config import HydraConfig
    from hydra.errors import InstantiationException
    from hydra.utils import instantiate

    from fibexp import config

    HydraConfig.instance().set_config(cfg)  # ${hydra:...} (paths.root) resolves as in the job
    try:
        config.validate(cfg)
        with torch.device("meta"):
            instantiate(cfg.model)
        accelerator = cfg.trainer.accelerator
        if machine and accelerator in ("gpu", "cuda") and not torch.cuda.is_available():
            raise ValueError(f"trainer.accelerator: {accelerator}; allowed: cpu, auto (no CUDA device on this machine)")
    except InstantiationException as e:
        raise BadInput(_first_line(e.__cause__ or e)) from None
    except OmegaConfBaseException as e:
        raise BadInput(omegaconf_line(e, sys.argv[1:])) from None
    except ValueError as e:
        raise BadInput(_first_line(e)) from None


class Preflight(Callback):
    """Hydra callback running `preflight` on what Hydra composed, before it creates anything."""

    def __init__(self, machine: bool = True):
        self.machine = machine

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        try:
            preflight(config, self.machine)
        except BadInput as e:
            raise Refused(str(e)) from None

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        if not str(config.hydra.sweeper.get("_target_", "")).endswith("BasicSweeper"):
            return  # the fibexp sweeper composes and checks its cells itself (fibexp.sweep.run_sweep)
        from hydra.core.global_hydra import GlobalHydra

        from fibexp.sweep import expand

        loader = GlobalHydra.instance().config_loader()
        for cell in expand([{}], list(config.hydra.overrides.task), loader):
            try:
                preflight(loader.load_sweep_config(config, cell), machine=False)
            except BadInput as e:
                raise Refused(f"{e} [cell: {' '.join(cell)}]") from None
            except (HydraException, OmegaConfBaseException) as e:
                raise Refused(f"{hydra_line(e, cell) or _first_line(e)} [cell: {' '.join(cell)}]") from None

    def on_job_start(self, config: DictConfig, **kwargs: Any) -> None:
        _state["job_started"] = True


def _describe(t) -> str:
    """A type as the allowed values of a key: `an integer`, `dense, sparse, hypercube`, ..."""
    if t is Any or t is None:
        return "any value"
    origin, args = typing.get_origin(t), typing.get_args(t)
    if origin is typing.Union:
        kinds = [a for a in args if a is not type(None)]
        return " or ".join(_describe(a) for a in kinds) + (" or null" if len(kinds) < len(args) else "")
    if origin in (list, tuple):
        return f"a list of {_describe(args[0]) if args else 'values'} ([a,b])"
    if origin is dict:
        return "a mapping {key: value}"
    if isinstance(t, type) and issubclass(t, Enum):
        return ", ".join(str(m.value) for m in t)
    if dataclasses.is_dataclass(t):
        return f"a mapping of {', '.join(_fields(t))}"
    return {bool: "true or false", int: "an integer", float: "a number", str: "a string"}.get(t, getattr(t, "__name__", str(t)))


def _fields(t) -> list[str]:
    return [f.name for f in dataclasses.fields(t) if not f.name.startswith("_")]


def _given(key: str, argv: list[str]) -> str | None:
    """What the command line set `key` to, as typed (the last override of it wins)."""
    found = None
    for arg in argv:
        name, eq, val = arg.lstrip("+~").partition("=")
        if eq and name == key:
            found = val
    return found


def _field_type(e: OmegaConfBaseException):
    parent = e.object_type
    if dataclasses.is_dataclass(parent) and e.key is not None:
        return typing.get_type_hints(parent).get(str(e.key), Any)
    ref = e.ref_type  # an element of a typed list or dict: List[int] -> int
    args = typing.get_args(ref) if ref is not None else ()
    return args[-1] if args else Any


def omegaconf_line(e: OmegaConfBaseException, argv: list[str]) -> str:
    """An OmegaConf error (from an override or a config value) as `<key>: <value>; allowed: ...`."""
    key = e.full_key or str(e.key or "")
    given = _given(key, argv)
    if isinstance(e, (ConfigAttributeError, ConfigKeyError)) and dataclasses.is_dataclass(e.object_type):
        parent = key.rpartition(".")[0] or "the config"
        return f"{key}: {given if given is not None else 'unknown key'}; allowed: the keys of {parent}: " \
               f"{', '.join(_fields(e.object_type))}"
    if isinstance(e, MissingMandatoryValue):
        return f"{key}: ???; allowed: a value (this key is mandatory)"
    if isinstance(e, ValidationError):
        value = given if given is not None else e.value
        return f"{key}: {value!r}; allowed: {_describe(_field_type(e))}"
    why = (e.msg or "").splitlines()[0] if e.msg else type(e).__name__
    return f"{key}: {given if given is not None else e.value}; allowed: a valid value ({why})"


def _options(options, conf_dir: str | None = None, group: str | None = None) -> str:
    if options is None and conf_dir and group:
        try:
            from hydra import initialize_config_dir
            from hydra.core.global_hydra import GlobalHydra

            with initialize_config_dir(conf_dir, version_base="1.3"):
                options = GlobalHydra.instance().config_loader().get_group_options(group)
        except Exception:  # listing is a courtesy: the line stays one line without it
            options = None
    return ", ".join(o for o in options or [] if not o.endswith("_schema")) or "an option of the group"


def _unparsable(argv: list[str]) -> tuple[str, str]:
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parser = OverridesParser.create()
    for arg in argv:
        if "=" not in arg or arg.startswith("-"):
            continue
        try:
            parser.parse_override(arg)
        except HydraException:
            name, _, val = arg.partition("=")
            return name.lstrip("+~"), val
    return "override", " ".join(a for a in argv if not a.startswith("-"))


def hydra_line(e: BaseException, argv: list[str], conf_dir: str | None = None) -> str | None:
    """One line for a Hydra composition error, naming the key and what it allows; None when `e`
    is not one (a bug, shown with its traceback)."""
    if isinstance(e, MissingConfigException) and e.missing_cfg_file and "/" in e.missing_cfg_file:
        group, _, name = e.missing_cfg_file.rpartition("/")
        return f"{group}: {name}; allowed: {_options(e.options, conf_dir, group)}"
    if isinstance(e, OverrideParseException):
        key, val = _unparsable(argv)
        return f"{key}: {val}; allowed: Hydra's override grammar (key=value, key=[a,b], key='a,b'; " \
               f"{_first_line(e)})"
    if isinstance(e, ConfigCompositionException):
        cause, text = e.__cause__, str(e)
        if isinstance(cause, OmegaConfBaseException) and (cause.full_key or cause.key):
            return omegaconf_line(cause, argv)
        if m := re.match(r"Could not override '(.+?)'\. No match in the defaults list", text):
            group = m[1]
            return f"{group}: {_given(group, argv)}; allowed: +{group}=<option> ({group} is not in this config's " \
                   f"defaults list), options: {_options(None, conf_dir, group)}"
        if m := re.match(r"You must specify '(.+?)'", text):
            listed = [line.strip() for line in text.splitlines()[2:] if line.startswith("\t")]
            return f"{m[1]}: ???; allowed: {_options(listed or None, conf_dir, m[1])}"
        if m := re.match(r"Ambiguous value for argument '(.+?)=(.*)'", text):
            return f"{m[1]}: {m[2]}; allowed: one value (to sweep over it: -m; a list: [a,b]; a string: quote it)"
        if isinstance(cause, BaseException):
            return hydra_line(cause, argv, conf_dir) or _first_line(e)
        return _first_line(e)
    if isinstance(e, OmegaConfBaseException):
        return omegaconf_line(e, argv)
    return None


def run_cli(prog: str, hydra_main: Callable[[], Any], conf_dir: str, bad: tuple[type, ...] = (),
            machine: bool = True) -> Any:
    """Run a `@hydra.main` function with `Preflight` and print any refusal as one line, exit 2.
    `bad`: the caller's own bad-input exceptions (already one line) raised inside the job."""
    argv = list(sys.argv[1:])
    if not {"-sc", "--shell-completion"} & set(argv):
        sys.argv += ["+hydra.callbacks.fibexp_preflight._target_=fibexp.validation.Preflight",
                     f"+hydra.callbacks.fibexp_preflight.machine={str(machine).lower()}"]
    previous = os.environ.get("HYDRA_FULL_ERROR")
    os.environ["HYDRA_FULL_ERROR"] = "1"  # Hydra re-raises what it would print as a multi-line report
    _state["job_started"] = False
    try:
        return hydra_main()
    except (Refused, BadInput, *bad) as e:
        line = _first_line(e)
    except (HydraException, OmegaConfBaseException) as e:
        line = None if _state["job_started"] else hydra_line(e, argv, conf_dir)
        if line is None:
            raise
    finally:
        if previous is None:
            os.environ.pop("HYDRA_FULL_ERROR", None)
        else:
            os.environ["HYDRA_FULL_ERROR"] = previous
    print(f"{prog}: error: {line}", file=sys.stderr)
    sys.exit(2)
