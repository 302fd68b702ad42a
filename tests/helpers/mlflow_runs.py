"""Hand-made MLflow runs for the report and claims tests: a sqlite store per module (its schema
built once per session and copied: creating it costs seconds) and runs shaped like fibexp's; and
reading back the runs a real fibexp command logged."""
from __future__ import annotations

import itertools
import json
import shutil
import tempfile

from mlflow.entities import Metric, Param
from mlflow.tracking import MlflowClient
from omegaconf import OmegaConf

from fibexp.tasks import registry

SETS = ("code", "docs", "drama", "encyclopedic", "prose")
_names = itertools.count()


def fibexp_runs(store) -> tuple[MlflowClient, list]:
    """(client, the runs of experiment "fibexp") of `store`: a tracking URI, or an output dir with mlflow.db."""
    client = MlflowClient(store if isinstance(store, str) else f"sqlite:///{store}/mlflow.db")
    exp = client.get_experiment_by_name("fibexp")
    return client, ([] if exp is None else client.search_runs([exp.experiment_id]))


def undeclared_and_missing(client: MlflowClient, run) -> tuple[set[str], set[str]]:
    """(metrics the run logged that its task does not declare, declared ones it did not log):
    both empty when a finished run logged exactly what its task's config declares (fibexp.tasks.registry)."""
    cfg = OmegaConf.load(client.download_artifacts(run.info.run_id, "config.yaml", tempfile.mkdtemp()))
    declared, logged = registry.get(cfg.task.name).metric_names(cfg), set(run.data.metrics)
    return logged - declared, declared - logged


def sqlite_store(tmp_path_factory, name: str) -> MlflowClient:
    template = tmp_path_factory.getbasetemp() / "mlflow-schema.db"
    if not template.exists():
        MlflowClient(f"sqlite:///{template}").search_experiments()
    d = tmp_path_factory.mktemp(name)
    shutil.copy(template, d / "mlflow.db")
    client = MlflowClient(f"sqlite:///{d}/mlflow.db")
    client.artifact_root = (d / "artifacts").as_uri()
    return client


def new_experiment(client, name=None) -> str:
    return client.create_experiment(name or f"case{next(_names)}", artifact_location=client.artifact_root)


def log_run(client, exp, cell, *, task="lm", seed=42, lr=1e-3, layers=4, length=64, steps=1500, metrics=(),
            params=None, tags=None, status="FINISHED"):
    """One finished cell run with the params and tags the report reads (contract names)."""
    base = {"seed": seed, "optim.lr": lr, "model.n_layers": layers, "model.seq_len": length,
            "trainer.max_steps": steps, "data.batch_size": 16, "model.d_model": 64, "data.tokenizer": "bpe",
            "task.name": task, "attention.kind": cell.split("/")[0], "attention.order": "rot",
            "attention.causal": task == "lm", "attention.hybrid_layers": None, "model.n_params": 123456}
    base.update(params or {})
    t = {"fibexp.cell": cell, "fibexp.task": task, "fibexp.eval_version": "1",
         "fibexp.corpus": "c0ffee" if task == "lm" else "gen-v1", "fibexp.sweep": "sw-1"}
    t.update(tags or {})
    run = client.create_run(exp, tags=t)
    client.log_batch(run.info.run_id, metrics=[Metric(k, v, 0, 0) for k, v in dict(metrics).items()],
                     params=[Param(k, str(v)) for k, v in base.items()])
    client.set_terminated(run.info.run_id, status)
    return run.info.run_id


# a loss curve over position bins (falling, then flat) for fixed alpha, and stagger's, a little lower
FIXED_BINS = (4.05, 3.95, 3.85, 3.85, 3.85, 3.85, 3.85, 3.84)
STAGGER_BINS = (4.02, 3.92, 3.82, 3.82, 3.82, 3.81, 3.82, 3.81)


def lm_metrics(ppl, rel4=0.0, bins=None):
    """Five held-out sets (spread around ppl), extrapolation at 1x/2x/4x, optional position bins."""
    m = {}
    for i, s in enumerate(SETS):
        p = ppl * (0.8 + 0.1 * i)
        m |= {f"val/ppl/{s}": p, f"extrap/ppl_x1/{s}": p, f"extrap/rel_x1/{s}": 0.0,
              f"extrap/ppl_x2/{s}": p * (1 + rel4 / 2), f"extrap/rel_x2/{s}": rel4 / 2,
              f"extrap/ppl_x4/{s}": p * (1 + rel4), f"extrap/rel_x4/{s}": rel4}
        for j, b in enumerate(bins or ()):
            m[f"val/pos_loss/{s}/bin{j}"] = b
    return m


def count(acc, chance=0.196):
    return {"task/acc": acc, "task/chance": chance, "train/loss": 0.1}


# Paper B's char-LM lr grid, held-out bpc per cell and lr; None: the run diverged (attention at the two largest).
HYPERCUBE_LR_BPC = {"dense": {0.004: None, 0.002: None, 0.001: 1.80, 0.0005: 1.82},
                    "hypercube/hybrid": {0.004: 1.79, 0.002: 1.72, 0.001: 1.73, 0.0005: 1.78},
                    "hypercube/rot": {0.004: 1.80, 0.002: 1.74, 0.001: 1.75, 0.0005: 1.79}}
HYPERCUBE_LM = {"data.tokenizer": "char", "model.seq_len": 256, "model.n_layers": 16, "attention.causal": True}


def log_hypercube_lr_grid(client, exp, weights=None, seeds=(42,), census=None, grid=None) -> None:
    """Every cell of `grid` (default HYPERCUBE_LR_BPC) as a run per seed (seed s adds 0.001 * (s - 42) to
    the bpc; diverged ones tagged, with only train/diverged_step); census: {cell: (links, weights)} logged
    as model/links and model/weights, as fibexp.model.census does."""
    for cell, lrs in (grid or HYPERCUBE_LR_BPC).items():
        for lr, b in lrs.items():
            for seed in seeds:
                v = None if b is None else b + 0.001 * (seed - 42)
                m = ({f"val/bpc/{s}": v for s in SETS} | {f"val/ppl/{s}": 2 ** v for s in SETS}) if v else \
                    {"train/diverged_step": 40.0}
                if census and cell in census:
                    m |= {"model/links": float(census[cell][0]), "model/weights": float(census[cell][1])}
                log_run(client, exp, cell, lr=lr, seed=seed, metrics=m,
                        params={**HYPERCUBE_LM, **({"model.n_params": weights[cell]} if weights else {})},
                        tags={"fibexp.diverged": "true"} if b is None else None)


def run_dir_of(tmp_path, run_id: str = "x", tracking_uri: str | None = None, ckpt: bool = True):
    """A fibexp run dir as training leaves it (mlflow_run.json, checkpoints/last.ckpt: empty) naming
    `run_id` in `tracking_uri` (default: a store that does not exist)."""
    run_dir = tmp_path / "run"
    (run_dir / "checkpoints").mkdir(parents=True)
    if ckpt:
        (run_dir / "checkpoints" / "last.ckpt").write_bytes(b"")
    uri = tracking_uri or f"sqlite:///{tmp_path}/none.db"
    (run_dir / "mlflow_run.json").write_text(json.dumps({"run_id": run_id, "tracking_uri": uri}))
    return run_dir
