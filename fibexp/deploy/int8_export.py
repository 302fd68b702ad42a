"""`fibexp-export RUN --int8`: a finished task=lm or task=graft run's model quantized to int8
(fibexp.model.quantize, the rule of what quantizes), measured on the run's held-out data
(fibexp.evals.int8, the same measurement `eval.int8=true` makes at the end of training: both sit
below training, which calls them), logged into the run's own MLflow run as `int8/...` (claim B14
reads `int8/degradation`), and the printed table."""
from __future__ import annotations

import time
from pathlib import Path

from mlflow.entities import Metric
from omegaconf import DictConfig

from fibexp.data.sources import open_corpus
from fibexp.errors import refuse
from fibexp.evals.int8 import measure
from fibexp.model import quantize
from fibexp.tasks import registry
from fibexp.tasks.lm.task import LanguageModelling
from fibexp.tracking import waiting


def heldout_data(cfg: DictConfig):
    """The run's LM datamodule, prepared (its token caches, rebuilt if gone)."""
    task = registry.build(cfg)
    if not isinstance(task, LanguageModelling):
        refuse("task", cfg.task.name, "lm or graft (--int8 measures held-out ppl and bpc of a language model's run)")
    dm = task.datamodule(open_corpus(cfg.data, Path(cfg.paths.cache_dir)))
    dm.prepare_data()
    return dm


def quantized(cfg: DictConfig, model):
    """(the int8 copy of the run's model, its int8/... metrics against `model` on the held-out data)."""
    qmodel = quantize.int8(model)
    return qmodel, measure(model, heldout_data(cfg), int(cfg.model.seq_len), int(cfg.eval.batch_tokens), qmodel)


def log(run_id: str, tracking_uri: str, metrics: dict[str, float]) -> None:
    """Into the run's own MLflow run (a finished run takes new metrics); a locked store is waited for:
    the measurement is not lost to it."""
    ts = int(time.time() * 1000)
    client = waiting.Client(tracking_uri, prog="fibexp-export")
    client.log_batch(run_id, metrics=[Metric(k, float(v), ts, 0) for k, v in metrics.items()])


def lines(metrics: dict[str, float]) -> list[str]:
    """The printed table: one row per held-out set, then size and degradation."""
    sets = sorted(k.split("/")[-1] for k in metrics if k.startswith("int8/bpc/"))
    out = [f"{'held-out set':<14}{'bpc float':>10}{'bpc int8':>10}{'ppl float':>11}{'ppl int8':>10}"]
    for s in sets:
        out.append(f"{s:<14}{metrics[f'int8/bpc_float/{s}']:>10.4f}{metrics[f'int8/bpc/{s}']:>10.4f}"
                   f"{metrics[f'int8/ppl_float/{s}']:>11.2f}{metrics[f'int8/ppl/{s}']:>10.2f}")
    out.append(f"size: {metrics['int8/bytes_float'] / 1e3:,.1f} kB float -> {metrics['int8/bytes_int8'] / 1e3:,.1f} kB "
               f"int8 ({metrics['int8/size_ratio']:.2f}x smaller); degradation (relative bpc increase, mean over "
               f"sets): {metrics['int8/degradation']:+.3%}")
    return out
