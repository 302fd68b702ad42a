"""Cached one-token decoding equals full recomputation, for every mixer and alpha schedule, and
the sparse layers' caches do not grow with the sequence."""
from __future__ import annotations

import pytest
import torch

from fibexp.deploy import decode
from fibexp.errors import Refusal
from fibexp.model.lm import LM
from fibexp.model.spec import AttentionSpec

CELLS = {
    "dense": dict(kind="dense"),
    "fib fixed": dict(kind="sparse", schedule="fixed", window=2),
    "fib stagger": dict(kind="sparse", schedule="stagger", window=2),
    "fib coprime": dict(kind="sparse", schedule="coprime", window=1),
    "pow2 fixed": dict(kind="sparse", base="pow2", schedule="fixed", window=2),
    "pow2 stagger": dict(kind="sparse", base="pow2", schedule="stagger", window=2),
    "fib learned": dict(kind="sparse", schedule="learned", window=2),
    "hypercube rot": dict(kind="hypercube", schedule="rot"),
    "hypercube fixed": dict(kind="hypercube", schedule="fixed"),
    "hypercube mixa": dict(kind="hypercube", schedule="mixa"),
    "hypercube hybrid": dict(kind="hypercube", schedule="hybrid"),
    "hypercube local": dict(kind="hypercube", schedule="local"),
    "hypercube dense": dict(kind="hypercube", schedule="dense"),
    "hypercube warp": dict(kind="hypercube", schedule="warp"),
    "hypercube rot hierarchy": dict(kind="hypercube", schedule="rot", hierarchy=True),
    "dynamics": dict(kind="dynamics"),
}
FAST = {"dense", "fib fixed", "fib stagger", "fib coprime", "pow2 fixed", "hypercube rot", "hypercube fixed",
        "hypercube mixa", "hypercube hybrid", "hypercube local"}  # cells with no recomputed layer
RECOMPUTED = {"fib learned", "hypercube dense", "dynamics"}  # mixers without a constant-cache step


def model(cell: str, seq_len: int = 16) -> LM:
    torch.manual_seed(0)
    return LM(5, 32, 4, 2, 61, seq_len, AttentionSpec(**CELLS[cell])).eval()


@pytest.mark.slow  # test-fast stays under 2 minutes (make test runs it)
@pytest.mark.parametrize("cell", CELLS)
def test_cached_decoding_equals_full_recomputation(cell):
    m = model(cell)
    prompt = torch.randint(0, 61, (1, 3), generator=torch.Generator().manual_seed(1))
    n = 29  # beyond twice the training length: the offsets and wiring keep going
    for temperature, top_k in [(0.0, None), (1.0, 5)]:
        cached = decode.generate(m, prompt, n, temperature, top_k, seed=3)
        full = decode.generate(m, prompt, n, temperature, top_k, seed=3, cached=False)
        assert torch.equal(cached, full), cell
    # logits at every step: the step vs the forward over the prefix
    ids = cached[:, :24]
    dec = decode.Decoder(m, 24)
    with torch.no_grad():
        for i in range(24):
            assert torch.allclose(dec.feed(ids[:, i:i + 1]), m(ids[:, :i + 1])[:, -1], atol=2e-5), (cell, i)
    step = decode.StepModel(m, 64)
    if cell in FAST:
        assert not step.fallbacks and not step.length_dependent
    if cell in RECOMPUTED:
        assert step.fallbacks, cell
    assert bool(step.length_dependent) == (cell == "pow2 stagger")


def test_pow2_below_alpha_one_depends_on_the_length():
    """Why pow2 stagger is decoded by recomputing the prefix: its layers with alpha < 1 give
    position i another output once the sequence is long enough for the next rung."""
    m = model("pow2 stagger")
    ids = torch.randint(0, 61, (1, 40), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert not torch.allclose(m(ids[:, :20])[:, -1], m(ids)[:, 19], atol=1e-3)
        m = model("pow2 fixed")
        assert torch.allclose(m(ids[:, :20])[:, -1], m(ids)[:, 19], atol=1e-5)
    assert decode.StepModel(model("pow2 stagger"), 40).length_dependent == [
        "layer 0: pow2 offsets, alpha 0.50", "layer 1: pow2 offsets, alpha 0.75"]


def test_batched_decoding_matches_each_row():
    m = model("hypercube hybrid")
    ids = torch.randint(0, 61, (3, 20), generator=torch.Generator().manual_seed(2))
    dec = decode.Decoder(m, 20, batch=3)
    for i in range(20):
        logits = dec.feed(ids[:, i:i + 1])
    with torch.no_grad():
        assert torch.allclose(logits, m(ids)[:, -1], atol=2e-5)


def cache_at(cell: str, length: int) -> int:
    m = model(cell)
    dec = decode.Decoder(m, 16 * 16)
    dec.feed(torch.zeros(1, length, dtype=torch.long))
    return dec.cache_bytes()


@pytest.mark.slow  # test-fast stays under 2 minutes (make test runs it)
def test_sparse_caches_do_not_grow_dense_does():
    # hypercube: the last k inputs per layer, whatever the length
    assert cache_at("hypercube rot", 16) == cache_at("hypercube rot", 64) == cache_at("hypercube rot", 256)
    m = model("hypercube rot")
    k = [b.mixer.k for b in m.blocks]
    assert cache_at("hypercube rot", 16) == sum(k) * 32 * 4  # fp32 rows of width 32
    # dense: one key and one value row per position and layer
    assert cache_at("dense", 64) == 4 * cache_at("dense", 16) == 64 * 5 * 2 * 2 * 8 * 4
    # fib: spans its largest distance (233 = alpha 1 x the rung 233, by 256 here), then stops
    assert cache_at("fib fixed", 240) == cache_at("fib fixed", 256) == 233 * 5 * 2 * 2 * 8 * 4 < cache_at("dense", 256)
    spans = [decode._OffsetStep(b.mixer, 256).span for b in model("fib stagger").blocks]
    assert spans == [max(d for d in decode.offset_columns(2, "fib", a, 256)[0]) for a in (0.5, 0.75, 1.0, 1.25, 1.5)]


def test_offset_columns_follow_the_full_forward():
    # fib: every rung's distance from that distance on; pow2: also only once its rung exists
    ds, first = decode.offset_columns(2, "fib", 1.0, 64)
    assert ds == [0, 1, 2, 3, 5, 8, 13, 21, 34, 55] and first == ds
    ds, first = decode.offset_columns(1, "pow2", 0.5, 64)
    assert dict(zip(ds, first)) == {0: 0, 1: 1, 2: 4, 4: 8, 8: 16, 16: 32}


@pytest.mark.slow  # test-fast stays under 2 minutes (make test runs it)
def test_a_step_that_disagrees_with_its_mixer_falls_back(monkeypatch):
    m = model("hypercube rot")
    monkeypatch.setattr(decode._ShiftStep, "forward",
                        lambda self, x, pos, cos, sin, past: (self.mixer.self_map(x), past))
    step = decode.StepModel(m, 32)
    assert step.fallbacks == [f"layer {l}: ShiftMixer" for l in range(5)]
    prompt = torch.tensor([[1, 2, 3]])
    assert torch.equal(decode.generate(m, prompt, 10), decode.generate(m, prompt, 10, cached=False))


def test_bidirectional_models_are_refused():
    m = LM(2, 32, 4, 2, 61, 16, AttentionSpec(kind="hypercube", schedule="rot", causal=False))
    with pytest.raises(Refusal, match=r"^attention.causal: False; allowed: True for decoding \(a bidirectional"):
        decode.StepModel(m, 32)


def test_decoding_past_max_len_is_refused():
    dec = decode.Decoder(model("fib fixed"), 4)
    with pytest.raises(Refusal, match="^length: 5; allowed: at most max_len=4$"):
        dec.feed(torch.zeros(1, 5, dtype=torch.long))
