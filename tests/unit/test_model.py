"""The model library against the papers: what each layer can see, causality, hypercube reach, the
agreement of the attention paths, parameter counts, length extrapolation, input checks.

Dependence is measured by perturbation in float64: "position i depends on j" means that
changing the token (or hidden row) at j moves the output at i by more than TOL. Every
perturbation of one case runs as one batch (row 0 unperturbed), so the suite stays fast.
"""
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from fibexp.errors import Refusal
from fibexp.science import patterns, wiring
from fibexp.model import kernels, mixers
from fibexp.model.lm import LM
from fibexp.model.spec import AttentionSpec
from fibexp.model.layers import RMSNorm, rope_tables

TOL = 1e-9
V = 13  # vocab of the tiny models
D_MODEL, N_HEADS, N_KV = 16, 4, 2  # head dim 4, GQA groups of 2
CPU = torch.device("cpu")


pytestmark = pytest.mark.usefixtures("one_thread")


def tiny(n_layers=1, seq_len=64, dtype=torch.float64, seed=0, **spec):
    torch.manual_seed(seed)
    model = LM(n_layers, D_MODEL, N_HEADS, N_KV, V, seq_len, attention=AttentionSpec(**spec))
    return model.to(dtype).eval()


def _ids(t, batch=1, seed=1):
    return torch.randint(0, V, (batch, t), generator=torch.Generator().manual_seed(seed))


def token_dependence(model, t, positions=None, seed=1):
    """{j: positions i whose logits move when the token at j changes}."""
    positions = list(range(t)) if positions is None else list(positions)
    base = _ids(t, seed=seed)
    batch = base.repeat(len(positions) + 1, 1)
    for b, j in enumerate(positions):
        batch[b + 1, j] = (batch[b + 1, j] + 1 + b % (V - 1)) % V
    with torch.no_grad():
        out = model(batch)
    diff = (out[1:] - out[:1]).abs().amax(-1)
    return {j: set(torch.nonzero(diff[b] > TOL).flatten().tolist()) for b, j in enumerate(positions)}


def depends_on(dep, i):
    """Positions j that position i depends on, from a token_dependence map."""
    return {j for j, seen in dep.items() if i in seen}


def mixer_dependence(model, layer, t, positions, seed=2):
    """Same at the level of one mixer: perturb hidden row j, see which output rows move."""
    mixer = model.blocks[layer].mixer
    cos, sin = rope_tables(t, model.head_dim, model.rope_theta)
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(1, t, D_MODEL, generator=g, dtype=torch.float64)
    batch = x.repeat(len(positions) + 1, 1, 1)
    for b, j in enumerate(positions):
        batch[b + 1, j] += torch.randn(D_MODEL, generator=g, dtype=torch.float64)
    with torch.no_grad():
        out = mixer(batch, cos, sin)
    diff = (out[1:] - out[:1]).abs().amax(-1)
    return {j: set(torch.nonzero(diff[b] > TOL).flatten().tolist()) for b, j in enumerate(positions)}


def expected_reads(distances, t, positions):
    """Offset attention: row j is read by queries j + d for every attended distance d."""
    return {j: {j + d for d in distances if j + d < t} for j in positions}


def assert_reads(dep, expected, what=""):
    """Compare dependence maps, naming the offending distances (got - expected, expected - got)."""
    bad = {j: (sorted(i - j for i in dep[j] - expected[j]), sorted(i - j for i in expected[j] - dep[j]))
           for j in expected if dep[j] != expected[j]}
    assert not bad, f"{what} row j: (extra distances, missing distances) {bad}"


# ---------------------------------------------------------------- 1. receptive field

@pytest.mark.parametrize("base", ["fib", "pow2"])
@pytest.mark.parametrize("schedule", ["fixed", "learned", "stagger", "coprime"])
@pytest.mark.parametrize("window, t", [(0, 64), (3, 200), (8, 64)])
def test_one_layer_model_attends_exactly_the_pattern(base, schedule, window, t):
    """One layer (alpha = 1 for every schedule): token j moves logits i iff i - j is attended."""
    model = tiny(seq_len=t, kind="sparse", base=base, schedule=schedule, window=window)
    assert model.alphas() == [1.0]
    distances = patterns.attended_distances(window, base, 1.0, t)
    positions = range(t) if t <= 64 else [0, 1, 5, t // 2, t - 40, t - 2, t - 1]
    assert_reads(token_dependence(model, t, positions), expected_reads(distances, t, positions))


@pytest.mark.parametrize("base", ["fib", "pow2"])
@pytest.mark.parametrize("schedule, n_layers", [("stagger", 4), ("coprime", 5), ("stagger", 16)])
@pytest.mark.parametrize("window, t", [(0, 200), (3, 1024), (8, 1024)])
def test_each_layer_mixer_attends_its_alpha_pattern(base, schedule, n_layers, window, t):
    """Every layer of a staggered model (alpha 0.5..1.5) reads exactly round(alpha_l * r)
    (half to even) beyond the window, at the mixer level and at long T."""
    model = tiny(n_layers, seq_len=t, kind="sparse", base=base, schedule=schedule, window=window)
    alphas = patterns.layer_alphas(schedule, n_layers)
    assert model.alphas() == pytest.approx(alphas, abs=1e-6)
    positions = [0, 1, 7, t // 2, t - 2, t - 1]  # row 0 alone exercises every distance
    for layer, alpha in enumerate(alphas):
        distances = patterns.attended_distances(window, base, alpha, t)
        dep = mixer_dependence(model, layer, t, positions)
        assert_reads(dep, expected_reads(distances, t, positions), f"layer {layer}, alpha {alpha}:")


@pytest.mark.parametrize("schedule, per_layer, union", [("fixed", 19, 19), ("stagger", None, 133),
                                                       ("coprime", None, 133)])
def test_model_offsets_reproduce_spec_coverage(schedule, per_layer, union):
    """Paper A: W = 8, T = 1024, 16 layers, fib: 19 distances per layer; union 19 fixed, 133 staggered.
    The offsets the layers actually gather, not the pattern math, must give these numbers."""
    model = tiny(16, seq_len=1024, kind="sparse", schedule=schedule, window=8)
    sets = [set(block.mixer.pattern.rows(1024, CPU).tolist()) for block in model.blocks]
    if per_layer is not None:
        assert [len(s) for s in sets] == [per_layer] * 16
    for l, (got, alpha) in enumerate(zip(sets, patterns.layer_alphas(schedule, 16))):
        assert got == set(patterns.attended_distances(8, "fib", alpha, 1024)), f"layer {l}, alpha {alpha}"
    assert len(set().union(*sets)) == union


@pytest.mark.parametrize("base, window, theta", [("fib", 3, 0.3), ("fib", 0, -1.1), ("pow2", 8, 0.7)])
def test_learned_mixer_reads_floor_and_next_row(base, window, theta):
    """Learned at a non-integral alpha: rung r reads rows lo and lo + 1 (lo = floor(alpha r))."""
    t = 1024
    model = tiny(seq_len=t, kind="sparse", base=base, schedule="learned", window=window)
    with torch.no_grad():
        model.blocks[0].mixer.pattern.theta.fill_(theta)
    alpha = model.alphas()[0]
    kept = patterns.interpolated_rungs(window, base, alpha, t)
    assert kept and all(0 < frac < 1 for _, _, frac in kept)
    distances = set(range(window + 1)) | {lo for _, lo, _ in kept} | {lo + 1 for _, lo, _ in kept}
    positions = [0, 3, t // 2, t - 1]
    assert_reads(mixer_dependence(model, 0, t, positions), expected_reads(distances, t, positions))


# ---------------------------------------------------------------- 2. causality

CAUSAL_CASES = (
    [dict(kind="dense")]
    + [dict(kind="sparse", schedule=s, base=b, impl=i, window=w)
       for s in ("fixed", "stagger", "coprime") for b in ("fib", "pow2") for i in ("gather", "mask")
       for w in (0, 3)]
    + [dict(kind="sparse", schedule="learned", base=b, window=w) for b in ("fib", "pow2") for w in (0, 3)]
    + [dict(kind="hypercube", schedule=s, hybrid_layers=[1, 2]) for s in wiring.SCHEDULES]
)


@pytest.mark.parametrize("spec", CAUSAL_CASES, ids=lambda s: "-".join(f"{v}" for v in s.values()))
def test_no_mixer_reads_the_future(spec):
    t = 32
    model = tiny(4, seq_len=t, **spec)
    if spec["kind"] == "sparse" and spec["schedule"] == "learned":
        with torch.no_grad():  # a non-integral alpha, so rows lo + 1 are read too
            for block, theta in zip(model.blocks, (0.3, -0.4, 0.9, -1.3)):
                block.mixer.pattern.theta.fill_(theta)
    dep = token_dependence(model, t)
    for j, seen in dep.items():
        assert j in seen and min(seen) == j, f"token {j} moved logits at {sorted(seen)}"
    assert len(dep[0]) > 1  # something mixes across positions


# ---------------------------------------------------------------- 3. hypercube reach

@pytest.mark.parametrize("schedule, order, n_layers", [
    ("rot", "rot", 4), ("rot", "random", 4), ("rot", "gray", 4), ("rot", "rot", 3), ("fixed", "rot", 4),
    ("local", "rot", 4), ("mixa", "rot", 6), ("hybrid", "rot", 4), ("dense", "rot", 2)])
def test_causal_hypercube_reach_matches_wiring(schedule, order, n_layers):
    """For every target position, the inputs its logits depend on are wiring.reach's set."""
    n = 16
    model = tiny(n_layers, seq_len=n, kind="hypercube", schedule=schedule, order=order, hybrid_layers=[1])
    plan = wiring.layer_plan(schedule, n_layers, n, [1], order)
    dep = token_dependence(model, n)
    for i in range(n):
        assert depends_on(dep, i) == wiring.reach(plan, n, causal=True, target=i), f"target {i}"


def test_rot_at_depth_log2_n_sees_everything_fixed_does_not():
    n = 16
    rot = token_dependence(tiny(4, seq_len=n, kind="hypercube", schedule="rot"), n)
    fixed = token_dependence(tiny(4, seq_len=n, kind="hypercube", schedule="fixed"), n)
    assert depends_on(rot, n - 1) == set(range(n))
    assert depends_on(fixed, n - 1) == {n // 2 - 1, n - 1}


def test_rot_reach_by_gradient():
    """The same claim by autograd: d logits[-1] / d embeddings is nonzero at every position."""
    n = 16
    for schedule, reached in [("rot", n), ("fixed", 2)]:
        model = tiny(4, seq_len=n, kind="hypercube", schedule=schedule)
        ids = _ids(n)
        cos, sin = rope_tables(n, model.head_dim, model.rope_theta)
        x = model.embed(ids).detach().requires_grad_(True)
        h = x
        for block in model.blocks:
            h = block(h, cos, sin)
        logits = model.norm(h) @ model.embed.weight.T
        assert torch.allclose(logits, model(ids))
        (grad,) = torch.autograd.grad(logits[0, -1].square().sum(), x)
        assert int((grad[0].abs().amax(-1) > TOL).sum()) == reached, schedule


@pytest.mark.parametrize("schedule, n_layers", [
    ("rot", 4), ("rot", 3), ("fixed", 4), ("local", 4), ("mixa", 6), ("dense", 1), ("hybrid", 4)])
def test_non_causal_hypercube_reach_matches_wiring(schedule, n_layers):
    """Count-ones reads position 0: with XOR wiring, rot at depth log2(n) reaches all of it."""
    n = 16
    model = tiny(n_layers, seq_len=n, kind="hypercube", schedule=schedule, causal=False, hybrid_layers=[1])
    plan = wiring.layer_plan(schedule, n_layers, n, [1])
    dep = token_dependence(model, n)
    if (schedule, n_layers) == ("rot", 4):
        assert depends_on(dep, 0) == set(range(n))
    for i in range(n):
        assert depends_on(dep, i) == wiring.reach(plan, n, causal=False, target=i), f"target {i}"


# ---------------------------------------------------------------- 4. the paths agree

def _qkv(t, b=2, hkv=2, g=3, d=8, dtype=torch.float32, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(*shape, generator=gen, dtype=dtype).requires_grad_(True)
                 for shape in ((b, hkv, t, g, d), (b, hkv, t, d), (b, hkv, t, d)))


@pytest.mark.parametrize("t, rows", [
    (37, [0, 1, 2, 3, 5, 8, 13, 21, 34]),
    (50, [0, 1, 2, 3, 4, 9, 17, 27, 44, 72]),  # rows beyond T never count
    (23, [0]),
    (64, [0, 1, 2, 4, 8, 16, 32])])
@pytest.mark.parametrize("chunk", [1, 5, 7, 16, None])
def test_gather_kernel_matches_mask_forward_and_grad(t, rows, chunk):
    rows = torch.tensor(rows)
    q, k, v = _qkv(t)
    q2, k2, v2 = (x.detach().clone().requires_grad_(True) for x in (q, k, v))
    out = kernels.gather_attention(q, k, v, rows, chunk=chunk)
    ref = kernels.mask_attention(q2, k2, v2, rows)
    assert out.shape == ref.shape == q.shape
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
    w = torch.randn_like(out)
    (out * w).sum().backward()
    (ref * w).sum().backward()
    for a, b in ((q, q2), (k, k2), (v, v2)):
        torch.testing.assert_close(a.grad, b.grad, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("base, schedule, window", [
    ("fib", "fixed", 8), ("fib", "stagger", 3), ("fib", "coprime", 0), ("pow2", "stagger", 8), ("pow2", "fixed", 2)])
def test_gather_model_matches_mask_model(monkeypatch, base, schedule, window):
    """Whole model in float32, T = 50 (not a multiple of the forced 16-query chunk)."""
    monkeypatch.setattr(kernels, "CHUNK_BYTES", 1)  # chunk = the minimum, 16
    t = 50
    spec = dict(kind="sparse", base=base, schedule=schedule, window=window)
    gather = tiny(5, seq_len=t, dtype=torch.float32, impl="gather", **spec)
    mask = tiny(5, seq_len=t, dtype=torch.float32, seed=7, impl="mask", **spec)
    mask.load_state_dict(gather.state_dict())
    ids = _ids(t, batch=2)
    target = _ids(t, batch=2, seed=9)
    out_g, out_m = gather.train()(ids), mask.train()(ids)
    torch.testing.assert_close(out_g, out_m, atol=1e-5, rtol=1e-5)
    F.cross_entropy(out_g.flatten(0, 1), target.flatten()).backward()
    F.cross_entropy(out_m.flatten(0, 1), target.flatten()).backward()
    grads_m = dict(mask.named_parameters())
    for name, p in gather.named_parameters():
        torch.testing.assert_close(p.grad, grads_m[name].grad, atol=1e-5, rtol=1e-4, msg=name)


def test_auto_picks_the_measured_path_for_device_and_length():
    """auto: mask below CPU_MASK_BELOW and gather from it on (CPU), flex for integer offsets on
    CUDA, the gather for learned alpha everywhere (the only path that interpolates rows)."""
    auto, below = mixers.Impl.auto, mixers.CPU_MASK_BELOW
    assert mixers.resolve_impl(auto, CPU, below - 1) is mixers.Impl.mask
    assert mixers.resolve_impl(auto, CPU, below) is mixers.Impl.gather
    assert mixers.resolve_impl(auto, torch.device("cuda"), 64) is mixers.Impl.flex
    for device, t in ((CPU, 16), (CPU, 4 * below), (torch.device("cuda"), 64)):
        assert mixers.resolve_impl(auto, device, t, learned=True) is mixers.Impl.gather
    for impl in (mixers.Impl.gather, mixers.Impl.mask, mixers.Impl.flex):
        assert mixers.resolve_impl(impl, CPU, 8) is impl
    assert AttentionSpec(kind="sparse").impl is auto and AttentionSpec(kind="sparse", schedule="learned").impl is auto


@pytest.mark.parametrize("below", [1000, 1])  # auto on either side of its crossover
def test_auto_model_matches_gather_and_mask_models(monkeypatch, below):
    """The default impl gives the same logits and gradients as both explicit paths."""
    monkeypatch.setattr(mixers, "CPU_MASK_BELOW", below)
    t = 40
    spec = dict(kind="sparse", base="fib", schedule="stagger", window=3)
    models = {impl: tiny(3, seq_len=t, dtype=torch.float32, impl=impl, **spec).train()
              for impl in ("auto", "gather", "mask")}
    for m in models.values():
        m.load_state_dict(models["auto"].state_dict())
    ids, target = _ids(t, batch=2), _ids(t, batch=2, seed=9)
    grads = {}
    for impl, m in models.items():
        out = m(ids)
        F.cross_entropy(out.flatten(0, 1), target.flatten()).backward()
        grads[impl] = (out.detach(), {n: p.grad for n, p in m.named_parameters()})
    for impl in ("gather", "mask"):
        torch.testing.assert_close(grads["auto"][0], grads[impl][0], atol=1e-5, rtol=1e-5)
        for name, g in grads["auto"][1].items():
            torch.testing.assert_close(g, grads[impl][1][name], atol=1e-5, rtol=1e-4, msg=f"{impl} {name}")


def test_gather_results_do_not_share_the_kernels_scratch_buffers():
    """Chunk temporaries live in buffers reused across calls: the returned outputs and
    gradients must not be views of them (a later call would overwrite an earlier result)."""
    rows = torch.tensor([0, 1, 2, 5, 9])
    first = _qkv(30, seed=1)
    out1 = kernels.gather_attention(*first, rows)
    out1.sum().backward()
    kept = [out1.detach().clone()] + [x.grad.clone() for x in first]
    second = _qkv(30, seed=2)
    kernels.gather_attention(*second, rows).sum().backward()  # same shapes: same buffers
    for a, b in zip([out1.detach()] + [x.grad for x in first], kept):
        assert torch.equal(a, b)
    ref = kernels.mask_attention(*(x.detach() for x in first), rows)
    torch.testing.assert_close(out1.detach(), ref, atol=1e-5, rtol=1e-5)


def test_gather_trains_after_an_evaluation_under_inference_mode(monkeypatch):
    """Lightning evaluates under torch.inference_mode: buffers the kernel first made there must
    still take a training call's writes (an inference tensor cannot be written outside it)."""
    monkeypatch.setattr(kernels, "_SCRATCH", {})  # the evaluation makes the buffers
    rows = [0, 1, 3]
    q, k, v = (x.detach() for x in _qkv(61, seed=3))
    with torch.inference_mode():
        kernels.gather_attention(q, k, v, rows)
    q, k, v = (x.clone().requires_grad_(True) for x in (q, k, v))
    kernels.gather_attention(q, k, v, rows).sum().backward()
    assert all(torch.isfinite(x.grad).all() for x in (q, k, v))


@pytest.mark.parametrize("spec", [dict(kind="dense"), dict(kind="sparse", schedule="stagger", impl="mask"),
                                  dict(kind="sparse", schedule="stagger", impl="gather"),
                                  dict(kind="sparse", schedule="learned"), dict(kind="hypercube", schedule="dense")],
                         ids=lambda s: "-".join(map(str, s.values())))
def test_a_length_first_evaluated_can_be_trained(spec):
    """Tables cached per length (RoPE, offsets, masks) made under inference_mode must not be
    inference tensors: autograd cannot save those for backward."""
    model = tiny(2, seq_len=16, dtype=torch.float32, **spec)
    ids = _ids(16, batch=2)
    with torch.inference_mode():
        model(ids)
    _lm_loss(model.train(), ids, _ids(16, batch=2, seed=5)).backward()
    assert all(p.grad is not None for p in model.parameters())


def test_learned_gradients_do_not_depend_on_the_chunking(monkeypatch):
    t = 45
    model = tiny(2, seq_len=t, dtype=torch.float32, kind="sparse", schedule="learned", window=2, alpha_init="stagger")
    ids, target = _ids(t, batch=2), _ids(t, batch=2, seed=4)
    grads = []
    for chunk_bytes in (kernels.CHUNK_BYTES, 1):  # one chunk; chunks of 16 queries
        monkeypatch.setattr(kernels, "CHUNK_BYTES", chunk_bytes)
        model.zero_grad()
        _lm_loss(model.train(), ids, target).backward()
        grads.append({n: p.grad.clone() for n, p in model.named_parameters()})
    for name, g in grads[0].items():
        torch.testing.assert_close(g, grads[1][name], atol=1e-5, rtol=1e-4, msg=name)
    assert all(grads[0][f"blocks.{l}.mixer.pattern.theta"].abs() > 0 for l in range(2))


def test_length_dependent_tables_are_built_once():
    """RoPE tables, offsets and masks are made once per (T, device) and reused by every step."""
    model = tiny(2, seq_len=32, dtype=torch.float32, kind="sparse", schedule="stagger", impl="mask")
    model(_ids(32))
    tables = dict(model._rope)
    caches = [dict(block.mixer.pattern._cache) for block in model.blocks]
    assert set(tables) == {(32, CPU)} and all(caches)
    model(_ids(32, batch=3))
    assert all(model._rope[k] is v for k, v in tables.items())
    for block, cache in zip(model.blocks, caches):
        assert block.mixer.pattern._cache.keys() == cache.keys()
        assert all(block.mixer.pattern._cache[k] is v for k, v in cache.items())
    model(_ids(64))  # another length: its own entries, the first kept
    assert set(model._rope) == {(32, CPU), (64, CPU)}


@pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")
def test_flex_matches_gather_forward_on_cpu():
    t = 40
    spec = dict(kind="sparse", base="fib", schedule="stagger", window=2)
    gather = tiny(2, seq_len=t, dtype=torch.float32, impl="gather", **spec)
    flex = tiny(2, seq_len=t, dtype=torch.float32, impl="flex", **spec)
    flex.load_state_dict(gather.state_dict())
    ids = _ids(t)
    with torch.no_grad():  # the pinned torch has flex_attention's CPU kernel (inference only): any error fails
        out_f = flex(ids)
        out_g = gather(ids)
    torch.testing.assert_close(out_f, out_g, atol=1e-5, rtol=1e-5)
    with pytest.raises(Refusal, match=r"^attention.impl: flex; allowed: auto, gather, mask for training on CPU"):
        flex(ids)


@pytest.mark.parametrize("base, window", [("fib", 3), ("fib", 8), ("pow2", 0), ("pow2", 5)])
def test_learned_at_alpha_one_equals_fixed(base, window):
    t = 70
    learned = tiny(3, seq_len=t, dtype=torch.float32, kind="sparse", base=base, schedule="learned",
                   window=window)
    fixed = tiny(3, seq_len=t, dtype=torch.float32, seed=5, kind="sparse", base=base, schedule="fixed",
                 window=window)
    assert learned.alphas() == [1.0] * 3
    state = {k: v for k, v in learned.state_dict().items() if not k.endswith("pattern.theta")}
    missing, unexpected = fixed.load_state_dict(state, strict=False)
    assert not unexpected and all(k.endswith("pattern.alpha") for k in missing) and len(missing) == 3
    ids = _ids(t, batch=2)
    with torch.no_grad():
        torch.testing.assert_close(learned(ids), fixed(ids), atol=1e-5, rtol=1e-5)


def _lm_loss(model, ids, target):
    return F.cross_entropy(model(ids).flatten(0, 1), target.flatten())


def test_gradient_reaches_theta_at_init():
    t = 40
    model = tiny(3, seq_len=t, dtype=torch.float32, kind="sparse", schedule="learned", window=2)
    _lm_loss(model.train(), _ids(t, batch=2), _ids(t, batch=2, seed=3)).backward()
    for block in model.blocks:
        grad = block.mixer.pattern.theta.grad
        assert grad is not None and torch.isfinite(grad) and grad.abs() > 1e-8


@pytest.mark.parametrize("base", ["fib", "pow2"])
def test_theta_gradient_matches_finite_difference(base):
    t, window, eps = 48, 2, 1e-6
    thetas = (0.37, -0.61)
    model = tiny(2, seq_len=t, kind="sparse", base=base, schedule="learned", window=window)
    ids, target = _ids(t, batch=2), _ids(t, batch=2, seed=4)
    pats = [block.mixer.pattern for block in model.blocks]
    with torch.no_grad():
        for p, th in zip(pats, thetas):
            p.theta.fill_(th)
    for p in pats:  # fractional everywhere, and the kept rungs do not change within +-eps
        alpha = float(p.alpha.detach())
        kept = patterns.interpolated_rungs(window, base, alpha, t)
        assert kept and all(0.01 < frac < 0.99 for _, _, frac in kept)
        for sign in (-1, 1):
            a = 0.5 + 1 / (1 + math.exp(-(float(p.theta.detach()) + sign * eps)))
            assert [lo for _, lo, _ in patterns.interpolated_rungs(window, base, a, t)] == [lo for _, lo, _ in kept]
    _lm_loss(model, ids, target).backward()
    for p in pats:
        analytic = float(p.theta.grad)
        with torch.no_grad():
            p.theta += eps
            up = float(_lm_loss(model, ids, target))
            p.theta -= 2 * eps
            down = float(_lm_loss(model, ids, target))
            p.theta += eps
        numeric = (up - down) / (2 * eps)
        assert abs(analytic) > 1e-6
        assert analytic == pytest.approx(numeric, rel=1e-6)


@pytest.mark.parametrize("schedule", ["fixed", "stagger", "coprime"])
@pytest.mark.parametrize("impl", ["gather", "mask", "flex"])
def test_static_alpha_is_a_buffer_not_a_parameter(schedule, impl):
    model = tiny(4, seq_len=32, kind="sparse", schedule=schedule, impl=impl)
    names = [n for n, _ in model.named_parameters()]
    assert not [n for n in names if "alpha" in n or "theta" in n]
    for module in model.modules():
        own = list(module.parameters(recurse=False))
        if own:
            assert isinstance(module, (nn.Linear, nn.Embedding, RMSNorm)), type(module)
    buffers = dict(model.named_buffers())
    for l, alpha in enumerate(patterns.layer_alphas(schedule, 4)):
        buf = buffers[f"blocks.{l}.mixer.pattern.alpha"]
        assert not buf.requires_grad and float(buf) == pytest.approx(alpha, abs=1e-6)
    assert "blocks.0.mixer.pattern.alpha" in model.state_dict()


def test_learned_adds_exactly_one_theta_per_layer():
    model = tiny(4, seq_len=32, kind="sparse", schedule="learned")
    fixed = tiny(4, seq_len=32, kind="sparse", schedule="fixed")
    extra = [n for n, _ in model.named_parameters() if n not in dict(fixed.named_parameters())]
    assert extra == [f"blocks.{l}.mixer.pattern.theta" for l in range(4)]
    assert all(float(p.theta.detach()) == 0.0 for p in (b.mixer.pattern for b in model.blocks))


# ---------------------------------------------------------------- 5. parameter counts

PAPER = dict(n_layers=16, d_model=512, n_heads=8, n_kv_heads=2, vocab_size=32768, seq_len=1024)


def _paper_params(**spec):
    with torch.device("meta"):
        model = LM(**PAPER, attention=AttentionSpec(**spec))
    return model.n_params(), model.n_params() - model.embed.weight.numel()


def test_paper_preset_dense_count():
    total, non_embedding = _paper_params(kind="dense")
    assert total == 60_850_688
    assert round(non_embedding / 1e6, 2) == 44.07


@pytest.mark.parametrize("base", ["fib", "pow2"])
@pytest.mark.parametrize("schedule", ["fixed", "stagger", "coprime"])
def test_paper_preset_static_sparse_count(base, schedule):
    assert _paper_params(kind="sparse", base=base, schedule=schedule)[0] == 60_850_688


@pytest.mark.parametrize("base", ["fib", "pow2"])
def test_paper_preset_learned_count(base):
    assert _paper_params(kind="sparse", base=base, schedule="learned")[0] == 60_850_688 + 16


# ---------------------------------------------------------------- 6. extrapolation

EXTRAP_CASES = (
    [dict(kind="dense")]
    + [dict(kind="sparse", schedule=s, base=b, impl=i) for s in ("fixed", "stagger", "coprime")
       for b in ("fib", "pow2") for i in ("gather", "mask")]
    + [dict(kind="sparse", schedule="learned", base=b) for b in ("fib", "pow2")]
    + [dict(kind="hypercube", schedule=s, causal=c) for s in wiring.SCHEDULES for c in (True, False)]
)


@pytest.mark.parametrize("spec", EXTRAP_CASES, ids=lambda s: "-".join(f"{v}" for v in s.values()))
def test_runs_at_2x_and_4x_the_training_length(spec):
    seq_len = 16
    model = tiny(4, seq_len=seq_len, dtype=torch.float32, window=3, hybrid_layers=[1], **spec)
    for t in (seq_len, 2 * seq_len, 4 * seq_len):
        with torch.no_grad():
            out = model(_ids(t, batch=2))
        assert out.shape == (2, t, V) and torch.isfinite(out).all()


def test_pow2_rungs_grow_with_the_evaluated_length():
    """Trained at 1024, pow2 gains rung 1024 at 2048 and 2048 at 4096; the layer really reads it."""
    model = tiny(seq_len=1024, kind="sparse", base="pow2", schedule="fixed", window=8)
    pattern = model.blocks[0].mixer.pattern
    assert 512 in pattern.rows(1024, CPU).tolist() and 1024 not in pattern.rows(1024, CPU).tolist()
    assert 1024 in pattern.rows(2048, CPU).tolist() and 2048 not in pattern.rows(2048, CPU).tolist()
    assert 2048 in pattern.rows(4096, CPU).tolist()
    dep = mixer_dependence(model, 0, 2048, [0])
    assert 1024 in dep[0]
    assert dep == expected_reads(patterns.attended_distances(8, "pow2", 1.0, 2048), 2048, [0])


def test_learned_pow2_also_grows():
    model = tiny(seq_len=1024, kind="sparse", base="pow2", schedule="learned", window=8)
    assert 1024 not in mixer_dependence(model, 0, 1024, [0])[0]
    assert 1024 in mixer_dependence(model, 0, 2048, [0])[0]


# ---------------------------------------------------------------- 7. bad inputs

def _lm(spec=None, **kw):
    args = dict(n_layers=2, d_model=16, n_heads=4, n_kv_heads=2, vocab_size=V, seq_len=16)
    args.update(kw)
    return LM(**args, attention=spec)


BAD = [
    (lambda: _lm(n_kv_heads=3), "model.n_kv_heads", ["divisor", "n_heads=4"]),
    (lambda: _lm(dict(kind="sparse", window=-1)), "attention.window", [">= 0"]),
    (lambda: AttentionSpec(kind="dense", window=-3), "attention.window", [">= 0"]),
    (lambda: _lm(dict(kind="banana")), "attention.kind", ["dense, sparse, hypercube"]),
    (lambda: AttentionSpec(kind="sparse", base="pow3"), "attention.base", ["fib, pow2"]),
    (lambda: AttentionSpec(kind="sparse", schedule="rot"), "attention.schedule",
     ["fixed, learned, stagger, coprime"]),
    (lambda: AttentionSpec(kind="hypercube", schedule="stagger"), "attention.schedule",
     ["local, fixed, rot, mixa, hybrid, dense"]),
    (lambda: AttentionSpec(kind="sparse", impl="triton"), "attention.impl", ["auto, gather, mask, flex"]),
    (lambda: AttentionSpec(kind="hypercube", schedule="rot", order="spiral"), "attention.order",
     ["rot, random, gray"]),
    (lambda: _lm(dict(kind="hypercube", schedule="rot"), seq_len=24), "model.seq_len", ["power of two"]),
    (lambda: AttentionSpec(kind="sparse", schedule="learned", impl="mask"), "attention.impl", ["auto, gather"]),
    (lambda: AttentionSpec(kind="sparse", schedule="learned", impl="flex"), "attention.impl", ["auto, gather"]),
    (lambda: AttentionSpec(kind="sparse", causal=False), "attention.causal", ["hypercube", "True"]),
    (lambda: AttentionSpec(kind="sparse", schedule="stagger", causal=False), "attention.causal", ["dense", "True"]),
    (lambda: _lm(dict(kind="hypercube", schedule="hybrid", hybrid_layers=[3])), "attention.hybrid_layers",
     ["[0, 1]"]),
]


@pytest.mark.parametrize("make, key, allowed", BAD, ids=[f"{b[1]}-{i}" for i, b in enumerate(BAD)])
def test_bad_input_names_key_and_allowed_values(make, key, allowed):
    with pytest.raises(ValueError) as info:
        make()
    msg = str(info.value)
    assert "\n" not in msg and msg.startswith(key + ":") and "allowed" in msg, msg
    for word in allowed:
        assert word in msg, msg


# ---------------------------------------------------------------- paper B: warp and the hierarchy

def test_warp_starts_as_the_hybrid_and_its_coordinates_move_its_couplings():
    """Coordinates start at the cube vertices (one edge apart: weight exp(1 - 1) = 1), so warp
    with the hybrid's weights is the hybrid; moving a position changes the logits behind it only."""
    n = 16
    hybrid = tiny(4, seq_len=n, kind="hypercube", schedule="hybrid", hybrid_layers=[1])
    warp = tiny(4, seq_len=n, kind="hypercube", schedule="warp", hybrid_layers=[1])
    missing, unexpected = warp.load_state_dict(hybrid.state_dict(), strict=False)
    assert not unexpected and all(k.endswith("coords.p") for k in missing)
    ids = _ids(n, batch=2)
    with torch.no_grad():
        assert torch.allclose(warp(ids), hybrid(ids), atol=1e-12)
        coords = next(b.mixer.coords for b in warp.blocks if hasattr(b.mixer, "coords"))
        coords.p[9, 0] += 0.5
        moved = (warp(ids) - hybrid(ids)).abs().amax(-1)[0]
    assert moved[9:].amax() > 1e-6 and moved[:9].amax() < 1e-12  # causal: nothing before 9 moves


def test_hierarchy_starts_neutral_and_adds_one_gate_per_cube_layer():
    n = 16
    plain = tiny(4, seq_len=n, kind="hypercube", schedule="mixa")
    hier = tiny(4, seq_len=n, kind="hypercube", schedule="mixa", hierarchy=True)
    assert hier.n_params() - plain.n_params() == 4 * (D_MODEL + 1)
    hier.load_state_dict(plain.state_dict(), strict=False)
    ids = _ids(n, batch=2)
    with torch.no_grad():
        assert torch.allclose(hier(ids), plain(ids), atol=1e-12)


@pytest.mark.parametrize("schedule", ["rot", "mixa", "warp"])
def test_hierarchy_reads_no_future_and_keeps_the_wiring_reach(schedule):
    """A trained (non-zero) gate: causal, and position i still depends on exactly reach's set."""
    n = 16
    model = tiny(4, seq_len=n, kind="hypercube", schedule=schedule, hierarchy=True, hybrid_layers=[1])
    with torch.no_grad():
        for block in model.blocks:
            if getattr(block.mixer, "gate", None) is not None:
                block.mixer.gate.u.normal_(0, 0.5)
                block.mixer.gate.c.fill_(0.3)
    dep = token_dependence(model, n)
    plan = wiring.layer_plan(schedule, 4, n, [1])
    for j, seen in dep.items():
        assert min(seen) == j
    for i in range(n):
        # the gate reads the group's own earlier members, so reach can only grow inside groups
        assert wiring.reach(plan, n, causal=True, target=i) <= depends_on(dep, i) <= set(range(i + 1))
