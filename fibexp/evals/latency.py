"""Forward-pass speed of a language model by paper A's protocol (claim A9): random token ids of
batch 8 x T (T = the model's training length), inference only, bf16 autocast on CUDA (fp32 on
CPU), 2 warm-up passes then 5 timed ones. The wall time of a whole held-out evaluation (what
`perf/tokens_per_s_eval` records) mixes data loading and a shared machine's load into it; a few
synchronised passes of one fixed batch do not.

Each timed pass has its own clock (CUDA synchronised before and after), so the spread of the five
is known: the figure is their median tokens/s, with the slowest and fastest pass. The authors time
the five passes under one clock and divide; `tokens_per_s_mean` is that figure."""
from __future__ import annotations

import contextlib
import statistics
import time
from typing import Callable

import torch

BATCH, WARMUP, TIMED = 8, 2, 5


class ForwardPass:
    """One inference forward of `model` on a fixed batch of random ids, as the protocol runs it;
    calling it runs the pass (the caller clocks it)."""

    def __init__(self, model: torch.nn.Module, vocab_size: int, seq_len: int, device: torch.device | None = None,
                 batch: int = BATCH, seed: int = 0):
        self.model = model
        self.device = torch.device(device) if device is not None else next(model.parameters()).device
        gen = torch.Generator().manual_seed(seed)  # not the global RNG: a run's own state stays as it was
        self.ids = torch.randint(0, vocab_size, (batch, seq_len), generator=gen).to(self.device)
        self.tokens = batch * seq_len
        cuda = self.device.type == "cuda"
        self.sync: Callable[[], None] = torch.cuda.synchronize if cuda else (lambda: None)
        self._autocast = (lambda: torch.autocast("cuda", dtype=torch.bfloat16)) if cuda else contextlib.nullcontext

    def __call__(self) -> None:
        with torch.inference_mode(), self._autocast():
            self.model(self.ids)


def summary(seconds: list[float], tokens: int) -> dict[str, float]:
    """tokens/s of the timed passes: median, slowest, fastest, and all passes under one clock."""
    rates = [tokens / s for s in seconds]
    return {"tokens_per_s": statistics.median(rates), "tokens_per_s_min": min(rates), "tokens_per_s_max": max(rates),
            "tokens_per_s_mean": tokens * len(seconds) / sum(seconds)}


def measure(model: torch.nn.Module, vocab_size: int, seq_len: int, device: torch.device | None = None,
            clock: Callable[[], float] = time.perf_counter) -> dict[str, float]:
    """The protocol on `model` (eval mode while it runs, then as it was): WARMUP untimed passes,
    TIMED clocked ones; `summary` of their seconds, and the seconds themselves."""
    fwd = ForwardPass(model, vocab_size, seq_len, device)
    was_training = model.training
    model.eval()
    try:
        for _ in range(WARMUP):
            fwd()
        seconds = []
        for _ in range(TIMED):
            fwd.sync()
            t0 = clock()
            fwd()
            fwd.sync()
            seconds.append(clock() - t0)
    finally:
        model.train(was_training)
    return {**summary(seconds, fwd.tokens), "seconds": seconds}


def metrics(model: torch.nn.Module, vocab_size: int, seq_len: int) -> dict[str, float]:
    """What a run logs: perf/fwd_tokens_per_s (median of the timed passes) and its _min / _max,
    on the model's own device."""
    m = measure(model, vocab_size, seq_len)
    return {"perf/fwd_tokens_per_s": m["tokens_per_s"], "perf/fwd_tokens_per_s_min": m["tokens_per_s_min"],
            "perf/fwd_tokens_per_s_max": m["tokens_per_s_max"]}
