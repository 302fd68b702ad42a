"""Paper A's attended sets, checked against the numbers the paper states."""
import pytest

from fibexp.science.patterns import (FIB, attended_distances, coprime_stride, coverage,
                             interpolated_rungs, layer_alphas, rungs)


def test_spec_coverage_w8_t1024_16_layers():
    per_layer, union = coverage(8, "fib", layer_alphas("fixed", 16), 1024)
    assert per_layer == [19] * 16 and union == 19
    assert coverage(8, "fib", layer_alphas("learned", 16), 1024)[1] == 19
    assert coverage(8, "fib", layer_alphas("stagger", 16), 1024)[1] == 133
    # coprime is the same multiset of alphas, so the same union
    assert coverage(8, "fib", layer_alphas("coprime", 16), 1024)[1] == 133


def test_coprime_order_l16():
    assert coprime_stride(16) == 7
    expected = [0.5, .967, 1.433, .833, 1.3, .7, 1.167, .567, 1.033, 1.5, .9, 1.367,
                .767, 1.233, .633, 1.1]
    assert layer_alphas("coprime", 16) == pytest.approx(expected, abs=1e-3)
    assert sorted(layer_alphas("coprime", 16)) == pytest.approx(layer_alphas("stagger", 16))


@pytest.mark.parametrize("n_layers, stride", [(1, 1), (4, 1), (5, 2), (6, 1), (8, 3), (12, 5)])
def test_coprime_stride_small(n_layers, stride):
    assert coprime_stride(n_layers) == stride


def test_stagger_endpoints_and_single_layer():
    alphas = layer_alphas("stagger", 16)
    assert alphas[0] == 0.5 and alphas[-1] == 1.5
    assert layer_alphas("stagger", 1) == layer_alphas("coprime", 1) == [1.0]


def test_pow2_rungs_grow_with_length():
    assert rungs("pow2", 1024) == [2**e for e in range(10)]
    assert rungs("pow2", 2048) == rungs("pow2", 1024) + [1024]
    assert rungs("pow2", 4096) == rungs("pow2", 2048) + [2048]
    assert rungs("fib", 1024) == rungs("fib", 4096) == list(FIB)


def test_round_half_to_even():
    # rung 5 at alpha 0.5 -> 2.5 -> 2 (inside any window), rung 13 -> 6.5 -> 6, rung 21 -> 10.5 -> 10
    assert 10 in attended_distances(0, "fib", 0.5, 1024)
    d = attended_distances(1, "fib", 0.5, 1024)
    assert 2 in d and 6 in d and 3 not in d and 7 not in d


def test_rungs_kept_only_beyond_window_and_inside_sequence():
    assert attended_distances(8, "fib", 1.0, 1024) == list(range(9)) + [13, 21, 34, 55, 89, 144, 233, 377, 610, 987]
    assert attended_distances(8, "fib", 1.0, 100) == list(range(9)) + [13, 21, 34, 55, 89]
    # alpha 0.5, W 0: rungs 1, 2, 3, 5 give 0, 1, 2, 2 -> 0 is the window, 2 kept once
    assert attended_distances(0, "fib", 0.5, 1024)[:4] == [0, 1, 2, 4]
    assert attended_distances(50, "fib", 1.0, 10) == list(range(10))


def test_interpolated_rungs_skip_rules():
    # alpha 0.5, W 0: rung 1 (t 0.5, floor 0 <= W) skipped; rung 3 (t 1.5) repeats rung 2's lo 1
    assert interpolated_rungs(0, "fib", 0.5, 1024)[:3] == [(2, 1, 0.0), (5, 2, 0.5), (8, 4, 0.0)]
    # floor(t) decides the window test: rung 5 at t 2.5 has floor 2 <= W = 2; so has rung 3 at
    # t 2.7 with W = 2 (alpha 0.9), although round(t) = 3 > W
    assert [lo for _, lo, _ in interpolated_rungs(2, "fib", 0.5, 1024)][:2] == [4, 6]
    assert [r for r, _, _ in interpolated_rungs(2, "fib", 0.9, 1024)][:2] == [5, 8]
    # rung 21 at t 10.5: floor 10 > 8 keeps it
    assert interpolated_rungs(8, "fib", 0.5, 1024)[0] == (21, 10, 0.5)
    # t = 1.5 * 987 = 1480.5: lo beyond seq_len - 1 is skipped; lo == seq_len - 1 is kept
    assert interpolated_rungs(8, "fib", 1.5, 1024)[-1] == (610, 915, 0.0)
    assert interpolated_rungs(8, "fib", 1.5, 916)[-1] == (610, 915, 0.0)
    assert interpolated_rungs(8, "fib", 1.5, 915)[-1] == (377, 565, 0.5)


@pytest.mark.parametrize("base, window", [("fib", 8), ("fib", 12), ("pow2", 6)])
def test_interpolated_matches_integer_at_integral_alpha(base, window):
    got = interpolated_rungs(window, base, 1.0, 1024)
    assert all(frac == 0 and lo == r for r, lo, frac in got)
    assert [lo for _, lo, _ in got] == [d for d in attended_distances(window, base, 1.0, 1024) if d > window]


@pytest.mark.parametrize("call, key", [
    (lambda: rungs("fibonacci", 1024), "attention.base"),
    (lambda: layer_alphas("foo", 16), "attention.schedule"),
    (lambda: attended_distances(-1, "fib", 1.0, 1024), "attention.window"),
    (lambda: attended_distances(8, "fib", 1.0, 0), "model.seq_len"),
    (lambda: attended_distances(8, "fib", 1.6, 1024), "alpha"),
    (lambda: interpolated_rungs(8, "fib", 0.4, 1024), "alpha"),
    (lambda: layer_alphas("stagger", 0), "model.n_layers"),
])
def test_bad_inputs_name_the_key(call, key):
    with pytest.raises(ValueError, match=rf"^{key}: ") as err:
        call()
    assert "\n" not in str(err.value) and "allowed" in str(err.value)


def test_unknown_schedule_lists_allowed():
    with pytest.raises(ValueError, match="allowed: fixed, learned, stagger, coprime"):
        layer_alphas("foo", 16)
