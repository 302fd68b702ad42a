"""A sweep: its config as `fibexp-train -m` composes it; its cells, the union of its grids' cross
products, expanded with Hydra's own override parser and basic sweeper, so a cell means exactly what
the same overrides mean on the command line; and every cell's job config, composed as Hydra's `load_sweep_config` composes it but once per
distinct set of config-group choices (a sweep of hundreds of cells has a few dozen), each cell's
other overrides applied to a copy by Hydra's own override machinery."""
from __future__ import annotations

import copy
import os
import sys

from hydra._internal.config_loader_impl import get_overrides_dirname
from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
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


def expand(grids: list[dict], arguments: list[str], config_loader) -> list[list[str]]:
    """Cells of the union of the grids' cross products; command-line overrides win over a
    grid's value for the same key; identical cells appear once, in order."""
    parser = OverridesParser.create(config_loader=config_loader)
    cli_keys = {o.key_or_group for o in parser.parse_overrides(arguments)}
    cells, seen = [], set()
    for grid in grids:
        params = [f"{k}={v}" for k, v in grid.items() if k not in cli_keys]
        for batch in BasicSweeper.split_arguments(parser.parse_overrides(params + arguments), None):
            for cell in batch:
                if tuple(cell) not in seen:
                    seen.add(tuple(cell))
                    cells.append(list(cell))
    return cells


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
