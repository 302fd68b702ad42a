"""What a run will write to and resume from, without torch or MLflow: the outputs and cache
folders, the tracking store (a sqlite file must be an SQLite database, a server must answer) and
the checkpoint file."""
from __future__ import annotations

import os
import urllib.error
import urllib.request
from pathlib import Path

from omegaconf import DictConfig

from fibexp.checks.refusals import refusals
from fibexp.config.paths import check_checkpoint_file
from fibexp.config.paths import writable as _writable
from fibexp.errors import refuse

SQLITE_HEADER = b"SQLite format 3\x00"


def tracking_uri(cfg: DictConfig) -> tuple[str, str]:
    """(the run's tracking URI, the key that chose it): logger.tracking_uri, else
    $MLFLOW_TRACKING_URI, else the sqlite store under paths.output_dir (as fibexp.tracking.store.resolve_uri)."""
    if cfg.logger.tracking_uri:
        return str(cfg.logger.tracking_uri), "logger.tracking_uri"
    if os.environ.get("MLFLOW_TRACKING_URI"):
        return os.environ["MLFLOW_TRACKING_URI"], "MLFLOW_TRACKING_URI"
    return f"sqlite:///{Path(cfg.paths.output_dir).resolve()}/mlflow.db", "paths.output_dir"


def check_store(cfg: DictConfig, timeout: float = 20.0) -> None:
    """The tracking store a run will write to, without MLflow: a sqlite file must be an SQLite
    database (it is never modified here) in a writable folder; a server must answer."""
    uri, key = tracking_uri(cfg)
    if uri.startswith("sqlite:///"):
        db = Path(uri[len("sqlite:///"):])
        _writable(db.parent, key, "the sqlite store's folder")
        if db.exists():
            try:
                with open(db, "rb") as f:
                    head = f.read(len(SQLITE_HEADER))
            except OSError as e:
                refuse(key, f"{uri} ({db} cannot be read: {e.strerror})", "a readable MLflow sqlite store")
            if head and head != SQLITE_HEADER:
                refuse(key, f"{uri} ({db} is not an SQLite database: it starts {head!r})",
                       "an MLflow sqlite store (fibexp leaves this file as it is), or another paths.output_dir")
    elif uri.startswith(("http://", "https://")):
        try:
            with urllib.request.urlopen(uri.rstrip("/") + "/health", timeout=timeout) as r:
                r.read()
        except (urllib.error.URLError, OSError, ValueError) as e:
            refuse(key, f"{uri} unreachable ({getattr(e, 'reason', e)})", "a running server (`make mlflow-server`), "
                   "or null for the local sqlite store")


@refusals
def check_outside(cfg: DictConfig, run_dir: Path | None = None) -> None:
    """What a run will write to and resume from, without torch or MLflow: the outputs and cache
    folders, the tracking store, and the checkpoint file."""
    _writable(Path(cfg.paths.output_dir), "paths.output_dir", "runs/, mlflow.db and mlartifacts/ go there")
    _writable(Path(cfg.paths.cache_dir), "paths.cache_dir", "tokenizers and token caches go there")
    check_store(cfg)
    check_checkpoint_file(cfg, run_dir)
