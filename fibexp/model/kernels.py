"""Attention over a fixed set of relative offsets, in time and memory linear in T.

Offsets are shared by every query, so the keys of query i are the rows i - d of one
padded K/V tensor: a shifted copy, gathered per KV head (the query heads of a GQA group
share it, so K/V are never repeated). Queries are processed in chunks small enough for the
allocator to reuse their buffers; when the gathered rows of the whole sequence would
exceed SAVED_BYTES, each chunk's backward is recomputed (activation checkpointing), so
memory stays a small multiple of the inputs at any length. `mix` lets a column be a
weighted sum of gathered rows: that is the exact interpolated gather of learned alpha,
applied to scores and probabilities instead of to K/V rows.

Layouts (head-major, so every batched matmul sees contiguous operands):
q [B, Hkv, T, G, D]; k, v [B, Hkv, T, D]; output [B, Hkv, T, G, D].
"""
import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

CHUNK_BYTES = 4 << 20  # per gathered K (or V) chunk: well under glibc's mmap threshold
SAVED_BYTES = 128 << 20  # gathered K and V kept for backward beyond this are recomputed


def _chunk(q, kp, vp, pos, rows, mix, col_lo, scale):
    """One query chunk: q [B, Hkv, C, G, D], kp/vp zero-padded in front [B, Hkv, T+1, D]."""
    idx = (pos[:, None] - rows[None, :] + 1).clamp_(min=0)  # row 0 of kp is the zero row
    c, s = idx.shape
    b, hkv, _, d = kp.shape
    kg = kp.index_select(2, idx.flatten()).view(b, hkv, c, s, d)
    vg = vp.index_select(2, idx.flatten()).view(b, hkv, c, s, d)
    scores = torch.matmul(q, kg.transpose(-1, -2)) * scale  # [B, Hkv, C, G, S]
    if mix is not None:
        scores = scores @ mix
    scores = scores.masked_fill((pos[:, None] < col_lo[None, :])[:, None, :], float("-inf"))
    p = torch.softmax(scores, dim=-1)
    if mix is not None:
        p = p @ mix.T
    return torch.matmul(p, vg)


def gather_attention(q, k, v, rows, mix=None, col_lo=None, chunk: int | None = None):
    """Softmax attention of query i over columns built from key rows i - rows[s].

    rows: LongTensor [S] of distances. Without `mix`, column s is row s and is valid when
    i >= rows[s]. With `mix` [S, Ncol] (float), column c is sum_s mix[s, c] * row s, valid
    when i >= col_lo[c]; rows before position 0 read a zero row.
    """
    b, hkv, t, g, d = q.shape
    if col_lo is None:
        col_lo = rows
    kp, vp = F.pad(k, (0, 0, 1, 0)), F.pad(v, (0, 0, 1, 0))
    row_bytes = b * hkv * len(rows) * d * k.element_size()
    if chunk is None:
        chunk = max(16, CHUNK_BYTES // row_bytes)
    recompute = torch.is_grad_enabled() and 2 * t * row_bytes > SAVED_BYTES
    pos = torch.arange(t, device=q.device)
    scale = d ** -0.5
    outs = []
    for qc, pc in zip(q.split(chunk, dim=2), pos.split(chunk)):
        args = (qc, kp, vp, pc, rows, mix, col_lo, scale)
        if recompute:
            outs.append(checkpoint(_chunk, *args, use_reentrant=False))
        else:
            outs.append(_chunk(*args))
    return torch.cat(outs, dim=2)


def offset_mask(t: int, rows, device=None):
    """Boolean [T, T] mask: query i may see key j when i - j is one of the offsets."""
    allowed = torch.zeros(t, dtype=torch.bool, device=device)
    allowed[rows[rows < t]] = True
    rel = torch.arange(t, device=device)[:, None] - torch.arange(t, device=device)[None, :]
    return (rel >= 0) & allowed[rel.clamp(min=0)]


def mask_attention(q, k, v, rows):
    """Reference path: SDPA with a dense boolean mask (T x T, quadratic; for cross-checks)."""
    b, hkv, t, g, d = q.shape
    qh = q.transpose(2, 3).reshape(b, hkv * g, t, d)
    out = F.scaled_dot_product_attention(qh, k, v, attn_mask=offset_mask(t, rows, q.device), enable_gqa=True)
    return out.view(b, hkv, g, t, d).transpose(2, 3)


def flex_attention(q, k, v, rows):
    """Fused block-sparse path (torch flex_attention); CPU has no backward, so CUDA for training."""
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention as flex

    b, hkv, t, g, d = q.shape
    allowed = torch.zeros(t, dtype=torch.bool, device=q.device)
    allowed[rows[rows < t]] = True

    def mask_mod(_b, _h, qi, ki):
        return (qi >= ki) & allowed[(qi - ki).clamp(min=0)]

    block = 128 if q.is_cuda else 16
    bm = create_block_mask(mask_mod, None, None, t, t, device=q.device, BLOCK_SIZE=block)
    qh = q.transpose(2, 3).reshape(b, hkv * g, t, d)
    out = flex(qh, k, v, block_mask=bm, enable_gqa=True)
    return out.view(b, hkv, g, t, d).transpose(2, 3)
