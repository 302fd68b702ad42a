"""`fibexp-export RUN --int8`: a trained run quantized to int8 (fibexp.model.quantize), its
held-out ppl and bpc before and after, measured by the LM task's own evaluator
(fibexp.tasks.lm.HeldoutPerplexity, contiguous windows at the training length, the evaluated
prefix of every held-out set), and the size ratio of the serialized float and int8 states; logged
into the run's own MLflow run as `int8/...` (claim B14 reads `int8/degradation`).

Metrics: int8/ppl_float/<set>, int8/ppl/<set>, int8/bpc_float/<set>, int8/bpc/<set> (bits per
character of the set's text, for BPE runs too: nats per token / ln 2 / characters per token),
int8/bytes_float, int8/bytes_int8, int8/size_ratio (float bytes / int8 bytes) and
int8/degradation (mean int8 bpc over the sets / mean float bpc - 1: the relative bpc increase)."""
from __future__ import annotations

import time
from pathlib import Path

import torch
from mlflow.entities import Metric
from omegaconf import DictConfig
from torch.utils.data import DataLoader, TensorDataset

from fibexp.data.sources import open_corpus
from fibexp.errors import refuse
from fibexp.model import quantize
from fibexp.tasks import registry
from fibexp.tasks.lm import HeldoutPerplexity, LanguageModelling
from fibexp.tracking import store


def heldout_data(cfg: DictConfig):
    """The run's LM datamodule, prepared (its token caches, rebuilt if gone)."""
    task = registry.build(cfg)
    if not isinstance(task, LanguageModelling):
        refuse("task", cfg.task.name, "lm (--int8 measures held-out ppl and bpc of a language model's run)")
    dm = task.datamodule(open_corpus(cfg.data, Path(cfg.paths.cache_dir)))
    dm.prepare_data()
    return dm


def heldout(model: torch.nn.Module, dm, seq_len: int, batch_tokens: int) -> dict[str, float]:
    """val/ppl/<set>, val/loss/<set> and val/bpc/<set> of `model` at the training length, as the
    LM task's evaluation computes them (bpc for every tokenizer)."""
    names = dm.heldout_names
    ev = HeldoutPerplexity([(n, 1) for n in names], {n: dm.chars_per_token(n) for n in names})
    with torch.no_grad():
        for i, name in enumerate(names):
            loader = DataLoader(TensorDataset(*dm.heldout_windows(name, seq_len)), batch_size=max(1, batch_tokens // seq_len))
            for batch in loader:
                ev.update(model, batch, i)
    return {k: v for k, v in ev.compute(lambda t: t).items() if k.startswith(("val/ppl/", "val/bpc/"))}


def measure(cfg: DictConfig, model: torch.nn.Module, qmodel: torch.nn.Module, dm) -> dict[str, float]:
    """The int8/... metrics of a float model and its quantized copy."""
    seq_len, batch_tokens = int(cfg.model.seq_len), int(cfg.eval.batch_tokens)
    before, after = heldout(model.eval(), dm, seq_len, batch_tokens), heldout(qmodel, dm, seq_len, batch_tokens)
    out: dict[str, float] = {}
    for key in before:
        what, s = key.split("/")[1:]
        out[f"int8/{what}_float/{s}"], out[f"int8/{what}/{s}"] = before[key], after[key]
    fb = [v for k, v in before.items() if k.startswith("val/bpc/")]
    qb = [v for k, v in after.items() if k.startswith("val/bpc/")]
    fbytes, qbytes = quantize.state_bytes(model), quantize.state_bytes(qmodel)
    out |= {"int8/bytes_float": float(fbytes), "int8/bytes_int8": float(qbytes), "int8/size_ratio": fbytes / qbytes,
            "int8/degradation": (sum(qb) / len(qb)) / (sum(fb) / len(fb)) - 1}
    return out


def log(run_id: str, tracking_uri: str, metrics: dict[str, float]) -> None:
    """Into the run's own MLflow run (a finished run takes new metrics)."""
    ts = int(time.time() * 1000)
    store.MlflowClient(tracking_uri).log_batch(run_id, metrics=[Metric(k, float(v), ts, 0) for k, v in metrics.items()])


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
