"""Seed statistics against textbook values."""
import pytest

from fibexp.report.stats import below_p, diff_interval, exact_p, mean_interval, power, seeds_for_power, tost_p


def test_the_t_interval_of_three_seeds_uses_t_with_two_degrees_of_freedom():
    m, lo, hi = mean_interval([1.0, 2.0, 3.0])
    assert m == 2.0  # sd 1, t(0.975, 2) = 4.302653: half width 4.302653 / sqrt(3)
    assert (lo, hi) == pytest.approx((2 - 2.484138, 2 + 2.484138), abs=1e-6)


def test_one_seed_has_no_spread_and_none_is_refused():
    assert mean_interval([5.0]) == (5.0, 5.0, 5.0)
    with pytest.raises(ValueError):
        mean_interval([])


# ---- comparing two cells ----
def test_welch_and_paired_intervals_of_a_difference():
    # Welch: d = -3, se = sqrt(1/3 + 1/3) = 0.8165, df = 4 (equal variances and n): t(0.975, 4) = 2.776445
    d, lo, hi = diff_interval([1.0, 2.0, 3.0], [4.0, 5.0, 6.0])
    assert (d, lo, hi) == pytest.approx((-3.0, -3 - 2.776445 * 0.816497, -3 + 2.776445 * 0.816497), abs=1e-5)
    # paired: differences -3, -3.5, -2.5 (sd 0.5): -3 +- t(0.975, 2) * 0.5 / sqrt(3)
    d, lo, hi = diff_interval([1.0, 2.0, 3.0], [4.0, 5.5, 5.5], paired=True)
    assert (lo, hi) == pytest.approx((-3 - 4.302653 * 0.5 / 3 ** 0.5, -3 + 4.302653 * 0.5 / 3 ** 0.5), abs=1e-5)
    assert diff_interval([1.0, 1.0], [2.0, 2.0]) == (-1.0, -1.0, -1.0)  # no spread: the point


def test_exact_permutation_p_two_sided():
    assert exact_p([1.0, 2.0, 3.0], [4.0, 5.0, 6.0]) == pytest.approx(0.10)  # 2 of the 20 splits
    assert exact_p([0.99] * 6, [0.5 + 0.01 * i for i in range(6)]) == pytest.approx(2 / 924)
    assert exact_p([1.0, 2.0, 3.0], [1.5, 2.5, 2.0]) == 1.0
    assert exact_p([1.0, 2.0, 3.0], [10.0]) == pytest.approx(0.5)  # 3 against 1: 4 splits, never below 2/4


def test_equivalence_tests_against_a_band():
    a, b = [10.0, 10.1, 9.9, 10.05, 9.95], [10.02, 10.12, 9.92, 10.07, 9.97]
    assert tost_p(a, b, 0.5) < 0.001 and tost_p(a, b, 0.01) > 0.4  # inside a wide band, not a narrow one
    assert below_p([1.0, 1.1, 0.9], [5.0, 5.1, 4.9], 0.5) < 0.001  # a - b far below +0.5


def test_power_and_seeds_needed_match_the_textbook():
    # two-sided two-sample t, alpha 0.05, effect 1 sd: n = 17 per group for 80% (Cohen's tables)
    assert power(1.0, 1.0, 17) == pytest.approx(0.807, abs=0.002)
    assert seeds_for_power(1.0, 1.0) == 17 and seeds_for_power(2.0, 1.0) == 6
    assert power(1.0, 1.0, 3) == pytest.approx(0.159, abs=0.002)
    assert seeds_for_power(0.001, 1.0, most=50) is None
