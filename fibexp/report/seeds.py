"""The seed rule every verdict follows, and its statistics.

Rankings (paper B's bar): >= MIN_SEEDS seeds per compared cell; ranked only where the seed ranges
(min..max) do not overlap, an overlap is a tie. Threshold claims: >= MIN_SEEDS seeds and the bar
holds for every seed. "Level with" claims: the difference inside the paper's own seed band
(`level`, `no_advantage`), decided only where our seeds are at least as tight as that band.

Every comparison a judge makes (`compare`, `level`, `no_advantage`) is also measured
(`Comparison`: the difference with its 95% interval, an exact permutation p, the equivalence test
against a band) and, inside `recording()`, collected for the verdict line and the JSON: the
paper's rule decides, the statistics say how strong the evidence is."""
from __future__ import annotations

import itertools
import math
import random
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import asdict, dataclass
from typing import Callable, Iterable, Mapping, Sequence

from fibexp.report.claims import NOT_REPRODUCED, REPRODUCED, TIE, UNDECIDED, Missing
from fibexp.report.published import MIN_SEEDS
from fibexp.report.runs import RunView
from fibexp.report.stats import below_p, diff_interval, exact_p, pooled_sd, tost_p


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


@dataclass(frozen=True)
class Comparison:
    """One comparison of two cells: d = mean(a) - mean(b) in the metric's unit and relative to b's
    mean, its 95% interval (paired t where the cells share their seeds, and so their data order;
    else Welch), the exact two-sided permutation p over the seeds, and for a band claim the band
    (absolute) with its equivalence p (two one-sided tests; one-sided for "no advantage")."""

    a: str
    b: str
    kind: str  # "rank", "level" or "no advantage"
    d: float
    rel: float
    lo: float
    hi: float
    p: float
    paired: bool
    seeds: tuple[int, int]
    sd: float  # the cells' pooled per-seed sd (sample), what a power calculation reads
    band: float | None = None
    p_band: float | None = None

    def text(self, scale: float = 1.0, unit: str = "") -> str:
        """`fib stagger W8 - fib fixed W8 -1.10 ppl (-2.1%), 95% CI -1.52..-0.68 (paired), p = 0.10`."""
        f = lambda x: f"{x * scale:+.3g}"
        out = (f"{self.a} - {self.b} {f(self.d)}{unit} ({self.rel:+.1%}), 95% CI {f(self.lo)}..{f(self.hi)}"
               f"{' (paired)' if self.paired else ''}, p = {p_str(self.p)}")
        if self.band is not None:
            test = "TOST" if self.kind == "level" else "lead < band"
            out += f", {test} p = {p_str(self.p_band)} against \u00b1{self.band * scale:.3g}{unit}"
        return out

    def as_dict(self) -> dict:
        """For JSON: a value that is not finite (a difference relative to a zero mean) as None."""
        return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in asdict(self).items()}


def p_str(p: float) -> str:
    """0.10, 0.0011: two decimals, or two significant digits below 0.01."""
    return f"{p:.2f}" if p >= 0.01 else f"{p:.2g}"


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


def level(a: Seeds, b: Seeds, band: float, relative: bool = True) -> tuple[str, str]:
    """A "level with" claim (a tie the paper states): the difference of means d inside the paper's
    band, decided only where our seed spread s (the wider range) is no wider than that band:
    reproduced: d <= band and s <= band; not reproduced: d > band with the seed ranges disjoint;
    undecided otherwise (our seeds are too spread to tell a difference of the band's size).
    band and the printed d, s are relative to b's mean (relative) or absolute (accuracy)."""
    measure(a, b, "level", band * abs(b.mean) if relative else band)
    d = _rel(abs(a.mean - b.mean), b, relative)
    s = _rel(max(a.spread, b.spread), b, relative)
    disjoint = rank(a.vals, b.vals) != "~"
    words = f"difference {_unit(d, relative)}, band {_unit(band, relative)}"
    if d > band and disjoint:
        return NOT_REPRODUCED, words + ", seed ranges disjoint"
    if d <= band and s <= band:
        return REPRODUCED, words + f", seed spread {_unit(s, relative)}"
    why = (f"seed spread {_unit(s, relative)} wider than the band" if s > band
           else "beyond the band but the seed ranges overlap")
    return UNDECIDED, f"{words}: {why}"


def no_advantage(challenger: Seeds, base: Seeds, band: float, relative: bool = True) -> tuple[str, str]:
    """A "no advantage" claim (lower is better): the challenger's lead over the base at most the
    paper's band. reproduced: behind with disjoint seed ranges, or a lead <= band measured with a
    seed spread <= band; not reproduced: a lead beyond the band with disjoint ranges; undecided
    otherwise (our seeds too spread to exclude a lead of the band's size)."""
    measure(challenger, base, "no advantage", band * abs(base.mean) if relative else band)
    lead = _rel(base.mean - challenger.mean, base, relative)
    s = _rel(max(challenger.spread, base.spread), base, relative)
    sign = rank(challenger.vals, base.vals)
    words = f"lead {'+' if lead >= 0 else '-'}{_unit(abs(lead), relative)}, band {_unit(band, relative)}"
    if sign == ">":
        return REPRODUCED, words + ", behind beyond every seed"
    if lead > band and sign == "<":
        return NOT_REPRODUCED, words + ", ahead beyond every seed"
    if lead <= band and s <= band:
        return REPRODUCED, words + f", seed spread {_unit(s, relative)}"
    why = (f"seed spread {_unit(s, relative)} wider than the band" if s > band
           else "beyond the band but the seed ranges overlap")
    return UNDECIDED, f"{words}: {why}"


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
