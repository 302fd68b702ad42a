"""What a sweep will run, judge and cost, before it runs (`fibexp-plan`).

- The cells (`grid`): composed and checked as the sweep composes and checks them; new, FINISHED
  already (a run with the same config hash in the tracking store, `stored`: the sweep skips it)
  or a duplicate of another cell (run once).
- The claims (`judgeable`): the report's judges on stand-in runs of the cells; a served claim
  the grid cannot judge is a refusal.
- The cost (`pricing`): analytic training FLOPs, priced in GPU-hours for GPU cells and in hours
  on this machine for CPU cells.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from omegaconf import DictConfig

from fibexp.model import cost
from fibexp.report import ledger
from fibexp.sweep.plan.grid import DUPLICATE, FINISHED, NEW, Cell, cells
from fibexp.sweep.plan.judgeable import JUDGEABLE, ClaimPlan, claims, declared
from fibexp.sweep.plan.pricing import Cost, per_cell, price
from fibexp.sweep.plan.stored import Store, read_store
from fibexp.tracking import store, waiting


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
                powers, per_cell(planned, known, gpu, mfu) if powers else {})
