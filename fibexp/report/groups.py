"""Seed groups: the cells of a sweep that differ only in their seed, each headline metric's mean
and 95% Student-t interval over them (`fibexp.report.stats.mean_interval`, the claims report's
numbers), logged where the MLflow UI shows them: a tag on every cell run that the runs table's
"Group by" (and fibexp's saved seed view) groups on, whose value carries the group's interval, and
a table artifact of the sweep's parent run with every metric's interval."""
from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import Sequence

from fibexp.report.runs import RunView, load_runs
from fibexp.report.stats import mean_interval
from fibexp.tracking import store

log = logging.getLogger("fibexp.sweep")
GROUP_TAG = store.SEED_GROUP_TAG
TABLE = "seed_groups.json"
LEVEL = 0.95
# The params that make a result (fibexp.config.identity's parts, flattened), less the seed: runs
# equal on these are seeds of one cell. The attention implementation computes the same offsets.
_SAME = ("model.", "attention.", "data.", "optim.", "eval.", "task.", "trainer.max_steps")
_IGNORED = ("attention.impl",)


def sig4(x: float) -> str:
    """Four significant figures, as the UI's group label and the table show a number."""
    return f"{x:.4g}"


@dataclass
class SeedGroup:
    """One cell's seeds: its label, the runs (ids, seeds) and, per headline metric, (mean, lo, hi)."""

    label: str
    run_ids: list[str]
    seeds: list[int]
    stats: dict[str, tuple[float, float, float]] = field(default_factory=dict)

    def tag(self) -> str:
        """The group key the UI groups on and shows as the group's name (its seed count beside it):
        the cell and its first headline metric's mean and interval
        (`sparse/fib/stagger/W8 · mean_ppl_1x 808.2 [726.3, 890.2]`)."""
        if not self.stats:
            return self.label
        name, (m, lo, hi) = next(iter(self.stats.items()))
        return f"{self.label} · {name} {sig4(m)} [{sig4(lo)}, {sig4(hi)}]"


def _key(r: RunView) -> tuple:
    return (r.cell,) + tuple(sorted((k, v) for k, v in r.params.items()
                                    if k.startswith(_SAME) and k not in _IGNORED and not k.startswith("data.tokens.")))


def seed_groups(runs: Sequence[RunView], level: float = LEVEL) -> list[SeedGroup]:
    """Runs grouped by everything but the seed (in the order they first ran), the newest run of a
    repeated seed kept; each group's headline metrics (store.headline_metrics) over the seeds that logged them."""
    by_key: dict[tuple, dict[int, RunView]] = {}
    for r in sorted(runs, key=lambda r: r.start_time):
        by_key.setdefault(_key(r), {})[r.seed] = r
    labels = _labels(list(by_key))
    out = []
    for key, seeds in by_key.items():
        rs = [seeds[s] for s in sorted(seeds)]
        metrics = store.headline_metrics({m for r in rs for m in r.metrics})
        stats = {m: mean_interval([r.metrics[m] for r in rs if m in r.metrics], level) for m in metrics}
        out.append(SeedGroup(labels[key], [r.run_id for r in rs], [r.seed for r in rs], stats))
    return out


def _labels(keys: list[tuple]) -> dict[tuple, str]:
    """The cell's name, with the params that tell apart groups of the same cell (e.g. `optim.lr=0.002`)."""
    out = {}
    for key in keys:
        twins = [k for k in keys if k[0] == key[0]]
        if len(twins) == 1:
            out[key] = key[0]
            continue
        params = [dict(k[1:]) for k in twins]
        differ = sorted({p for d in params for p in d if len({d.get(p) for d in params}) > 1})
        mine = dict(key[1:])
        out[key] = " ".join([key[0]] + [f"{p}={mine.get(p)}" for p in differ])
    return out


def table(groups: Sequence[SeedGroup]) -> dict[str, list]:
    """One row per (group, metric): n, seeds, mean and the interval's ends (columns of MLflow's table artifact)."""
    rows = [(g, m, s) for g in groups for m, s in g.stats.items()]
    return {"group": [g.label for g, _, _ in rows], "metric": [m for _, m, _ in rows],
            "n": [len(g.seeds) for g, _, _ in rows], "seeds": [",".join(map(str, g.seeds)) for g, _, _ in rows],
            "mean": [s[0] for _, _, s in rows], "ci95_lo": [s[1] for _, _, s in rows],
            "ci95_hi": [s[2] for _, _, s in rows]}


def lines(groups: Sequence[SeedGroup]) -> list[str]:
    """The groups as the sweep prints them: a line per group, each metric `mean [lo, hi]`."""
    return [f"  {g.label} ({len(g.seeds)} seeds): "
            + "; ".join(f"{m} {sig4(a)} [{sig4(lo)}, {sig4(hi)}]" for m, (a, lo, hi) in g.stats.items())
            for g in groups if len(g.seeds) > 1]


def publish(client, experiment_id: str, sweep_id: str, parent_run_id: str, run_ids: Sequence[str]) -> list[SeedGroup]:
    """At a sweep's end: tag every finished cell with its seed group, log the table to the parent,
    print the groups of several seeds. A failure is logged, never fails the sweep."""
    try:
        views, _ = load_runs(client, [experiment_id], sweep_id, list(run_ids))
        groups = seed_groups(views)
        for g in groups:
            for run_id in g.run_ids:
                client.set_tag(run_id, GROUP_TAG, g.tag()[:5000])
        client.log_table(parent_run_id, table(groups), TABLE)
        client.set_tag(parent_run_id, "fibexp.seed_groups", json.dumps({g.label: len(g.seeds) for g in groups})[:5000])
    except Exception as e:  # a finished sweep is not failed by its seed groups
        log.error("seed groups of sweep %s not logged: %s: %s", sweep_id, type(e).__name__, e)
        return []
    if shown := lines(groups):
        print(f"Seed groups of sweep {sweep_id} (mean [{LEVEL:.0%} interval]; {TABLE} on its parent run):",
              flush=True)
        print("\n".join(shown), flush=True)
    base = store.ui_base(getattr(client, "tracking_uri", None))
    print(f"Seed groups in the UI: {store.ui_url(experiment_id, base, view=store.SEED_VIEW_KEY)}", flush=True)
    return groups
