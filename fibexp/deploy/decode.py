"""One token at a time with a cache per layer (`fibexp-generate`, the ONNX decode graph, the
`transformers` wrapper's `generate`).

`StepModel(lm, max_len)` maps (ids [B, 1], pos [] int64, *caches) to (logits [B, 1, V],
*new caches), reading the trained LM's own weights and buffers. Each layer keeps:

- paper B's shift layer (Eq. (1), y_i = W_self x_i + W_off x_{i-k}): its last k inputs, [B, k, d],
  a constant size;
- offset attention with integer offsets (fib/pow2; fixed, stagger, coprime alpha): the keys and
  values of the last C positions, C = the largest distance the layer attends before `max_len`.
  A key is read at every distance of the pattern, so the cache must span the largest one; for
  the fib base the rungs stop at 987, so C <= round(alpha * 987) whatever the length;
- dense attention: the usual KV cache, one row per position (it grows);
- pow2 offsets with alpha < 1 (`length_dependent`): a position's output depends on the
  sequence's length, so no cache can equal full recomputation; the whole prefix is recomputed;
- any other causal mixer (learned alpha's interpolated offsets, paper B's `dense` mixing, kinds
  added later): its inputs so far, recomputed over the prefix at each step (exact, grows; named
  in `fallbacks`). A bidirectional model (attention.causal=False) cannot be decoded.

Every fast step is checked against the mixer's own forward on random inputs when it is built;
a step that disagrees (a mixer whose semantics changed) falls back to recomputation, so decoding
always equals full recomputation (tests/unit/test_decode.py checks the tokens and logits)."""
from __future__ import annotations

import math
from typing import Callable

import torch
from torch import nn
import torch.nn.functional as F

from fibexp.errors import Refusal
from fibexp.model.layers import apply_rope, rope_tables
from fibexp.model.mixers import Attention, FixedOffsets, ShiftMixer
from fibexp.science import patterns

CHECK_TOLERANCE = 1e-4  # a fast step's max |deviation| from the mixer's forward on random inputs


def offset_columns(window: int, base: str, alpha: float, max_len: int) -> tuple[list[int], list[int]]:
    """(distance d, first position it is attended at) of every column a fixed-offset layer reads
    before `max_len`. The full forward at length t attends attended_distances(.., t): position i
    sees d when d <= i and, for pow2 (whose rungs grow with the length), when its rung r <= i."""
    near = list(range(min(window, max_len - 1) + 1))
    first = {d: d for d in near}
    for r in patterns.rungs(base, max_len):
        d = round(alpha * r)
        if window < d <= max_len - 1:
            start = max(d, r) if base == "pow2" else d
            first[d] = min(first.get(d, start), start)
    ds = sorted(first)
    return ds, [first[d] for d in ds]


class _KVStep(nn.Module):
    """Dense causal attention: the growing KV cache."""

    def __init__(self, attn: Attention):
        super().__init__()
        self.attn = attn

    def cache_shapes(self, batch: int):
        a = self.attn
        return [(batch, 0, a.n_kv, a.head_dim)] * 2

    def project(self, x, cos, sin):
        a = self.attn
        b = x.shape[0]
        h, hkv, d = a.n_heads, a.n_kv, a.head_dim
        qkv = F.linear(x, torch.cat([a.q.weight, a.k.weight, a.v.weight])).view(b, 1, h + 2 * hkv, d)
        qk = apply_rope(qkv[:, :, :h + hkv], cos, sin)
        return qk[:, :, :h], qk[:, :, h:], qkv[:, :, h + hkv:]

    def attend(self, q, keys, values, valid=None):
        """q [B, 1, H, D], keys/values [B, S, Hkv, D], valid [S] bool or None -> [B, 1, H*D]."""
        a = self.attn
        b = keys.shape[0]
        g = a.n_heads // a.n_kv
        qg = q.reshape(b, a.n_kv, g, a.head_dim)  # head h reads kv head h // g
        kt = keys.permute(0, 2, 3, 1)  # [B, Hkv, D, S]
        scores = torch.matmul(qg, kt) / math.sqrt(a.head_dim)  # [B, Hkv, G, S]
        if valid is not None:
            scores = scores.masked_fill(~valid, float("-inf"))
        w = torch.softmax(scores, dim=-1)
        y = torch.matmul(w, values.transpose(1, 2))  # [B, Hkv, G, D]
        return a.o(y.reshape(b, 1, a.n_heads * a.head_dim))

    def forward(self, x, pos, cos, sin, k_cache, v_cache):
        q, k, v = self.project(x, cos, sin)
        keys, values = torch.cat([k_cache, k], 1), torch.cat([v_cache, v], 1)
        return self.attend(q, keys, values), keys, values


class _OffsetStep(_KVStep):
    """Integer offset attention: keys/values of the last C positions (C = largest distance)."""

    def __init__(self, attn: Attention, max_len: int):
        super().__init__(attn)
        p: FixedOffsets = attn.pattern
        ds, first = offset_columns(p.window, p.base, p.exact_alpha, max_len)
        self.span = max(ds)  # C: keys older than this are never read again
        self.register_buffer("dist", torch.tensor(ds), persistent=False)
        self.register_buffer("first", torch.tensor(first), persistent=False)

    def forward(self, x, pos, cos, sin, k_cache, v_cache):
        q, k, v = self.project(x, cos, sin)
        keys, values = torch.cat([k_cache, k], 1), torch.cat([v_cache, v], 1)  # last row: distance 0
        last = keys.shape[1] - 1
        idx = (last - self.dist).clamp(min=0)
        valid = (self.dist <= last) & (self.first <= pos)
        y = self.attend(q, keys.index_select(1, idx), values.index_select(1, idx), valid)
        return y, keys[:, -self.span:] if self.span else keys[:, :0], values[:, -self.span:] if self.span else values[:, :0]

    def cache_shapes(self, batch: int):
        a = self.attn
        return [(batch, 0, a.n_kv, a.head_dim)] * 2


class _ShiftStep(nn.Module):
    """Eq. (1) with paper B's causal wiring: the last k inputs (zeros before the sequence, as the
    shift pads). A cube jump hears x_{i-k} only where bit log2(k) of i is set; a near layer
    hears x_{i-1} everywhere."""

    def __init__(self, mixer: ShiftMixer, d_model: int):
        super().__init__()
        self.mixer, self.d_model = mixer, d_model
        self.k = 1 if mixer.near else mixer.k

    def cache_shapes(self, batch: int):
        return [(batch, self.k, self.d_model)]

    def forward(self, x, pos, cos, sin, past):
        m = self.mixer
        partner = past[:, :1]
        if not m.near:
            partner = partner * torch.bitwise_and(pos, m.k).ne(0).to(x.dtype)
        y = m.self_map(x) + m.off_map(partner)
        return y, torch.cat([past[:, 1:], x], 1)


class _Recompute(nn.Module):
    """Any other causal mixer: its inputs so far, the mixer's forward over them, the last row."""

    def __init__(self, mixer: nn.Module, d_model: int, tables: Callable):
        super().__init__()
        self.mixer, self.d_model, self.tables = mixer, d_model, tables

    def cache_shapes(self, batch: int):
        return [(batch, 0, self.d_model)]

    def forward(self, x, pos, cos, sin, past):
        xs = torch.cat([past, x], 1)
        t = xs.shape[1]
        if hasattr(self.mixer, "prepare"):
            self.mixer.prepare(t, xs.device)
        full_cos, full_sin = self.tables(t)
        return self.mixer(xs, full_cos, full_sin)[:, -1:], xs


def _fast_step(mixer: nn.Module, d_model: int, max_len: int) -> nn.Module | None:
    if type(mixer) is ShiftMixer and mixer.causal and getattr(mixer, "gate", None) is None:
        return _ShiftStep(mixer, d_model)
    if type(mixer) is Attention and mixer.causal:
        if mixer.pattern is None:
            return _KVStep(mixer)
        if type(mixer.pattern) is FixedOffsets:
            return _OffsetStep(mixer, max_len)
    return None


def length_dependent(mixer: nn.Module, max_len: int) -> bool:
    """Whether a position's output depends on how long the sequence is (so no cache can equal
    full recomputation): pow2's rungs are every power of two below the length, so with alpha < 1
    a rung r > T - 1 lands at a distance round(alpha * r) <= T - 1 that a longer sequence
    attends and a shorter one does not."""
    p = getattr(mixer, "pattern", None)
    if p is None or getattr(p, "base", None) != "pow2":
        return False
    alpha = float(p.exact_alpha if hasattr(p, "exact_alpha") else p.alpha.detach())
    return any(p.window < round(alpha * r) < r for r in patterns.rungs("pow2", max_len))


def _kind(mixer: nn.Module) -> str:
    pattern = getattr(mixer, "pattern", None)
    return type(pattern).__name__ if pattern is not None else type(mixer).__name__


class StepModel(nn.Module):
    """The LM's one-token step: (ids [B, 1], pos [] int64, *caches) -> (logits [B, 1, V], *caches).
    `max_len`: the longest sequence it will decode (RoPE table, pow2 rungs)."""

    def __init__(self, lm: nn.Module, max_len: int, check: bool = True):
        super().__init__()
        if not getattr(lm.spec, "causal", True):
            raise Refusal("attention.causal", False, "True for decoding (a bidirectional model reads positions "
                          "that are not generated yet)")
        self.lm, self.max_len = lm, int(max_len)
        d_model = lm.embed.weight.shape[1]
        cos, sin = rope_tables(self.max_len, lm.head_dim, lm.rope_theta)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)
        steps, self.fallbacks = [], []
        self.length_dependent = [f"layer {l}: pow2 offsets, alpha {float(getattr(b.mixer.pattern, 'alpha')):.2f}"
                                 for l, b in enumerate(lm.blocks) if length_dependent(b.mixer, self.max_len)]
        for l, block in enumerate(lm.blocks):
            step = _fast_step(block.mixer, d_model, self.max_len)
            if step is not None and check and not _agrees(step, block.mixer, self._tables, d_model, min(self.max_len, 40)):
                step = None
            if step is None:
                step = _Recompute(block.mixer, d_model, self._tables)
                self.fallbacks.append(f"layer {l}: {_kind(block.mixer)}")
            steps.append(step)
        self.steps = nn.ModuleList(steps)
        self.n_caches = [len(s.cache_shapes(1)) for s in steps]

    def _tables(self, t: int):
        if t > self.cos.shape[0]:
            raise Refusal("length", t, f"at most max_len={self.max_len} for this decoder")
        return self.cos[:t], self.sin[:t]

    def constant_cache(self) -> bool:
        """Whether no layer's cache grows with the sequence (no dense attention, no recomputation)."""
        return all(type(s) in (_ShiftStep, _OffsetStep) for s in self.steps)

    def init_caches(self, batch: int, dtype=torch.float32, device=None, fixed: bool = False) -> list[torch.Tensor]:
        """Zero caches. fixed: every cache at its final size from the start (offset layers'
        keys at their span, masked by position until filled): the shapes a graph with its caches
        as inputs and outputs needs."""
        out = []
        for s in self.steps:
            for shape in s.cache_shapes(batch):
                if fixed and isinstance(s, _OffsetStep):
                    shape = (shape[0], s.span, *shape[2:])
                out.append(torch.zeros(shape, dtype=dtype, device=device))
        return out

    def forward(self, ids: torch.Tensor, pos: torch.Tensor, *caches: torch.Tensor):
        lm = self.lm
        cos, sin = self.cos[pos].unsqueeze(0), self.sin[pos].unsqueeze(0)  # [1, D/2]
        x = lm.embed(ids)
        out, at = [], 0
        for block, step, n in zip(lm.blocks, self.steps, self.n_caches):
            y, *new = step(block.norm1(x), pos, cos, sin, *caches[at:at + n])
            at += n
            out.extend(new)
            x = x + y
            x = x + block.ffn(block.norm2(x))
        return (lm.norm(x) @ lm.embed.weight.T, *out)


def _agrees(step: nn.Module, mixer: nn.Module, tables: Callable, d_model: int, t: int) -> bool:
    """The fast step reproduces, at every position i < t, the mixer's forward over the prefix
    x[:, :i + 1] (what full recomputation runs), on random inputs."""
    gen = torch.Generator().manual_seed(0)
    param = next(mixer.parameters())
    x = torch.randn(2, t, d_model, generator=gen).to(param)
    worst = 0.0
    with torch.no_grad():
        caches = [torch.zeros(s, dtype=x.dtype, device=x.device) for s in step.cache_shapes(2)]
        for i in range(t):
            if hasattr(mixer, "prepare"):
                mixer.prepare(i + 1, x.device)
            cos, sin = tables(i + 1)
            expected = mixer(x[:, :i + 1], cos, sin)[:, -1:]
            y, *caches = step(x[:, i:i + 1], torch.tensor(i, device=x.device), cos[i:], sin[i:], *caches)
            worst = max(worst, float((y - expected).abs().max()))
    return worst <= CHECK_TOLERANCE


def cache_bytes(caches) -> int:
    return sum(c.numel() * c.element_size() for c in caches)


class Decoder:
    """Stateful eager decoding: `feed(ids [B, T])` runs T tokens through the step, keeps the
    caches, returns the last logits [B, V]. A length-dependent model (pow2 offsets with
    alpha < 1, see `length_dependent`) is decoded by recomputing the whole prefix instead."""

    def __init__(self, lm: nn.Module, max_len: int, batch: int = 1):
        self.step = StepModel(lm, max_len).eval()
        self.lm, self.recompute = lm, bool(self.step.length_dependent)
        param = next(lm.parameters())
        self.caches = [] if self.recompute else self.step.init_caches(batch, param.dtype, param.device)
        self.ids = torch.zeros(batch, 0, dtype=torch.long, device=param.device)
        self.pos = 0

    @torch.no_grad()
    def feed(self, ids: torch.Tensor) -> torch.Tensor:
        if self.pos + ids.shape[1] > self.step.max_len:
            raise Refusal("length", self.pos + ids.shape[1], f"at most max_len={self.step.max_len}")
        if self.recompute:
            self.ids = torch.cat([self.ids, ids], 1)
            self.pos += ids.shape[1]
            return self.lm(self.ids)[:, -1]
        logits = None
        for j in range(ids.shape[1]):
            pos = torch.tensor(self.pos, device=ids.device)
            logits, *self.caches = self.step(ids[:, j:j + 1], pos, *self.caches)
            self.pos += 1
        return logits[:, -1]

    def cache_bytes(self) -> int:
        return cache_bytes(self.caches if not self.recompute else [self.ids])


def sample(logits: torch.Tensor, temperature: float, top_k: int | None, generator: torch.Generator | None):
    """Next ids [B] from logits [B, V]: argmax at temperature 0, else softmax(logits / T) over the top k."""
    if temperature <= 0:
        return logits.argmax(-1)
    logits = logits.float() / temperature
    if top_k:
        kth = torch.topk(logits, min(top_k, logits.shape[-1]), dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    return torch.multinomial(torch.softmax(logits, -1), 1, generator=generator).squeeze(-1)


@torch.no_grad()
def generate(lm: nn.Module, prompt: torch.Tensor, max_new_tokens: int, temperature: float = 0.0,
             top_k: int | None = None, seed: int = 0, on_token: Callable[[int], None] | None = None,
             cached: bool = True) -> torch.Tensor:
    """prompt [1, T0] -> [1, T0 + max_new_tokens]. cached=False recomputes the whole prefix at
    every step (the reference the cached path must equal)."""
    gen = torch.Generator(device=prompt.device).manual_seed(seed)
    ids = prompt
    decoder = Decoder(lm, prompt.shape[1] + max_new_tokens, prompt.shape[0]) if cached else None
    logits = decoder.feed(prompt) if cached else lm(prompt)[:, -1]
    for _ in range(max_new_tokens):
        nxt = sample(logits, temperature, top_k, gen)
        ids = torch.cat([ids, nxt[:, None]], 1)
        if on_token is not None:
            on_token(int(nxt[0]))
        if ids.shape[1] == prompt.shape[1] + max_new_tokens:
            break
        logits = decoder.feed(nxt[:, None]) if cached else lm(ids)[:, -1]
    return ids
