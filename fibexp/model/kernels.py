"""Attention over a fixed set of relative offsets, in time and memory linear in T.

Offsets are shared by every query, so the key of query i at offset r is row i - r of one
K/V tensor padded with zero rows in front: a query chunk's keys at offset r are one
contiguous slice, and stacking those slices (one per offset) gathers them far faster than
an index lookup; the backward adds each offset's gradient back onto its slice the same way.
K/V are gathered per KV head (the query heads of a GQA group share them, so they are never
repeated). Queries go through in chunks whose temporaries live in buffers reused across
calls, and the backward pass is written out: it keeps only the attention probabilities
([T, S] per head, no bigger than q), gathers K/V again chunk by chunk and adds gradients in
place, so nothing of size [T, S, D] is kept between forward and backward.
`mix` lets a column be a weighted sum of gathered rows: the exact interpolated gather of
learned alpha, applied to scores and probabilities instead of to K/V rows. With `mix` the front
rows repeat row 0 instead of being zero, so a row before position 0 reads row 0 (a clamped
index): learned alpha's column at query i = lo mixes row 0 with row 0, as in the authors' code
that the paper's learned numbers come from; the backward adds the front rows' gradients onto
row 0. Without `mix` no front row is ever read unmasked, so they stay zero.

Layouts (head-major, so every batched matmul sees contiguous operands):
q [B, Hkv, T, G, D]; k, v [B, Hkv, T, D] (any strides); output [B, Hkv, T, G, D], stored
token-major ([B, T, Hkv, G, D] in memory) like the projections around it.
"""
from __future__ import annotations

import math
import threading

import torch
import torch.nn.functional as F

CHUNK_BYTES = 4 << 20  # per gathered K (or V) chunk: stays in cache, and its buffer is reused

_SCRATCH: dict[tuple, torch.Tensor] = {}
_INDEX: dict[tuple, torch.Tensor] = {}


def _ints(x) -> tuple:
    """Distances as plain ints (a tensor is read back to the host, a GPU sync)."""
    return tuple(x.tolist() if isinstance(x, torch.Tensor) else x)


def _index(values: tuple, device) -> torch.Tensor:
    """`values` as a tensor on `device`, made once per (values, device): a host-to-device copy
    per call and layer is a sync on CUDA. A normal tensor, like the scratch buffers."""
    key = (values, device)
    if key not in _INDEX:
        with torch.inference_mode(False):
            _INDEX[key] = torch.tensor(values, device=device)
    return _INDEX[key]


def _scratch(slot: str, shape, like: torch.Tensor) -> torch.Tensor:
    """A buffer for a chunk temporary that never leaves the kernel, kept between calls: a
    fresh multi-MiB tensor costs a page fault per 4 KiB on every call (glibc hands freed
    memory back to the OS), which at short T cost more than the arithmetic."""
    numel = math.prod(shape)
    key = (slot, like.dtype, like.device, threading.get_ident())
    buf = _SCRATCH.get(key)
    if buf is None or buf.numel() < numel:
        with torch.inference_mode(False):  # a normal tensor, so a training call may write it after an evaluation
            buf = _SCRATCH[key] = torch.empty(numel, dtype=like.dtype, device=like.device)
    return buf[:numel].view(shape)


def _padded(x, front: int, clamp: bool):
    """[B, H, T, D] (any strides) -> contiguous [B, H, front + T, D] with `front` rows first:
    copies of row 0 when `clamp` (row i - r < 0 reads row 0), else zeros."""
    b, h, t, d = x.shape
    xp = x.new_empty(b, h, front + t, d)
    if clamp:
        xp[:, :, :front] = x[:, :, :1]
    else:
        xp[:, :, :front].zero_()
    xp[:, :, front:] = x
    return xp


def _unpadded(dxp, front: int, clamp: bool):
    """The adjoint of `_padded`: the gradient of the T real rows (with `clamp`, row 0 gets the
    front rows' gradients too)."""
    if clamp:
        dxp[:, :, front].add_(dxp[:, :, :front].sum(2))
    return dxp[:, :, front:]


def _gather(xp, rows, c0, c1, front, slot):
    """Rows i - r of a padded K or V for queries c0..c1-1 and every offset r: [B, H, n, S, D]."""
    b, h, _, d = xp.shape
    out = _scratch(slot, (b, h, c1 - c0, len(rows), d), xp)
    return torch.stack([xp[:, :, front + c0 - r:front + c1 - r] for r in rows], dim=3, out=out)


def _scatter_add(dxp, g, rows, c0, c1, front):
    """The gather's adjoint: add g[:, :, :, s] onto the rows it was read from."""
    for s, r in enumerate(rows):
        dxp[:, :, front + c0 - r:front + c1 - r].add_(g[:, :, :, s])


def _token_major(q):
    """An empty [B, Hkv, T, G, D] laid out as [B, T, Hkv, G, D] in memory: the layout the
    projections read and write, so going back to it costs no copy."""
    b, hkv, t, g, d = q.shape
    return q.new_empty(b, t, hkv, g, d).permute(0, 2, 1, 3, 4)


def _scores(s_rows, pos, mix, col_lo, masked):
    """Scores of the attended columns in fp32, -inf where a column's key is before position 0."""
    s = s_rows @ mix if mix is not None else s_rows
    if masked:
        s = s.masked_fill_((pos[:, None] < col_lo[None, :])[:, None, :], float("-inf"))
    return s


def _softmax_(s):
    """Softmax over the last dim (in place where that is faster): torch.softmax on CPU is
    about 5x slower than three plain passes on rows shorter than 16 (measured: S = 13 at
    T = 64), and faster than them from 16 on."""
    if s.shape[-1] >= 16 or not s.is_cpu:
        return torch.softmax(s, dim=-1)
    s.sub_(s.amax(-1, keepdim=True)).exp_()
    return s.div_(s.sum(-1, keepdim=True))


def _to_rows(p, mix):
    """Column probabilities -> weights of the gathered rows (identity without `mix`)."""
    return p @ mix.T if mix is not None else p


def _chunks(t: int, chunk: int):
    for c0 in range(0, t, chunk):
        yield c0, min(t, c0 + chunk)


class _OffsetAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, offsets, mix, col_lo, chunk):
        b, hkv, t, g, d = q.shape
        front, first_valid = max(offsets), max(col_lo)  # queries from first_valid on see every column
        col_lo = _index(col_lo, q.device)
        acc = torch.promote_types(q.dtype, torch.float32)  # softmax in fp32 at least (bf16 inputs)
        clamp = mix is not None
        kp, vp = _padded(k, front, clamp), _padded(v, front, clamp)
        out = _token_major(q)
        # kept for backward, all [T, S]-sized (small): column probabilities, with `mix` also the
        # rows' weights, and the row scores when the mix needs a gradient
        probs = q.new_empty((b, hkv, t, g, col_lo.numel()), dtype=acc)
        row_probs = q.new_empty((b, hkv, t, g, len(offsets)), dtype=acc) if mix is not None else None
        s_rows_all = q.new_empty((b, hkv, t, g, len(offsets)), dtype=acc) if ctx.needs_input_grad[4] else None
        for c0, c1 in _chunks(t, chunk):
            pos = torch.arange(c0, c1, device=q.device)
            kg = _gather(kp, offsets, c0, c1, front, "kv")
            s_rows = (q[:, :, c0:c1] @ kg.transpose(-1, -2)).to(acc).mul_(d ** -0.5)
            if s_rows_all is not None:
                s_rows_all[:, :, c0:c1] = s_rows
            s = _scores(s_rows, pos, mix, col_lo, c0 < first_valid)
            p = probs[:, :, c0:c1]
            p.copy_(_softmax_(s))
            p_rows = _to_rows(p, mix)
            if row_probs is not None:
                row_probs[:, :, c0:c1] = p_rows
            vg = _gather(vp, offsets, c0, c1, front, "kv")  # the keys' buffer, reused
            out[:, :, c0:c1] = p_rows.to(v.dtype) @ vg
        ctx.save_for_backward(q, kp, vp, mix, probs, row_probs, s_rows_all)
        ctx.meta = (chunk, offsets, front, clamp)
        return out

    @staticmethod
    def backward(ctx, dout):
        q, kp, vp, mix, probs, row_probs, s_rows_all = ctx.saved_tensors
        chunk, offsets, front, clamp = ctx.meta
        b, hkv, t, g, d = q.shape
        scale = d ** -0.5
        acc = probs.dtype
        dq = _token_major(q)
        dkp, dvp = torch.zeros_like(kp), torch.zeros_like(vp)
        dmix = torch.zeros_like(mix) if s_rows_all is not None else None  # saved only when mix needs a gradient
        dout = dout.contiguous()
        for c0, c1 in _chunks(t, chunk):
            qc, doc, p = q[:, :, c0:c1], dout[:, :, c0:c1], probs[:, :, c0:c1]
            p_rows = p if row_probs is None else row_probs[:, :, c0:c1]
            grad = _scratch("grad", (b, hkv, c1 - c0, len(offsets), d), q)
            vg = _gather(vp, offsets, c0, c1, front, "kv")
            _scatter_add(dvp, torch.matmul(p_rows.to(q.dtype).transpose(-1, -2), doc, out=grad), offsets, c0, c1, front)
            dp_rows = (doc @ vg.transpose(-1, -2)).to(acc)
            dp = dp_rows @ mix if mix is not None else dp_rows
            ds = p * (dp - (p * dp).sum(-1, keepdim=True))  # softmax backward; sum_n p_n dp_n = dO . o
            if dmix is not None:  # p_rows = p M^T and s = s_rows M: dM = dp_rows^T p + s_rows^T ds
                u, n = dp_rows.shape[-1], p.shape[-1]
                dmix.addmm_(dp_rows.reshape(-1, u).T, p.reshape(-1, n))
                dmix.addmm_(s_rows_all[:, :, c0:c1].reshape(-1, u).T, ds.reshape(-1, n))
            ds_rows = _to_rows(ds, mix).mul_(scale).to(q.dtype)  # scale folded in once, on the small tensor
            kg = _gather(kp, offsets, c0, c1, front, "kv")  # the values' buffer, reused
            dq[:, :, c0:c1] = ds_rows @ kg
            _scatter_add(dkp, torch.matmul(ds_rows.transpose(-1, -2), qc, out=grad), offsets, c0, c1, front)
        return dq, _unpadded(dkp, front, clamp), _unpadded(dvp, front, clamp), None, dmix, None, None


@torch.compiler.disable  # traced, the chunk loop unrolls: 70 s to compile at T = 256, and 11% slower than eager
def gather_attention(q, k, v, rows, mix=None, col_lo=None, chunk: int | None = None):
    """Softmax attention of query i over columns built from key rows i - rows[s].

    rows: distinct distances >= 0 (ints, or a 1-D integer tensor). Without `mix`, column s is
    row s and is valid when i >= rows[s]. With `mix` [S, Ncol] (float), column c is
    sum_s mix[s, c] * row s, valid when i >= col_lo[c]; rows before position 0 read row 0.
    Pass plain ints where you have them (a tensor is read back to the host, a GPU sync).
    torch.compile runs it eagerly (a graph break per call) and compiles everything around it.
    """
    b, hkv, t, g, d = q.shape
    rows = _ints(rows)
    col_lo = rows if col_lo is None else _ints(col_lo)
    if chunk is None:
        chunk = max(16, CHUNK_BYTES // (b * hkv * len(rows) * d * k.element_size()))
    mix = None if mix is None else mix.to(torch.promote_types(q.dtype, torch.float32))
    return _OffsetAttention.apply(q.contiguous(), k, v, rows, mix, col_lo, chunk)


def _allowed(t: int, rows, device):
    """Boolean [T]: distance d is attended (rows beyond the length never count)."""
    allowed = torch.zeros(t, dtype=torch.bool, device=device)
    allowed[torch.tensor([r for r in _ints(rows) if r < t], dtype=torch.long, device=device)] = True
    return allowed


def offset_mask(t: int, rows, device=None):
    """Boolean [T, T] mask: query i may see key j when i - j is one of the offsets."""
    allowed = _allowed(t, rows, device)
    rel = torch.arange(t, device=device)[:, None] - torch.arange(t, device=device)[None, :]
    return (rel >= 0) & allowed[rel.clamp(min=0)]


def additive_mask(t: int, rows, dtype, device=None):
    """offset_mask as 0 / -inf, the form SDPA adds to the scores without converting it per call."""
    return torch.zeros(t, t, dtype=dtype, device=device).masked_fill_(~offset_mask(t, rows, device), float("-inf"))


def mask_attention(q, k, v, rows):
    """SDPA with a dense [T, T] mask: quadratic, but SDPA's fused kernel, the fastest exact
    path at short T. q [B, Hkv, T, G, D] as the other paths."""
    b, hkv, t, g, d = q.shape
    mask = additive_mask(t, rows, q.dtype, q.device)
    qh = q.transpose(2, 3).reshape(b, hkv * g, t, d)
    out = F.scaled_dot_product_attention(qh, k, v, attn_mask=mask, enable_gqa=True)
    return out.view(b, hkv, g, t, d).transpose(2, 3)


def offset_mask_mod(t: int, rows, device=None):
    """flex_attention's mask_mod for the offsets (key j visible to query i when i - j is one)."""
    allowed = _allowed(t, rows, device)

    def mask_mod(_b, _h, qi, ki):
        return (qi >= ki) & allowed[(qi - ki).clamp(min=0)]

    return mask_mod


def flex_block_mask(t: int, rows, device):
    """The block mask of the offsets, built once per (T, device) by the caller."""
    from torch.nn.attention.flex_attention import create_block_mask

    block = 128 if device.type == "cuda" else 16
    return create_block_mask(offset_mask_mod(t, rows, device), None, None, t, t, device=device, BLOCK_SIZE=block)


_compiled_flex = None


def flex_attention(q, k, v, block_mask):
    """Fused block-sparse path (torch flex_attention) over `flex_block_mask`: compiled on CUDA,
    where it trains; eager (forward only, for cross-checks) on CPU. q/k/v [B, H, T, D] (GQA: H = Hkv * G)."""
    global _compiled_flex
    from torch.nn.attention.flex_attention import flex_attention as flex

    if q.is_cuda:
        if _compiled_flex is None:
            _compiled_flex = torch.compile(flex, dynamic=False)
        flex = _compiled_flex
    return flex(q, k, v, block_mask=block_mask, enable_gqa=True)

