"""The decoder: token embedding, pre-norm blocks (norm -> mixer -> norm -> SwiGLU), tied head."""
from __future__ import annotations

import math
from collections.abc import Mapping

import torch
import torch.nn.functional as F
from torch import nn

from fibexp.errors import Refusal
from fibexp.model import layers
from fibexp.model.layers import RMSNorm, SwiGLU, rope_tables
from fibexp.model.mixers import build_mixers
from fibexp.model.spec import AttentionSpec


class Block(nn.Module):
    def __init__(self, d_model: int, hidden: int, mixer: nn.Module, eps: float):
        super().__init__()
        self.norm1, self.mixer = RMSNorm(d_model, eps), mixer
        self.norm2, self.ffn = RMSNorm(d_model, eps), SwiGLU(d_model, hidden)
        self.ffn.down.residual = True

    def forward(self, x, cos, sin):
        x = x + self.mixer(self.norm1(x), cos, sin)
        return x + self.ffn(self.norm2(x))


def _check(cond: bool, key: str, value, allowed: str):
    if not cond:
        raise Refusal(key, value, allowed)


class LM(nn.Module):
    """Maps ids [B, T] to logits [B, T, V] for any T: RoPE tables and offsets are built for
    the length at hand, so the same weights evaluate at 1x, 2x, 4x the training length.
    `seq_len` is the training length; the hypercube wiring is laid out for it."""

    def __init__(self, n_layers: int, d_model: int, n_heads: int, n_kv_heads: int, vocab_size: int,
                 seq_len: int, attention: AttentionSpec | Mapping | None = None, ffn_hidden: int | None = None,
                 rope_theta: float = 1e4, norm_eps: float = 1e-6):
        super().__init__()
        if not isinstance(attention, AttentionSpec):
            attention = AttentionSpec(**{k: v for k, v in dict(attention or {}).items() if k != "_target_"})
        for key, value in [("model.n_layers", n_layers), ("model.d_model", d_model), ("model.n_heads", n_heads),
                           ("model.n_kv_heads", n_kv_heads), ("model.vocab_size", vocab_size),
                           ("model.seq_len", seq_len)]:
            _check(value >= 1, key, value, "an integer >= 1")
        _check(n_heads % n_kv_heads == 0, "model.n_kv_heads", n_kv_heads,
               f"a divisor of model.n_heads={n_heads} (GQA groups)")
        _check(d_model % n_heads == 0 and (d_model // n_heads) % 2 == 0, "model.n_heads", n_heads,
               f"a divisor of model.d_model={d_model} leaving an even head dim (RoPE)")
        self.spec, self.seq_len, self.rope_theta = attention, seq_len, rope_theta
        self.head_dim = d_model // n_heads
        self.embed = nn.Embedding(vocab_size, d_model)
        mixers = build_mixers(attention, n_layers, d_model, n_heads, n_kv_heads, seq_len)
        hidden = ffn_hidden or layers.ffn_hidden(d_model)
        self.blocks = nn.ModuleList(Block(d_model, hidden, m, norm_eps) for m in mixers)
        self.norm = RMSNorm(d_model, norm_eps)
        self._rope: dict[tuple, tuple[torch.Tensor, torch.Tensor]] = {}  # (T, device) -> cos, sin
        self._init(d_model, n_layers)

    def _init(self, d_model: int, n_layers: int):
        """Paper init: normal std d^-0.5; projections into the residual stream std / sqrt(2L)."""
        std = d_model ** -0.5
        nn.init.normal_(self.embed.weight, std=std)
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, std=std / math.sqrt(2 * n_layers) if getattr(m, "residual", False) else std)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        cos, sin = self.tables(ids.shape[1], ids.device)
        x = self.embed(ids)
        for block in self.blocks:
            x = block(x, cos, sin)
        return self.norm(x) @ self.embed.weight.T  # tied input/output embedding

    @torch.compiler.disable
    @torch.inference_mode(False)
    def tables(self, t: int, device: torch.device):
        """What depends on the length, made once per (T, device) and outside any compiled graph
        (so torch.compile sees cached constants, not their construction): the RoPE tables, which
        it returns, and each mixer's (offsets, masks, links). Never inference tensors, so a
        length first seen in an evaluation (Lightning's inference_mode) can still be trained."""
        key = (t, device)
        if key not in self._rope:
            self._rope[key] = rope_tables(t, self.head_dim, self.rope_theta, device)
            for block in self.blocks:
                if hasattr(block.mixer, "prepare"):
                    block.mixer.prepare(t, device)
        return self._rope[key]

    def alphas(self) -> list[float | None]:
        """alpha of each layer (None where the layer has no offset pattern)."""
        out = []
        for block in self.blocks:
            pattern = getattr(block.mixer, "pattern", None)
            out.append(None if pattern is None else float(pattern.alpha.detach()))
        return out

    def n_params(self) -> int:
        return sum(p.numel() for p in self.parameters())


def nll(model, x, y) -> torch.Tensor:
    """Per-token negative log-likelihood [B, T] in fp32 (over flat rows: the [B, V, T] layout of
    a transposed call is 4-6x slower on CPU)."""
    return F.cross_entropy(model(x).float().flatten(0, 1), y.flatten(), reduction="none").view_as(y)


def param_groups(model: nn.Module) -> list[dict]:
    """AdamW's groups: weight decay only on matrices (not on parameters with dim < 2: norms,
    biases, learned alpha's theta)."""
    params = [p for p in model.parameters() if p.requires_grad]
    return [{"params": [p for p in params if p.dim() >= 2]},
            {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
