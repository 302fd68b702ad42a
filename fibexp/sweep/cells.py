"""A sweep: its config as `fibexp-train -m` composes it; every cell's job config (the cells, the union
of its grids' cross products, expanded by `fibexp.config.overrides.expand`), composed as Hydra's
`load_sweep_config` composes it but once per distinct set of config-group choices (a sweep of
hundreds of cells has a few dozen), each cell's other overrides applied to a copy by Hydra's own
override machinery; and the names a sweep and its cells are known by."""
from __future__ import annotations

import copy
import hashlib
import os
import re
import sys

from hydra._internal.config_loader_impl import get_overrides_dirname
from hydra._internal.hydra import Hydra
from hydra._internal.utils import create_config_search_path
from hydra.core.config_search_path import SearchPathQuery
from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override
from hydra.errors import ConfigCompositionException
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from fibexp.config.schema import CONF_DIR, register
from fibexp.errors import refuse


def sweep_config(config_name: str, overrides: list[str], config_dir: str | None = None):
    """(master config, config loader) of `fibexp-train -m [--config-dir D] --config-name N OVERRIDES`:
    the same search path (conf/, then D before it) and the same multirun composition."""
    register()
    search_path = create_config_search_path(CONF_DIR)
    if config_dir is not None:
        path = os.path.abspath(config_dir)
        if not os.path.isdir(path):
            refuse("--config-dir", config_dir, "an existing directory of sweep configs (e.g. sweeps)")
        search_path.prepend(provider="command-line", path=f"file://{path}", anchor=SearchPathQuery(provider="schema"))
    GlobalHydra.instance().clear()
    hydra = Hydra.create_main_hydra2(task_name="train", config_search_path=search_path)
    master = hydra.compose_config(config_name, overrides, run_mode=RunMode.MULTIRUN, with_log_configuration=False)
    return master, hydra.config_loader


class Composer:
    """`compose(cell)` == `config_loader.load_sweep_config(master, cell)`, in a fraction of the time.

    Hydra composes a config from its defaults list, which only the config-group overrides
    (attention=, task=, scale=, +group=, ~group, and every hydra.* override) can change; the other
    overrides (key=value) are then applied in order to the composed config. So the defaults are
    composed once per distinct set of group overrides (by `load_sweep_config` itself) and each
    cell's key=value overrides are applied to a deep copy by the loader's own
    `_apply_overrides_to_config`; what `load_sweep_config` records per cell is then set as it sets
    it: hydra.overrides.task (every non-hydra override, in order) and hydra.job.override_dirname.
    Which overrides are group overrides is decided as Hydra decides it (the override's key names a
    group of the master's search path, and its value is no dict)."""

    def __init__(self, master: DictConfig, config_loader):
        self.master, self.loader = master, config_loader
        self.parser = OverridesParser.create()
        self._parsed: dict[str, Override] = {}
        self._bases: dict[tuple[str, ...], DictConfig] = {}
        _, self.repo = config_loader._parse_overrides_and_create_caching_repo(
            master.hydra.job.config_name, list(master.hydra.overrides.hydra))

    def _parse(self, line: str) -> Override:
        if line not in self._parsed:
            self._parsed[line] = self.parser.parse_override(line)
        return self._parsed[line]

    def _shapes_defaults(self, o: Override) -> bool:
        """Whether Hydra reads this override while building the defaults list (the split of
        Hydra's own hydra._internal.defaults_list.Overrides), or it belongs to the hydra node."""
        if o.is_hydra_override():
            return True
        return not o.is_sweep_override() and not isinstance(o.value(), dict) and self.repo.group_exists(o.key_or_group)

    def groups(self, cell: list[str]) -> tuple[str, ...]:
        """The cell's overrides that shape the defaults list (cells with the same share a base)."""
        return tuple(line for line in cell if self._shapes_defaults(self._parse(line)))

    def base(self, groups: tuple[str, ...]) -> DictConfig:
        """The config of one set of group overrides, composed once."""
        if groups not in self._bases:
            self._bases[groups] = self.loader.load_sweep_config(self.master, list(groups))
        return self._bases[groups]

    def __call__(self, cell: list[str]) -> DictConfig:
        parsed = [self._parse(line) for line in cell]
        cfg = copy.deepcopy(self.base(self.groups(cell)))
        rest = [o for o in parsed if not self._shapes_defaults(o)]
        try:
            self.loader._apply_overrides_to_config(rest, cfg)
        except OmegaConfBaseException as e:  # as load_configuration wraps it
            raise ConfigCompositionException().with_traceback(sys.exc_info()[2]) from e
        app = [o for o in parsed if not o.is_hydra_override()]
        names = cfg.hydra.job.config.override_dirname
        cfg.hydra.overrides.task = [o.input_line for o in app]
        cfg.hydra.job.override_dirname = get_overrides_dirname(
            overrides=app, kv_sep=names.kv_sep, item_sep=names.item_sep, exclude_keys=names.exclude_keys)
        OmegaConf.copy_cache(from_config=self.master, to_config=cfg)
        return cfg


def compose(master: DictConfig, cells: list[list[str]], config_loader) -> list[DictConfig]:
    """Every cell's job config, each equal to `config_loader.load_sweep_config(master, cell)`."""
    composer = Composer(master, config_loader)
    return [composer(cell) for cell in cells]


def _key_values(cell: list[str]) -> dict[str, str]:
    """{key: value} of a cell's overrides (`+`/`++`/`~` dropped from the key)."""
    return {k.lstrip("+~"): v for k, _, v in (o.partition("=") for o in cell)}


def varying(cells: list[list[str]]) -> dict[str, list[str]]:
    """The keys whose value is not the same in every cell, with their values in order of appearance."""
    values: dict[str, dict[str, None]] = {}
    for cell in cells:
        for k, v in _key_values(cell).items():
            values.setdefault(k, {})[v] = None
    return {k: list(vs) for k, vs in values.items()
            if len(vs) > 1 or any(k not in _key_values(c) for c in cells)}


def grid_name(config_name: str, cells: list[list[str]], limit: int = 100) -> str:
    """A sweep's name after what varies, e.g. `attention=fib_fixed,fib_stagger x attention.window=4,8`
    (`main: ...` for a sweep file); values are elided (`,…+3`) past `limit` characters."""
    keys = varying(cells)
    head = "" if config_name == "train" else f"{config_name}: "
    if not keys:
        return head + (" ".join(cells[0]) if cells and cells[0] else config_name)
    present = {k: sum(k in _key_values(c) for c in cells) for k in keys}
    order = sorted(keys, key=lambda k: -present[k])  # the keys of every cell first (stable: in order of appearance)
    for n in range(len(order), 0, -1):
        for shown in (None, 3, 2):
            parts = [f"{k}={','.join(keys[k][:shown])}" + (f",…+{len(keys[k]) - shown}" if shown and len(keys[k]) > shown
                                                         else "") for k in order[:n]]
            name = head + " x ".join(parts) + (" x …" if n < len(order) else "")
            if len(name) <= limit:
                return name
    return name[:limit - 1] + "…"


def sweep_id(config_name: str, hashes: list[str]) -> str:
    """Stable for the same set of cells (their config hashes), so a rerun finds its parent run."""
    return f"{config_name}-{hashlib.sha256(' '.join(sorted(set(hashes))).encode()).hexdigest()[:8]}"


_UNSAFE = re.compile(r"[^A-Za-z0-9._=,+-]+")


def unique_names(cells: list[list[str]], names: list[str], hashes: list[str]) -> list[str]:
    """Run names that tell the cells apart: cells of different configs that share a name get the
    keys that set them apart appended (`dense-s42-max_steps=8`); a name stays a plain folder name."""
    out = list(names)
    by_name: dict[str, list[int]] = {}
    for i, name in enumerate(names):
        by_name.setdefault(name, []).append(i)
    for name, idx in by_name.items():
        if len({hashes[i] for i in idx}) < 2:
            continue
        differ = varying([cells[i] for i in idx])
        for i in idx:
            kv = _key_values(cells[i])
            extra = "-".join(f"{k.rsplit('.', 1)[-1]}={kv[k]}" for k in differ if k in kv)
            out[i] = _UNSAFE.sub("_", f"{name}-{extra}" if extra else name)
    seen: dict[str, set[str]] = {}
    for i, name in enumerate(out):
        seen.setdefault(name, set()).add(hashes[i])
    return [f"{n}-{hashes[i][:6]}" if len(seen[n]) > 1 else n for i, n in enumerate(out)]
