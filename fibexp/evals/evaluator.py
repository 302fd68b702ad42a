"""The accumulator a held-out evaluation is, as Lightning's test loop drives it, and forced choice,
the scoring rule of every evaluation that offers candidates."""
from __future__ import annotations

from typing import Callable

import torch


class Evaluator:
    """`update` per batch, `compute` once at the end with `reduce` summing a tensor over ranks."""

    def update(self, model, batch, loader_idx: int) -> None:
        raise NotImplementedError

    def compute(self, reduce: Callable[[torch.Tensor], torch.Tensor]) -> dict[str, float]:
        raise NotImplementedError


def forced_choice(last_logits: torch.Tensor, choices: torch.Tensor) -> torch.Tensor:
    """[B, V] logits, [B, C] candidate ids -> [B] the candidate with the highest logit."""
    return choices.gather(1, last_logits.gather(1, choices).argmax(1, keepdim=True)).squeeze(1)
