"""Hydra's and OmegaConf's composition errors (unknown key, wrong type, unknown group option,
parse errors) built into the suite's Refusal, naming the key and what it allows. Hydra re-raises
them under HYDRA_FULL_ERROR=1 (the entry points set it) instead of printing a multi-line report."""
from __future__ import annotations

import dataclasses
import re
import typing
from enum import Enum
from typing import Any

from hydra import initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import (ConfigCompositionException, HydraException, InstantiationException, MissingConfigException,
                          OverrideParseException)
from omegaconf.errors import (ConfigAttributeError, ConfigKeyError, MissingMandatoryValue, OmegaConfBaseException,
                              ValidationError)

from fibexp.errors import Refusal, first_line, shown


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
            found = shown(val)
    return found


def _field_type(e: OmegaConfBaseException):
    parent = e.object_type
    if dataclasses.is_dataclass(parent) and e.key is not None:
        return typing.get_type_hints(parent).get(str(e.key), Any)
    ref = e.ref_type  # an element of a typed list or dict: List[int] -> int
    args = typing.get_args(ref) if ref is not None else ()
    return args[-1] if args else Any


def omegaconf_refusal(e: OmegaConfBaseException, argv: list[str]) -> Refusal:
    """An OmegaConf error (from an override or a config value) as the Refusal naming its key."""
    key = e.full_key or str(e.key or "")
    given = _given(key, argv)
    if isinstance(e, (ConfigAttributeError, ConfigKeyError)) and dataclasses.is_dataclass(e.object_type):
        parent = key.rpartition(".")[0] or "the config"
        return Refusal(key, given if given is not None else "unknown key",
                       f"the keys of {parent}: {', '.join(_fields(e.object_type))}")
    if isinstance(e, MissingMandatoryValue):
        return Refusal(key, "???", "a value (this key is mandatory)")
    if isinstance(e, ValidationError):
        return Refusal(key, repr(given if given is not None else e.value), _describe(_field_type(e)))
    why = e.msg.splitlines()[0] if e.msg else first_line(e)
    if not key:  # raised outside any node (e.g. while a plugin resolves its own params)
        return Refusal("config", "does not resolve", f"a config whose interpolations resolve ({why})")
    return Refusal(key, given if given is not None else e.value, f"a valid value ({why})")


def instantiation_refusal(e: InstantiationException) -> Refusal:
    """What a `_target_` raised while Hydra built it: its own Refusal, else the library's error as
    the refusal of the target's arguments."""
    if isinstance(e.__cause__, Refusal):
        return e.__cause__
    return Refusal("_target_", first_line(e.__cause__ or e), "a target its config's arguments build")


def _options(options, conf_dir: str | None = None, group: str | None = None) -> str:
    if options is None and conf_dir and group:
        try:
            with initialize_config_dir(conf_dir, version_base="1.3"):
                options = GlobalHydra.instance().config_loader().get_group_options(group)
        except Exception:  # listing is a courtesy: the line stays one line without it
            options = None
    return ", ".join(o for o in options or [] if not o.endswith("_schema")) or "an option of the group"


def _unparsable(argv: list[str]) -> tuple[str, str]:
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


def _name_rules() -> dict[str, str]:
    from fibexp.checks import rules

    return {"logger.run_name": rules.RUN_NAME_ALLOWED, "logger.experiment": rules.EXPERIMENT_ALLOWED}


def uncomposed(e: BaseException) -> Refusal:
    """A composition error Hydra names no key for: its own first line, as what was given."""
    return Refusal("config", first_line(e), "a config Hydra composes (its overrides and defaults lists)")


def hydra_refusal(e: BaseException, argv: list[str], conf_dir: str | None = None) -> Refusal | None:
    """The Refusal of a Hydra composition error, naming the key and what it allows; None when `e`
    is not one (a bug, shown with its traceback)."""
    if isinstance(e, MissingConfigException) and e.missing_cfg_file and "/" in e.missing_cfg_file:
        group, _, name = e.missing_cfg_file.rpartition("/")
        return Refusal(group, name, _options(e.options, conf_dir, group))
    if isinstance(e, OverrideParseException):
        key, val = _unparsable(argv)
        names = _name_rules()
        if key in names:  # a character the grammar does not take (é, a space): say what a name may hold
            return Refusal(key, val, names[key])
        return Refusal(key, val, f"Hydra's override grammar (key=value, key=[a,b], key='a,b'; {shown(first_line(e))})")
    if isinstance(e, ConfigCompositionException):
        cause, text = e.__cause__, str(e)
        if isinstance(cause, OmegaConfBaseException) and (cause.full_key or cause.key):
            return omegaconf_refusal(cause, argv)
        if m := re.match(r"Could not override '(.+?)'\. No match in the defaults list", text):
            group = m[1]
            return Refusal(group, _given(group, argv), f"+{group}=<option> ({group} is not in this config's "
                                                      f"defaults list), options: {_options(None, conf_dir, group)}")
        if m := re.match(r"You must specify '(.+?)'", text):
            listed = [line.strip() for line in text.splitlines()[2:] if line.startswith("\t")]
            return Refusal(m[1], "???", _options(listed or None, conf_dir, m[1]))
        if m := re.match(r"Ambiguous value for argument '(.+?)=(.*)'", text):
            return Refusal(m[1], m[2], "one value (to sweep over it: -m; a list: [a,b]; a string: quote it)")
        if isinstance(cause, BaseException):
            return hydra_refusal(cause, argv, conf_dir) or uncomposed(e)
        return uncomposed(e)
    if isinstance(e, OmegaConfBaseException):
        return omegaconf_refusal(e, argv)
    return None
