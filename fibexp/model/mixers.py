"""Token mixers, one per layer: dense attention, Fibonacci/pow2 offset attention (static or
learned alpha), and paper B's shift mixer. Which mixer a layer gets is decided by the
schedule in `AttentionSpec`; the pattern math itself lives in `fibexp.science.patterns`/`wiring`."""
from __future__ import annotations

import torch
from torch import nn
import torch.nn.functional as F

from fibexp.errors import Refusal
from fibexp.science import patterns, wiring
from fibexp.model import kernels
from fibexp.model.layers import apply_rope
from fibexp.model.spec import AttentionSpec, Base, Impl, Kind


# Where `attention.impl=auto` switches paths on CPU: static offsets take the mask path (SDPA's
# fused kernel, quadratic) below this length and the gather from it on. Measured by
# `fibexp-bench model` ("crossover" in outputs/bench/model-latest.json: one static layer,
# forward + backward, gather vs mask at T = 64 .. 2048): the gather won from T = 256 on at the
# tiny preset's width and from 128-256 at the paper's (2 cores, fp32).
CPU_MASK_BELOW = 256


def resolve_impl(impl: Impl, device: torch.device, t: int, learned: bool = False) -> Impl:
    """The concrete path for `impl` at this device and length. auto: learned alpha needs
    the gather (only it interpolates rows); on CUDA integer offsets take flex_attention (fused,
    block-sparse); on CPU the mask path below CPU_MASK_BELOW, the gather from there on."""
    if impl is not Impl.auto:
        return impl
    if learned:
        return Impl.gather
    if device.type == "cuda":
        return Impl.flex
    return Impl.mask if t < CPU_MASK_BELOW else Impl.gather


def _head_major(q, k, v, n_kv: int):
    """Natural [B, T, H, D] views -> the gather kernel's q [B, Hkv, T, G, D], k/v [B, Hkv, T, D] (views)."""
    b, t, h, d = q.shape
    return (q.view(b, t, n_kv, h // n_kv, d).permute(0, 2, 1, 3, 4), k.transpose(1, 2), v.transpose(1, 2))


def _natural(y):
    """The gather kernel's [B, Hkv, T, G, D] output -> [B, T, H, D]."""
    b, hkv, t, g, d = y.shape
    return y.permute(0, 2, 1, 3, 4).reshape(b, t, hkv * g, d)


class FixedOffsets(nn.Module):
    """Integer offsets round(alpha * rung): alpha is a buffer, nothing is trainable. What
    depends on the length (the offsets; the mask or flex's block mask where that path runs)
    is built once per (T, device) by `prepare`, which LM calls before its layers run."""

    def __init__(self, window: int, base: Base, alpha: float, impl: Impl):
        super().__init__()
        self.window, self.base, self.impl = window, base.value, impl
        self.exact_alpha = float(alpha)  # offsets round this, not a float32 copy (x.5 ties!)
        self.register_buffer("alpha", torch.tensor(self.exact_alpha), persistent=True)
        self._cache: dict[tuple, dict] = {}

    @torch.inference_mode(False)  # cached for training too (see LM.tables)
    def prepare(self, t: int, device: torch.device) -> dict:
        """{"rows": the offsets as ints, "impl": the path, and what that path needs: "masks"
        (by dtype) or "block_mask"} for length t."""
        key = (t, device)
        if key not in self._cache:
            rows = tuple(patterns.attended_distances(self.window, self.base, self.exact_alpha, t))
            tables = {"rows": rows, "impl": resolve_impl(self.impl, device, t)}
            if tables["impl"] is Impl.mask:
                tables["masks"] = {torch.float32: kernels.additive_mask(t, rows, torch.float32, device)}
            elif tables["impl"] is Impl.flex:
                tables["block_mask"] = kernels.flex_block_mask(t, rows, device)
            self._cache[key] = tables
        return self._cache[key]

    def rows(self, t: int, device) -> torch.Tensor:
        return torch.tensor(self.prepare(t, device)["rows"], device=device)

    def forward(self, q, k, v):
        """q [B, T, H, D], k/v [B, T, Hkv, D] (RoPE applied) -> [B, T, H, D]."""
        t, device = q.shape[1], q.device
        tables = self.prepare(t, device)
        rows, impl = tables["rows"], tables["impl"]
        if impl is Impl.gather:
            return _natural(kernels.gather_attention(*_head_major(q, k, v, k.shape[2]), rows))
        qh, kh, vh = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        if impl is Impl.flex:
            if torch.is_grad_enabled() and not q.is_cuda:
                raise Refusal("attention.impl", "flex", "auto, gather, mask for training on CPU (flex has no "
                              "backward on CPU)")
            return kernels.flex_attention(qh, kh, vh, tables["block_mask"]).transpose(1, 2)
        mask = self._mask(tables, q.dtype)
        return F.scaled_dot_product_attention(qh, kh, vh, attn_mask=mask, enable_gqa=True).transpose(1, 2)

    @torch.inference_mode(False)
    def _mask(self, tables: dict, dtype) -> torch.Tensor:
        """The mask in the query's dtype (SDPA wants it so; bf16 under autocast), cached like the
        other tables and, like them, never an inference tensor."""
        masks = tables["masks"]
        if dtype not in masks:
            masks[dtype] = masks[torch.float32].to(dtype)
        return masks[dtype]


class LearnedOffsets(nn.Module):
    """alpha = 0.5 + sigmoid(theta), theta trained; rung targets alpha * r between integers
    read rows floor and floor + 1 mixed by the fraction, so theta gets a gradient. Two edge
    rules are the authors' (the paper's learned numbers were trained with them): a rung whose
    floor lies in the window is dropped (`patterns.interpolated_rungs`), and at the query
    i = floor the row before position 0 reads row 0 (`kernels.gather_attention` with a mix)."""

    def __init__(self, window: int, base: Base, alpha: float = 1.0):
        super().__init__()
        self.window, self.base = window, base.value
        self.theta = nn.Parameter(torch.tensor(patterns.theta_for(alpha)))
        self._layouts: dict[tuple, tuple] = {}

    @property
    def alpha(self) -> torch.Tensor:
        return 0.5 + torch.sigmoid(self.theta)

    @torch.inference_mode(False)  # cached for training too (see LM.tables)
    def _layout(self, t: int, rungs: tuple, lows: tuple, dtype, device):
        """What depends only on the integer part of the rungs, built once per (T, lows): the
        gathered rows, each column's first valid query, and the mix matrix as
        base + step * frac (window column d reads row d; rung column j reads row lo_j with
        weight 1 - frac_j and row lo_j + 1 with weight frac_j)."""
        key = (t, rungs, lows, dtype, device)
        if key not in self._layouts:
            near = list(range(min(self.window, t - 1) + 1))
            rows = sorted(set(near) | set(lows) | {lo + 1 for lo in lows})
            at = {d: i for i, d in enumerate(rows)}
            base = torch.zeros(len(rows), len(near) + len(lows), dtype=dtype)
            step = torch.zeros_like(base)
            for c, d in enumerate(near):
                base[at[d], c] = 1.0
            for j, lo in enumerate(lows):
                c = len(near) + j
                base[at[lo], c], step[at[lo], c], step[at[lo + 1], c] = 1.0, -1.0, 1.0
            floats = dict(dtype=dtype, device=device)
            self._layouts[key] = (tuple(rows), tuple(near) + lows, base.to(device), step.to(device),
                                  torch.tensor(rungs, **floats), torch.tensor(lows, **floats), len(near))
        return self._layouts[key]

    def forward(self, q, k, v):
        """q [B, T, H, D], k/v [B, T, Hkv, D] (RoPE applied) -> [B, T, H, D]."""
        t, alpha = q.shape[1], self.alpha
        kept = patterns.interpolated_rungs(self.window, self.base, float(alpha.detach()), t)
        acc = torch.promote_types(q.dtype, torch.float32)  # the mix stays >= fp32 under bf16
        rows, col_lo, base, step, r, lows, n_near = self._layout(
            t, tuple(x for x, _, _ in kept), tuple(lo for _, lo, _ in kept), acc, q.device)
        frac = F.pad(alpha.to(acc) * r - lows, (n_near, 0))  # 0 for the window's columns
        mix = torch.addcmul(base, step, frac)
        return _natural(kernels.gather_attention(*_head_major(q, k, v, k.shape[2]), rows, mix, col_lo))


class Attention(nn.Module):
    """GQA attention with RoPE at true positions; `pattern` None means dense SDPA (causal
    unless the task reads every position, as count-ones does)."""

    def __init__(self, d_model: int, n_heads: int, n_kv_heads: int, pattern: nn.Module | None = None,
                 causal: bool = True):
        super().__init__()
        self.causal = causal
        self.n_heads, self.n_kv, self.head_dim = n_heads, n_kv_heads, d_model // n_heads
        self.q = nn.Linear(d_model, n_heads * self.head_dim, bias=False)
        self.k = nn.Linear(d_model, n_kv_heads * self.head_dim, bias=False)
        self.v = nn.Linear(d_model, n_kv_heads * self.head_dim, bias=False)
        self.o = nn.Linear(n_heads * self.head_dim, d_model, bias=False)
        self.o.residual = True
        self.pattern = pattern

    def prepare(self, t: int, device: torch.device) -> None:
        if hasattr(self.pattern, "prepare"):
            self.pattern.prepare(t, device)

    def links(self, n: int) -> int | None:
        """(query, key) pairs at length n, the identity included; None for learned alpha (it moves)."""
        if self.pattern is None:
            return wiring.links(["attn"], n, self.causal)
        if isinstance(self.pattern, FixedOffsets):
            rows = patterns.attended_distances(self.pattern.window, self.pattern.base, self.pattern.exact_alpha, n)
            return sum(n - d for d in set(rows) if d < n)
        return None

    def forward(self, x, cos, sin):
        b, t, _ = x.shape
        h, hkv, d = self.n_heads, self.n_kv, self.head_dim
        # q, k and v in one matmul (the three weights stay separate parameters), RoPE on q and k at once
        w = (self.q.weight, self.k.weight, self.v.weight)
        if isinstance(w[0], torch.Tensor):
            qkv = F.linear(x, torch.cat(w)).view(b, t, h + 2 * hkv, d)
        else:  # int8 projections (fibexp.model.quantize: `weight` is a method of a quantized Linear)
            qkv = torch.cat([self.q(x), self.k(x), self.v(x)], -1).view(b, t, h + 2 * hkv, d)
        qk = apply_rope(qkv[:, :, :h + hkv], cos, sin)
        q, k, v = qk[:, :, :h], qk[:, :, h:], qkv[:, :, h + hkv:]
        if self.pattern is None:
            y = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                               is_causal=self.causal, enable_gqa=True).transpose(1, 2)
        else:
            y = self.pattern(q, k, v)
        return self.o(y.reshape(b, t, h * d))


class _TwoMaps(nn.Module):
    """Paper B's layers: y = W_self x + W_off (what the wiring brings from other positions)."""

    def __init__(self, d_model: int, causal: bool):
        super().__init__()
        self.causal = causal
        self.self_map = nn.Linear(d_model, d_model, bias=False)
        self.off_map = nn.Linear(d_model, d_model, bias=False)
        self.self_map.residual = self.off_map.residual = True


class ShiftMixer(_TwoMaps):
    """Paper B's sparse layer y_i = W_self x_i + W_off x_j: two linear maps and a shift.
    A cube jump (k = 2**d) takes j = i - k only where bit d of i is set (the earlier endpoint of
    the edge i XOR k; elsewhere the partner term is 0); a `near` layer takes j = i - 1 at every
    position. Non-causal mode links i to its cube neighbour i XOR k (the count-ones task).
    `gate` (the hierarchy) scales the couplings whose partner lies in i's own group."""

    def __init__(self, d_model: int, k: int, causal: bool = True, near: bool = False, gate: nn.Module | None = None):
        super().__init__(d_model, causal)
        self.k, self.near, self.gate = k, near, gate
        self._has_bit: dict[tuple, torch.Tensor] = {}

    @torch.inference_mode(False)  # cached for training too (see LM.tables)
    def prepare(self, t: int, device: torch.device) -> torch.Tensor:
        """[T, 1] bool: positions that hear a partner at all (causal; bit d of i set for a jump)."""
        key = (t, device)
        if key not in self._has_bit:
            i = torch.arange(t, device=device)
            self._has_bit[key] = ((i >= 1) if self.near else (i & self.k) != 0)[:, None]
        return self._has_bit[key]

    def partner(self, x: torch.Tensor) -> torch.Tensor:
        """x_j for each i (0 where i hears none)."""
        t, k = x.shape[1], 1 if self.near else self.k
        if not self.causal:
            return x[:, torch.arange(t, device=x.device) ^ k]
        shifted = F.pad(x[:, : max(t - k, 0)], (0, 0, min(k, t), 0))
        return shifted if self.near else torch.where(self.prepare(t, x.device), shifted, 0.0)

    def couplings(self, x: torch.Tensor) -> torch.Tensor | None:
        """Per-position weight of the link to the partner [B or 1, T, 1]; None: all 1."""
        return None

    def forward(self, x, cos=None, sin=None):
        shifted = self.partner(x)
        w = self.couplings(x)
        if self.gate is not None:
            g = self.gate(x, 1 if self.near else self.k, self.causal)
            w = g if w is None else w * g
        if w is not None:
            shifted = shifted * w.to(x.dtype)
        return self.self_map(x) + self.off_map(shifted)

    def links(self, n: int) -> int:
        return wiring.links([wiring.NEAR if self.near else self.k], n, self.causal)


class Coordinates(nn.Module):
    """`warp`'s learned coordinates: where each of the n cube positions sits, in R^b, starting
    at its vertex (the bits of i). One table for the whole model (positions learn where they sit,
    every layer reads the same place); beyond n, position i sits where i mod n does."""

    def __init__(self, n: int):
        super().__init__()
        self.n = n
        b = wiring.cube_dims(n)
        bits = (torch.arange(n)[:, None] >> torch.arange(b)[None, :]) & 1
        self.p = nn.Parameter(bits.float())

    def at(self, t: int, device) -> torch.Tensor:
        return self.p[torch.arange(t, device=device) % self.n]


class WarpMixer(ShiftMixer):
    """A cube jump whose one link i <- j is weighted by the learned coordinates:
    w_i = exp(1 - ||p_i - p_j||^2), exactly 1 at the start (p at the vertices, one edge apart),
    so warp starts as the hybrid and the positions then move. Same links as the jump it replaces."""

    def __init__(self, d_model: int, k: int, coords: Coordinates, causal: bool = True, gate=None):
        super().__init__(d_model, k, causal, near=False, gate=gate)
        self.coords = coords

    def couplings(self, x):
        t = x.shape[1]
        p = self.coords.at(t, x.device)
        j = torch.arange(t, device=x.device)
        j = j ^ self.k if not self.causal else (j - self.k).clamp(min=0)
        w = torch.exp(1 - (p - p[j]).square().sum(-1))
        return w[None, :, None]


class GroupGate(nn.Module):
    """The hierarchy (paper B §3.4): groups of g = 2**a consecutive positions are the vertices of
    a coarser cube of n / g vertices. A group's state is the mean of its members' inputs (causal:
    of those up to i), plus its coarse-cube partner's along the layer's coarse dimension, by the
    same earlier-endpoint rule; it gates the couplings inside the group:
    gate_i = 2 sigmoid(u . s_G(i) + c), 1 at the start (u = c = 0). Couplings to other groups
    keep weight 1. The force law (W_self, W_off) is the layer's own, shared: the gate adds
    d_model + 1 weights per layer."""

    def __init__(self, d_model: int, n: int, layer: int):
        super().__init__()
        b = wiring.cube_dims(n)
        self.a = max(1, b // 2)
        self.g = 2 ** self.a
        self.coarse = 1 << (layer % max(1, b - self.a))  # rot over the coarse cube's dimensions
        self.u = nn.Parameter(torch.zeros(d_model))
        self.c = nn.Parameter(torch.zeros(()))

    def forward(self, x: torch.Tensor, k: int, causal: bool) -> torch.Tensor:
        b, t, d = x.shape
        if k >= self.g:  # the partner is in another group: no coupling inside the group to gate
            return torch.ones(1, t, 1, dtype=x.dtype, device=x.device)
        inside = (torch.arange(t, device=x.device) % self.g) >= (1 if k == 1 else 0)  # near: i - 1 may not be
        pad = (-t) % self.g
        xs = F.pad(x, (0, 0, 0, pad)).view(b, -1, self.g, d)
        if causal:
            counts = torch.arange(1, self.g + 1, device=x.device, dtype=x.dtype)[None, None, :, None]
            own = xs.cumsum(2) / counts  # mean of the members up to i
            full = xs.mean(2)  # a whole earlier group (all its members precede i)
            gi = torch.arange(xs.shape[1], device=x.device)
            has = (gi & self.coarse) != 0
            partner = torch.where(has[None, :, None], full[:, (gi - self.coarse).clamp(min=0)], 0.0)
        else:
            own = xs.mean(2, keepdim=True).expand_as(xs)
            gi = torch.arange(xs.shape[1], device=x.device)
            partner = xs.mean(2)[:, (gi ^ self.coarse) % xs.shape[1]]
        state = (own + partner[:, :, None]).reshape(b, -1, d)[:, :t]
        gate = 2 * torch.sigmoid(state @ self.u.to(x.dtype) + self.c)
        return torch.where(inside, gate, 1.0)[..., None]


class DenseMixer(_TwoMaps):
    """Paper B's `dense` control: all-to-all learned mixing without search. Weights depend on
    the distance i - j (n per direction), so the same weights run at any length."""

    def __init__(self, d_model: int, n: int, causal: bool = True):
        super().__init__(d_model, causal)
        self.n = n
        self.by_distance = nn.Parameter(torch.full((2 * n - 1,), 1.0 / n))
        self._links: dict[tuple, tuple[torch.Tensor, torch.Tensor]] = {}

    @torch.inference_mode(False)  # cached for training too (see LM.tables)
    def prepare(self, t: int, device: torch.device):
        """Which pairs are linked and the distance index of each, once per (T, device)."""
        key = (t, device)
        if key not in self._links:
            rel = torch.arange(t, device=device)[:, None] - torch.arange(t, device=device)[None, :]
            linked = (rel >= 0) if self.causal else torch.ones_like(rel, dtype=torch.bool)
            self._links[key] = (linked & (rel.abs() < self.n), (rel + self.n - 1).clamp(0, 2 * self.n - 2))
        return self._links[key]

    def links(self, n: int) -> int:
        return wiring.links(["dense"], n, self.causal)

    def forward(self, x, cos=None, sin=None):
        linked, index = self.prepare(x.shape[1], x.device)
        m = torch.where(linked, self.by_distance[index], 0.0)
        return self.self_map(x) + m.to(x.dtype) @ self.off_map(x)


def build_mixers(spec: AttentionSpec, n_layers: int, d_model: int, n_heads: int, n_kv_heads: int,
                 seq_len: int) -> list[nn.Module]:
    """One mixer per layer, from the schedule."""
    if spec.kind is Kind.dense:
        return [Attention(d_model, n_heads, n_kv_heads, causal=spec.causal) for _ in range(n_layers)]
    if spec.kind is Kind.sparse:
        if spec.schedule == "learned":
            starts = patterns.layer_alphas("stagger" if spec.alpha_init == "stagger" else "learned", n_layers)
            return [Attention(d_model, n_heads, n_kv_heads, LearnedOffsets(spec.window, spec.base, a))
                    for a in starts]
        alphas = patterns.layer_alphas(spec.schedule, n_layers)
        return [Attention(d_model, n_heads, n_kv_heads, FixedOffsets(spec.window, spec.base, a, spec.impl))
                for a in alphas]
    if spec.kind is Kind.dynamics:
        from fibexp.model.dynamics import DynamicsMixer
        return [DynamicsMixer(d_model, spec.form, spec.steps, spec.coord_dim, spec.tau, spec.causal)
                for _ in range(n_layers)]
    plan = wiring.layer_plan(spec.schedule, n_layers, seq_len, spec.hybrid_layers, spec.order)
    coords = Coordinates(seq_len) if spec.schedule == "warp" else None
    out: list[nn.Module] = []
    for layer, step in enumerate(plan):
        gate = GroupGate(d_model, seq_len, layer) if spec.hierarchy and step not in wiring.FULL else None
        if step == "attn":
            out.append(Attention(d_model, n_heads, n_kv_heads, causal=spec.causal))
        elif step == "dense":
            out.append(DenseMixer(d_model, seq_len, spec.causal))
        elif step == wiring.NEAR:
            out.append(ShiftMixer(d_model, 1, spec.causal, near=True, gate=gate))
        elif coords is not None:
            out.append(WarpMixer(d_model, step, coords, spec.causal, gate=gate))
        else:
            out.append(ShiftMixer(d_model, step, spec.causal, gate=gate))
    return out
