"""What the fibexp sweeper does with a sweep file, without running it: its cells and their configs."""
from __future__ import annotations

from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra

from fibexp.config import schema
from fibexp.config.overrides import expand as expand_cells

CONF = Path(schema.CONF_DIR)
REPO = CONF.parent
SWEEPS = REPO / "sweeps"


def expand(name: str, overrides: list[str], compose_cells: bool = True):
    """What the sweeper does with `--config-dir sweeps --config-name NAME OVERRIDES`: the cells
    and (optionally: about 0.3 s each) every cell's job config."""
    with initialize_config_dir(str(SWEEPS), version_base="1.3"):
        loader = GlobalHydra.instance().config_loader()
        master = compose(name, overrides=[f"hydra.searchpath=[file://{CONF}]", *overrides], return_hydra_config=True)
        cells = expand_cells([dict(g) for g in master.hydra.sweeper.grids], overrides, loader)
        composed = [loader.load_sweep_config(master, cell) for cell in cells] if compose_cells else None
    return cells, composed


def value(cell: list[str], key: str) -> str | None:
    """The value a cell's overrides give `key` (`+key` too), None when they give none."""
    found = [o.split("=", 1)[1] for o in cell if o.split("=", 1)[0].lstrip("+") == key]
    assert len(found) <= 1, cell
    return found[0] if found else None


def compose_train(overrides=(), name: str = "train"):
    """What `fibexp-train [--config-dir sweeps --config-name NAME] OVERRIDES` composes."""
    primary, extra = (CONF, SWEEPS) if name == "train" else (SWEEPS, CONF)
    with initialize_config_dir(str(primary), version_base="1.3"):
        return compose(name, overrides=[f"hydra.searchpath=[file://{extra}]", *overrides])


def write_sweep(directory: Path, name: str, grids: str, claims: str = "") -> Path:
    """A sweep config of one's own, `directory/name.yaml`, at scale=smoke under the fibexp sweeper:
    `grids` are its grid lines (indented six spaces), `claims` lines that go before them."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.yaml"
    path.write_text(f"""\
defaults:
  - train
  - _self_
  - scale: smoke
  - override hydra/sweeper: fibexp

hydra:
  sweeper:
{claims}    grids:
{grids}""")
    return path

