"""Paper B's dynamics variants (§3.4, §7): each position carries coordinates p_i in R^d, read
from its input; positions couple by c_ij = exp(-||p_i - p_j||^2 / tau), normalised over the
allowed partners (j <= i when causal); a learned force moves the coordinates, T times, before
the coupling reads out the values.

- `dyn`: the unscaled kernel. At the start d^2 is about 2 x coord_dim (about 100 at the default
  48): the kernel underflows to one-hot on i itself, a pointer chain (effective partners ~1).
- `fld` (field): d^2 divided by its causal row mean before exp, so the kernel stays soft.
- `ph` (phase): fld plus a velocity: v <- v + force, p <- p + v.

Effective partners = exp(entropy of a coupling row), the mean over rows; each layer keeps the
last value it computed (`last_partners`) and the first one (`partners_init`, a buffer, so a
resumed run keeps the value from before its first step)."""
from __future__ import annotations

import torch
from torch import nn

from fibexp.errors import Refusal

FORMS = ("dyn", "fld", "ph")


class DynamicsMixer(nn.Module):
    def __init__(self, d_model: int, form: str = "dyn", steps: int = 1, coord_dim: int = 48, tau: float = 1.0,
                 causal: bool = True):
        super().__init__()
        if form not in FORMS:
            raise Refusal("attention.form", form, ", ".join(FORMS))
        self.form, self.steps, self.tau, self.causal = form, int(steps), float(tau), causal
        self.to_p = nn.Linear(d_model, coord_dim, bias=False)
        self.force = nn.Linear(coord_dim, coord_dim, bias=False)  # the force law, the same at every step
        self.value = nn.Linear(d_model, d_model, bias=False)
        self.out = nn.Linear(d_model, d_model, bias=False)
        self.out.residual = True
        self.register_buffer("partners_init", torch.tensor(-1.0), persistent=True)
        self.last_partners: torch.Tensor | None = None
        self._init_known = False  # partners_init read once per process (no device sync per step)

    def coupling(self, p: torch.Tensor) -> torch.Tensor:
        """[B, T, T] rows summing to 1 over the allowed partners."""
        acc = torch.promote_types(p.dtype, torch.float32)
        p = p.to(acc)
        t = p.shape[1]
        sq = p.square().sum(-1)  # ||p_i - p_j||^2 = |p_i|^2 + |p_j|^2 - 2 p_i.p_j: one matmul, no [B, T, T, d] tensor
        d2 = (sq[:, :, None] + sq[:, None, :] - 2 * p @ p.transpose(1, 2)).clamp_min(0)
        allowed = (torch.ones(t, t, dtype=torch.bool, device=p.device).tril() if self.causal
                   else torch.ones(t, t, dtype=torch.bool, device=p.device))
        if self.form in ("fld", "ph"):
            mean = torch.where(allowed, d2, 0.0).sum(-1, keepdim=True) / allowed.sum(-1, keepdim=True)
            d2 = d2 / mean.clamp_min(1e-6)
        return torch.softmax((-d2 / self.tau).masked_fill(~allowed, float("-inf")), -1)

    def forward(self, x, cos=None, sin=None):
        p = self.to_p(x)
        vel = torch.zeros_like(p)
        for _ in range(self.steps):
            c = self.coupling(p).to(p.dtype)
            f = self.force(c @ p - p)  # the pull toward the coupled partners, through the learned law
            if self.form == "ph":
                vel = vel + f
                p = p + vel
            else:
                p = p + f
        c = self.coupling(p)
        if not (torch.compiler.is_compiling() or torch.jit.is_tracing()):  # export/compile: a pure graph
            self._record(c)
        return self.out(c.to(x.dtype) @ self.value(x))

    @torch.compiler.disable
    @torch.no_grad()
    def _record(self, c: torch.Tensor) -> None:
        partners = effective_partners(c)
        self.last_partners = partners
        if not self._init_known:
            self._init_known = True
            if self.partners_init.item() < 0:  # not restored from a checkpoint: this is the first forward
                with torch.inference_mode(False):
                    self.partners_init.fill_(float(partners))

    def links(self, n: int) -> int:
        return n * (n + 1) // 2 if self.causal else n * n


def effective_partners(c: torch.Tensor) -> torch.Tensor:
    """exp(entropy) of each coupling row (nats; 0 log 0 = 0), the mean over rows."""
    c = c.float()
    h = -torch.where(c > 0, c * c.clamp_min(1e-30).log(), 0.0).sum(-1)
    return h.exp().mean()
