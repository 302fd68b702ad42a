"""Attention over a fixed set of relative offsets, in time and memory linear in T.

Offsets are shared by every query, so the keys of query i are the rows i - d of one
padded K/V tensor: a shifted copy, gathered per KV head (the query heads of a GQA group
share it, so K/V are never repeated). Queries go through in chunks small enough for the
allocator to reuse their buffers, and the backward pass is written out (as FlashAttention
does: recompute the chunk's scores from q, K, V and the saved log-sum-exp), so nothing of
size [T, S, D] is kept between forward and backward and gradients are written in place.
`mix` lets a column be a weighted sum of gathered rows: the exact interpolated gather of
learned alpha, applied to scores and probabilities instead of to K/V rows.

Layouts (head-major, so every batched matmul sees contiguous operands):
q [B, Hkv, T, G, D]; k, v [B, Hkv, T, D]; output [B, Hkv, T, G, D].
"""
import torch
import torch.nn.functional as F

CHUNK_BYTES = 4 << 20  # per gathered K (or V) chunk: well under glibc's mmap threshold


def _chunks(t: int, chunk: int):
    for c0 in range(0, t, chunk):
        yield c0, min(t, c0 + chunk)


def _gather(kp, idx):
    b, hkv, _, d = kp.shape
    return kp.index_select(2, idx.flatten()).view(b, hkv, *idx.shape, d)


def _scores(s_rows, pos, mix, col_lo):
    """Scores of the attended columns in fp32, -inf where a column's key is before position 0."""
    s = s_rows @ mix if mix is not None else s_rows
    return s.masked_fill_((pos[:, None] < col_lo[None, :])[:, None, :], float("-inf"))


def _to_rows(p, mix):
    """Column probabilities -> weights of the gathered rows (identity without `mix`)."""
    return p @ mix.T if mix is not None else p


class _OffsetAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, rows, mix, col_lo, chunk):
        b, hkv, t, g, d = q.shape
        acc = torch.promote_types(q.dtype, torch.float32)  # softmax in fp32 at least (bf16 inputs)
        kp, vp = F.pad(k, (0, 0, 1, 0)), F.pad(v, (0, 0, 1, 0))  # row 0: the zero row before position 0
        out = torch.empty_like(q)
        lse = q.new_empty((b, hkv, t, g), dtype=acc)
        for c0, c1 in _chunks(t, chunk):
            pos = torch.arange(c0, c1, device=q.device)
            idx = (pos[:, None] - rows[None, :] + 1).clamp_(min=0)
            s = _scores((q[:, :, c0:c1] @ _gather(kp, idx).transpose(-1, -2)).to(acc) * d ** -0.5, pos, mix, col_lo)
            lse[:, :, c0:c1] = torch.logsumexp(s, dim=-1)
            p = s.sub_(lse[:, :, c0:c1, :, None]).exp_()
            out[:, :, c0:c1] = _to_rows(p, mix).to(v.dtype) @ _gather(vp, idx)
        ctx.save_for_backward(q, k, v, rows, mix, col_lo, out, lse)
        ctx.chunk = chunk
        return out

    @staticmethod
    def backward(ctx, dout):
        q, k, v, rows, mix, col_lo, out, lse = ctx.saved_tensors
        b, hkv, t, g, d = q.shape
        scale = d ** -0.5
        kp, vp = F.pad(k, (0, 0, 1, 0)), F.pad(v, (0, 0, 1, 0))
        dq = torch.empty_like(q)
        dkp, dvp = torch.zeros_like(kp), torch.zeros_like(vp)
        dmix = torch.zeros_like(mix) if mix is not None and ctx.needs_input_grad[4] else None
        dout = dout.contiguous()
        acc = lse.dtype
        delta = (dout.to(acc) * out.to(acc)).sum(-1, keepdim=True)  # sum_n p_n dp_n = dO . o
        for c0, c1 in _chunks(t, ctx.chunk):
            pos = torch.arange(c0, c1, device=q.device)
            idx = (pos[:, None] - rows[None, :] + 1).clamp_(min=0)
            kg, vg, qc, doc = _gather(kp, idx), _gather(vp, idx), q[:, :, c0:c1], dout[:, :, c0:c1]
            s_rows = (qc @ kg.transpose(-1, -2)).to(acc) * scale
            p = _scores(s_rows.clone(), pos, mix, col_lo).sub_(lse[:, :, c0:c1, :, None]).exp_()
            p_rows = _to_rows(p, mix)
            dvg = p_rows.to(v.dtype).transpose(-1, -2) @ doc
            dp_rows = (doc @ vg.transpose(-1, -2)).to(acc)
            dp = dp_rows @ mix if mix is not None else dp_rows
            if dmix is not None:  # p_rows = p M^T
                dmix += torch.einsum("bhcgu,bhcgn->un", dp_rows, p)
            ds = p.mul_(dp.sub_(delta[:, :, c0:c1]))  # softmax backward, in place of p
            if dmix is not None:  # s = s_rows M
                dmix += torch.einsum("bhcgu,bhcgn->un", s_rows, ds)
            ds_rows = _to_rows(ds, mix).to(q.dtype)
            dq[:, :, c0:c1] = (ds_rows @ kg) * scale
            flat = idx.flatten()
            dkp.index_add_(2, flat, ((ds_rows.transpose(-1, -2) @ qc) * scale).reshape(b, hkv, -1, d))
            dvp.index_add_(2, flat, dvg.reshape(b, hkv, -1, d))
        return dq, dkp[:, :, 1:], dvp[:, :, 1:], None, dmix, None, None


def gather_attention(q, k, v, rows, mix=None, col_lo=None, chunk: int | None = None):
    """Softmax attention of query i over columns built from key rows i - rows[s].

    rows: LongTensor [S] of distances. Without `mix`, column s is row s and is valid when
    i >= rows[s]. With `mix` [S, Ncol] (float), column c is sum_s mix[s, c] * row s, valid
    when i >= col_lo[c]; rows before position 0 read a zero row.
    """
    b, hkv, t, g, d = q.shape
    if chunk is None:
        chunk = max(16, CHUNK_BYTES // (b * hkv * len(rows) * d * k.element_size()))
    col_lo = rows if col_lo is None else col_lo
    mix = None if mix is None else mix.to(torch.promote_types(q.dtype, torch.float32))
    return _OffsetAttention.apply(q.contiguous(), k.contiguous(), v.contiguous(), rows, mix, col_lo, chunk)


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
