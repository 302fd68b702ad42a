"""Learned alpha (paper A) against a reference written from its definition and the authors' two
edge rules, which the paper's learned numbers were trained with:
1. a rung is kept only when W < floor(alpha r) <= T - 1 and its floor is new (the window's rows
   count as taken, so round(alpha r) = W + 1 with floor W is dropped);
2. the row before position 0 that a column reads at the query i = floor(alpha r) is row 0
   (a clamped index), not zero.
Forward and every gradient (theta, q, k, v) in float64, against LearnedOffsets itself; the mixed
gather's backward by gradcheck; and the config hash that keeps older learned runs apart."""
import math
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir

from fibexp.config import identity
from fibexp.model import kernels, mixers
from fibexp.model.spec import Base
from fibexp.science import patterns

B, HKV, G, D = 2, 2, 4, 8  # GQA: 4 query heads per KV head
FIB_RUNGS = list(patterns.FIB)


pytestmark = pytest.mark.usefixtures("one_thread")


def _theta(alpha: float) -> float:
    return math.log((alpha - 0.5) / (1.5 - alpha))  # alpha = 0.5 + sigmoid(theta)


def reference(q, k, v, theta, window, rungs, clamp=True):
    """The learned layer spelled out: q [B, T, H, D], k/v [B, T, Hkv, D], theta a 0-d tensor.
    Column by column, every query reads its own rows through an explicit index; the rung's
    second row i - lo - 1 is clamped to row 0 (rule 2), or zero with clamp=False."""
    b, t, h, d = q.shape
    alpha = 0.5 + torch.sigmoid(theta)
    i = torch.arange(t)
    cols = [(dist, None) for dist in range(min(window, t - 1) + 1)]
    taken = set(range(window + 1))  # rule 1: the window's rows are taken
    for r in rungs:
        lo = math.floor(float(alpha.detach()) * r)
        if lo <= t - 1 and lo not in taken:
            taken.add(lo)
            cols.append((lo, alpha * r - lo))
    keys, vals, valid = [], [], []
    for lo, frac in cols:
        near = (i - lo).clamp(min=0)
        kn, vn = k[:, near], v[:, near]
        if frac is not None:
            far = (i - lo - 1).clamp(min=0)
            kf, vf = k[:, far], v[:, far]
            if not clamp:
                before = (i - lo - 1 < 0)[None, :, None, None]
                kf, vf = kf.masked_fill(before, 0.0), vf.masked_fill(before, 0.0)
            kn, vn = (1 - frac) * kn + frac * kf, (1 - frac) * vn + frac * vf
        keys.append(kn)
        vals.append(vn)
        valid.append(i >= lo)
    kk = torch.stack(keys, 2).repeat_interleave(h // k.shape[2], 3)  # [B, T, C, H, D]
    vv = torch.stack(vals, 2).repeat_interleave(h // k.shape[2], 3)
    s = torch.einsum("bthd,btchd->bthc", q, kk) * d ** -0.5
    s = s.masked_fill(~torch.stack(valid, 1)[None, :, None, :], float("-inf"))
    return torch.einsum("bthc,btchd->bthd", torch.softmax(s, -1), vv)


def _inputs(t, seed=0):
    gen = torch.Generator().manual_seed(seed)
    shapes = ((B, t, HKV * G, D), (B, t, HKV, D), (B, t, HKV, D), (B, t, HKV * G, D))
    return [torch.randn(*s, generator=gen, dtype=torch.float64) for s in shapes]


def _forward_and_grads(fn, theta, q, k, v, g):
    leaves = [theta] + [x.clone().requires_grad_(True) for x in (q, k, v)]
    out = fn(*leaves[1:])
    (out * g).sum().backward()
    return [out.detach()] + [x.grad for x in leaves]


def _run_both(t, window, alpha, base="fib", clamp=True):
    q, k, v, g = _inputs(t)
    module = mixers.LearnedOffsets(window, Base(base)).double()
    with torch.no_grad():
        module.theta.fill_(_theta(alpha))
    theta = module.theta.detach().clone().requires_grad_(True)
    rungs = patterns.rungs(base, t)
    ours = _forward_and_grads(module, module.theta, q, k, v, g)
    ref = _forward_and_grads(lambda *x: reference(*x, theta, window, rungs, clamp), theta, q, k, v, g)
    return ours, ref


CASES = [  # (T, W, alpha, base)
    (64, 12, 0.97, "fib"), (1024, 12, 0.97, "fib"),  # rung 13: t = 12.61, floor 12 in the window
    (64, 8, 1.1, "fib"), (1024, 8, 1.1, "fib"),  # rung 8: t = 8.8, floor 8 in the window
    (64, 8, 1.0, "fib"), (1024, 8, 1.0, "fib"), (1024, 12, 1.0, "fib"),  # at init
    (64, 8, 0.51, "fib"), (1024, 8, 0.51, "fib"), (1024, 8, 1.49, "fib"),  # near the ends of the range
    (64, 0, 0.51, "fib"),  # rungs 2 and 3 share floor 1: the first is kept
    (40, 3, 0.5 + 1 / (1 + math.exp(-0.3)), "fib"), (40, 0, 0.5 + 1 / (1 + math.exp(0.8)), "fib"),
    (40, 1, 0.5 + 1 / (1 + math.exp(-1.7)), "pow2"), (1024, 8, 1.27, "pow2"),
]


@pytest.mark.parametrize("t, window, alpha, base", CASES)
def test_learned_layer_matches_the_reference_forward_and_gradients(t, window, alpha, base):
    ours, ref = _run_both(t, window, alpha, base)
    for name, a, b in zip(("output", "dL/dtheta", "dL/dq", "dL/dk", "dL/dv"), ours, ref):
        torch.testing.assert_close(a, b, atol=1e-12, rtol=1e-12, msg=name)


@pytest.mark.parametrize("t, window, alpha", [(1024, 8, 1.0), (1024, 12, 1.0), (64, 8, 0.73)])
def test_reading_zeros_before_position_0_changes_the_theta_gradient(t, window, alpha):
    """Rule 2 matters where it claims to: with zeros the theta gradient moves by more than 1%,
    even at alpha = 1 where the forward is the same (frac = 0 there)."""
    ours, zeros = _run_both(t, window, alpha, clamp=False)
    if alpha == 1.0:
        torch.testing.assert_close(ours[0], zeros[0], atol=1e-12, rtol=1e-12)
    else:
        assert (ours[0] - zeros[0]).abs().max() > 1e-3
    assert abs(float(ours[1]) - float(zeros[1])) > 0.01 * abs(float(ours[1]))


@pytest.mark.parametrize("window, alpha, t, kept", [
    (12, 0.97, 1024, FIB_RUNGS[6:]),  # rung 13 at t = 12.61 (round 13 > W) dropped: floor 12 <= W
    (12, 0.9615, 1024, FIB_RUNGS[6:]),  # t = 12.4995: dropped by either reading
    (12, 1.0, 1024, FIB_RUNGS[5:]),  # t = 13: floor 13 kept
    (8, 1.1, 1024, FIB_RUNGS[5:-1]),  # rung 8 at t = 8.8 dropped; 987 at 1085.7 > T - 1
    (8, 1.0625, 1024, FIB_RUNGS[5:-1]),  # t = 8.5: floor 8
    (8, 1.125, 1024, FIB_RUNGS[4:-1]),  # t = 9: floor 9 kept
    (8, 1.0, 64, FIB_RUNGS[5:9]),  # 89 > T - 1
    (0, 0.51, 64, [2, 5, 8, 13, 21, 34, 55, 89]),  # rung 1: floor 0; rung 3 repeats rung 2's floor 1
])
def test_a_rung_whose_floor_is_in_the_window_is_dropped(window, alpha, t, kept):
    got = patterns.interpolated_rungs(window, "fib", alpha, t)
    assert [r for r, _, _ in got] == kept
    assert all(window < lo <= t - 1 and lo == math.floor(alpha * r) for r, lo, _ in got)


def test_the_integer_variants_keep_the_rung_learned_alpha_drops():
    """Same alpha, W = 12: the integer offset round(0.97 * 13) = 13 lies beyond the window,
    learned alpha's floor 12 does not."""
    assert 13 in patterns.attended_distances(12, "fib", 0.97, 1024)
    assert 13 not in [r for r, _, _ in patterns.interpolated_rungs(12, "fib", 0.97, 1024)]


@pytest.mark.parametrize("chunk", [2, 3, 64])
def test_mixed_gather_gradcheck(chunk):
    """The kernel with a mix (front rows repeat row 0, their gradients fold back onto it) against
    autograd's finite differences, in q, k, v and the mix. Columns: rows 0, 1, then rung columns
    at lo = 2, 4, 5 that mix rows lo and lo + 1, so each reads before position 0 at i = lo."""
    t = 9
    rows = (0, 1, 2, 3, 4, 5, 6)
    lows = (2, 4, 5)
    col_lo = (0, 1) + lows
    gen = torch.Generator().manual_seed(3)
    mix = torch.zeros(len(rows), len(col_lo), dtype=torch.float64)
    mix[0, 0] = mix[1, 1] = 1.0
    for c, (lo, frac) in enumerate(zip(lows, (0.3, 0.0, 0.8)), start=2):
        mix[lo, c], mix[lo + 1, c] = 1 - frac, frac
    q = torch.randn(1, 2, t, 2, 3, generator=gen, dtype=torch.float64)
    k, v = (torch.randn(1, 2, t, 3, generator=gen, dtype=torch.float64) for _ in range(2))
    args = [x.requires_grad_(True) for x in (q, k, v, mix)]
    assert torch.autograd.gradcheck(
        lambda q, k, v, m: kernels.gather_attention(q, k, v, rows, m, col_lo, chunk=chunk), args)


# Config hashes before learned alpha took the authors' edge rules (main at 5d2b194): a sweep skips
# a cell whose hash has a finished run, so a learned cell must get a new hash and no other may.
OLD_HASHES = {("attention=fib_learned",): "e16beac04c",
              ("attention=fib_learned", "attention.window=12"): "afb9e3f635",
              ("attention=fib_learned", "attention.base=pow2"): "86c9aa5ed3",
              ("attention=fib_stagger",): "006b07e224", ("attention=fib_fixed",): "f8cab20d79",
              ("attention=pow2_stagger",): "9025e79578", ("attention=dense",): "638a94aee9",
              ("attention=hypercube",): "e10680abd0"}


def test_only_learned_cells_change_identity():
    conf = Path(__file__).resolve().parents[2] / "conf"
    with initialize_config_dir(str(conf), version_base="1.3"):
        for overrides, old in OLD_HASHES.items():
            cfg = compose("train", overrides=["paths.root=.", *overrides])
            learned = cfg.attention.schedule == "learned" and cfg.attention.kind.value == "sparse"
            assert (identity.config_hash(cfg) != old) == learned, overrides
            assert (identity.identity(cfg)["attention"].get("edges") == "authors") == learned, overrides
