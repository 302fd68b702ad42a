"""Transformer building blocks shared by every mixer: RMSNorm, SwiGLU, RoPE."""
import math

import torch
from torch import nn
import torch.nn.functional as F


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return F.rms_norm(x, (x.shape[-1],), self.weight, self.eps)


class SwiGLU(nn.Module):
    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.gate = nn.Linear(dim, hidden, bias=False)
        self.up = nn.Linear(dim, hidden, bias=False)
        self.down = nn.Linear(hidden, dim, bias=False)

    def forward(self, x):
        return self.down(F.silu(self.gate(x)) * self.up(x))


def ffn_hidden(d_model: int) -> int:
    """SwiGLU width 8/3 d rounded up (1366 at d = 512, as in the paper preset)."""
    return math.ceil(8 * d_model / 3)


def rope_tables(seq_len: int, head_dim: int, theta: float, device=None):
    """cos/sin [T, D/2] at true positions 0..T-1, built for the length at hand (no scaling)."""
    inv = 1.0 / theta ** (torch.arange(0, head_dim, 2, device=device, dtype=torch.float64) / head_dim)
    ang = torch.outer(torch.arange(seq_len, device=device, dtype=torch.float64), inv)
    return ang.cos().float(), ang.sin().float()


def apply_rope(x, cos, sin):
    """Rotate pairs (first half, second half) of x [B, T, H, D] by the position angles."""
    x1, x2 = x.chunk(2, dim=-1)
    cos, sin = cos[:, None, :].to(x.dtype), sin[:, None, :].to(x.dtype)
    return torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)
