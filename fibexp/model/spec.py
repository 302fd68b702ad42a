"""What mixes tokens at each layer, as a typed spec: the `attention` config group's schema and
the model's input. No torch: the config layer validates it before anything is built."""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Optional

from fibexp.science import patterns, wiring


class Kind(str, Enum):
    dense = "dense"
    sparse = "sparse"
    hypercube = "hypercube"


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
        raise ValueError(f"{key}: unknown {value!r}; allowed: {', '.join(m.value for m in cls)}") from None


@dataclass
class AttentionSpec:
    """What mixes tokens at each layer; validated on construction, before any compute."""

    kind: Kind = Kind.dense
    base: Base = Base.fib
    schedule: str = "fixed"
    window: int = 8
    impl: Impl = Impl.auto
    hybrid_layers: Optional[list[int]] = None  # None: SPEC's 3 and 9 of 16, scaled to the depth
    order: str = "rot"
    causal: bool = True
    alpha_init: str = "uniform"  # learned alpha's start: uniform (alpha 1, SPEC) | stagger (the stagger schedule)

    def __post_init__(self):
        self.kind = _enum("attention.kind", Kind, self.kind)
        self.base = _enum("attention.base", Base, self.base)
        self.impl = _enum("attention.impl", Impl, self.impl)
        if self.hybrid_layers is not None:
            self.hybrid_layers = [int(x) for x in self.hybrid_layers]
        if self.window < 0:
            raise ValueError(f"attention.window: {self.window}; allowed: an integer >= 0")
        if self.kind is Kind.sparse:
            patterns._choice("attention.schedule", self.schedule, patterns.SCHEDULES)
            patterns._choice("attention.alpha_init", self.alpha_init, patterns.ALPHA_INITS)
            if self.schedule == "learned" and self.impl not in (Impl.auto, Impl.gather):
                raise ValueError(f"attention.impl: {self.impl.value!r} cannot interpolate rows for "
                                 "attention.schedule=learned; allowed: auto, gather")
        if self.kind is Kind.hypercube:
            wiring._choice("attention.schedule", self.schedule, wiring.SCHEDULES)
            wiring._choice("attention.order", self.order, wiring.ORDERS)
        if not self.causal and self.kind is Kind.sparse:
            raise ValueError("attention.causal: False is for attention.kind=hypercube or dense (bidirectional "
                             "tasks such as count-ones); offset attention is causal; allowed: True")
