"""Paper B's wiring schedules and the reachability claims behind its results."""
import pytest

from fibexp.science.wiring import (NEAR, default_hybrid_layers, cube_dims, dimension_order, layer_plan, links,
                                   reach, sources)


def _names(plan):
    """Paper B's notation: "near", "attn", "jump<k>"."""
    return " ".join(k if isinstance(k, str) else f"jump{k}" for k in plan)


def test_hybrid_reproduces_spec_window_256_string():
    plan = layer_plan("hybrid", 16, 256)
    assert [k for l, k in enumerate(plan) if l % 2 == 0] == [NEAR] * 8
    assert _names(plan) == (
        "near jump128 near attn near jump32 near jump16 near attn near jump4 near jump2 near jump1")


def test_mixa_n64_visits_each_scale_once_from_the_largest():
    plan = layer_plan("mixa", 12, 64)
    assert plan[0::2] == [NEAR] * 6 and plan[1::2] == [32, 16, 8, 4, 2, 1]
    assert layer_plan("mixa", 16, 64)[13::2] == [32, 16]  # cycles when deeper


def test_simple_schedules():
    assert layer_plan("local", 4, 64) == [NEAR] * 4
    assert layer_plan("warp", 16, 256) == layer_plan("hybrid", 16, 256)
    assert layer_plan("fixed", 4, 64) == [32] * 4
    assert layer_plan("rot", 8, 64) == [1, 2, 4, 8, 16, 32, 1, 2]
    assert layer_plan("dense", 2, 64) == ["dense", "dense"]


def test_gray_order():
    dims = dimension_order("gray", 16, 6)
    assert dims.count(0) == 8 and 5 not in dims
    assert dimension_order("gray", 4, 2) == [0, 1, 0, 1]  # cyclic: the wrap flips the top bit


def test_random_order_is_a_seeded_permutation_repeated():
    dims = dimension_order("random", 16, 6, seed=3)
    assert sorted(dims[:6]) == list(range(6)) and dims[6:12] == dims[:6]
    assert dims == dimension_order("random", 16, 6, seed=3)


@pytest.mark.parametrize("n", [8, 16, 32, 64, 128, 256])
def test_noncausal_rot_at_depth_log2n_reaches_everything(n):
    b = cube_dims(n)
    assert reach(layer_plan("rot", b, n), n, causal=False) == set(range(n))
    assert len(reach(layer_plan("rot", b - 1, n), n, causal=False)) == n // 2
    assert len(reach(layer_plan("fixed", 4 * b, n), n, causal=False)) == 2


def test_gray_never_reaches_everything_random_does():
    n = 64
    assert len(reach(layer_plan("rot", 16, n, order="gray"), n, causal=False)) < n
    for seed in range(5):
        assert reach(layer_plan("rot", 16, n, order="random", seed=seed), n, causal=False) == set(range(n))


@pytest.mark.parametrize("n", [16, 256, 1024])
def test_causal_rot_reaches_every_earlier_position_from_the_last(n):
    assert reach(layer_plan("rot", cube_dims(n), n), n, causal=True) == set(range(n))
    assert reach(layer_plan("local", 3, n), n, causal=True) == {n - 1, n - 2, n - 3, n - 4}


def test_attention_layers_link_everything_allowed():
    assert reach(["attn"], 16, causal=True, target=5) == set(range(6))
    assert reach(layer_plan("dense", 1, 16), 16, causal=False) == set(range(16))


def test_links():
    assert links([1, "dense"], 8, causal=False) == 2 * 8 + 64
    assert links([4], 8, causal=True) == 8 + 4  # positions 4..7 have bit 2 set
    assert links([NEAR], 8, causal=True) == 8 + 7
    assert links(["attn"], 8, causal=True) == 36


def test_causal_jump_keeps_the_earlier_endpoint_of_each_cube_edge():
    """i hears i - 2^k only where bit k of i is set: the edge i XOR 2^k, earlier end kept."""
    n = 16
    for k in (1, 2, 4, 8):
        for i in range(n):
            heard = set(sources(k, i, n, causal=True)) - {i}
            assert heard == ({i ^ k} if i ^ k < i else set())
    # under the bit rule i hears only positions whose bits are a subset of i's: 2 never hears 1
    assert reach(layer_plan("rot", 4, n), n, causal=True, target=2) == {0, 2}
    assert all(reach(layer_plan("rot", 8, n), n, causal=True, target=i) == {j for j in range(n) if j & i == j}
               for i in range(n))


@pytest.mark.parametrize("call, key", [
    (lambda: cube_dims(100), "model.seq_len"),
    (lambda: layer_plan("rot", 6, 48), "model.seq_len"),
    (lambda: layer_plan("spin", 6, 64), "attention.schedule"),
    (lambda: layer_plan("hybrid", 6, 64, hybrid_layers=[3, 9]), "attention.hybrid_layers"),
    (lambda: layer_plan("rot", 6, 64, order="snake"), "attention.order"),
    (lambda: layer_plan("rot", 0, 64), "model.n_layers"),
])
def test_bad_inputs_name_the_key(call, key):
    with pytest.raises(ValueError, match=rf"^{key}: "):
        call()


def test_default_hybrid_layers_keep_specs_relative_depth():
    assert default_hybrid_layers(16) == [3, 9]  # paper B's window-256 string
    for n_layers in (2, 4, 6, 8, 12, 32):
        layers = default_hybrid_layers(n_layers)
        assert layers and all(0 <= h < n_layers and h % 2 == 1 for h in layers)  # long-jump layers
        assert layer_plan("hybrid", n_layers, 64).count("attn") == len(layers)
