"""One cell's training step timed on this machine: what `fibexp-plan` prices a CPU cell with
when the tracking store holds no measured step time (perf/step_ms) for a model of its shape. The
step is the one fibexp-train runs (forward, fp32 token cross-entropy, backward, clipping, AdamW)
on random ids of the cell's batch and length, on the cell's threads."""
from __future__ import annotations

import statistics
import time

import torch

from fibexp.bench.whole_model import _step_and_forward, adamw
from fibexp.tasks import registry as tasks

STEPS = 3  # timed, after one warm-up step


def step_ms(cfg, steps: int = STEPS) -> float | None:
    """The median wall time of `steps` training steps of the cell's model, in ms; None where its
    model cannot be built here (a pretrained model not at hand)."""
    if cfg.task.name == "graft":  # transformers draws a progress bar per model loaded
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
    try:
        model = tasks.build(cfg).build_model().train()
    except (ValueError, OSError):
        return None
    previous = torch.get_num_threads()
    torch.set_num_threads(int(cfg.trainer.threads) or 1)
    try:
        vocab, shape = int(cfg.model.vocab_size), (int(cfg.data.batch_size), int(cfg.model.seq_len))
        gen = torch.Generator().manual_seed(0)
        x, y = torch.randint(0, vocab, shape, generator=gen), torch.randint(0, vocab, shape, generator=gen)
        step, _ = _step_and_forward(model, adamw(model), x, y, torch.autocast("cpu", enabled=False))
        step()
        times = []
        for _ in range(steps):
            t0 = time.perf_counter()
            step()
            times.append(time.perf_counter() - t0)
        return 1000 * statistics.median(times)
    finally:
        torch.set_num_threads(previous)
