"""What a model costs and how it couples, as MLflow metrics (paper B's columns): `model/links`
(the (position, source) pairs its layers link at the training length, identity included, as
paper B counts them), `model/weights` (parameters, shared ones once) and, for the dynamics
variants, `attn/effective_partners` (exp of the coupling rows' entropy, the mean over rows and
layers, measured on `sample` (held-out inputs at the training length) after training) beside
`attn/effective_partners_init` (the first forward, before any step)."""
from __future__ import annotations

import contextlib

import torch
from torch import nn


def links(model: nn.Module, n: int | None = None) -> int | None:
    """Links of every layer at length n (default the training length); None if a layer's move."""
    n = n or model.seq_len
    counts = [block.mixer.links(n) if hasattr(block.mixer, "links") else None for block in model.blocks]
    return None if any(c is None for c in counts) else sum(counts)


def metrics(model: nn.Module, sample: torch.Tensor | None = None, forward_context=contextlib.nullcontext
            ) -> dict[str, float]:
    """The census of a model; with `sample` ([B, T] ids) the coupling is measured on it first."""
    mixers = [b.mixer for b in model.blocks if hasattr(b.mixer, "partners_init")]
    if mixers and sample is not None:
        device = next(model.parameters()).device
        with torch.no_grad(), forward_context():
            model(sample.to(device))
    out: dict[str, float] = {"model/weights": float(sum(p.numel() for p in model.parameters()))}
    if (count := links(model)) is not None:
        out["model/links"] = float(count)
    if mixers:
        if all(m.last_partners is not None for m in mixers):
            out["attn/effective_partners"] = sum(float(m.last_partners) for m in mixers) / len(mixers)
        out["attn/effective_partners_init"] = sum(float(m.partners_init) for m in mixers) / len(mixers)
    return out
