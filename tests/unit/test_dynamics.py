"""Paper B's dynamics variants: causal coupling, the forms' kernels, effective partners (paper B:
dyn ~1 before training, the scaled field tens), and the same path on every device."""
from __future__ import annotations

import math

import pytest
import torch

from fibexp.model import census
from fibexp.model.dynamics import DynamicsMixer, effective_partners
from fibexp.model.lm import LM
from fibexp.model.spec import AttentionSpec


def _lm(form="dyn", steps=1, n_layers=2, t=64, d_model=64, seed=0):
    torch.manual_seed(seed)
    return LM(n_layers, d_model, 4, 4, 97, t, attention=AttentionSpec(kind="dynamics", form=form, steps=steps))


def test_effective_partners_is_exp_entropy():
    assert effective_partners(torch.eye(5)[None]) == pytest.approx(1.0)
    uniform = torch.full((1, 3, 8), 1 / 8)
    assert effective_partners(uniform) == pytest.approx(8.0)
    causal = torch.tril(torch.ones(4, 4)) / torch.arange(1, 5)[:, None]
    assert effective_partners(causal[None]) == pytest.approx((1 + 2 + 3 + 4) / 4)


@pytest.mark.parametrize("form", ["dyn", "fld", "ph"])
@pytest.mark.parametrize("scale", [1.0, 30.0])
def test_coupling_is_the_definition(form, scale):
    """The one-matmul distance matches exp(-||p_i - p_j||^2 / tau) over j <= i written out, also
    for coordinates that have grown far from the origin (cancellation in |p_i|^2 + |p_j|^2 - 2 p.p)."""
    mixer = DynamicsMixer(32, form)
    p = torch.randn(2, 24, 48, generator=torch.Generator().manual_seed(3)) * scale + scale
    d2 = (p[:, :, None, :] - p[:, None, :, :]).square().sum(-1)
    allowed = torch.ones(24, 24, dtype=torch.bool).tril()
    if form != "dyn":
        d2 = d2 / (torch.where(allowed, d2, 0.0).sum(-1, keepdim=True) / allowed.sum(-1, keepdim=True)).clamp_min(1e-6)
    want = torch.softmax((-d2).masked_fill(~allowed, float("-inf")), -1)
    torch.testing.assert_close(mixer.coupling(p), want, atol=2e-5, rtol=1e-3)


@pytest.mark.parametrize("form", ["dyn", "fld", "ph"])
@pytest.mark.parametrize("steps", [1, 3])
def test_no_position_reads_the_future(form, steps):
    t = 16
    model = _lm(form, steps, t=t).double().eval()
    ids = torch.randint(0, 97, (1, t), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        base = model(ids)
        for j in (0, 7, 15):
            changed = ids.clone()
            changed[0, j] = (changed[0, j] + 1) % 97
            moved = (model(changed) - base).abs().amax(-1)[0]
            assert moved[:j].amax() < 1e-10 if j else True
            assert moved[j] > 1e-8


def test_saturated_kernel_is_one_hot_the_field_is_not():
    """Paper B §7: dyn at tau 1 with d^2 ~ 100 underflows to one-hot (partners ~1); fld divides d^2
    by its causal row mean and keeps tens of partners at n = 64."""
    ids = torch.randint(0, 97, (4, 64), generator=torch.Generator().manual_seed(2))
    partners = {}
    for form in ("dyn", "fld", "ph"):
        model = _lm(form).eval()
        with torch.no_grad():
            model(ids)
        m = census.metrics(model)
        assert m["attn/effective_partners_init"] == pytest.approx(m["attn/effective_partners"])
        partners[form] = m["attn/effective_partners"]
    assert partners["dyn"] < 1.5
    assert partners["fld"] > 10 and partners["ph"] > 10


def test_partners_init_is_the_first_forward_and_survives_a_checkpoint():
    model = _lm("fld")
    ids = torch.randint(0, 97, (2, 64), generator=torch.Generator().manual_seed(3))
    model(ids)
    first = census.metrics(model)["attn/effective_partners_init"]
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(1.5)
    model(ids)
    assert census.metrics(model)["attn/effective_partners_init"] == first
    fresh = _lm("fld", seed=5)
    fresh.load_state_dict(model.state_dict())
    fresh(ids)
    assert census.metrics(fresh)["attn/effective_partners_init"] == first


def test_phase_adds_a_velocity_only():
    """ph = fld plus a velocity: at one step (v starts at 0, v = f, p + v) the two agree; at two they differ."""
    ids = torch.randint(0, 97, (2, 32), generator=torch.Generator().manual_seed(4))
    for steps, same in ((1, True), (2, False)):
        fld, ph = _lm("fld", steps, t=32).double(), _lm("ph", steps, t=32).double()
        ph.load_state_dict(fld.state_dict())
        with torch.no_grad():
            assert torch.allclose(fld(ids), ph(ids)) is same


def test_weights_do_not_grow_with_steps():
    assert _lm(steps=1).n_params() == _lm(steps=8).n_params()
    assert census.links(_lm(t=64, n_layers=2)) == 2 * 64 * 65 // 2


def test_trains_and_the_gradient_reaches_the_force():
    model = _lm("ph", 2, t=32)
    ids = torch.randint(0, 97, (2, 33), generator=torch.Generator().manual_seed(5))
    loss = torch.nn.functional.cross_entropy(model(ids[:, :-1]).flatten(0, 1), ids[:, 1:].flatten())
    loss.backward()
    forces = [b.mixer.force.weight.grad for b in model.blocks]
    assert all(g is not None and torch.isfinite(g).all() and g.abs().sum() > 0 for g in forces)
    assert math.isfinite(float(loss.detach()))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device here; the same code runs on CPU above")
def test_cuda_matches_cpu():
    model = _lm("fld", 2, t=32).double()
    ids = torch.randint(0, 97, (2, 32))
    with torch.no_grad():
        cpu = model(ids)
        gpu = model.cuda()(ids.cuda()).cpu()
    assert torch.allclose(cpu, gpu, atol=1e-8)


def test_refusals_name_the_key():
    for kwargs, key in ((dict(steps=0), "attention.steps"), (dict(form="wave"), "attention.form"),
                        (dict(tau=0.0), "attention.tau")):
        with pytest.raises(ValueError, match=rf"^{key}: .*; allowed: "):
            AttentionSpec(kind="dynamics", **kwargs)
    with pytest.raises(ValueError, match=r"^attention.hierarchy: true; allowed: false for attention.kind=dynamics"):
        AttentionSpec(kind="dynamics", hierarchy=True)
    with pytest.raises(ValueError, match=r"^attention.form: "):
        DynamicsMixer(8, form="wave")
