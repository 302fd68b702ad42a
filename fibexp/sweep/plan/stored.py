"""What the tracking store already holds for a plan, read only: FINISHED runs by config hash
(the sweep skips their cells) and the measured step times of FINISHED runs by model shape (what
a CPU cell is priced at); and the params a run of a cell logs, which both are read from."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

from omegaconf import DictConfig, OmegaConf

from fibexp.sweep.plan.size import n_params
from fibexp.tracking import store, waiting


# What makes two runs' training steps cost the same (params of a run, plus its fibexp.cell tag).
SHAPE = ("task.name", "task.model", "task.k", "model.n_layers", "model.d_model", "model.n_heads", "model.n_kv_heads",
         "model.vocab_size", "model.seq_len", "model.ffn_hidden", "data.batch_size", "attention.order",
         "attention.hybrid_layers", "attention.coord_dim")


def _resolved(cfg: DictConfig) -> dict:
    """The config its job runs (no hydra node), resolved."""
    return {k: OmegaConf.to_container(cfg[k], resolve=True, enum_to_str=True) if OmegaConf.is_config(cfg[k]) else cfg[k]
            for k in cfg if k != "hydra"}


def logged_params(cfg: DictConfig) -> dict[str, str]:
    """The params a run of this config logs (fibexp.training.record.Record.open)."""
    resolved = _resolved(cfg)
    resolved["model"].pop("attention")
    size = n_params(cfg)
    return {**store.flatten(resolved), "model.n_params": str(size) if size is not None else "unknown"}


def shape_of(params: Mapping[str, str], cell: str) -> tuple:
    """What makes two runs' training steps cost the same: their cell and SHAPE params."""
    return (cell, *(params.get(k) for k in SHAPE))


@dataclass
class Store:
    """What the tracking store already holds: FINISHED runs by config hash, and the measured step
    times (perf/step_ms) of FINISHED runs by model shape."""

    uri: str
    finished: dict[str, str] = field(default_factory=dict)
    step_ms: dict[tuple, list[float]] = field(default_factory=dict)
    exists: bool = True
    experiment_id: str | None = None  # where the runs are (their seed spreads: fibexp.report.power)


def read_store(uri: str, experiment: str) -> Store:
    """The store's FINISHED runs; nothing is created (a sqlite file that does not exist is an
    empty store). An unreachable server is refused, as the sweep refuses it."""
    if uri.startswith("sqlite:///") and not Path(uri[len("sqlite:///"):]).exists():
        return Store(uri, exists=False)
    store.check_reachable(uri)
    client = waiting.Client(uri, prog="fibexp-plan")  # a store another process holds locked is waited for
    exp = client.get_experiment_by_name(experiment)
    out = Store(uri, experiment_id=exp.experiment_id if exp else None)
    if exp is None:
        return out
    token = None
    while True:
        page = client.search_runs([exp.experiment_id], "attributes.status = 'FINISHED'", max_results=5000,
                                  page_token=token)
        for r in page:
            tags, h = r.data.tags, r.data.tags.get("fibexp.config_hash")
            if h and h not in out.finished:
                out.finished[h] = r.info.run_id
            if "fibexp.cell" in tags and (ms := r.data.metrics.get("perf/step_ms")) is not None:
                out.step_ms.setdefault(shape_of(r.data.params, tags["fibexp.cell"]), []).append(ms)
        if not (token := page.token):
            return out
