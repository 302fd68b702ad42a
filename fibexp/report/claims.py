"""How a claim is judged: verdicts, the seed-range rule and its statistics, the verdict lines.

Each claim names the runs it needs, the metric, the comparison and the paper's published numbers;
`judge` turns groups of comparable runs (same corpus, steps, eval version, length: `fibexp.report`
builds them) into one line per claim:

    A6  reproduced      dense +11.2% vs fib stagger -1.9% at 4x (paper: +201% vs -1.3%)

Verdicts: `reproduced`, `not reproduced`, `tie` (the paper ranks two cells whose seed ranges
overlap here: paper B's rule, rank only where seed ranges do not overlap), `insufficient` (names
the runs or metrics missing; `insufficient (n seeds)` where a ranked cell has fewer than MIN_SEEDS = 3
seeds: paper B's bar) and `degenerate` (two compared cells attend identical per-layer offsets,
e.g. coprime == stagger at 4 layers, where no stride in [2, L/2] is coprime with L: the comparison
would hold vacuously). Our models are tiny and train on another corpus, so no claim compares
absolute perplexities with the papers': each compares a direction or a ratio, with explicit
thresholds (`Claim.thresholds`) and the criterion in words (`Claim.comparison`). Threshold claims
must hold for every seed; ranking claims follow the seed-range rule with >= 3 seeds per compared cell
(`seeded`, `compare`), their lines showing mean ± sd and the seeds.
"""
from __future__ import annotations

import ast
import itertools
import math
import random
from dataclasses import dataclass
from typing import Callable, Iterable, Mapping, Sequence

from fibexp.report.runs import Group, RunView, ppl
from fibexp.science import patterns
from fibexp.science import wiring


REPRODUCED, NOT_REPRODUCED, TIE, INSUFFICIENT, DEGENERATE = (
    "reproduced", "not reproduced", "tie", "insufficient", "degenerate")
VERDICTS = (REPRODUCED, NOT_REPRODUCED, TIE, INSUFFICIENT, DEGENERATE)


def mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs)


def pstdev(xs: Sequence[float]) -> float:
    """Population standard deviation (the papers' seed spread)."""
    m = mean(xs)
    return math.sqrt(sum((x - m) ** 2 for x in xs) / len(xs))


AT_CHANCE = 0.05  # "at chance" in B1-B3: within 5 points of the majority guess (docs/papers.md)
MIN_SEEDS = 3  # paper B's bar: every compared cell of a ranking has >= 3 seeds


def rank(a: Sequence[float], b: Sequence[float]) -> str:
    """'<' or '>' when the seed ranges of a and b do not overlap, else '~' (a tie)."""
    if max(a) < min(b):
        return "<"
    if min(a) > max(b):
        return ">"
    return "~"


def ranking(cells: Mapping[str, Sequence[float]]) -> str:
    """Cells by mean, lowest first; '<' only between neighbours whose seed ranges do not overlap."""
    items = sorted(cells.items(), key=lambda kv: mean(kv[1]))
    out = items[0][0]
    for (_, a), (name, b) in zip(items, items[1:]):
        out += f" {'<' if max(a) < min(b) else '~'} {name}"
    return out


# ---- which runs a claim reads ----
class Missing(Exception):
    """What a claim needs and the runs do not have (its `insufficient` message)."""


def label(family: str, window: int | None = None) -> str:
    """`fib stagger W8`, `rot` (hypercube cells without their prefix)."""
    return family.replace("hypercube/", "") + (f" W{window}" if window is not None else "")


def cell_runs(group: Group, family: str, window: int | None = None, n_layers: int | None = None,
              order: str | None = None, score: Callable[[RunView], float | None] = ppl,
              higher_is_better: bool = False) -> list[RunView]:
    """The runs (seeds) of one cell, at that cell's best lr when it was run at several
    (SPEC: each configuration at its own best lr)."""
    rs = [r for r in group.runs if r.family == family and (window is None or r.window == window)
          and (n_layers is None or r.n_layers == n_layers) and (order is None or r.order == order)]
    by_lr: dict[float | None, list[float]] = {}
    for r in rs:
        v = score(r)
        if v is not None:
            by_lr.setdefault(r.lr, []).append(-v if higher_is_better else v)
    if len({r.lr for r in rs}) > 1 and by_lr:
        best = min(by_lr, key=lambda lr: mean(by_lr[lr]))
        rs = [r for r in rs if r.lr == best]
    return rs


def values(runs: Iterable[RunView], fn: Callable[[RunView], float | None], what: str, metric: str,
           min_seeds: int = 1) -> list[float]:
    runs = list(runs)
    if not runs:
        raise Missing(f"needs {what} (no run)")
    vals = [v for r in runs if (v := fn(r)) is not None]
    if not vals:
        why = "diverged" if all(r.diverged for r in runs) else f"has no {metric}"
        raise Missing(f"{what} {why}" + daggers(runs))
    if len(vals) < min_seeds:
        raise Missing(f"({len(vals)} seed{'s' if len(vals) != 1 else ''}) {what}: {len(vals)} seed(s), "
                      f"needs >= {min_seeds}" + daggers(runs))
    return vals


def daggers(runs: Iterable[RunView]) -> str:
    """' († seed 43 lr 0.002)': the diverged runs of a cell, which count as † and never as values."""
    d = [f"seed {r.seed} lr {r.lr:g}" if r.lr is not None else f"seed {r.seed}"
         for r in sorted(runs, key=lambda r: (r.lr or 0.0, r.seed)) if r.diverged]
    return f" (\u2020 {', '.join(d)})" if d else ""


@dataclass(frozen=True)
class Seeds:
    """One compared cell of a ranking: its per-seed values (paper B's bar: >= MIN_SEEDS of them)."""

    what: str
    seeds: tuple[int, ...]
    vals: tuple[float, ...]
    dagger: str = ""

    @property
    def mean(self) -> float:
        return mean(self.vals)

    def show(self, fmt: Callable[[float], str] = lambda x: f"{x:.2f}") -> str:
        """`51.00 ± 0.30 (seeds 42,43,44)`, diverged seeds as †."""
        return (f"{fmt(self.mean)} \u00b1 {fmt(pstdev(self.vals)).lstrip('+')} "
                f"(seeds {','.join(map(str, self.seeds))}){self.dagger}")

    def per_seed(self, fmt: Callable[[float], str] = lambda x: f"{x:.2f}") -> str:
        """`42: 51.10, 43: 50.90, 44: 51.00`."""
        return ", ".join(f"{s}: {fmt(v)}" for s, v in zip(self.seeds, self.vals))


def seeded(runs: Iterable[RunView], fn: Callable[[RunView], float | None], what: str, metric: str) -> Seeds:
    """A ranked cell's per-seed values; Missing ('(n seeds) ...': the claim is insufficient) below
    paper B's bar of MIN_SEEDS seeds per compared cell."""
    runs = list(runs)
    vals = values(runs, fn, what, metric)
    if len(vals) < MIN_SEEDS:
        raise Missing(f"({len(vals)} seed{'s' if len(vals) != 1 else ''}) {what}: paper B's bar needs >= "
                      f"{MIN_SEEDS} seeds per compared cell" + daggers(runs))
    pairs = sorted((r.seed, v) for r in runs if (v := fn(r)) is not None)
    return Seeds(what, tuple(s for s, _ in pairs), tuple(v for _, v in pairs), daggers(runs))


def permutation_p(a: Sequence[float], b: Sequence[float]) -> float:
    """One-sided exact permutation test over seeds: the share of the ways to split the pooled values
    into groups of len(a) and len(b) whose mean difference is at least a's over b's (paper B's test
    for B10: 6 seeds against 6, fully separated, gives 1/924 = 0.0011)."""
    pooled, k = list(a) + list(b), len(a)
    observed = mean(a) - mean(b)
    if math.comb(len(pooled), k) <= 200_000:
        splits = list(itertools.combinations(range(len(pooled)), k))
    else:  # beyond 10 seeds a side: a seeded sample of the splits, never the whole list
        rng = random.Random(0)
        splits = [tuple(rng.sample(range(len(pooled)), k)) for _ in range(200_000)]
    total = sum(pooled)
    hits = 0
    for idx in splits:
        sa = sum(pooled[i] for i in idx)
        hits += sa / k - (total - sa) / (len(pooled) - k) >= observed - 1e-12
    return hits / len(splits)


def compare(a: Seeds, b: Seeds) -> str:
    """'<' / '>' where the seed ranges do not overlap, '~' (a tie) where they do."""
    return rank(a.vals, b.vals)


def offsets(r: RunView):
    """Per-layer attended offsets fixed by the config (None: dense or learned, which train them,
    or a run whose params do not say)."""
    p = r.params
    try:
        if r.kind == "sparse" and r.cell.split("/")[2] != "learned":
            base, schedule = r.cell.split("/")[1:3]
            return tuple(tuple(patterns.attended_distances(r.window, base, a, r.n))
                         for a in patterns.layer_alphas(schedule, r.n_layers))
        if r.kind == "hypercube":
            hybrid = p.get("attention.hybrid_layers", "None")
            hybrid = None if hybrid in ("None", "") else ast.literal_eval(hybrid)
            plan = wiring.layer_plan(r.cell.split("/")[1], r.n_layers, r.n, hybrid, r.order)
            return ("hypercube", r.causal, tuple(plan))
    except (ValueError, IndexError, SyntaxError):
        return None
    return None


def degenerate(a: Sequence[RunView], b: Sequence[RunView], la: str, lb: str) -> str | None:
    """Why comparing a and b proves nothing, when their layers attend exactly the same offsets."""
    if not a or not b:
        return None
    oa, ob = offsets(a[0]), offsets(b[0])
    if oa is None or oa != ob:
        return None
    r = a[0]
    why = f"{la} and {lb} attend identical per-layer offsets at {r.n_layers} layers"
    if "coprime" in (la + lb) and patterns.coprime_stride(r.n_layers) == 1:
        why += f" (no stride S in [2, L/2] is coprime with L = {r.n_layers}; needs L >= 5, L != 6)"
    return why


def link_count(r: RunView) -> int | None:
    """Links of a run's wiring (paper B's cost): standard attention = every causal pair per layer."""
    if r.kind == "hypercube":
        o = offsets(r)
        return None if o is None else wiring.links(o[2], r.n, r.causal)
    return wiring.links(["attn"] * r.n_layers, r.n, r.causal) if r.n_layers and r.n else None


def cube_dims(g: Group) -> int:
    """log2 n of a count-ones group (Missing when n is no power of two)."""
    try:
        return wiring.cube_dims(g.n)
    except ValueError:
        raise Missing(f"count-ones n={g.n} is no power of two") from None


# ---- formatting ----
def pct(x: float) -> str:
    return f"{x:+.1%}"


def span_str(vals: Sequence[float], fmt: Callable[[float], str]) -> str:
    return fmt(vals[0]) if len(vals) == 1 else f"{fmt(min(vals))}..{fmt(max(vals))}"


def seeds_note(*vals: Sequence[float]) -> str:
    """' (3 seeds)': how many seeds the compared values hold."""
    ns = sorted({len(v) for v in vals})
    count = str(ns[0]) if len(ns) == 1 else f"{ns[0]}-{ns[-1]}"
    return f" ({count} seed{'s' if ns[-1] > 1 else ''})"


# ---- the claims ----
@dataclass(frozen=True)
class Needs:
    """The runs a claim reads: task, cells (families; W from the runs), extrapolation factor,
    minimum seeds per cell, and whether each compared cell needs an lr sweep."""

    task: str
    cells: tuple[str, ...]
    factor: int | None = None
    min_seeds: int = 1
    lr_sweep: bool = False
    across: str | None = None  # a comparison-key field whose groups are judged together (B10: "step budget")


@dataclass(frozen=True)
class Claim:
    id: str
    paper: str  # "A" (Fibonacci offsets) or "B" (hypercube wiring)
    statement: str
    needs: Needs
    metric: str
    comparison: str  # the criterion, in words (printed by `fibexp-report --claims -v` and in report.md)
    thresholds: Mapping[str, float]
    paper_numbers: str
    judge: Callable[["Claim", Group], tuple[str, str, str | None]]  # -> (verdict, ours, paper or None)

    def criterion(self) -> str:
        """The comparison in words with its thresholds' values."""
        values = ", ".join(f"{k}={x:g}" for k, x in self.thresholds.items())
        return self.comparison + (f" [{values}]" if values else "")


@dataclass(frozen=True)
class Verdict:
    claim: Claim
    verdict: str
    detail: str
    paper: str

    def line(self) -> str:
        """`A6  reproduced      <ours> (paper: <theirs>)`; an insufficient claim names what is missing."""
        paper = "" if self.verdict == INSUFFICIENT else f" (paper: {self.paper})"
        verdict, detail = self.verdict, self.detail
        if verdict == INSUFFICIENT and detail.startswith("(") and " seed" in detail.split(")")[0]:
            n, detail = detail[1:].split(") ", 1)  # `insufficient (1 seed)`
            verdict = f"{verdict} ({n})"
        return f"{self.claim.id:<3} {verdict:<15} {detail}{paper}"


def lines(verdicts: Sequence[Verdict], verbose: bool = False) -> list[str]:
    out = []
    for v in verdicts:
        out.append(v.line())
        if verbose:
            out.append(f"    criterion: {v.claim.criterion()}")
    return out
