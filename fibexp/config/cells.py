"""A sweep's cells: the union of its grids' cross products, expanded with Hydra's own override
parser and basic sweeper, so a cell means exactly what the same overrides mean on the command line."""
from __future__ import annotations

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.override_parser.overrides_parser import OverridesParser


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
