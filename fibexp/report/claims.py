"""What a verdict is: its kinds, what a claim states and needs, and the line the report prints.

    A6  reproduced (direction only; paper +201%) dense +11.2%..+14.0% vs ... (paper: dense +201% ...)

Verdicts:
- `reproduced` / `not reproduced`: judged by the claim's bars (fibexp.report.published) and the
  seed rule (fibexp.report.seeds); a bar weaker than the paper's statement, or runs covering less
  than the paper did, put their words in brackets beside the verdict (`Verdict.qualifier`);
- `tie`: the paper ranks two cells whose seed ranges overlap here;
- `undecided`: the paper calls two cells level (or one no better than the other), and the 95%
  interval of our difference crosses the paper's band: equivalence is neither shown nor refuted
  (more seeds, or less noisy runs, decide it);
- `insufficient`: runs, seeds, windows, lrs or metrics the claim needs are missing, named
  (`insufficient (n seeds)` where a compared cell has fewer than 3);
- `not at this scale`: the runs exist but at a scale the paper's claim does not speak for (its
  window, device or pretrained model), with why;
- `degenerate`: two compared cells are one model (identical per-layer offsets), so the
  comparison would hold vacuously.
Which runs and metrics exist decides `insufficient` and `not at this scale`, never their values:
a plan made of a sweep's cells (runs with any values) gets the same answer as its finished runs.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Mapping, Sequence

if TYPE_CHECKING:
    from fibexp.report.published import Bar, Scale
    from fibexp.report.runs import Group
    from fibexp.report.stats import Comparison

REPRODUCED, NOT_REPRODUCED, TIE, UNDECIDED = "reproduced", "not reproduced", "tie", "undecided"
INSUFFICIENT, NOT_AT_SCALE, DEGENERATE = "insufficient", "not at this scale", "degenerate"
VERDICTS = (REPRODUCED, NOT_REPRODUCED, TIE, UNDECIDED, INSUFFICIENT, NOT_AT_SCALE, DEGENERATE)
JUDGED = (REPRODUCED, NOT_REPRODUCED, TIE, UNDECIDED)  # the verdicts a claim's bars decided


class Missing(Exception):
    """What a claim needs and a group of runs does not have: its `insufficient` detail; seeds: the
    seed count of a compared cell below the bar (`insufficient (n seeds)`)."""

    def __init__(self, detail: str, seeds: int | None = None):
        super().__init__(detail)
        self.seeds = seeds

    @classmethod
    def of(cls, errors: Sequence["Missing"], suffix: str = "", pick=min) -> "Missing":
        """Several cells' Missing as one (every one named), its seed count the fewest (pick)."""
        counts = [e.seeds for e in errors if e.seeds is not None]
        return cls("; ".join(map(str, errors)) + suffix, seeds=pick(counts) if counts else None)


class Absent(Missing):
    """The group holds none of the claim's cells: it says nothing about the claim (a paper A group
    for a hypercube claim); named only when no group holds them."""


class NotAtScale(Exception):
    """The claim's cells exist, at a scale the paper's claim does not speak for: why."""


@dataclass(frozen=True)
class Result:
    """One group's verdict: the detail (ours), the paper's numbers when the judge adds to them, and
    notes: the runs' coverage set against the paper's (`at W12 only; paper: every W of 6-12`)."""

    verdict: str
    detail: str
    paper: str | None = None
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Needs:
    """The runs a claim reads: task, cells (families; W from the runs), extrapolation factor,
    whether each compared cell needs an lr sweep (>= min_lrs lrs), and a comparison-key field whose
    groups are judged together (B10: "step budget")."""

    task: str
    cells: tuple[str, ...]
    factor: int | None = None
    min_lrs: int = 0
    across: str | None = None


@dataclass(frozen=True)
class Claim:
    id: str
    paper: str  # "A" (Fibonacci offsets) or "B" (hypercube wiring)
    statement: str
    needs: Needs
    metric: str
    comparison: str  # the criterion, in words (printed by `fibexp-report --claims -v` and in report.md)
    bars: Mapping[str, "Bar"]
    paper_numbers: str
    judge: Callable[["Claim", "Group"], Result]
    scale: "Scale | None" = None
    beside: Callable[[Sequence["Group"]], str | None] | None = None  # a substitute measurement, shown, not judged

    @property
    def thresholds(self) -> dict[str, float]:
        return {k: b.value for k, b in self.bars.items()}

    def weaker(self) -> list[str]:
        """The words of every bar weaker than the paper's statement."""
        return [b.weaker for b in self.bars.values() if b.weaker]

    def criterion(self) -> str:
        """The comparison in words with its bars' values."""
        values = ", ".join(f"{k}={x:.4g}" for k, x in self.thresholds.items())
        return self.comparison + (f" [{values}]" if values else "")


@dataclass(frozen=True)
class Verdict:
    claim: Claim
    verdict: str
    detail: str
    paper: str
    qualifier: str = ""  # beside the verdict: weaker bars, coverage, `n seeds`, weak evidence
    others: tuple[str, ...] = field(default=())  # the groups not judged, and why
    stats: tuple["Comparison", ...] = field(default=())  # every comparison the verdict made, measured

    @property
    def label(self) -> str:
        """`reproduced (direction only; paper +201%)`, `insufficient (2 seeds)`."""
        return f"{self.verdict} ({self.qualifier})" if self.qualifier else self.verdict

    def line(self) -> str:
        """`A6  reproduced (...) <ours> (paper: <theirs>)`; insufficient and not-at-this-scale lines
        say what is missing or why, without the paper's numbers."""
        paper = f" (paper: {self.paper})" if self.verdict in JUDGED + (DEGENERATE,) else ""
        rest = f"; {'; '.join(self.others)}" if self.others else ""
        scale, unit = unit_of(self.claim.metric)
        stats = f"; stats: {'; '.join(c.text(scale, unit) for c in self.stats)}" if self.stats else ""
        return f"{self.claim.id:<3} {self.label:<15} {self.detail}{paper}{rest}{stats}"

    def as_dict(self) -> dict:
        """The verdict for scripts (`fibexp-report --claims --json`)."""
        scale, unit = unit_of(self.claim.metric)
        return {"id": self.claim.id, "statement": self.claim.statement, "verdict": self.verdict,
                "qualifier": self.qualifier, "detail": self.detail, "paper": self.paper, "others": list(self.others),
                "criterion": self.claim.criterion(), "unit": unit.strip() or None, "unit_scale": scale,
                "stats": [c.as_dict() for c in self.stats]}


def unit_of(metric: str) -> tuple[float, str]:
    """(scale, unit) a claim's differences print in: ppl, bpc, accuracy in points (x100)."""
    for key, out in (("ppl", (1.0, " ppl")), ("bpc", (1.0, " bpc")), ("task/acc", (100.0, " points")),
                     ("int8/degradation", (100.0, " points")), ("tokens_per_s", (1.0, " tokens/s"))):
        if key in metric:
            return out
    return 1.0, ""


def evidence(verdict: str, stats: Sequence["Comparison"]) -> list[str]:
    """Where the statistics disagree with the paper's rule that decided: `paper's rule: ranges
    disjoint; p = 0.10, weak` (a ranking reproduced without p <= 0.05). A level or no-advantage
    claim needs no such words: its statistics decide it (fibexp.report.seeds.level)."""
    ranks = [c.p for c in stats if c.kind == "rank"]
    if verdict == REPRODUCED and ranks and max(ranks) > 0.05:
        return [f"paper's rule: ranges disjoint; p = {max(ranks):.2f}, weak"]
    return []


def lines(verdicts: Sequence[Verdict], verbose: bool = False) -> list[str]:
    """One line per claim; verbose: its criterion and each bar with its source."""
    out = []
    for v in verdicts:
        out.append(v.line())
        if verbose:
            out.append(f"    criterion: {v.claim.criterion()}")
            out += [f"    {k} = {b.value:.4g}: {b.source}" for k, b in v.claim.bars.items()]
            if v.claim.scale:
                out.append(f"    scale: {v.claim.scale.why}")
    return out


# ---- formatting shared by the judges ----
def pct(x: float) -> str:
    return f"{x:+.1%}"


def span_str(vals: Sequence[float], fmt: Callable[[float], str]) -> str:
    """`98.5%..99.7%`, one value where every seed gave the same."""
    lo, hi = fmt(min(vals)), fmt(max(vals))
    return lo if lo == hi else f"{lo}..{hi}"
