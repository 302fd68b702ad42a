"""Hydra discovers sweepers only under the `hydra_plugins` namespace, so fibexp's lives here;
it expands the grids (or, without grids, the sweep typed on the command line) and hands the cells
to `fibexp.sweep`, which owns the semantics."""
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from hydra.core.config_store import ConfigStore
from hydra.experimental.callback import Callback
from hydra.plugins.sweeper import Sweeper

EMPTY_GRID = ("hydra.sweeper.grids", "no cells")
EMPTY_ALLOWED = "at least one cell: every swept key a list of one value or more (e.g. seed=1,2; not range(0))"


@dataclass
class FibexpSweeperConf:
    _target_: str = "hydra_plugins.fibexp_sweeper.FibexpSweeper"
    # Union of cross products: each grid maps keys to comma-separated values (Hydra sweep
    # syntax); command-line overrides apply to every grid. Duplicate cells run once.
    grids: List[Dict[str, Any]] = field(default_factory=list)
    max_batch_size: Optional[int] = None
    # The claims the grids serve and, for the others, why not: {serves: [A1, ...], not_served:
    # {B13: why}}; read by fibexp-plan, which refuses a grid that cannot judge a claim it serves.
    claims: Dict[str, Any] = field(default_factory=dict)


ConfigStore.instance().store(group="hydra/sweeper", name="fibexp", node=FibexpSweeperConf, provider="fibexp")


class FibexpSweeper(Sweeper):
    def __init__(self, grids: List[Dict[str, Any]], max_batch_size: Optional[int] = None,
                 claims: Optional[Dict[str, Any]] = None):
        self.grids = [dict(g) for g in grids] or [{}]
        self.max_batch_size = max_batch_size

    def setup(self, *, hydra_context, task_function, config) -> None:
        from hydra.core.hydra_config import HydraConfig
        from hydra.core.plugins import Plugins

        from hydra_plugins.fibexp_launchers import LAUNCHERS
        from omegaconf import open_dict, read_write

        self.hydra_context, self.config = hydra_context, config
        target = config.hydra.launcher.get("_target_")
        if target in LAUNCHERS:  # wait for every job, record the ones that died (fibexp_launchers)
            with read_write(config.hydra.launcher), open_dict(config.hydra.launcher):
                config.hydra.launcher._target_ = LAUNCHERS[target]
        # Instantiating a launcher resolves its params: submitit's folder is under hydra.sweep.dir,
        # which (conf/train.yaml) reaches ${hydra:runtime.cwd}, and Hydra sets HydraConfig only per
        # job in a multirun; without this, every submitit launcher fails unless sweep.dir is given.
        HydraConfig.instance().set_config(config)
        self.launcher = Plugins.instance().instantiate_launcher(
            hydra_context=hydra_context, task_function=task_function, config=config)

    def sweep(self, arguments: List[str]) -> Any:
        from fibexp.config.overrides import expand
        from fibexp.errors import Refusal
        from fibexp.sweep.runner import run_sweep

        cells = expand(self.grids, arguments, self.hydra_context.config_loader)
        if not cells:
            raise Refusal(*EMPTY_GRID, EMPTY_ALLOWED)
        return run_sweep(cells, self.config, self.hydra_context.config_loader, self.launcher, self.max_batch_size)


class RefuseEmptyGrid(Callback):
    """Hydra's basic sweeper (`hydra/sweeper=basic`) given a grid without a cell (e.g. seed=range(0))
    would exit 0 having run nothing: refused in one line instead, as the fibexp sweeper refuses it."""

    def on_multirun_start(self, config, **kwargs) -> None:
        from hydra.core.global_hydra import GlobalHydra

        from fibexp.config.overrides import expand
        from fibexp.errors import Refusal, RefusalExit

        if not str(config.hydra.sweeper.get("_target_", "")).endswith("BasicSweeper"):
            return
        if not expand([{}], list(config.hydra.overrides.task), GlobalHydra.instance().config_loader()):
            raise RefusalExit(str(Refusal(*EMPTY_GRID, EMPTY_ALLOWED)))
