"""Paper B: rotating sparse wiring on the hypercube.

Positions are the vertices of a b-dimensional cube (n = 2**b). A jump layer along dimension d
(k = 2**d) follows one cube edge: y_i = W_self x_i + W_off x_j with j = i XOR k. In the causal
model only the earlier endpoint of that edge is kept, so i hears i - k only where bit d of i is
set (n + n/2 links per layer, paper B's own counts, docs/papers.md); a `near`
layer is the shift by one at every position (n + n - 1 links). The non-causal count-ones wiring
keeps both endpoints (2n). Depth b can connect every pair, but only if the layers rotate
through all b dimensions: which dimensions a schedule visits, not how many layers it has,
decides reachability (`reach`). Under the causal bit rule position i hears only positions whose
bits are a subset of i's (2 never hears 1), which paper B's poor window-64 `rot` fits.
"""
from __future__ import annotations

import random
from typing import Sequence

from fibexp.errors import Refusal

SCHEDULES = ("local", "fixed", "rot", "mixa", "hybrid", "dense", "warp")
NEAR = "near"  # the shift by one (local layers, mixa's and hybrid's near layers)
FULL = ("attn", "dense")  # layers linking every allowed pair
ORDERS = ("rot", "random", "gray")


def _choice(key: str, value: str, allowed: Sequence[str]) -> None:
    if value not in allowed:
        raise Refusal(key, f"unknown {value!r}", ", ".join(allowed))


def cube_dims(n: int) -> int:
    """b with n == 2**b (b >= 1)."""
    if n < 2 or n & (n - 1):
        raise Refusal("model.seq_len", n, "a power of two >= 2 (hypercube length)")
    return n.bit_length() - 1


def dimension_order(order: str, n_layers: int, b: int, seed: int = 0) -> list[int]:
    """Cube dimension used at each layer.

    rot: l mod b. random: one fixed shuffle of range(b), repeated (still visits every
    dimension each b layers). gray: the bit flipped at step l of the cyclic reflected
    Gray code, i.e. trailing zeros of l + 1; it walks every vertex but keeps returning to
    the low dimensions (16 layers, b = 6: dim 0 eight times, dim 5 never).
    """
    _choice("attention.order", order, ORDERS)
    if order == "rot":
        return [l % b for l in range(n_layers)]
    if order == "random":
        perm = list(range(b))
        random.Random(seed).shuffle(perm)
        return [perm[l % b] for l in range(n_layers)]
    steps = [(l % 2**b) + 1 for l in range(n_layers)]
    return [min((s & -s).bit_length() - 1, b - 1) for s in steps]  # the wrap flips the top bit


def default_hybrid_layers(n_layers: int) -> list[int]:
    """Paper B's window-256 hybrid (near jump128 near attn near jump32 near jump16 near attn near
    jump4 near jump2 near jump1) keeps attention at layers 3 and 9 of 16; the same relative depth for other depths
    (always long-jump, i.e. odd, layers; 4 layers -> 1, 3; 8 -> 1, 5)."""
    return sorted({min(n_layers - 1, 2 * int(f * n_layers / 32) + 1) for f in (3, 9)})


def layer_plan(schedule: str, n_layers: int, n: int, hybrid_layers: Sequence[int] | None = None,
               order: str = "rot", seed: int = 0) -> list[int | str]:
    """Per layer: a cube jump k = 2**d (int), "near" (the shift by one), "attn" (standard
    attention) or "dense" (learned n x n mixing).

    `fixed` uses the top dimension (k = n/2) at every layer: dimension 0 would be `local`
    again, so the top one is the un-rotated control that differs from it.
    `mixa` alternates near layers with long jumps n/2, n/4, ..., 1, cycling. `warp` is hybrid's
    plan; its jump layers weight their links by learned coordinates (`fibexp.model.mixers.WarpMixer`).
    """
    _choice("attention.schedule", schedule, SCHEDULES)
    if n_layers < 1:
        raise Refusal("model.n_layers", n_layers, "an integer >= 1")
    b = cube_dims(n)
    if schedule == "local":
        return [NEAR] * n_layers
    if schedule == "fixed":
        return [n // 2] * n_layers
    if schedule == "rot":
        return [2**d for d in dimension_order(order, n_layers, b, seed)]
    if schedule == "dense":
        return ["dense"] * n_layers
    plan: list[int | str] = [NEAR if l % 2 == 0 else n >> (1 + (l // 2) % b) for l in range(n_layers)]
    if schedule in ("hybrid", "warp"):
        hybrid_layers = default_hybrid_layers(n_layers) if hybrid_layers is None else hybrid_layers
        if any(not 0 <= h < n_layers for h in hybrid_layers):
            raise Refusal("attention.hybrid_layers", list(hybrid_layers),
                          f"layer indices in [0, {n_layers - 1}]")
        for h in hybrid_layers:
            plan[h] = "attn"
    return plan


def sources(layer: int | str, i: int, n: int, causal: bool) -> list[int]:
    """Positions a layer feeds into position i (itself included)."""
    if layer in FULL:
        return list(range(i + 1)) if causal else list(range(n))
    k = 1 if layer == NEAR else layer
    if not causal:
        return [i, i ^ k]
    if layer == NEAR:
        return [i, i - 1] if i >= 1 else [i]
    return [i, i - k] if i & k else [i]  # the earlier endpoint of the edge i XOR k


def reach(plan: Sequence[int | str], n: int, causal: bool, target: int | None = None) -> set[int]:
    """Positions whose information reaches `target` (default n-1 causal, 0 otherwise).

    Causal: jump k links i <- i - k where bit k of i is set, near i <- i - 1. Non-causal (the
    count-ones task reads position 0): i <- i XOR k. "attn"/"dense" link every allowed position.
    """
    target = (n - 1 if causal else 0) if target is None else target
    if not 0 <= target < n:
        raise Refusal("target", target, f"0 <= target < {n}")
    found = {target}
    for layer in reversed(plan):
        if layer in FULL:
            found = set(range(max(found) + 1)) if causal else set(range(n))
        else:
            found = {j for i in found for j in sources(layer, i, n, causal)}
    return found


def links(plan: Sequence[int | str], n: int, causal: bool) -> int:
    """Total (source, position) links, the identity included, as paper B counts them: causal jump
    n + n/2, near n + n - 1, attention/dense n(n+1)/2 per layer; non-causal 2n and n^2."""
    return sum(len(sources(layer, i, n, causal)) for layer in plan for i in range(n))
