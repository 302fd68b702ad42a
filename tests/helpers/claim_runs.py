"""Hand-made runs for the claims' judges, without MLflow: RunViews shaped as fibexp logs them (the
params and tags the report reads), grouped and judged as `fibexp-report --claims` does. Fast enough
to walk every judge through each of its verdicts."""
from __future__ import annotations

import itertools
from typing import Iterable

from fibexp.report.ledger import CLAIMS, judge
from fibexp.report.runs import RunView, comparable

SETS = ("code", "prose")
SEEDS = (42, 43, 44)
_ids = itertools.count()


def run(cell: str, *, seed: int = 42, lr: float | None = 1e-3, layers: int = 4, length: int = 64, task: str = "lm",
        steps: int = 1500, metrics: dict | None = None, params: dict | None = None, diverged: bool = False) -> RunView:
    """One finished cell run; metrics as logged (`val/ppl/<set>`...), params over fibexp's defaults."""
    p = {"seed": str(seed), "optim.lr": str(lr), "model.n_layers": str(layers), "model.seq_len": str(length),
         "trainer.max_steps": str(steps), "data.batch_size": "16", "model.d_model": "64", "data.tokenizer": "bpe",
         "task.name": task, "attention.order": "rot", "attention.causal": str(task == "lm"),
         "attention.hybrid_layers": "None", "trainer.accelerator": "cpu"}
    p.update({k: str(v) for k, v in (params or {}).items()})
    tags = {"fibexp.cell": cell, "fibexp.task": task, "fibexp.eval_version": "1",
            "fibexp.corpus": "c0ffee" if task == "lm" else "gen-v1"}
    if diverged:
        tags["fibexp.diverged"] = "true"
    return RunView(f"r{next(_ids)}", cell, p, dict(metrics or {}), tags, start_time=next(_ids))


def ppl(value: float, rel4: float | None = None, bins: Iterable[float] = ()) -> dict:
    """Held-out ppl on two sets (mean `value`), the change at 4x, position bins."""
    m = {f"val/ppl/{s}": value * f for s, f in zip(SETS, (0.9, 1.1))}
    if rel4 is not None:
        m |= {f"extrap/rel_x4/{s}": rel4 for s in SETS}
    for j, b in enumerate(bins):
        m |= {f"val/pos_loss/{s}/bin{j}": b for s in SETS}
    return m


def bpc(value: float) -> dict:
    return {f"val/bpc/{s}": value for s in SETS}


def seeds(cell: str, values: Iterable, make=ppl, seeds_=SEEDS, **kw) -> list[RunView]:
    """A cell's runs, one per seed; a value of None: the run diverged."""
    return [run(cell, seed=s, metrics={} if v is None else make(v), diverged=v is None, **kw)
            for s, v in zip(seeds_, values)]


def verdicts(runs: Iterable[RunView]) -> dict:
    """{claim id: Verdict} over the runs, grouped as the report groups them."""
    groups, _ = comparable(list(runs))
    return {v.claim.id: v for v in judge(groups)}


def verdict(claim_id: str, runs: Iterable[RunView]):
    groups, _ = comparable(list(runs))
    (v,) = judge(groups, [c for c in CLAIMS if c.id == claim_id])
    return v
