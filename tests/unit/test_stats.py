"""Seed statistics against textbook values."""
import pytest

from fibexp.report.stats import mean_interval


def test_the_t_interval_of_three_seeds_uses_t_with_two_degrees_of_freedom():
    m, lo, hi = mean_interval([1.0, 2.0, 3.0])
    assert m == 2.0  # sd 1, t(0.975, 2) = 4.302653: half width 4.302653 / sqrt(3)
    assert (lo, hi) == pytest.approx((2 - 2.484138, 2 + 2.484138), abs=1e-6)


def test_one_seed_has_no_spread_and_none_is_refused():
    assert mean_interval([5.0]) == (5.0, 5.0, 5.0)
    with pytest.raises(ValueError):
        mean_interval([])
