"""What a sweep will run, judge and cost, before it runs (`fibexp-plan`).

- The cells: composed as the sweep composes them (`fibexp.config.cells`) and checked by the
  torch-free rules (`fibexp.config.rules`); new, FINISHED already (a run with the same config
  hash in the tracking store: the sweep skips it) or a duplicate of another cell (run once).
- The claims: the report's own judges (`fibexp.report.ledger.judge`) run on stand-in runs made
  from the cells (the params a run logs, its tags, and the metrics its task declares with
  placeholder values), so `insufficient` here means the grid cannot judge the claim whatever
  the runs measure. A sweep config may declare which claims it serves and, for the others, why
  not (`hydra.sweeper.claims`); a served claim the grid cannot judge is a refusal.
- The cost: analytic training FLOPs (`fibexp.model.cost`), priced in GPU-hours at a named GPU's
  peak times an MFU for GPU cells, and in hours on this machine for CPU cells, from measured step
  times (the store's runs of the same shape, else a calibration the caller times here).
"""
from __future__ import annotations

import hashlib
import json
import random
import statistics
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping

from hydra.core.hydra_config import HydraConfig
from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from fibexp.config import identity, messages, rules
from fibexp.config.cells import Composer, expand
from fibexp.errors import Refusal, first_line, refuse
from fibexp.model import cost
from fibexp.report import ledger
from fibexp.report.claims import INSUFFICIENT
from fibexp.report.runs import RunView, comparable
from fibexp.tasks import registry as tasks
from fibexp.tasks.graft.config import pretrained_file
from fibexp.tracking import store, waiting

NEW, FINISHED, DUPLICATE = "new", "finished", "duplicate"
JUDGEABLE, CANNOT, NOT_AT_SCALE = "judgeable", "cannot judge", "not at this scale"  # the last: also the report's verdict

# What makes two runs' training steps cost the same (params of a run, plus its fibexp.cell tag).
SHAPE = ("task.name", "task.model", "task.k", "model.n_layers", "model.d_model", "model.n_heads", "model.n_kv_heads",
         "model.vocab_size", "model.seq_len", "model.ffn_hidden", "data.batch_size", "attention.order",
         "attention.hybrid_layers", "attention.coord_dim")


# ---- cells ----
@dataclass
class Cell:
    overrides: list[str]
    cfg: DictConfig  # as the sweep composes it (with the hydra node; see `cells` for a model not at hand)
    name: str
    hash: str  # the config hash (a stand-in where the pretrained model is not at hand: `unknown`)
    status: str = NEW
    ref: str | None = None  # the FINISHED run's id, or the name of the cell this one duplicates
    unknown: str | None = None  # what cannot be known here (task.model not at hand), else None

    @property
    def line(self) -> str:
        ref = f" ({'run' if self.status == FINISHED else 'as'} {self.ref})" if self.ref else ""
        return f"  {self.status:<9} {self.name:<34} {' '.join(self.overrides)}{ref}"


def _offline_model_missing(e: Refusal) -> bool:
    """The refusal of a pretrained model (task=graft) that is not on this machine: the sweep
    needs it where its jobs start, the plan can go on without it."""
    return e.key == "task.model" and "cannot be loaded offline" in str(e.value)


def _resolved(cfg: DictConfig) -> dict:
    """The config its job runs (no hydra node), resolved."""
    return {k: OmegaConf.to_container(cfg[k], resolve=True, enum_to_str=True) if OmegaConf.is_config(cfg[k]) else cfg[k]
            for k in cfg if k != "hydra"}


SEED_RULES = [r for r in rules.RULES if r[0] == "seed"]


def _validate(cfg: DictConfig, checked: dict) -> None:
    """rules.validate(cfg), once per config up to its seed: no check reads the seed but its own
    range rule (a seed sweep of one config is checked once, then each seed's range)."""
    key = json.dumps({k: OmegaConf.to_container(cfg[k]) if OmegaConf.is_config(cfg[k]) else cfg[k]
                      for k in cfg if k not in ("hydra", "seed")}, sort_keys=True, default=str)
    if key not in checked:
        try:
            rules.validate(cfg)
            checked[key] = None
        except ValueError as e:  # a Refusal, or a schema's own one-line ValueError
            checked[key] = Refusal.of(e)
    if checked[key] is not None:
        raise checked[key]
    rules.check_rules(cfg, SEED_RULES)


def cells(master: DictConfig, loader) -> list[Cell]:
    """Every cell of the sweep, composed and checked as the sweep checks it (without the model
    built on the meta device, which needs torch); a bad cell is refused in one line naming it.
    A pretrained model (task=graft) not at hand here leaves its cells checked without it."""
    grids = [dict(g) for g in master.hydra.sweeper.get("grids") or []] or [{}]
    overrides = expand(grids, list(master.hydra.overrides.task), loader)
    composer = Composer(master, loader)
    out, seen, hydra_set, checked = [], {}, None, {}
    for cell in overrides:
        where = f" [cell: {' '.join(cell)}]"
        try:
            cfg = composer(cell)
        except (HydraException, OmegaConfBaseException) as e:
            raise Refusal.of(ValueError((messages.hydra_line(e, cell) or first_line(e)) + where)) from None
        if hydra_set != (groups := composer.groups(cell)):  # ${hydra:runtime.cwd} resolves as in the job
            HydraConfig.instance().set_config(cfg)
            hydra_set = groups
        unknown = None
        try:
            _validate(cfg, checked)
        except Refusal as e:
            if not _offline_model_missing(e):
                raise Refusal.of(ValueError(f"{e}{where}")) from None
            unknown = f"task.model={cfg.task.model} is not at hand here (a local folder or the Hugging Face cache)"
        except OmegaConfBaseException as e:
            raise Refusal.of(ValueError(messages.omegaconf_line(e, cell) + where)) from None
        if unknown:  # a stand-in for the vocabulary its config.json would set, so the rest resolves
            cfg.model.vocab_size = 0
        h = identity.config_hash(cfg)
        c = Cell(cell, cfg, identity.run_name(cfg), h, unknown=unknown)
        if h in seen:
            c.status, c.ref = DUPLICATE, seen[h]
        else:
            seen[h] = c.name
        out.append(c)
    return out


# ---- the tracking store, read only ----
def _params(cfg: DictConfig, n_params: int | None) -> dict[str, str]:
    """The params a run of this config logs (fibexp.training.run.open_run)."""
    resolved = _resolved(cfg)
    resolved["model"].pop("attention")
    return {**store.flatten(resolved), "model.n_params": str(n_params) if n_params is not None else "unknown"}


def _shape(params: Mapping[str, str], cell: str) -> tuple:
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
    try:
        store.check_reachable(uri)
    except store.TrackingError as e:
        raise Refusal.of(e) from None
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
                out.step_ms.setdefault(_shape(r.data.params, tags["fibexp.cell"]), []).append(ms)
        if not (token := page.token):
            return out


# ---- stand-in runs, and what the judges make of them ----
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


def n_params(job: DictConfig) -> int | None:
    """Parameters of the cell's model: fibexp's LM counted from its config, a pretrained model's
    from its config.json where it is at hand, else None."""
    if job.task.name == "graft":
        conf = _pretrained(job)
        return None if conf is None else cost.pretrained_params(conf)[0]
    m = OmegaConf.to_container(job.model, resolve=True)
    return cost.n_params(m, OmegaConf.to_container(job.attention, resolve=True, enum_to_str=True))


def _pretrained(job: DictConfig) -> dict | None:
    path = pretrained_file(str(job.task.model), "config.json")
    return None if path is None else json.loads(path.read_text(encoding="utf-8"))


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
    return RunView(c.hash, tags["fibexp.cell"], _params(job, n_params(job)), metrics, tags)


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


# ---- cost ----
@dataclass
class Cost:
    cells: int = 0  # new cells
    flops: float = 0.0  # analytic training FLOPs of the new cells whose size is known
    gpu_flops: float = 0.0
    gpu_cells: int = 0
    cpu_ms: float = 0.0  # training time of the new CPU cells on this machine, one after another
    cpu_cells: int = 0
    sources: dict[str, int] = field(default_factory=dict)  # where the CPU step times came from: cells per source
    unknown: dict[str, int] = field(default_factory=dict)  # why a cell could not be priced: cells per reason
    gpu: str = cost.DEFAULT_GPU
    mfu: float = cost.DEFAULT_MFU

    @property
    def gpu_hours(self) -> float:
        return self.gpu_flops / (cost.GPUS[self.gpu][1] * self.mfu) / 3600

    def line(self) -> str:
        parts = [f"cost: {self.cells} new cells, {self.flops:.3g} training FLOPs (analytic)"]
        if self.gpu_cells:
            parts.append(f"{self.gpu_hours:,.1f} GPU-hours for {self.gpu_cells} GPU cells at {cost.GPUS[self.gpu][0]} "
                         f"x MFU {self.mfu:g} (assumed)")
        if self.cpu_cells:
            how = ", ".join(f"{n} from {s}" for s, n in self.sources.items())
            hours = self.cpu_ms / 3.6e6
            shown = f"{hours:,.2f} CPU-hours" if hours >= 1 else f"{hours * 60:.1f} CPU-minutes"
            parts.append(f"{shown} for {self.cpu_cells} CPU cells on this machine, one cell at a time, training steps "
                         f"only (step times: {how})")
        if self.unknown:
            parts.append("not priced: " + "; ".join(f"{n} cells ({why})" for why, n in self.unknown.items()))
        return "; ".join(parts)


def price(planned: list[Cell], known: Store | None = None, calibrate: Callable[[DictConfig], float | None] | None = None,
          gpu: str = cost.DEFAULT_GPU, mfu: float = cost.DEFAULT_MFU) -> Cost:
    """The new cells' training FLOPs (tokens = max_steps x batch x length, times the model's
    FLOPs per token); GPU cells priced at the GPU's peak x MFU, CPU cells at their step time on
    this machine: the median perf/step_ms of the store's FINISHED runs of the same shape, else
    `calibrate(cfg)` (a training step timed here), once per shape."""
    cost.check_pricing(gpu, mfu)
    out, timed = Cost(gpu=gpu, mfu=mfu), {}
    for c in (c for c in planned if c.status == NEW):
        out.cells += 1
        job = c.cfg
        trains = not (job.task.name == "graft" and int(job.task.k) == 0)  # k = 0 only evaluates
        steps = int(job.trainer.max_steps) if trains else 0
        tokens = steps * int(job.data.batch_size) * int(job.model.seq_len)
        per_token = _flops_per_token(job) if steps else 0.0
        if per_token is None:
            why = f"task.model={job.task.model}: no config.json at hand"
            out.unknown[why] = out.unknown.get(why, 0) + 1
            continue
        flops = tokens * per_token
        out.flops += flops
        if str(job.trainer.accelerator) in ("gpu", "cuda"):
            out.gpu_flops += flops
            out.gpu_cells += 1
            continue
        if not steps:
            out.cpu_cells += 1
            continue
        params = _params(job, n_params(job))
        shape = _shape(params, identity.cell(job))
        if shape not in timed:
            measured = (known.step_ms.get(shape) if known else None) or []
            if measured:
                timed[shape] = (statistics.median(measured), f"the median perf/step_ms of FINISHED runs of the same "
                                                            f"shape in {known.uri}")
            elif calibrate and (ms := calibrate(c.cfg)) is not None:
                timed[shape] = (ms, "a 3-step calibration timed here")
            else:
                timed[shape] = (None, "")
        ms, source = timed[shape]
        if ms is None:
            why = "no step time measured for its shape"
            out.unknown[why] = out.unknown.get(why, 0) + 1
            continue
        out.cpu_ms += steps * ms
        out.cpu_cells += 1
        out.sources[source] = out.sources.get(source, 0) + 1
    return out


def _flops_per_token(job: DictConfig) -> float | None:
    if job.task.name == "graft":
        conf = _pretrained(job)
        return None if conf is None else cost.pretrained_flops_per_token(conf, int(job.model.seq_len))
    m = OmegaConf.to_container(job.model, resolve=True)
    return cost.train_flops_per_token(m, OmegaConf.to_container(job.attention, resolve=True, enum_to_str=True))


# ---- the plan ----
@dataclass
class Plan:
    name: str
    cells: list[Cell]
    claims: list[ClaimPlan]
    cost: Cost
    store: Store
    declaration: tuple | None
    powers: list = field(default_factory=list)  # fibexp.report.power.ClaimPower of the served ranking claims
    per_cell: dict = field(default_factory=dict)  # {task: (unit, the cost of one more cell)}

    def counts(self) -> dict[str, int]:
        return {s: sum(c.status == s for c in self.cells) for s in (NEW, FINISHED, DUPLICATE)}

    def refusal(self) -> str | None:
        """Why the sweep must not start: the claims it serves that its cells cannot judge."""
        if not self.declaration:
            return None
        bad = [c for c in self.claims if c.id in self.declaration[0] and c.kind != JUDGEABLE]
        if not bad:
            return None
        return (f"hydra.sweeper.claims.serves: {', '.join(c.id for c in bad)} ({bad[0].kind}: {bad[0].detail}); "
                "allowed: a grid that can judge every claim it serves (or declare the claim in not_served, with why)")

    def lines(self, verbose: bool = False) -> list[str]:
        n = self.counts()
        store_note = "" if self.store.exists else " (no store there yet)"
        out = [f"plan of sweep {self.name}: {len(self.cells)} cells: {n[NEW]} new, {n[FINISHED]} finished (a FINISHED "
               f"run with the same config in {self.store.uri}{store_note}: skipped), {n[DUPLICATE]} duplicates of "
               "another cell (run once)"]
        unknown = [c for c in self.cells if c.unknown]
        for why in dict.fromkeys(c.unknown for c in unknown):
            k = sum(c.unknown == why for c in unknown)
            out.append(f"note: {k} cells: {why}; checked without it, their config hash and size unknown (the sweep "
                       "refuses them until it is there)")
        if verbose:
            out += [c.line for c in self.cells]
        out.append("claims (the report's judges on stand-in runs of these cells):")
        out += [c.line() for c in self.claims]
        if self.powers:
            out.append("power (two-sided t at 5%, per compared cell; the paper's smallest effect per claim):")
            task = {c.id: c.needs.task for c in ledger.CLAIMS}
            out += [p.line(_added(p.extra_cells, self.per_cell.get(task[p.id]))) for p in self.powers]
        out.append(self.cost.line())
        return out


def _per_cell(planned: list[Cell], known: Store, gpu: str, mfu: float) -> dict[str, tuple[str, float]]:
    """{task: (unit, the cost of one more cell)}, the mean over the plan's new cells of that task
    (GPU: analytic GPU-hours; CPU: minutes at the store's step times, else training FLOPs)."""
    out = {}
    for task in {str(c.cfg.task.name) for c in planned}:
        p = price([c for c in planned if str(c.cfg.task.name) == task], known, None, gpu, mfu)
        if p.gpu_cells:
            out[task] = ("GPU-hours", p.gpu_hours / p.gpu_cells)
        elif p.cpu_cells and p.cpu_ms:
            out[task] = ("CPU-minutes", p.cpu_ms / p.cpu_cells / 6e4)
        elif p.cells:
            out[task] = ("training FLOPs", p.flops / p.cells)
    return out


def _added(cells: int, per_cell: tuple[str, float] | None) -> str:
    return f", +{cells * per_cell[1]:.3g} {per_cell[0]}" if per_cell and cells else ""


def plan(master: DictConfig, loader, calibrate=None, gpu: str = cost.DEFAULT_GPU, mfu: float = cost.DEFAULT_MFU,
         target: float = 0.8) -> Plan:
    declaration = declared(master)
    planned = cells(master, loader)
    first = planned[0].cfg if planned else None
    uri = store.resolve_uri(first.logger.tracking_uri if first else None,
                            Path(first.paths.output_dir) if first else Path("outputs"))
    known = read_store(uri, first.logger.experiment if first else "fibexp")
    for c in planned:
        if c.status == NEW and not c.unknown and c.hash in known.finished:
            c.status, c.ref = FINISHED, known.finished[c.hash]
    name = " ".join([master.hydra.job.config_name, *master.hydra.overrides.task])
    planned_claims = claims(planned, declaration)
    served = set(declaration[0]) if declaration else {c.id for c in planned_claims}
    from fibexp.report import power

    stored = power.stored_comparisons(waiting.Client(uri, prog="fibexp-plan"), known.experiment_id) \
        if known.experiment_id else None
    powers = power.claim_powers({c.id: c.stats for c in planned_claims if c.kind == JUDGEABLE and c.id in served},
                                stored, target)
    return Plan(name, planned, planned_claims, price(planned, known, calibrate, gpu, mfu), known, declaration,
                powers, _per_cell(planned, known, gpu, mfu) if powers else {})
