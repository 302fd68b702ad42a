"""What the fibexp sweeper does with a sweep file, without running it: its cells and their configs."""
from __future__ import annotations

from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra

from fibexp.config import cells as sweep_cells_of, schema

CONF = Path(schema.CONF_DIR)
REPO = CONF.parent
SWEEPS = REPO / "sweeps"


def expand(name: str, overrides: list[str], compose_cells: bool = True):
    """What the sweeper does with `--config-dir sweeps --config-name NAME OVERRIDES`: the cells
    and (optionally: about 0.3 s each) every cell's job config."""
    with initialize_config_dir(str(SWEEPS), version_base="1.3"):
        loader = GlobalHydra.instance().config_loader()
        master = compose(name, overrides=[f"hydra.searchpath=[file://{CONF}]", *overrides], return_hydra_config=True)
        cells = sweep_cells_of.expand([dict(g) for g in master.hydra.sweeper.grids], overrides, loader)
        composed = [loader.load_sweep_config(master, cell) for cell in cells] if compose_cells else None
    return cells, composed


def compose_train(overrides=(), name: str = "train"):
    """What `fibexp-train [--config-dir sweeps --config-name NAME] OVERRIDES` composes."""
    primary, extra = (CONF, SWEEPS) if name == "train" else (SWEEPS, CONF)
    with initialize_config_dir(str(primary), version_base="1.3"):
        return compose(name, overrides=[f"hydra.searchpath=[file://{extra}]", *overrides])
