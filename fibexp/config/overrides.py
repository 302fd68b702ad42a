"""A sweep's command line (and its grids) expanded into cells with Hydra's own override parser and
basic sweeper, so a cell means exactly what the same overrides mean on the command line; bounded
by sweep.max_cells before a cell is listed. Below the sweep: the validation pass expands the
cells of Hydra's basic sweeper with it too."""
from __future__ import annotations

import math

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import ChoiceSweep, Override, RangeSweep

from fibexp.errors import Refusal, RefusalExit

MAX_CELLS = 10_000  # sweep.max_cells: a larger grid is refused before it is expanded or validated


def _values(o: Override) -> int:
    """How many values a sweep override takes (1 for a plain one), counted without listing them."""
    if not o.is_sweep_override():
        return 1
    v = o.value()
    if isinstance(v, RangeSweep) and v.start is not None and v.stop is not None and v.step:
        return max(0, math.ceil((v.stop - v.start) / v.step))
    if isinstance(v, ChoiceSweep):
        return len(v.list)
    return len(list(o.sweep_string_iterator()))


def _bound(parsed: list[Override]) -> int:
    """sweep.max_cells as the command line sets it, else MAX_CELLS."""
    for o in parsed:
        if o.key_or_group == "sweep.max_cells" and not o.is_sweep_override():
            value = o.value()
            if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
                return value
            raise RefusalExit(str(Refusal("sweep.max_cells", value, "an integer >= 1 (the most cells a sweep may have)")))
    return MAX_CELLS


def expand(grids: list[dict], arguments: list[str], config_loader) -> list[list[str]]:
    """Cells of the union of the grids' cross products; command-line overrides win over a
    grid's value for the same key; identical cells appear once, in order. A grid of more than
    sweep.max_cells cells is refused first, counted from its overrides without listing a cell."""
    parser = OverridesParser.create(config_loader=config_loader)
    cli = parser.parse_overrides(arguments)
    cli_keys = {o.key_or_group for o in cli}
    bound, size, batches = _bound(cli), 0, []
    for grid in grids:
        parsed = parser.parse_overrides([f"{k}={v}" for k, v in grid.items() if k not in cli_keys] + arguments)
        size += math.prod(_values(o) for o in parsed)
        batches.append(parsed)
    if size > bound:  # a BaseException: Hydra's callbacks (hydra/sweeper=basic) would turn a Refusal into a warning
        raise RefusalExit(str(Refusal("sweep.max_cells", f"{bound:,} but the grid has {size:,} cells",
                                      "a grid of at most sweep.max_cells cells: narrow it, or raise the bound "
                                      f"(sweep.max_cells={size})")))
    cells, seen = [], set()
    for parsed in batches:
        for batch in BasicSweeper.split_arguments(parsed, None):
            for cell in batch:
                if tuple(cell) not in seen:
                    seen.add(tuple(cell))
                    cells.append(list(cell))
    return cells
