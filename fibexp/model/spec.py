"""What mixes tokens at each layer, as a typed spec: the `attention` config group's schema and
the model's input. No torch: the config layer validates it before anything is built."""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Optional

from fibexp.errors import refuse
from fibexp.science import patterns, wiring

FORMS = ("dyn", "fld", "ph")  # paper B's dynamics forms (fibexp.model.dynamics)


class Kind(str, Enum):
    dense = "dense"
    sparse = "sparse"
    hypercube = "hypercube"
    dynamics = "dynamics"


class Base(str, Enum):
    fib = "fib"
    pow2 = "pow2"


class Impl(str, Enum):
    auto = "auto"  # the fastest exact path for the device and length at hand (see `resolve_impl`)
    gather = "gather"  # linear-time offset gather (CPU and GPU, trains; the only one for learned alpha)
    mask = "mask"  # SDPA with a dense [T, T] mask: quadratic, fastest at short T on CPU
    flex = "flex"  # flex_attention block mask: fused on CUDA; forward only on CPU


def _enum(key: str, cls, value):
    try:
        return cls(value.value if isinstance(value, Enum) else value)
    except ValueError:
        pass
    refuse(key, f"unknown {value!r}", ", ".join(m.value for m in cls))


@dataclass
class AttentionSpec:
    """What mixes tokens at each layer; validated on construction, before any compute."""

    kind: Kind = Kind.dense
    base: Base = Base.fib
    schedule: str = "fixed"
    window: int = 8
    impl: Impl = Impl.auto
    hybrid_layers: Optional[list[int]] = None  # None: paper B's layers 3 and 9 of 16, scaled to the depth
    order: str = "rot"
    causal: bool = True
    alpha_init: str = "uniform"  # learned alpha's start: uniform (alpha 1, as the authors) | stagger (the stagger schedule)
    hierarchy: bool = False  # hypercube: groups of positions on a coarser cube gate the couplings inside them
    form: str = "dyn"  # dynamics: dyn (unscaled kernel) | fld (d^2 / its causal row mean) | ph (fld + velocity)
    steps: int = 1  # dynamics: T, how many times the learned force moves the coordinates
    tau: float = 1.0  # dynamics: the kernel's temperature
    coord_dim: int = 48  # dynamics: d of the coordinates p_i

    def __post_init__(self):
        self.kind = _enum("attention.kind", Kind, self.kind)
        self.base = _enum("attention.base", Base, self.base)
        self.impl = _enum("attention.impl", Impl, self.impl)
        if self.hybrid_layers is not None:
            self.hybrid_layers = [int(x) for x in self.hybrid_layers]
        if self.window < 0:
            refuse("attention.window", self.window, "an integer >= 0")
        if self.kind is Kind.sparse:
            patterns._choice("attention.schedule", self.schedule, patterns.SCHEDULES)
            patterns._choice("attention.alpha_init", self.alpha_init, patterns.ALPHA_INITS)
            if self.schedule == "learned" and self.impl not in (Impl.auto, Impl.gather):
                refuse("attention.impl", f"{self.impl.value!r} cannot interpolate rows for attention.schedule=learned",
                       "auto, gather")
        if self.kind is Kind.hypercube:
            wiring._choice("attention.schedule", self.schedule, wiring.SCHEDULES)
            wiring._choice("attention.order", self.order, wiring.ORDERS)
        if self.kind is Kind.dynamics:
            if self.form not in FORMS:
                refuse("attention.form", self.form, ", ".join(FORMS))
            if self.steps < 1:
                refuse("attention.steps", self.steps, "an integer >= 1 (T, the force's repeats)")
            if not self.tau > 0:
                refuse("attention.tau", self.tau, "> 0")
            if self.coord_dim < 1:
                refuse("attention.coord_dim", self.coord_dim, "an integer >= 1")
        if self.hierarchy:
            if self.kind is not Kind.hypercube:
                refuse("attention.hierarchy", "true", f"false for attention.kind={self.kind.value} "
                       "(the hierarchy groups hypercube positions; true needs attention.kind=hypercube)")
            if self.schedule == "dense":
                refuse("attention.hierarchy", "true", "false for attention.schedule=dense (no cube links to gate); "
                       "true with local, fixed, rot, mixa, hybrid, warp")
        if not self.causal and self.kind is Kind.sparse:
            refuse("attention.causal", "False is for attention.kind=hypercube or dense (bidirectional tasks such as "
                   "count-ones); offset attention is causal", "True")
