"""Seed statistics shared by the claims report and the UI's seed groups: the mean of a cell's
seeds with its Student-t interval, so a verdict and the MLflow view quote the same numbers, and
one comparison of two cells as the report states it (`Comparison`).
scipy's distributions, imported when first used (`fibexp-report --help` stays fast)."""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Sequence


def mean_interval(xs: Sequence[float], level: float = 0.95) -> tuple[float, float, float]:
    """(mean, low, high): the two-sided Student-t interval of the mean of `xs` at `level`; with a
    single value the interval is that value's point (no spread to estimate)."""
    n = len(xs)
    if n == 0:
        raise ValueError("mean_interval of no values")
    m = sum(xs) / n
    if n == 1:
        return m, m, m
    from scipy import stats

    sd = math.sqrt(sum((x - m) ** 2 for x in xs) / (n - 1))
    half = stats.t.ppf(0.5 + level / 2, n - 1) * sd / math.sqrt(n)
    return m, float(m - half), float(m + half)


# ---- comparing two cells' seeds (the claims' verdicts, fibexp-plan's power) ----
def _same(xs: Sequence[float]) -> bool:
    return max(xs) - min(xs) <= 1e-12 * max(1.0, abs(xs[0]))


def diff_interval(a: Sequence[float], b: Sequence[float], paired: bool = False,
                  level: float = 0.95) -> tuple[float, float, float]:
    """(mean(a) - mean(b), low, high): Welch's two-sided t interval of the difference, or the paired
    t interval of the per-seed differences (paired: a[i] and b[i] share seed i and its data order).
    Without any spread to estimate the interval is the difference's point."""
    from scipy import stats

    d = sum(a) / len(a) - sum(b) / len(b)
    if paired:
        diffs = [x - y for x, y in zip(a, b)]
        if len(diffs) < 2 or _same(diffs):
            return d, d, d
        ci = stats.ttest_rel(a, b).confidence_interval(level)
    elif len(a) < 2 or len(b) < 2:  # one side a single value (a model no seed changes): a one-sample interval
        many, one, sign = (a, b[0], 1) if len(a) > 1 else (b, a[0], -1)
        if len(many) < 2 or _same(many):
            return d, d, d
        ci = stats.ttest_1samp(many, one).confidence_interval(level)
        lo, hi = sorted((sign * (float(ci.low) - one), sign * (float(ci.high) - one)))  # ci: of mean(many)
        return d, lo, hi
    else:
        if _same(a) and _same(b):
            return d, d, d
        ci = stats.ttest_ind(a, b, equal_var=False).confidence_interval(level)
    return d, float(ci.low), float(ci.high)


def exact_p(a: Sequence[float], b: Sequence[float]) -> float:
    """Two-sided exact permutation p of the difference of means over every split of the pooled seeds
    into groups of len(a) and len(b) (3 against 3, ranges disjoint: 2/20 = 0.10)."""
    import numpy as np
    from scipy import stats

    if min(len(a), len(b)) < 2:  # scipy wants two values a side: the len(a) + len(b) splits by hand
        import itertools

        pooled, k, observed = list(a) + list(b), len(a), sum(a) / len(a) - sum(b) / len(b)
        ds = [sum(pooled[i] for i in idx) / k - sum(pooled[i] for i in range(len(pooled)) if i not in idx)
              / (len(pooled) - k) for idx in itertools.combinations(range(len(pooled)), k)]
        tail = min(sum(x >= observed - 1e-12 for x in ds), sum(x <= observed + 1e-12 for x in ds))
        return min(1.0, 2 * tail / len(ds))
    res = stats.permutation_test((np.asarray(a, float), np.asarray(b, float)),
                                 lambda x, y, axis: np.mean(x, axis=axis) - np.mean(y, axis=axis),
                                 permutation_type="independent", alternative="two-sided", vectorized=True,
                                 n_resamples=np.inf if math.comb(len(a) + len(b), len(a)) <= 100_000 else 99_999,
                                 rng=0)
    return float(min(1.0, res.pvalue))


def _one_sided(a: Sequence[float], b: Sequence[float], shift: float, alternative: str, paired: bool) -> float:
    """p of H1: mean(a) - mean(b) - shift is `alternative` ('greater'/'less') than 0 (Welch or paired t)."""
    from scipy import stats

    b2 = [y + shift for y in b]
    diffs = [x - y for x, y in zip(a, b2)] if paired else None
    if (paired and _same(diffs)) or (not paired and _same(a) and _same(b2)):
        d = sum(a) / len(a) - sum(b2) / len(b2)
        return 0.0 if (d > 0 if alternative == "greater" else d < 0) else 1.0
    test = stats.ttest_rel(a, b2, alternative=alternative) if paired else \
        stats.ttest_ind(a, b2, equal_var=False, alternative=alternative)
    return float(test.pvalue)


def tost_p(a: Sequence[float], b: Sequence[float], band: float, paired: bool = False) -> float:
    """Two one-sided tests that mean(a) - mean(b) lies inside (-band, +band) (absolute units): the
    larger of the two p; equivalence at level alpha exactly when the (1 - 2 alpha) interval lies
    inside the band."""
    return max(_one_sided(a, b, -band, "greater", paired), _one_sided(a, b, band, "less", paired))


def below_p(a: Sequence[float], b: Sequence[float], band: float, paired: bool = False) -> float:
    """One-sided test that mean(a) - mean(b) < band (a "no advantage" claim: the lead at most band)."""
    return _one_sided(a, b, band, "less", paired)


def pooled_sd(*cells: Sequence[float]) -> float:
    """The per-seed sd pooled over cells (sample variances weighted by their degrees of freedom;
    a single-value cell adds none)."""
    ss = sum(sum((x - sum(c) / len(c)) ** 2 for x in c) for c in cells)
    df = sum(len(c) - 1 for c in cells)
    return math.sqrt(ss / df) if df > 0 else 0.0


def power(effect: float, sd: float, n: int, alpha: float = 0.05) -> float:
    """Power of a two-sided two-sample t test (n seeds per cell, a common seed sd) to detect a
    difference of means `effect`: the noncentral t's mass beyond the critical values."""
    from scipy import stats

    if n < 2:
        return 0.0
    if sd <= 0:
        return 1.0 if effect else alpha
    df = 2 * n - 2
    ncp = abs(effect) / (sd * math.sqrt(2 / n))
    crit = stats.t.ppf(1 - alpha / 2, df)
    p = stats.nct.sf(crit, df, ncp) + stats.nct.cdf(-crit, df, ncp)
    if not math.isfinite(p):  # far in the tail the noncentral t fails: its normal limit
        p = stats.norm.sf(crit - ncp) + stats.norm.cdf(-crit - ncp)
    return float(min(1.0, p))


def seeds_for_power(effect: float, sd: float, target: float = 0.8, alpha: float = 0.05, most: int = 1000) -> int | None:
    """The fewest seeds per cell whose power reaches `target` (None: not within `most`)."""
    for n in range(2, most + 1):
        if power(effect, sd, n, alpha) >= target:
            return n
    return None


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
