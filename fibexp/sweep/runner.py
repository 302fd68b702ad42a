"""Sweep semantics, owned by the submitting process (before any job starts):
every cell is composed and validated; the MLflow store, experiment and a parent run named after
the grid exist; the sweep's folder (fibexp.sweep.home) holds its config and links to its cells;
cells that already FINISHED with the same resolved config (hash) are skipped; the rest are
launched (basic, submitit_local, cores or submitit_slurm), each start and end printed
(fibexp.sweep.progress), and one failing cell does not stop the others; a summary ends the sweep,
non-zero if any cell failed. A first SIGINT/SIGTERM stops the cells, closes their runs and the
parent KILLED and says how to resume (fibexp.sweep.interrupt). MLflow is the record of what
finished, so the summary is right even when a launcher loses track of a job."""
from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import sys
from pathlib import Path

from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf, open_dict, read_write

from fibexp.checks import preflight, rules
from fibexp.config import identity
from fibexp.data.prepare import data_key, prepare
from fibexp.errors import JobDied, Refusal
from fibexp.sweep import cells as sweep_cells, detach, failfast, home, interrupt, state, summary
from fibexp.sweep.outcome import cell_outcome
from fibexp.sweep.progress import Progress
from fibexp.sweep.rerun import literal
from fibexp.tasks import registry as tasks
from fibexp.tracking import store, waiting


log = logging.getLogger("fibexp.sweep")
STOP_WAIT_S = 30.0  # how long stopped cells get to checkpoint and close their runs


@contextlib.contextmanager
def _naming(cell: list[str]):
    """A refusal met while checking or preparing one cell says which cell, in its one line."""
    try:
        yield
    except Refusal as e:
        raise e.within(f" [cell: {' '.join(cell)}]") from None


class _Checks:
    """A sweep's cells must pass the validation pass of `fibexp-train` before any job starts. Cells
    that differ only in their seed (a grid's seeds) share the torch-free checks: the seed is a typed
    int already, and its range rule is checked per cell; the model is built on the meta device once
    per distinct model, whose config is all but seed, optimizer, budget and bookkeeping (no memory,
    no compute). ${hydra:...} resolves per cell, as run_job does. The machine is not checked: the
    jobs may run elsewhere. A refusal names the cell and ends the sweep in one line."""

    _NOT_MODEL = ("optim", "logger", "sweep", "paths", "ckpt_path")  # and the seed, popped first

    def __init__(self):
        self.typed: dict[str, object] = {}  # config without hydra and seed -> its typed config
        self.built: set[str] = set()

    def __call__(self, cell: list[str], cfg) -> None:
        with _naming(cell):
            tree = {k: OmegaConf.to_container(v, resolve=True, enum_to_str=True) if OmegaConf.is_config(v) else v
                    for k, v in cfg.items_ex(resolve=False) if k != "hydra"}
            seed = tree.pop("seed")
            family = json.dumps(tree, sort_keys=True, default=str)
            if family in self.typed:
                typed = dataclasses.replace(self.typed[family], seed=seed)
                rules.check_rules(typed)
            else:
                typed = self.typed[family] = preflight.check_config(cfg, machine=False)
            for k in self._NOT_MODEL:
                tree.pop(k, None)
            tree["trainer"].pop("max_steps", None)
            model = json.dumps(tree, sort_keys=True, default=str)
            if model not in self.built:
                preflight.check_built(cfg, typed, machine=False)
                self.built.add(model)


def _prepare_data(cells, composed) -> None:
    """Tokenize each distinct corpus once, here, before any job starts: otherwise every job of
    the sweep would prepare the same data at the same time (a file lock would make them wait)."""
    done = set()
    for cell, cfg in zip(cells, composed):
        if not tasks.get(cfg.task.name).uses_corpus or (key := data_key(cfg)) in done:
            continue
        done.add(key)
        HydraConfig.instance().set_config(cfg)
        with _naming(cell):
            prepare(cfg)


def composed_and_checked(cells: list[list[str]], sweep_cfg, config_loader) -> list:
    """Every cell's job config (as Hydra's load_sweep_config makes it, faster), each one checked."""
    composed = sweep_cells.compose(sweep_cfg, cells, config_loader)
    check = _Checks()
    for cell, cfg in zip(cells, composed):
        check(cell, cfg)
    return composed


def run_sweep(cells: list[list[str]], sweep_cfg, config_loader, launcher, max_batch_size=None):
    """The fibexp sweeper's work: the sweep checked, held against a twin launch, run."""
    sweep = Sweep.checked(cells, sweep_cfg, config_loader)
    lock = home.Lock(sweep.output_dir, sweep.id)
    lock.acquire()  # a twin launch is refused here, before any data is prepared or cell started
    try:
        detach.refuse_if_live(sweep.home, sweep.id)
        return sweep.run(launcher, max_batch_size)
    finally:
        lock.release()


@dataclasses.dataclass
class Sweep:
    """One launch of a sweep, as its checks found it: the cells, their job configs and config
    hashes, the sweep's id and folder (`home`), and the store it reports into. `run` launches it."""

    cells: list[list[str]]
    composed: list
    hashes: list[str]
    id: str
    cfg: DictConfig  # the sweep's own config, with its hydra node
    output_dir: Path
    home: Path
    uri: str
    experiment_id: str

    @classmethod
    def checked(cls, cells: list[list[str]], sweep_cfg, config_loader) -> Sweep:
        """Every cell composed and checked, each cell's folder inside paths.output_dir, the store
        reachable: a refusal before any folder of the sweep exists."""
        max_failures = OmegaConf.select(sweep_cfg, "sweep.max_failures")
        if max_failures is not None and max_failures < 1:
            raise Refusal("sweep.max_failures", max_failures, "an integer >= 1 (the sweep stops after that many "
                          "failed cells), or null (off)")
        composed = composed_and_checked(cells, sweep_cfg, config_loader)
        hashes = [identity.config_hash(cfg) for cfg in composed]
        sweep_id = sweep_cells.sweep_id(sweep_cfg.hydra.job.config_name, hashes)
        output_dir = Path(composed[0].paths.output_dir)
        where = home.home_of(output_dir, sweep_id)
        for cell, cfg in zip(cells, composed):
            with _naming(cell):
                preflight.cell_dir_of(cfg, where)
        first = composed[0]
        uri = store.resolve_uri(first.logger.tracking_uri, output_dir)
        experiment_id = store.ensure_experiment(uri, first.logger.experiment, output_dir / "mlartifacts",
                                                first.logger.outage_wait_s)
        return cls(cells, composed, hashes, sweep_id, sweep_cfg, output_dir, where, uri, experiment_id)

    def run(self, launcher, max_batch_size=None) -> dict:
        """Data prepared once, cells named and linked, finished ones skipped, the rest launched;
        each cell's outcome read back from MLflow, and the summary."""
        _prepare_data(self.cells, self.composed)
        client = waiting.Client(self.uri, self.composed[0].logger.outage_wait_s)  # every call waits out a locked store
        names, renamed, run_dirs = self._names()
        home.write_config(self.home, self.cfg, self.cells, names, run_dirs)
        grid = sweep_cells.grid_name(self.cfg.hydra.job.config_name, self.cells)
        parent = _parent_run(client, self.experiment_id, self.id, grid, self.cells)
        todo, outcome = self._skip_finished(client, names, run_dirs)
        print(f"Sweep {self.id} ({grid}): {len(self.cells)} cells, {len(todo)} to run, {len(self.cells) - len(todo)} "
              f"already finished; parent run {parent} in {self.uri}; folder {self.home}" + _at_once(launcher), flush=True)
        record = self._record(parent, names, run_dirs, todo, outcome)
        state.write(self.home, record)
        failfast.reset(self.home)
        if todo and getattr(launcher, "detaches", False):
            return detach.submit(self, launcher, client, record, self._jobs(launcher, renamed, todo, parent), todo)
        with interrupt.trapped(self.home / "sweep.log") as signals:
            died = self._launch(launcher, max_batch_size, client, names, renamed, todo, parent, signals)
            stopped = signals.settle()
            cut, failed = failfast.cut(self.home), failfast.failed(self.home)
            for k, i in enumerate(todo):
                outcome[i] = cell_outcome(client, self.experiment_id, names[i], run_dirs[i], self.hashes[i], stopped,
                                          died.get(k))
                if cut and outcome[i] == ("failed", None) and k not in failed:  # never started
                    outcome[i] = ("pending", None)
            return summary.summarise(client, self.experiment_id, parent, self.id, names, outcome, stopped,
                                     self.home, cut)

    def _record(self, parent: str, names, run_dirs, todo, outcome) -> dict:
        """sweep.json: what `fibexp-sweep` and a detached sweep's closing job read."""
        return {"id": self.id, "uri": self.uri, "experiment_id": self.experiment_id, "parent": parent,
                "launcher": self.cfg.hydra.launcher._target_.rsplit(".", 1)[-1], "argv": summary.launched_args(),
                "outage_wait_s": self.composed[0].logger.outage_wait_s,
                "cells": [{"name": n, "hash": h, "run_dir": str(d), "job": None,
                           "outcome": list(outcome[i]) if i in outcome else None}
                          for i, (n, h, d) in enumerate(zip(names, self.hashes, run_dirs))]}

    def _names(self) -> tuple[list[str], dict[int, str], list[Path]]:
        """Each cell's run name (made unique within the sweep: the override renaming it, by cell)
        and run folder."""
        base_names = [identity.run_name(cfg) for cfg in self.composed]
        names = sweep_cells.unique_names(self.cells, base_names, self.hashes)
        renamed = {}
        for i, (cfg, base, name) in enumerate(zip(self.composed, base_names, names)):
            if name != base:
                renamed[i] = f"logger.run_name={literal(name)}"
                with open_dict(cfg.logger):
                    cfg.logger.run_name = name
        run_dirs = [self.output_dir / "runs" / f"{n}-{h}" for n, h in zip(names, self.hashes)]
        return names, renamed, run_dirs

    def _skip_finished(self, client, names, run_dirs) -> tuple[list[int], dict]:
        """The cells to run; the outcome of the others (a duplicate of an earlier cell, or FINISHED
        with the same config); every cell linked from the sweep's folder."""
        todo, outcome, unique = [], {}, {}
        for i, h in enumerate(self.hashes):
            if h in unique:
                outcome[i] = ("duplicate", unique[h])
                continue
            unique[h] = names[i]
            done = store.find_runs(client, self.experiment_id, h, "FINISHED")
            if done:
                outcome[i] = ("skipped", done[0].info.run_id)
                run_dir = done[0].data.tags.get("fibexp.run_dir")
                home.link_cell(self.home, names[i], Path(run_dir) if run_dir else run_dirs[i])
                log.info("skip %s: already FINISHED with the same config (run %s)", names[i], done[0].info.run_id)
            else:
                todo.append(i)
                home.link_cell(self.home, names[i], run_dirs[i])
        return todo, outcome

    def _jobs(self, launcher, renamed, todo, parent) -> list[list[str]]:
        """Each cell to run as its job's overrides; the launcher's files go to the sweep's home."""
        with read_write(self.cfg.hydra), open_dict(self.cfg.hydra):
            self.cfg.hydra.sweep.dir = str(self.home)  # the launcher's own files (multirun logs, .submitit) go there
        launcher.sweep_home = self.home
        max_failures = OmegaConf.select(self.cfg, "sweep.max_failures")
        launcher.fail_fast = (str(self.home), max_failures, len(todo)) if max_failures else None  # travels to jobs
        return [self.cells[i] + [f"sweep.id={self.id}", f"sweep.parent_run_id={parent}",
                                 f"hydra.sweep.dir={literal(str(self.home))}"]
                + _threads(self.cfg, self.composed[i]) + ([renamed[i]] if i in renamed else []) for i in todo]

    def _launch(self, launcher, max_batch_size, client, names, renamed, todo, parent, signals) -> dict[int, JobDied]:
        """The cells to run, in batches of the launcher; the jobs that died without a result (by
        position in `todo`). A first Ctrl-C or SIGTERM stops the cells (`signals` says which)."""
        jobs = self._jobs(launcher, renamed, todo, parent)
        launcher.progress = Progress(client, self.experiment_id, [names[i] for i in todo],
                                     [self.hashes[i] for i in todo])
        batch = max_batch_size or len(jobs) or 1
        died: dict[int, JobDied] = {}
        try:
            for start in range(0, len(jobs), batch):
                try:
                    returns = launcher.launch(jobs[start:start + batch], initial_job_idx=start)
                except Exception as e:  # a launcher without per-job outcomes: MLflow decides below
                    log.error("launcher: %s: %s", type(e).__name__, str(e).splitlines()[0] if str(e) else "")
                    returns = []
                died.update({start + i: r._return_value for i, r in enumerate(returns)
                             if isinstance(getattr(r, "_return_value", None), JobDied)})
        except (KeyboardInterrupt, SystemExit) as e:
            if isinstance(e, SystemExit) and not interrupt.is_sigterm(e):
                raise
            signals.caught(e)
            _stop_cells(launcher, signals)
        return died


def _stop_cells(launcher, signals) -> None:
    """Stop every cell the launcher started: SIGTERM, up to STOP_WAIT_S for them to checkpoint and
    close their runs, then SIGKILL; a second signal meanwhile kills them at once."""
    stop = getattr(launcher, "stop_cells", None)
    print(f"\nfibexp-train: {signals.name}: stopping the sweep's cells (up to {STOP_WAIT_S:.0f} s; "
          f"{signals.name} again stops them at once)", file=sys.stderr, flush=True)
    if stop is None:  # in-process cells: the interrupt has already unwound the cell
        return
    try:
        stop(force=False, wait_s=STOP_WAIT_S)
    except KeyboardInterrupt:
        stop(force=True, wait_s=5)


def _parent_run(client, experiment_id: str, sweep_id: str, grid: str, cells) -> str:
    """One parent run per sweep definition, named after its grid, reused when the same sweep is launched again."""
    found = client.search_runs([experiment_id], f"tags.`fibexp.sweep` = '{sweep_id}' and tags.`fibexp.sweep_parent` = 'true'")
    if found:
        client.update_run(found[0].info.run_id, status="RUNNING")
        return found[0].info.run_id
    run = client.create_run(experiment_id, run_name=f"{grid} [{sweep_id}]",  # the id tells apart sweeps of one grid
                            tags={"fibexp.sweep": sweep_id, "fibexp.sweep_parent": "true"})
    client.log_text(run.info.run_id, OmegaConf.to_yaml({"cells": [" ".join(c) for c in cells]}), "sweep.yaml")
    return run.info.run_id


def _at_once(launcher) -> str:
    """hydra.launcher.array_parallelism of a SLURM sweep that waits (a detached one says it at submission)."""
    n = getattr(launcher, "params", {}).get("array_parallelism")
    slurm = "Slurm" in type(launcher).__name__ and not getattr(launcher, "detaches", False)
    return f"; at most {n} cells at once (hydra.launcher.array_parallelism)" if slurm and n else ""


def _threads(sweep_cfg, cfg) -> list[str]:
    """Parallel launchers start many jobs on one machine or node: bound each job's threads."""
    if cfg.trainer.threads or "BasicLauncher" in sweep_cfg.hydra.launcher._target_:
        return []
    return [f"trainer.threads={sweep_cfg.hydra.launcher.get('cpus_per_task') or 1}"]
