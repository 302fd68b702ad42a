"""Paper A: which distances a sparse layer attends to, and how they vary with depth.

A layer attends to a dense local window {0..W} plus one key per rung r of a base
sequence, at distance alpha * r. Staggering alpha over depth makes different layers
land on different distances, so the union over layers covers far more of the context
than any single layer (paper A: 19 per layer, union 19 fixed vs 133 staggered).
Pure Python: the model gathers at these offsets; tests and reports count them.
"""
from __future__ import annotations

import math
from typing import Sequence

from fibexp.errors import Refusal

FIB: tuple[int, ...] = (1, 2, 3, 5, 8, 13, 21, 34, 55, 89, 144, 233, 377, 610, 987)
BASES = ("fib", "pow2")
SCHEDULES = ("fixed", "learned", "stagger", "coprime")
ALPHA_RANGE = (0.5, 1.5)  # alpha = 0.5 + sigmoid(theta)
ALPHA_INITS = ("uniform", "stagger")  # where learned alpha starts
_THETA_MARGIN = 0.01  # sigmoid never reaches 0 or 1: the stagger ends start just inside the range


def _choice(key: str, value: str, allowed: Sequence[str]) -> None:
    if value not in allowed:
        raise Refusal(key, f"unknown {value!r}", ", ".join(allowed))


def _positive(key: str, value: int) -> None:
    if value < 1:
        raise Refusal(key, value, "an integer >= 1")


def _check(window: int, alpha: float, seq_len: int) -> None:
    if window < 0:
        raise Refusal("attention.window", window, "an integer >= 0")
    _positive("model.seq_len", seq_len)
    lo, hi = ALPHA_RANGE
    if not lo <= alpha <= hi:
        raise Refusal("alpha", alpha, f"{lo} <= alpha <= {hi}")


def rungs(base: str, seq_len: int) -> list[int]:
    """Rungs of the base. pow2 is the reach-matched control: it grows with the
    evaluated length (1..512 at 1024; 1024 joins at 2048), as in the authors' numbers."""
    _choice("attention.base", base, BASES)
    _positive("model.seq_len", seq_len)
    if base == "fib":
        return list(FIB)
    return [2**e for e in range((seq_len - 1).bit_length())]  # every power of two <= T-1


def coprime_stride(n_layers: int) -> int:
    """Largest S in [2, L/2] coprime with L (7 for L = 16): l -> S*l mod L sends
    neighbouring layers far apart in the stagger order. Returns 1 (the identity, so
    coprime == stagger) when no such S exists, i.e. L < 5 or L = 6."""
    _positive("model.n_layers", n_layers)
    return next((s for s in range(n_layers // 2, 1, -1) if math.gcd(s, n_layers) == 1), 1)


def layer_alphas(schedule: str, n_layers: int) -> list[float]:
    """Initial alpha per layer (for `learned` the start point; training moves it)."""
    _choice("attention.schedule", schedule, SCHEDULES)
    _positive("model.n_layers", n_layers)
    if schedule in ("fixed", "learned") or n_layers == 1:
        return [1.0] * n_layers
    stagger = [0.5 + l / (n_layers - 1) for l in range(n_layers)]
    if schedule == "stagger":
        return stagger
    s = coprime_stride(n_layers)
    return [stagger[(s * l) % n_layers] for l in range(n_layers)]


def theta_for(alpha: float) -> float:
    """theta with 0.5 + sigmoid(theta) = alpha; the range's ends (stagger's first and last
    layer) are moved 0.01 inside it, where theta is finite (about -/+4.6)."""
    lo, hi = ALPHA_RANGE
    p = min(max(alpha - lo, _THETA_MARGIN), hi - lo - _THETA_MARGIN)
    return math.log(p / (1 - p))


def attended_distances(window: int, base: str, alpha: float, seq_len: int) -> list[int]:
    """Sorted distinct distances of the integer-offset variants: the window, plus
    round(alpha * r) (half-to-even, like torch.round) when W < d <= seq_len - 1."""
    _check(window, alpha, seq_len)
    near = set(range(min(window, seq_len - 1) + 1))
    far = {round(alpha * r) for r in rungs(base, seq_len)}
    return sorted(near | {d for d in far if window < d <= seq_len - 1})


def interpolated_rungs(window: int, base: str, alpha: float, seq_len: int) -> list[tuple[int, int, float]]:
    """Learned variant: each rung reads rows lo and lo + 1 back (lo = floor(alpha * r)), mixed
    by frac, so the loss has a gradient in alpha. Returns [(rung, lo, frac)] in rung order,
    keeping a rung only when W < lo <= seq_len - 1 and no earlier rung kept the same lo.

    The test is on lo, not on round(t): the window's rows 0..W count as taken, so a rung whose
    nearer row lies in the window is dropped even when round(t) = W + 1 (W = 12, alpha in
    (0.9615, 1): rung 13). This is the authors' rule, which the paper's learned numbers come
    from; round(t) <= W implies lo <= W, so the integer variants' window test is contained in it."""
    _check(window, alpha, seq_len)
    kept: list[tuple[int, int, float]] = []
    seen: set[int] = set()
    for r in rungs(base, seq_len):
        t = alpha * r
        lo = math.floor(t)
        if not window < lo <= seq_len - 1 or lo in seen:
            continue
        seen.add(lo)
        kept.append((r, lo, t - lo))
    return kept


def coverage(window: int, base: str, alphas: Sequence[float], seq_len: int) -> tuple[list[int], int]:
    """(distinct distances of each layer, size of their union over layers)."""
    per_layer = [attended_distances(window, base, a, seq_len) for a in alphas]
    return [len(d) for d in per_layer], len(set().union(*per_layer))
