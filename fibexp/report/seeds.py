"""The seed rule every verdict follows, and its statistics.

Rankings (paper B's bar): >= MIN_SEEDS seeds per compared cell; ranked only where the seed ranges
(min..max) do not overlap, an overlap is a tie. Threshold claims: >= MIN_SEEDS seeds and the bar
holds for every seed. "Level with" and "no advantage" claims (`level`, `no_advantage`): against
the paper's own band, and shown only by the 95% interval of the difference lying inside it (below
it, one-sided), never by a point estimate inside it.

Every comparison a judge makes (`compare`, `level`, `no_advantage`) is also measured
(`Comparison`: the difference with its 95% interval, an exact permutation p, the equivalence test
against a band) and, inside `recording()`, collected for the verdict line and the JSON: for a
ranking the paper's rule decides and the statistics say how strong the evidence is; for a band
claim the interval decides."""
from __future__ import annotations

import itertools
import math
import random
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Callable, Iterable, Mapping, Sequence

from fibexp.report.claims import NOT_REPRODUCED, REPRODUCED, TIE, UNDECIDED, Missing
from fibexp.report.published import MIN_SEEDS
from fibexp.report.runs import RunView
from fibexp.report.stats import Comparison, below_p, diff_interval, exact_p, p_str, pooled_sd, tost_p


def mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs)


def pstdev(xs: Sequence[float]) -> float:
    """Population standard deviation (the papers' seed spread)."""
    m = mean(xs)
    return math.sqrt(sum((x - m) ** 2 for x in xs) / len(xs))


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


def daggers(runs: Iterable[RunView]) -> str:
    """' († seed 43 lr 0.002)': the diverged runs of a cell, which count as † and never as values."""
    d = [f"seed {r.seed} lr {r.lr:g}" if r.lr is not None else f"seed {r.seed}"
         for r in sorted(runs, key=lambda r: (r.lr or 0.0, r.seed)) if r.diverged]
    return f" (\u2020 {', '.join(d)})" if d else ""


def n_seeds(n: int) -> str:
    return f"{n} seed{'' if n == 1 else 's'}"


@dataclass(frozen=True)
class Seeds:
    """One compared cell: its per-seed values (paper B's bar: >= MIN_SEEDS of them)."""

    what: str
    seeds: tuple[int, ...]
    vals: tuple[float, ...]
    dagger: str = ""

    @property
    def mean(self) -> float:
        return mean(self.vals)

    @property
    def spread(self) -> float:
        return max(self.vals) - min(self.vals)

    def show(self, fmt: Callable[[float], str] = lambda x: f"{x:.2f}") -> str:
        """`51.00 ± 0.30 (seeds 42,43,44)`, diverged seeds as †."""
        return (f"{fmt(self.mean)} \u00b1 {fmt(pstdev(self.vals)).lstrip('+')} "
                f"(seeds {','.join(map(str, self.seeds))}){self.dagger}")


def seeded(runs: Iterable[RunView], fn: Callable[[RunView], float | None], what: str, metric: str,
           min_seeds: int = MIN_SEEDS) -> Seeds:
    """A compared cell's per-seed values; Missing below min_seeds (which seeds it has, which ran
    without the metric or diverged). Which runs exist decides it, never their values."""
    runs = list(runs)
    if not runs:
        raise Missing(f"needs {what} (no run)")
    pairs = sorted((r.seed, v) for r in runs if (v := fn(r)) is not None)
    if not pairs:
        raise Missing(f"{what} {'diverged' if all(r.diverged for r in runs) else f'has no {metric}'}" + daggers(runs))
    if len(pairs) < min_seeds:
        raise Missing(f"{what} has seeds {','.join(str(s) for s, _ in pairs)} with {metric}, needs >= {min_seeds}"
                      + daggers(runs), seeds=len(pairs))
    return Seeds(what, tuple(s for s, _ in pairs), tuple(v for _, v in pairs), daggers(runs))


_RECORD: ContextVar[list[Comparison] | None] = ContextVar("fibexp_comparisons", default=None)


@contextmanager
def recording():
    """Collect every Comparison the judges make inside the block (the ledger wraps each judge)."""
    token = _RECORD.set([])
    try:
        yield _RECORD.get()
    finally:
        _RECORD.reset(token)


def measure(a: Seeds, b: Seeds, kind: str = "rank", band: float | None = None) -> Comparison:
    """The statistics of a against b (band: absolute), recorded when inside `recording()`."""
    paired = a.seeds == b.seeds and len(a.seeds) == len(set(a.seeds))
    d, lo, hi = diff_interval(a.vals, b.vals, paired)
    p_band = None
    if band is not None:
        p_band = tost_p(a.vals, b.vals, band, paired) if kind == "level" else below_p(b.vals, a.vals, band, paired)
    c = Comparison(a.what, b.what, kind, d, d / abs(b.mean) if b.mean else float("nan"), lo, hi,
                   exact_p(a.vals, b.vals), paired, (len(a.vals), len(b.vals)), pooled_sd(a.vals, b.vals), band, p_band)
    if (got := _RECORD.get()) is not None:
        got.append(c)
    return c


def compare(a: Seeds, b: Seeds) -> str:
    """'<' / '>' where the seed ranges do not overlap, '~' (a tie) where they do (measured too)."""
    measure(a, b)
    return rank(a.vals, b.vals)


def ranked(signs: Sequence[str]) -> str:
    """The verdict of a ranking from the signs of its comparisons ('ok', '~', 'against')."""
    return NOT_REPRODUCED if "against" in signs else TIE if "~" in signs else REPRODUCED


def worst(verdicts: Iterable[str]) -> str:
    """Several parts of one claim: any part against decides, then undecided, tie, reproduced."""
    vs = set(verdicts)
    return next(v for v in (NOT_REPRODUCED, UNDECIDED, TIE, REPRODUCED) if v in vs)


def _rel(x: float, base: Seeds, relative: bool) -> float:
    return x / abs(base.mean) if relative else x


def _unit(x: float, relative: bool) -> str:
    return f"{x:.2%}" if relative else f"{100 * x:.2f} points"


def _signed(x: float, relative: bool) -> str:
    return f"{x:+.2%}" if relative else f"{100 * x:+.2f} points"


def _interval(a: Seeds, b: Seeds, kind: str, band: float, relative: bool) -> tuple[Comparison, float, float, float]:
    """The measured comparison, with its 95% interval and the band in the printed unit (relative to
    b's mean, or absolute); Missing where a side has fewer than 2 seeds: no interval to test with."""
    n = min(len(a.vals), len(b.vals))
    if n < 2:
        raise Missing(f"{a.what} vs {b.what}: {n_seeds(n)} on a side, no interval to test the "
                      f"{_unit(band, relative)} band with; needs >= 2 a side", seeds=n)
    c = measure(a, b, kind, band * abs(b.mean) if relative else band)
    return c, _rel(c.lo, b, relative), _rel(c.hi, b, relative), band


def level(a: Seeds, b: Seeds, band: float, relative: bool = True) -> tuple[str, str]:
    """A "level with" claim (a tie the paper states): shown only by its statistics. reproduced: the
    95% interval of mean(a) - mean(b) lies inside the paper's band (-band, +band), equivalence
    shown (the two one-sided tests then give p < 0.025, below their usual 0.05); not reproduced:
    the interval lies wholly beyond the band (a difference larger than the band, shown); undecided:
    the interval crosses the band's edge (our seeds cannot tell). band and the printed numbers are
    relative to b's mean (relative) or absolute (accuracy)."""
    c, lo, hi, band = _interval(a, b, "level", band, relative)
    words = (f"difference {_signed(_rel(c.d, b, relative), relative)} (95% CI {_signed(lo, relative)}.."
             f"{_signed(hi, relative)}), band ±{_unit(band, relative)}")
    if -band < lo and hi < band:
        return REPRODUCED, f"{words}: equivalent, the interval inside the band (TOST p = {p_str(c.p_band)})"
    if lo >= band or hi <= -band:
        return NOT_REPRODUCED, f"{words}: not level, the interval beyond the band"
    return UNDECIDED, f"{words}: equivalence not shown, the interval crosses the band (TOST p = {p_str(c.p_band)})"


def no_advantage(challenger: Seeds, base: Seeds, band: float, relative: bool = True) -> tuple[str, str]:
    """A "no advantage" claim (lower is better), one-sided: the challenger's lead over the base
    (mean(base) - mean(challenger)) at most the paper's band, shown by its statistics.
    reproduced: the lead's 95% interval lies below the band (its upper end < band); not
    reproduced: the interval lies wholly above the band (a lead larger than the band, shown);
    undecided: the interval crosses the band."""
    c, lo, hi, band = _interval(challenger, base, "no advantage", band, relative)
    lead_lo, lead_hi = -hi, -lo
    words = (f"lead {_signed(-_rel(c.d, base, relative), relative)} (95% CI {_signed(lead_lo, relative)}.."
             f"{_signed(lead_hi, relative)}), band {_unit(band, relative)}")
    if lead_hi < band:
        return REPRODUCED, f"{words}: no advantage, the interval below the band (one-sided p = {p_str(c.p_band)})"
    if lead_lo >= band:
        return NOT_REPRODUCED, f"{words}: an advantage beyond the band, the interval above it"
    return UNDECIDED, f"{words}: not shown, the interval crosses the band (one-sided p = {p_str(c.p_band)})"


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
