"""The seed rule every verdict follows, and its statistics.

Rankings (paper B's bar): >= MIN_SEEDS seeds per compared cell; ranked only where the seed ranges
(min..max) do not overlap, an overlap is a tie. Threshold claims: >= MIN_SEEDS seeds and the bar
holds for every seed. "Level with" claims: the difference inside the paper's own seed band
(`level`, `no_advantage`), decided only where our seeds are at least as tight as that band."""
from __future__ import annotations

import itertools
import math
import random
from dataclasses import dataclass
from typing import Callable, Iterable, Mapping, Sequence

from fibexp.report.claims import NOT_REPRODUCED, REPRODUCED, TIE, UNDECIDED, Missing
from fibexp.report.published import MIN_SEEDS
from fibexp.report.runs import RunView


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


def compare(a: Seeds, b: Seeds) -> str:
    """'<' / '>' where the seed ranges do not overlap, '~' (a tie) where they do."""
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
    d = _rel(abs(a.mean - b.mean), b, relative)
    s = _rel(max(a.spread, b.spread), b, relative)
    disjoint = compare(a, b) != "~"
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
    lead = _rel(base.mean - challenger.mean, base, relative)
    s = _rel(max(challenger.spread, base.spread), base, relative)
    sign = compare(challenger, base)
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
