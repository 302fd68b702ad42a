"""MLflow plumbing: where the store is, making sure it exists once, and runs that can be
resumed (same run id across restarts) and compared (tags of the contract, flat params)."""
from __future__ import annotations

import os
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

from mlflow.tracking import MlflowClient


class TrackingError(RuntimeError):
    """The tracking store cannot be used; raised before any compute."""


def resolve_uri(configured: str | None, output_dir: Path) -> str:
    """logger.tracking_uri, else $MLFLOW_TRACKING_URI, else a sqlite db under outputs/."""
    return configured or os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{Path(output_dir).resolve()}/mlflow.db"


def check_reachable(uri: str, timeout: float = 20.0) -> None:
    if uri.startswith(("http://", "https://")):
        try:
            with urllib.request.urlopen(uri.rstrip("/") + "/health", timeout=timeout) as r:
                r.read()
        except (urllib.error.URLError, OSError) as e:
            raise TrackingError(f"logger.tracking_uri: cannot reach {uri} ({getattr(e, 'reason', e)}); "
                                "start it with `make mlflow-server` or unset it to use the local sqlite store") from None


def ensure_experiment(uri: str, name: str, artifact_root: Path) -> str:
    """Create the store (schema) and the experiment once, with artifacts pinned under outputs/."""
    check_reachable(uri)
    if uri.startswith("sqlite:///"):
        Path(uri[len("sqlite:///"):]).parent.mkdir(parents=True, exist_ok=True)
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name(name)
    if exp is not None:
        return exp.experiment_id
    location = None if uri.startswith(("http://", "https://")) else (Path(artifact_root).resolve() / name).as_uri()
    return client.create_experiment(name, artifact_location=location)


def git_sha(root: Path) -> str:
    """Commit of the code that ran, with '-dirty' when the work tree differs from it."""
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True,
                             check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True).stdout.strip()
        return sha + ("-dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def flatten(tree: dict, prefix: str = "") -> dict[str, str]:
    """Nested config -> {"model.n_layers": "4", ...} (the params contract: keys joined with '.')."""
    out = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flatten(value, name + "."))
        else:
            out[name] = str(value)
    return out


def log_params(client: MlflowClient, run_id: str, params: dict[str, str]) -> None:
    from mlflow.entities import Param

    items = [Param(k, v[:6000]) for k, v in sorted(params.items())]
    for i in range(0, len(items), 100):
        client.log_batch(run_id, params=items[i:i + 100])


def find_runs(client: MlflowClient, experiment_id: str, config_hash: str, status: str | None = None):
    query = f"tags.`fibexp.config_hash` = '{config_hash}'"
    if status:
        query += f" and attributes.status = '{status}'"
    return client.search_runs([experiment_id], query, order_by=["attributes.start_time DESC"])
