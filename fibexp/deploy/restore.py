"""Trained runs back into Python, for notebooks and export: the resolved config MLflow recorded,
the model with the weights of the run's last checkpoint, and the tokenizer it was trained with.

Finding a run (`locate`) imports neither torch nor MLflow: a run id is looked up in the store
directly (a sqlite file opened read-only, or a server's REST API), so a command given a wrong
run answers at once."""
from __future__ import annotations

import json
import os
import sqlite3
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from unittest import mock

from omegaconf import DictConfig, OmegaConf

from fibexp.errors import Refusal

SWEEP_PARENT = "fibexp.sweep_parent"  # the tag of a sweep's parent run (fibexp.sweep)
SHOWN_CELLS = 20


class RunNotFound(Refusal):
    """The run (dir, checkpoint or id) cannot be found or read: a refusal of the key `run`, so
    a notebook can catch it apart from the other refusals `load_run` may raise."""

    def __init__(self, value: object, allowed: str):
        super().__init__("run", value, allowed)


def store_uri(tracking_uri: str | None = None) -> str:
    """`tracking_uri`, else $MLFLOW_TRACKING_URI, else ./outputs/mlflow.db (as fibexp.tracking.store.resolve_uri)."""
    return tracking_uri or os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{Path('outputs').resolve()}/mlflow.db"


def _sqlite(uri: str, query: str, args: tuple) -> list[tuple]:
    db = Path(uri[len("sqlite:///"):])
    if not db.is_file():
        return []
    try:
        with sqlite3.connect(f"{db.resolve().as_uri()}?mode=ro", uri=True) as con:
            return con.execute(query, args).fetchall()
    except sqlite3.Error as e:
        raise RunNotFound(f"the store {uri} cannot be read ({e})", "an MLflow sqlite store") from None


def _rest(uri: str, endpoint: str, body: dict | None = None) -> dict | None:
    url = f"{uri.rstrip('/')}/api/2.0/mlflow/{endpoint}"
    data = json.dumps(body).encode() if body is not None else None
    try:
        with urllib.request.urlopen(urllib.request.Request(url, data, {"Content-Type": "application/json"}),
                                    timeout=20) as r:
            return json.loads(r.read())
    except urllib.error.HTTPError as e:
        if e.code == 404:
            return None
        raise RunNotFound(f"the tracking server {uri} answered {e.code}", "a reachable MLflow server") from None
    except (urllib.error.URLError, OSError) as e:
        raise RunNotFound(f"the tracking server {uri} is unreachable ({getattr(e, 'reason', e)})",
                          "a reachable MLflow server") from None


def find_run(uri: str, run_id: str) -> dict | None:
    """{"run_id", "status", "tags"} of a live run of the store, or None."""
    if uri.startswith("sqlite:///"):
        rows = _sqlite(uri, "SELECT run_uuid, status FROM runs WHERE run_uuid = ? AND lifecycle_stage = 'active'",
                       (run_id,))
        if not rows:
            return None
        tags = dict(_sqlite(uri, "SELECT key, value FROM tags WHERE run_uuid = ?", (run_id,)))
        return {"run_id": rows[0][0], "status": rows[0][1], "tags": tags}
    if uri.startswith(("http://", "https://")):
        got = _rest(uri, f"runs/get?{urllib.parse.urlencode({'run_id': run_id})}")
        if not got or got.get("run", {}).get("info", {}).get("lifecycle_stage") != "active":
            return None
        info, data = got["run"]["info"], got["run"].get("data", {})
        return {"run_id": info["run_id"], "status": info["status"], "experiment_id": info["experiment_id"],
                "tags": {t["key"]: t["value"] for t in data.get("tags", [])}}
    from mlflow.tracking import MlflowClient  # another kind of store: MLflow's own client

    try:
        found = MlflowClient(uri).get_run(run_id)
    except Exception:
        return None
    return {"run_id": found.info.run_id, "status": found.info.status, "experiment_id": found.info.experiment_id,
            "tags": dict(found.data.tags)}


def _cells(uri: str, parent: dict) -> list[tuple[str, str]]:
    """(run id, run name) of the runs nested under a sweep's parent run."""
    if uri.startswith("sqlite:///"):
        return _sqlite(uri, "SELECT r.run_uuid, r.name FROM runs r JOIN tags t ON t.run_uuid = r.run_uuid WHERE "
                            "t.key = 'mlflow.parentRunId' AND t.value = ? AND r.lifecycle_stage = 'active' "
                            "ORDER BY r.start_time", (parent["run_id"],))
    if uri.startswith(("http://", "https://")):
        got = _rest(uri, "runs/search", {"experiment_ids": [parent["experiment_id"]], "max_results": 1000,
                                         "filter": f"tags.mlflow.parentRunId = '{parent['run_id']}'"}) or {}
        return [(r["info"]["run_id"], r["info"].get("run_name", "")) for r in got.get("runs", [])]
    return []


def _sweep_parent(uri: str, found: dict) -> RunNotFound:
    cells = _cells(uri, found)
    listed = ", ".join(f"{i} ({name})" for i, name in cells[:SHOWN_CELLS])
    more = f" (+{len(cells) - SHOWN_CELLS} more)" if len(cells) > SHOWN_CELLS else ""
    return RunNotFound(f"{found['run_id']} (a sweep's parent run, tag {SWEEP_PARENT})",
                       f"a cell's run id or its run dir; its cells: {listed or 'none yet'}{more}")


def locate(run: str | os.PathLike, tracking_uri: str | None = None) -> tuple[str, str, Path]:
    """(run id, tracking URI, checkpoint) of a run dir, a checkpoint inside one, or an MLflow run
    id (looked up in `tracking_uri`, else $MLFLOW_TRACKING_URI, else ./outputs/mlflow.db)."""
    path = Path(run)
    if path.is_file() and path.suffix == ".ckpt":
        ckpt, run_dir = path, path.parent.parent
    elif path.is_dir():
        ckpt, run_dir = path / "checkpoints" / "last.ckpt", path
    else:
        uri = store_uri(tracking_uri)
        found = find_run(uri, str(run))
        if found is None:
            raise RunNotFound(repr(str(run)), f"a run dir, a .ckpt file in one, or a run id in {uri}")
        if found["tags"].get(SWEEP_PARENT) == "true":
            raise _sweep_parent(uri, found)
        run_dir = Path(found["tags"].get("fibexp.run_dir", ""))
        return found["run_id"], uri, _existing(run_dir / "checkpoints" / "last.ckpt", run)
    record = run_dir / "mlflow_run.json"
    if not record.is_file():
        raise RunNotFound(run, "a fibexp run dir (with mlflow_run.json), a .ckpt file in one, or a run id")
    try:
        info = json.loads(record.read_text(encoding="utf-8"))
        run_id, recorded_uri = info["run_id"], info["tracking_uri"]
    except (ValueError, KeyError, TypeError) as e:
        raise RunNotFound(f"{run} (its {record} cannot be read: {type(e).__name__})", "a fibexp run dir") from None
    return run_id, tracking_uri or recorded_uri, _existing(ckpt, run)


def _existing(ckpt: Path, run) -> Path:
    if not ckpt.is_file():
        raise RunNotFound(f"{run} (no checkpoint at {ckpt})", "a run that has reached its first checkpoint")
    return ckpt


def require_finished(run_id: str, tracking_uri: str, command: str) -> None:
    """Refuse a run that has not FINISHED: its last checkpoint may not be its final weights, and
    `command` logs into it."""
    found = find_run(tracking_uri, run_id)
    status = found["status"] if found else "not in the store"
    if status != "FINISHED":
        raise RunNotFound(f"{run_id} ({status})",
                          f"a FINISHED run ({command} reads its last checkpoint and logs into it)")


def run_config(run_id: str, tracking_uri: str) -> DictConfig:
    """The resolved config.yaml the run logged, with the model's attention node put back."""
    from fibexp.tracking import store

    client = store.MlflowClient(tracking_uri)
    # one small file: MLflow's download progress bar would only be noise in a notebook
    quiet = mock.patch.dict(os.environ, {"MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false"})
    with tempfile.TemporaryDirectory() as tmp, quiet:
        try:
            cfg = OmegaConf.load(client.download_artifacts(run_id, "config.yaml", tmp))
        except Exception as e:
            raise RunNotFound(f"{run_id} (its config.yaml cannot be read from {tracking_uri}: {type(e).__name__})",
                              "a run that logged its config.yaml") from None
    cfg.model.attention = cfg.attention
    return cfg


def load_weights(model, ckpt: Path):
    """The LM's weights (a torch.nn.Module's) from a Lightning checkpoint, read weights-only (no
    pickled code runs; one that needs any is refused by name)."""
    from fibexp import checkpoints

    state = checkpoints.read(ckpt, key="run")["state_dict"]
    prefix = checkpoints.MODEL_PREFIX
    model.load_state_dict({k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)})
    return model


def load_run(run: str | os.PathLike, tracking_uri: str | None = None):
    """(resolved config, LM in eval mode with the run's last weights) of a run dir, a checkpoint
    in one, or an MLflow run id; e.g. `cfg, model = fibexp.load_run("outputs/runs/dense-s42-...")`."""
    from fibexp.tasks import registry as tasks

    run_id, uri, ckpt = locate(run, tracking_uri)
    cfg = run_config(run_id, uri)
    model = load_weights(tasks.build(cfg).build_model(), ckpt)
    return cfg, model.eval()


def run_tokenizer(cfg: DictConfig):
    """The run's tokenizer, as it was built for training (the cache under the run's
    `paths.cache_dir`, rebuilt from the corpus if that cache is gone)."""
    from fibexp.data.sources import open_corpus
    from fibexp.data.tokenizer import load_tokenizer

    cache_dir = Path(cfg.paths.cache_dir)
    return load_tokenizer(cfg.data.tokenizer, open_corpus(cfg.data, cache_dir), int(cfg.model.vocab_size), cache_dir)
