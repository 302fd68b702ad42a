"""Runs as the report reads them: one MLflow run as a RunView, the metrics claims and tables read
of it, and groups of comparable runs (same task, corpus, step budget, evaluation, size); the
runs left out are named with the reason."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

from mlflow.tracking import MlflowClient


# ---- runs as the claims read them ----
@dataclass
class RunView:
    """What a claim or a table reads of one MLflow run (tags, flat params, final metrics)."""

    run_id: str
    cell: str
    params: Mapping[str, str] = field(default_factory=dict)
    metrics: Mapping[str, float] = field(default_factory=dict)
    tags: Mapping[str, str] = field(default_factory=dict)
    start_time: int = 0

    @classmethod
    def of(cls, run) -> "RunView":
        d = run.data
        return cls(run.info.run_id, d.tags["fibexp.cell"], dict(d.params), dict(d.metrics), dict(d.tags),
                   run.info.start_time or 0)

    @property
    def task(self) -> str:
        return self.tags.get("fibexp.task") or self.params.get("task.name") or "lm"

    def _int(self, key: str, default: int = 0) -> int:
        try:
            return int(self.params.get(key, default))
        except ValueError:
            return default

    @property
    def seed(self) -> int:
        return self._int("seed")

    @property
    def lr(self) -> float | None:
        v = self.params.get("optim.lr")
        return float(v) if v not in (None, "None") else None

    @property
    def max_steps(self) -> int:
        return self._int("trainer.max_steps")

    @property
    def n_layers(self) -> int:
        return self._int("model.n_layers")

    @property
    def n(self) -> int:
        """Sequence length: the training length of an LM, the task length (count-ones n)."""
        return self._int("model.seq_len")

    @property
    def order(self) -> str:
        return self.params.get("attention.order", "rot")

    @property
    def causal(self) -> bool:
        return self.params.get("attention.causal", "True") != "False"

    @property
    def diverged(self) -> bool:
        return self.tags.get("fibexp.diverged") == "true"

    @property
    def kind(self) -> str:
        return self.cell.split("/")[0]

    @property
    def window(self) -> int | None:
        last = self.cell.rsplit("/", 1)[-1]
        return int(last[1:]) if self.kind == "sparse" and last[1:].isdigit() else None

    @property
    def family(self) -> str:
        """The cell without its window: `fib stagger`, `dense`, `hypercube/rot`."""
        parts = self.cell.split("/")
        return " ".join(parts[1:3]) if parts[0] == "sparse" else self.cell

    @property
    def n_params(self) -> int | None:
        v = self.params.get("model.n_params")
        return int(v) if v and v.isdigit() else None

    def per_set(self, prefix: str) -> dict[str, float]:
        """{set: value} of the metrics `<prefix><set>` (finite values only)."""
        return {k[len(prefix):]: v for k, v in self.metrics.items()
                if k.startswith(prefix) and "/" not in k[len(prefix):] and math.isfinite(v)}

    def set_mean(self, prefix: str) -> float | None:
        """Mean over the held-out sets; None for a diverged run or a missing metric."""
        vals = self.per_set(prefix)
        return None if self.diverged or not vals else sum(vals.values()) / len(vals)

    def metric(self, name: str) -> float | None:
        v = self.metrics.get(name)
        return v if v is not None and math.isfinite(v) and not self.diverged else None


@dataclass
class Group:
    """Runs that may be compared: same task, corpus, steps, eval version, length, model size."""

    task: str
    key: tuple
    runs: list[RunView]

    @property
    def n(self) -> int:
        return self.runs[0].n if self.runs else 0


# ---- metrics ----
def ppl(r: RunView) -> float | None:
    return r.set_mean("val/ppl/")


def bpc(r: RunView) -> float | None:
    return r.set_mean("val/bpc/")


def rel(r: RunView, factor: int) -> float | None:
    return r.set_mean(f"extrap/rel_x{factor}/")


def acc(r: RunView) -> float | None:
    return r.metric("task/acc")


def bins(r: RunView) -> list[float] | None:
    """Loss per position bin (paper A's 8 bins), mean over the held-out sets."""
    per_bin: dict[int, list[float]] = {}
    for k, v in r.metrics.items():
        if k.startswith("val/pos_loss/") and k.rsplit("/", 1)[-1].startswith("bin") and math.isfinite(v):
            per_bin.setdefault(int(k.rsplit("bin", 1)[-1]), []).append(v)
    if r.diverged or not per_bin:
        return None
    return [sum(per_bin[j]) / len(per_bin[j]) for j in sorted(per_bin)]


# ---- which runs: loading and comparability ----
def load_runs(client: MlflowClient, experiment_ids: Sequence[str], sweep: str | None = None,
              run_ids: Sequence[str] | None = None) -> tuple[list[RunView], int]:
    """FINISHED cell runs (newest first) of the experiments, or of one sweep (tag fibexp.sweep)
    plus the named runs (a sweep's skipped cells belong to the sweep that ran them);
    also how many cell runs were not FINISHED (failed, killed, still running)."""
    if sweep and run_ids is None:  # the sweep's parent run names all its cells' runs, skipped ones too
        parents = client.search_runs(list(experiment_ids), f"tags.`fibexp.sweep` = '{sweep}' and "
                                                           "tags.`fibexp.sweep_parent` = 'true'")
        run_ids = [i for p in parents for i in p.data.tags.get("fibexp.runs", "").split(",") if i]
    runs, token = [], None
    while sweep or not run_ids:
        query = f"tags.`fibexp.sweep` = '{sweep}'" if sweep else ""
        page = client.search_runs(list(experiment_ids), query, order_by=["attributes.start_time DESC"],
                                  max_results=5000, page_token=token)
        runs += page
        if not (token := page.token):
            break
    have = {r.info.run_id for r in runs}
    runs += [client.get_run(i) for i in run_ids or () if i and i not in have]
    cells = [r for r in runs if "fibexp.cell" in r.data.tags]
    views = sorted((RunView.of(r) for r in cells if r.info.status == "FINISHED"), key=lambda v: -v.start_time)
    return views, sum(r.info.status != "FINISHED" for r in cells)


def _param(key: str) -> Callable[[RunView], str | None]:
    return lambda r: r.params.get(key)


# The comparison key: corpus fingerprint + tokenizer (the fingerprint alone does not name it), model size (vocab, heads, FFN width, layers, width),
# step budget, eval version, eval tokens and data mixture. Runs differing in any of these are never compared.
_COMMON = (("corpus", lambda r: r.tags.get("fibexp.corpus")), ("tokenizer", _param("data.tokenizer")), ("vocab", _param("model.vocab_size")),
           ("step budget", _param("trainer.max_steps")), ("eval version", lambda r: r.tags.get("fibexp.eval_version")),
           ("eval tokens", _param("data.eval_tokens")), ("mixture", _param("data.mixture")),
           ("batch size", _param("data.batch_size")), ("width", _param("model.d_model")),
           ("heads", _param("model.n_heads")), ("FFN width", _param("model.ffn_hidden")))
LM_KEY = _COMMON + (("length", _param("model.seq_len")), ("depth", _param("model.n_layers")))
TASK_KEY = _COMMON  # n is the task's bucket; depth and order vary within (they are the rows)


def _variant(r: RunView) -> tuple:
    p = r.params
    return (r.cell, r.seed, r.lr, r.n_layers, r.order, p.get("attention.alpha_init"), p.get("attention.hybrid_layers"),
            r.causal)


def comparable(views: Sequence[RunView]) -> tuple[list[Group], list[tuple[RunView, str]]]:
    """Groups of comparable runs, one per comparison key (per task, and n for synthetic tasks):
    groups never evict each other (paper A's BPE runs and paper B's character runs are both
    kept, each in its own group); within a group the newest run per cell/seed/lr/depth. Returns
    the groups (LM first, the largest first) and the runs left out with the reason."""
    groups: dict[tuple, Group] = {}
    left, seen = [], set()
    for r in sorted(views, key=lambda v: -v.start_time):
        bucket = ("lm",) if r.task == "lm" else (r.task, r.n)
        fields = LM_KEY if bucket[0] == "lm" else TASK_KEY
        key = tuple(f(r) for _, f in fields)
        g = groups.setdefault(bucket + key, Group(bucket[0], tuple((n, v) for (n, _), v in zip(fields, key)), []))
        if (bucket + key, _variant(r)) in seen:
            left.append((r, "an older rerun of a run shown"))
        else:
            seen.add((bucket + key, _variant(r)))
            g.runs.append(r)
    out = list(groups.values())
    out.sort(key=lambda g: (g.task != "lm", g.task, g.n, -len(g.runs)))
    return out, left


def merged(groups: Sequence[Group], field_name: str) -> list[Group]:
    """Groups that differ only in one key field, judged together (B10 reads the hierarchy sweep's
    step budgets side by side: one group per budget, since each run is compared at its own)."""
    out: dict[tuple, Group] = {}
    for g in groups:
        key = tuple((n, v) for n, v in g.key if n != field_name)
        m = out.setdefault((g.task, g.n, key), Group(g.task, key, []))
        m.runs.extend(g.runs)
    return list(out.values())


def group_differs(g: Group, ref: Group) -> str:
    """What sets group g apart from ref (`another step budget and vocab`)."""
    return "another " + " and ".join(n for (n, a), (_, b) in zip(g.key, ref.key) if a != b)


# ---- tables ----
