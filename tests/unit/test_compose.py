"""Hydra's Compose API on conf/ works in a fresh Python session (a notebook) that never imported
fibexp: the schemas are registered by the hydra_plugins.fibexp_schemas module Hydra loads itself.
A sweep's cells composed once per set of group choices (fibexp.sweep.cells.Composer) are the
configs Hydra's load_sweep_config composes, cell by cell, command-line overrides and errors included."""
from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest
from hydra.core.global_hydra import GlobalHydra
from hydra.errors import HydraException
from omegaconf import OmegaConf

from fibexp.checks import messages
from fibexp.config import overrides
from fibexp.sweep import cells as sweep_cells

CONF = Path(__file__).resolve().parents[2] / "conf"

NOTEBOOK = r"""
import json, sys
from hydra import compose, initialize_config_dir
from hydra.errors import ConfigCompositionException
from hydra.utils import instantiate

before = sorted(m for m in sys.modules if m == "fibexp" or m.startswith("fibexp."))
with initialize_config_dir(sys.argv[1], version_base="1.3"):
    cfg = compose("train", overrides=["attention=fib_stagger", "model.n_layers=3", "model.d_model=32",
                                      "model.n_heads=2", "model.n_kv_heads=1", "model.vocab_size=64"])
    try:
        compose("train", overrides=["model.n_layer=3"])
        typo = None
    except ConfigCompositionException as e:
        typo = str(e)
model = instantiate(cfg.model)
print(json.dumps({"before": before, "type": type(model).__module__ + "." + type(model).__name__,
                  "alphas": model.alphas(), "typo": typo}))
"""


@pytest.mark.slow  # test-fast stays under 2 minutes (make test runs it)
def test_compose_and_instantiate_without_importing_fibexp():
    proc = subprocess.run([sys.executable, "-c", NOTEBOOK, str(CONF)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["before"] == []  # nothing of fibexp was imported by the notebook itself
    assert out["type"] == "fibexp.model.lm.LM"
    assert out["alphas"] == [0.5, 1.0, 1.5]  # the stagger schedule over 3 layers (docs/papers.md)
    assert "n_layer" in out["typo"]  # the typed schema is active: a misspelt key fails
    assert "[Hydra plugins scanner]" not in proc.stderr  # the plugin imports without warnings


def test_an_error_raised_outside_any_config_node_is_one_line_with_its_cause():
    """An interpolation a plugin resolves on its own (a launcher's params) fails with no key: the
    line names the cause instead of `: None`."""
    from omegaconf.errors import InterpolationResolutionError

    from fibexp.checks.messages import omegaconf_refusal

    e = InterpolationResolutionError("ValueError raised while resolving interpolation: HydraConfig was not set")
    assert str(omegaconf_refusal(e, [])) == ("config: does not resolve; allowed: a config whose interpolations resolve "
                                     "(ValueError raised while resolving interpolation: HydraConfig was not set)")


# ---- a sweep's cells composed once per set of group choices (fibexp.sweep.cells.Composer) ----
SWEEPS = CONF.parent / "sweeps"
ARGS = ["seed=43", "optim.lr=0.002", "+trainer.callbacks=[{_target_:fibexp.training.faults.Preempt,at_step:3}]",
        "hydra.launcher.cpus_per_task=2", "hydra/launcher=cores"]


@pytest.fixture
def sweep():
    """(master config, loader, cells) of `fibexp-train -m --config-dir sweeps --config-name NAME ARGS`."""
    def load(name, args):
        master, loader = sweep_cells.sweep_config(name, args, str(SWEEPS))
        grids = [dict(g) for g in master.hydra.sweeper.grids]
        return master, loader, overrides.expand(grids, list(master.hydra.overrides.task), loader)

    yield load
    GlobalHydra.instance().clear()


def _same_as_hydra(master, loader, cells):
    """Each cell composed by the Composer equals Hydra's own load_sweep_config, hydra node included."""
    composer = sweep_cells.Composer(master, loader)
    for cell in cells:
        fast, slow = composer(cell), loader.load_sweep_config(master, cell)
        assert OmegaConf.to_container(fast, resolve=False) == OmegaConf.to_container(slow, resolve=False), cell
        assert list(fast.hydra.overrides.task) == [c for c in cell if not c.startswith("hydra.")]
    return composer


@pytest.mark.slow  # 118 cells composed twice: about 30 s
def test_every_smoke_cell_composes_as_hydra_composes_it(sweep):
    master, loader, cells = sweep("reproduce", ["scale=smoke"])
    composer = _same_as_hydra(master, loader, cells)
    assert len(cells) > 100 and len(composer._bases) < len(cells) / 4  # one composition per set of group choices


@pytest.mark.parametrize("scale", ["cpu", "paper"])
def test_a_sample_of_cpu_and_paper_cells_composes_as_hydra_composes_it_with_command_line_overrides(sweep, scale):
    master, loader, cells = sweep("reproduce", [f"scale={scale}", *ARGS])
    assert all("seed=43" in c and "optim.lr=0.002" in c for c in cells)  # the command line wins over the grids
    sample = random.Random(0).sample(cells, 12)
    _same_as_hydra(master, loader, sample)
    cfg = sweep_cells.Composer(master, loader)(sample[0])
    assert cfg.seed == 43 and cfg.optim.lr == 0.002 and cfg.hydra.launcher.cpus_per_task == 2
    assert cfg.trainer.callbacks[0].at_step == 3


@pytest.mark.parametrize("bad, line", [
    ("model.n_layer=3", "model.n_layer: 3; allowed: the keys of model"),
    ("attention=nope", "attention: nope; allowed: dense"),
])
def test_a_bad_cell_fails_as_it_fails_in_hydra(sweep, bad, line):
    master, loader, cells = sweep("reproduce", ["scale=smoke"])
    cell = cells[0] + [bad]
    errors = []
    for compose in (sweep_cells.Composer(master, loader), lambda c: loader.load_sweep_config(master, c)):
        with pytest.raises(HydraException) as e:
            compose(cell)
        errors.append((type(e.value), str(messages.hydra_refusal(e.value, cell, str(CONF)))))
    assert errors[0] == errors[1] and errors[0][1].startswith(line), errors


def test_a_grid_past_sweep_max_cells_is_refused_before_it_is_listed():
    """Counted from the overrides (a range's length, a choice's values), over every grid: a
    10^12-cell grid is refused at once, not listed."""
    from fibexp.errors import RefusalExit

    try:
        _, loader = sweep_cells.sweep_config("train", ["paths.root=."])
        assert len(overrides.expand([{}], ["seed=range(0,10000)"], loader)) == 10_000
        for args, line in (
                (["seed=range(0,1000000000000)"], "sweep.max_cells: 10,000 but the grid has 1,000,000,000,000 cells"),
                (["attention=dense,fib_fixed", "seed=range(0,5001)"], "sweep.max_cells: 10,000 but the grid has 10,002"),
                (["seed=range(0,20)", "sweep.max_cells=10"], "sweep.max_cells: 10 but the grid has 20 cells")):
            with pytest.raises(RefusalExit) as e:
                overrides.expand([{}], args, loader)
            assert str(e.value).startswith(line), str(e.value)
        with pytest.raises(RefusalExit, match="has 6 cells"):
            overrides.expand([{"seed": "1,2,3"}, {"seed": "4,5,6"}], ["sweep.max_cells=5"], loader)
        assert len(overrides.expand([{}], ["seed=range(0,20)", "sweep.max_cells=20"], loader)) == 20
    finally:
        GlobalHydra.instance().clear()  # sweep_config initialises Hydra for this process


def test_a_sweep_s_parent_run_carries_its_sweep_id(tmp_path):
    """Two sweeps of one grid (other budgets, other scales) have parents told apart by name."""
    from mlflow.tracking import MlflowClient

    from fibexp.sweep import _parent_run

    client = MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
    exp = client.create_experiment("x", artifact_location=(tmp_path / "a").as_uri())
    first = _parent_run(client, exp, "train-aaaa1111", "attention=fib_fixed,fib_stagger", [["attention=fib_fixed"]])
    second = _parent_run(client, exp, "train-bbbb2222", "attention=fib_fixed,fib_stagger", [["attention=fib_fixed"]])
    names = {client.get_run(r).info.run_name for r in (first, second)}
    assert names == {"attention=fib_fixed,fib_stagger [train-aaaa1111]", "attention=fib_fixed,fib_stagger [train-bbbb2222]"}
