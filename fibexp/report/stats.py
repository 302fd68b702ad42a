"""Seed statistics shared by the claims report and the UI's seed groups: the mean of a cell's
seeds with its Student-t interval, so a verdict and the MLflow view quote the same numbers.
scipy's distributions, imported when first used (`fibexp-report --help` stays fast)."""
from __future__ import annotations

import math
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
