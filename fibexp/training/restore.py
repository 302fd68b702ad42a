"""Trained runs back into Python, for notebooks and export: the resolved config MLflow recorded
and the model with the weights of the run's last checkpoint."""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from unittest import mock

import torch
from omegaconf import DictConfig, OmegaConf

from fibexp.tasks import registry as tasks
from fibexp.training import checkpoints
from fibexp.tracking import store


class RunNotFound(ValueError):
    """The run (dir, checkpoint or id) cannot be found or read."""


def locate(run: str | os.PathLike, tracking_uri: str | None = None) -> tuple[str, str, Path]:
    """(run id, tracking URI, checkpoint) of a run dir, a checkpoint inside one, or an MLflow run
    id (looked up in `tracking_uri`, else $MLFLOW_TRACKING_URI, else ./outputs/mlflow.db)."""
    path = Path(run)
    if path.is_file() and path.suffix == ".ckpt":
        ckpt, run_dir = path, path.parent.parent
    elif path.is_dir():
        ckpt, run_dir = path / "checkpoints" / "last.ckpt", path
    else:
        uri = store.resolve_uri(tracking_uri, Path("outputs"))
        try:
            found = store.MlflowClient(uri).get_run(str(run))
        except Exception:
            raise RunNotFound(f"run: {run!r}; allowed: a run dir, a .ckpt file in one, or a run id in {uri}") from None
        run_dir = Path(found.data.tags.get("fibexp.run_dir", ""))
        return found.info.run_id, uri, _existing(run_dir / "checkpoints" / "last.ckpt", run)
    record = run_dir / "mlflow_run.json"
    if not record.is_file():
        raise RunNotFound(f"run: {run}; allowed: a fibexp run dir (with mlflow_run.json), a .ckpt file in one, "
                          "or a run id")
    info = json.loads(record.read_text())
    return info["run_id"], tracking_uri or info["tracking_uri"], _existing(ckpt, run)


def _existing(ckpt: Path, run) -> Path:
    if not ckpt.is_file():
        raise RunNotFound(f"run: {run}; no checkpoint at {ckpt} (the run has not reached its first checkpoint)")
    return ckpt


def run_config(run_id: str, tracking_uri: str) -> DictConfig:
    """The resolved config.yaml the run logged, with the model's attention node put back."""
    client = store.MlflowClient(tracking_uri)
    # one small file: MLflow's download progress bar would only be noise in a notebook
    quiet = mock.patch.dict(os.environ, {"MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false"})
    with tempfile.TemporaryDirectory() as tmp, quiet:
        try:
            cfg = OmegaConf.load(client.download_artifacts(run_id, "config.yaml", tmp))
        except Exception as e:
            raise RunNotFound(f"run: {run_id}; its config.yaml cannot be read from {tracking_uri} "
                              f"({type(e).__name__})") from None
    cfg.model.attention = cfg.attention
    return cfg


def load_weights(model: torch.nn.Module, ckpt: Path) -> torch.nn.Module:
    """The LM's weights from a Lightning checkpoint, read weights-only (no pickled code runs; one
    that needs any is refused by name)."""
    state = checkpoints.read(ckpt, key="run")["state_dict"]
    prefix = checkpoints.MODEL_PREFIX
    model.load_state_dict({k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)})
    return model


def load_run(run: str | os.PathLike, tracking_uri: str | None = None) -> tuple[DictConfig, torch.nn.Module]:
    """(resolved config, LM in eval mode with the run's last weights) of a run dir, a checkpoint
    in one, or an MLflow run id; e.g. `cfg, model = fibexp.load_run("outputs/runs/dense-s42-...")`."""
    run_id, uri, ckpt = locate(run, tracking_uri)
    cfg = run_config(run_id, uri)
    model = load_weights(tasks.build(cfg).build_model(), ckpt)
    return cfg, model.eval()
