"""Paper A's speed protocol (fibexp.evals.latency, claim A9): exactly 2 warm-up and 5 timed
forward passes of one batch of 8 x T random ids under inference mode, in fp32 on CPU; tokens/s
follow from the clocked seconds; the model is left in the mode it was in."""
from __future__ import annotations

import statistics

import pytest
import torch
from torch import nn

from fibexp.model.lm import LM
from fibexp.evals import latency


class Stub(nn.Module):
    """Records what each forward saw and advances a fake clock by the next scripted duration."""

    def __init__(self, durations, clock):
        super().__init__()
        self.w = nn.Parameter(torch.zeros(1))
        self.durations, self.clock, self.calls = list(durations), clock, []

    def forward(self, ids):
        self.calls.append({"shape": tuple(ids.shape), "dtype": ids.dtype, "inference": torch.is_inference_mode_enabled(),
                           "autocast": torch.is_autocast_enabled("cpu"), "training": self.training, "ids": ids})
        self.clock.now += self.durations.pop(0)
        return ids.float()


class FakeClock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_two_warmups_then_five_timed_passes_of_batch_8_by_T_in_inference_mode():
    clock = FakeClock()
    durations = [9.0, 7.0, 0.5, 0.25, 1.0, 0.4, 2.0]  # the two warm-ups are slow and must not count
    model = Stub(durations, clock).train()
    got = latency.measure(model, vocab_size=50, seq_len=64, clock=clock)
    assert len(model.calls) == 2 + 5
    for call in model.calls:
        assert call["shape"] == (8, 64) and call["dtype"] == torch.int64
        assert call["inference"] and not call["autocast"] and not call["training"]  # fp32 on CPU, eval mode
    assert all(torch.equal(c["ids"], model.calls[0]["ids"]) for c in model.calls)  # one fixed batch
    assert 0 <= int(model.calls[0]["ids"].min()) and int(model.calls[0]["ids"].max()) < 50
    assert model.training  # put back as it was
    timed = durations[2:]
    assert got["seconds"] == pytest.approx(timed)
    rates = [8 * 64 / s for s in timed]
    assert got["tokens_per_s"] == pytest.approx(statistics.median(rates)) == pytest.approx(8 * 64 / 0.5)
    assert (got["tokens_per_s_min"], got["tokens_per_s_max"]) == pytest.approx((8 * 64 / 2.0, 8 * 64 / 0.25))
    assert got["tokens_per_s_mean"] == pytest.approx(5 * 8 * 64 / sum(timed))  # the authors' one-clock figure


def test_run_metrics_time_a_real_model_and_leave_its_weights_and_the_global_rng():
    torch.manual_seed(0)
    model = LM(n_layers=2, d_model=32, n_heads=2, n_kv_heads=1, vocab_size=97, seq_len=16,
               attention=dict(kind="sparse", schedule="learned", window=2)).eval()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    rng = torch.get_rng_state()
    m = latency.metrics(model, 97, 16)
    assert set(m) == {"perf/fwd_tokens_per_s", "perf/fwd_tokens_per_s_min", "perf/fwd_tokens_per_s_max"}
    assert 0 < m["perf/fwd_tokens_per_s_min"] <= m["perf/fwd_tokens_per_s"] <= m["perf/fwd_tokens_per_s_max"]
    assert torch.equal(torch.get_rng_state(), rng) and not model.training
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
