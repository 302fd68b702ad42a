"""Which claims a grid can judge, before it runs: the report's own judges
(`fibexp.report.ledger.judge`) run on stand-in runs made from the cells (the params a run logs,
its tags, and the metrics its task declares with placeholder values), so `insufficient` here
means the grid cannot judge the claim whatever the runs measure. A sweep config may declare
which claims it serves and, for the others, why not (`hydra.sweeper.claims`)."""
from __future__ import annotations

import hashlib
import json
import random
import zlib
from dataclasses import dataclass
from typing import Callable

from omegaconf import DictConfig, OmegaConf

from fibexp.config import identity
from fibexp.errors import refuse
from fibexp.sweep.plan.grid import DUPLICATE, Cell
from fibexp.sweep.plan.stored import logged_params
from fibexp.report import ledger
from fibexp.report.claims import INSUFFICIENT
from fibexp.report.runs import RunView, comparable
from fibexp.tasks import registry as tasks

JUDGEABLE, CANNOT, NOT_AT_SCALE = "judgeable", "cannot judge", "not at this scale"  # the last: also the report's verdict

_RANGES = (("task/chance", (0.05, 0.2)), ("task/", (0.05, 1.0)), ("extrap/rel_", (-0.1, 0.5)), ("ppl", (10.0, 60.0)),
           ("bpc", (1.0, 4.0)), ("loss", (1.0, 5.0)), ("int8/degradation", (0.0, 0.1)),
           ("int8/size_ratio", (1.5, 4.0)), ("alpha/", (0.5, 1.5)), ("attn/", (1.0, 60.0)), ("model/", (1e4, 1e6)),
           ("perf/", (1e3, 1e5)))


def placeholder(name: str, rng: random.Random) -> float:
    """A finite value in a plausible range for a metric (the judges need values, not these)."""
    lo, hi = next((r for prefix, r in _RANGES if prefix in name), (0.0, 1.0))
    return rng.uniform(lo, hi)


def _corpus(job: DictConfig) -> str:
    """A stand-in for the fibexp.corpus fingerprint: one per distinct corpus (what a real
    fingerprint covers: the embedded domains, or the hf sources with their tokenizer)."""
    spec = tasks.get(job.task.name)
    if not spec.uses_corpus:
        return f"synthetic/{job.task.name}"
    d = OmegaConf.to_container(job.data, resolve=True)
    keep = {k: d.get(k) for k in ("source", "domains", "sources", "train_tokens")}
    if d.get("source") == "hf":
        keep["tokenizer"] = d.get("tokenizer")
    else:
        keep.pop("sources")
    return hashlib.sha256(json.dumps(keep, sort_keys=True, default=str).encode()).hexdigest()[:12]


def stand_in(c: Cell, metric: Callable[[str, "Cell"], float] | None = None) -> RunView:
    """The run this cell would leave in MLflow, as the report reads it: its params, tags and the
    metrics its task declares, valued by `metric(name, cell)` (default: seeded placeholders)."""
    job = c.cfg
    spec = tasks.get(job.task.name)
    rng = random.Random(zlib.crc32(c.hash.encode()))
    names = sorted(spec.metric_names(job))
    metrics = {n: (metric(n, c) if metric else placeholder(n, rng)) for n in names}
    tags = {"fibexp.cell": identity.cell(job), "fibexp.task": job.task.name, "fibexp.corpus": _corpus(job),
            "fibexp.eval_version": identity.EVAL_VERSION, "fibexp.config_hash": c.hash}
    return RunView(c.hash, tags["fibexp.cell"], logged_params(job), metrics, tags)


@dataclass(frozen=True)
class ClaimPlan:
    id: str
    kind: str  # JUDGEABLE, CANNOT or NOT_AT_SCALE
    detail: str = ""
    judged: str = JUDGEABLE  # what the judges alone make of the grid (before the sweep's declaration)
    stats: tuple = ()  # the comparisons the judges made on the stand-ins (which cells, how many seeds)

    def line(self) -> str:
        return f"{self.id:<3} {self.kind}" + (f": {self.detail}" if self.detail else "")


def kind_of(verdict: str) -> str:
    """A verdict as the plan announces it: insufficient -> cannot judge, not at this scale as it
    is, any other verdict -> judgeable."""
    if verdict == INSUFFICIENT:
        return CANNOT
    return NOT_AT_SCALE if verdict.startswith(NOT_AT_SCALE) else JUDGEABLE


def judge(views: list[RunView]):
    """The ledger's verdicts on these runs (`fibexp-report --claims` on them), and their groups."""
    groups, _ = comparable(views)
    return ledger.judge(groups), groups


def _missing(claim, groups, detail: str) -> str:
    """What a claim the grid cannot judge misses, from the group that comes closest: a cell short
    of seeds, else a named shortfall, before the first group's `needs ...` (the ledger names the
    first group's, which may be a group the claim was never meant for)."""
    per = [ledger.judge([g], [claim])[0].detail for g in groups if g.task == claim.needs.task]
    return next((d for d in per if d.startswith("(")), next((d for d in per if not d.startswith("needs ")), detail))


def declared(master: DictConfig) -> tuple[list[str], dict[str, str]] | None:
    """hydra.sweeper.claims: (the claims the sweep serves, {claim: why not} of the others), or
    None where the sweep declares nothing. Every claim of the ledger is in exactly one of them."""
    d = master.hydra.sweeper.get("claims")
    if not d:
        return None
    ids = [c.id for c in ledger.CLAIMS]
    serves = [str(x) for x in d.get("serves") or []]
    not_served = {str(k): str(v) for k, v in (d.get("not_served") or {}).items()}
    for cid in serves + list(not_served):
        if cid not in ids:
            refuse("hydra.sweeper.claims", f"unknown claim {cid}", ", ".join(ids))
    if both := sorted(set(serves) & set(not_served)):
        refuse("hydra.sweeper.claims", f"{', '.join(both)} both served and not", "each claim in one of serves, not_served")
    if missing := [cid for cid in ids if cid not in serves and cid not in not_served]:
        refuse("hydra.sweeper.claims", f"{', '.join(missing)} neither served nor not",
               "every claim in serves or in not_served with the reason")
    return serves, not_served


def claims(planned: list[Cell], declaration=None) -> list[ClaimPlan]:
    """Per claim of the ledger: judgeable, cannot judge (what is missing) or not at this scale,
    from the judges on stand-in runs of the unique cells; a claim the sweep declares it does not
    serve is not at this scale, with the declared reason."""
    verdicts, groups = judge([stand_in(c) for c in planned if c.status != DUPLICATE])
    not_served = declaration[1] if declaration else {}
    out = []
    for v in verdicts:
        kind = kind_of(v.verdict)
        detail = {JUDGEABLE: "", CANNOT: _missing(v.claim, groups, v.detail)}.get(kind, v.detail)
        if v.claim.id in not_served:
            out.append(ClaimPlan(v.claim.id, NOT_AT_SCALE, not_served[v.claim.id], kind))
        else:
            out.append(ClaimPlan(v.claim.id, kind, detail, kind, v.stats))
    return out
