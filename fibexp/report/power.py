"""The seeds a claim needs (`fibexp-plan`): for each ranking claim a grid can judge, the power of
its seeds per cell to detect the paper's effect (fibexp.report.published.EFFECTS), at the seed
spread measured in the store's runs of that claim where it holds them (else the paper's own), the
effect measured so far beside it, and the seeds per cell that would reach a target power.

Power is that of a two-sided two-sample t test at 5% (fibexp.report.stats.power): the paper's
rule (seed ranges disjoint) has no closed form, and an exact permutation test of 3 seeds against
3 can never reach 5% (its smallest p is 0.10), so neither would say how many seeds help."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

from fibexp.report.published import EFFECTS
from fibexp.report.stats import Comparison
from fibexp.report.stats import power, seeds_for_power

FIRST_SEED = 42


@dataclass(frozen=True)
class ClaimPower:
    id: str
    seeds: int  # per compared cell in the grid
    effect: float  # the paper's, relative
    sd: float  # relative per-seed sd the power is computed at
    sd_from: str  # "the store" or "the paper"
    power: float
    needed: int | None  # seeds per cell for the target power
    target: float
    cells: int  # distinct compared cells (each needs the extra seeds)
    measured: float | None = None  # the effect measured so far (relative), where the store holds runs

    @property
    def extra_cells(self) -> int:
        return max(0, (self.needed or self.seeds) - self.seeds) * self.cells

    def line(self, cost: str = "") -> str:
        seen = f", measured so far {self.measured:+.1%}" if self.measured is not None else ""
        head = (f"{self.id:<3} power: {self.seeds} seeds {self.power:.0%} for the paper's {self.effect:+.1%} at "
                f"{self.sd_from}'s seed sd {self.sd:.2%}{seen}; ")
        if self.needed is None:
            return head + f"{self.target:.0%} needs more than 1000 seeds"
        if self.needed <= self.seeds:
            return head + f"{self.target:.0%} reached"
        return head + f"{self.target:.0%} needs {self.needed} seeds (+{self.extra_cells} cells{cost})"


def _cells(stats: Sequence[Comparison]) -> int:
    return len({c.a for c in stats if c.kind == "rank"} | {c.b for c in stats if c.kind == "rank"})


def claim_powers(planned: Mapping[str, Sequence[Comparison]], stored: Mapping[str, Sequence[Comparison]] | None = None,
                 target: float = 0.8) -> list[ClaimPower]:
    """planned: {claim id: the comparisons its verdict on the grid's stand-in runs made}; stored:
    the same on the store's finished runs (their spread and effect), where it holds any."""
    out = []
    for cid, stats in planned.items():
        ranks = [c for c in stats if c.kind == "rank"]
        if cid not in EFFECTS or not ranks:
            continue
        effect, sd, _ = EFFECTS[cid]
        sd_from, measured = "the paper", None
        have = [c for c in (stored or {}).get(cid, ()) if c.kind == "rank" and min(c.seeds) >= 2]
        if have:
            base = [abs(c.d / c.rel) for c in have if c.rel]
            if base and all(b > 0 for b in base):
                sd = max(c.sd / b for c, b in zip(have, base))
                sd_from = "the store"
                measured = min((c.rel for c in have), key=abs)
        n = min(min(c.seeds) for c in ranks)
        out.append(ClaimPower(cid, n, effect, sd, sd_from, power(effect, sd, n), seeds_for_power(effect, sd, target),
                              target, _cells(ranks), measured))
    return out


def seeds_override(powers: Sequence[ClaimPower]) -> str | None:
    """`seed=42,43,...`: the most seeds any claim needs for its target power (None: none needs more)."""
    need = max((p.needed for p in powers if p.needed and p.needed > p.seeds), default=None)
    return None if need is None else "seed=" + ",".join(str(FIRST_SEED + i) for i in range(need))


def stored_comparisons(client, experiment_id: str) -> dict[str, list[Comparison]]:
    """{claim id: the comparisons its verdict made} on the store's finished runs (fibexp-report's
    own judging), for their measured seed spread and effect."""
    from fibexp.report import ledger
    from fibexp.report.runs import comparable, load_runs

    views, _ = load_runs(client, [experiment_id])
    groups, _ = comparable(views)
    return {v.claim.id: list(v.stats) for v in ledger.judge(groups) if v.stats}
