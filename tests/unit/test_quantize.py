"""int8 deployment (fibexp.model.quantize): torch's dynamic quantization really replaces every
Linear (attention's fused q/k/v path included) and leaves the float model untouched; the int8
state is smaller and reads back to the same logits."""
from __future__ import annotations

import io

import pytest
import torch
from torch import nn
from torch.ao.nn.quantized.dynamic import Linear as DynamicLinear

from fibexp.model import quantize
from fibexp.model.lm import LM

CELLS = [dict(kind="dense"), dict(kind="sparse", schedule="stagger", window=2), dict(kind="hypercube", schedule="rot"),
         dict(kind="hypercube", schedule="hybrid")]


def _lm(attention, seed=0):
    torch.manual_seed(seed)
    return LM(n_layers=4, d_model=64, n_heads=4, n_kv_heads=2, vocab_size=97, seq_len=32, attention=attention).eval()


@pytest.mark.parametrize("attention", CELLS, ids=lambda a: "/".join(map(str, a.values())))
def test_int8_quantizes_every_linear_and_leaves_the_float_model(attention):
    model = _lm(attention)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    q = quantize.int8(model)
    assert not any(type(m) is nn.Linear for m in q.modules())
    n_linear = sum(type(m) is nn.Linear for m in model.modules())
    assert sum(type(m) is DynamicLinear for m in q.modules()) == n_linear > 0
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    ids = torch.randint(0, 97, (3, 32), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        ref, got = model(ids), q(ids)
    err = float((got - ref).abs().mean())
    assert 0 < err < 0.2 * float(ref.abs().mean())  # quantized (not equal), and close (measured: 6-11% at init)
    assert quantize.state_bytes(model) > 1.5 * quantize.state_bytes(q)


def test_int8_state_reads_back_to_the_same_logits(tmp_path):
    model = _lm(dict(kind="hypercube", schedule="rot"))
    q = quantize.int8(model)
    quantize.save(q, tmp_path / "m.int8.pt")
    buf = io.BytesIO()
    quantize.save(q, buf)
    assert buf.tell() == quantize.state_bytes(q)
    # the file differs only by the archive's record names (torch.save names them after the file)
    assert (tmp_path / "m.int8.pt").stat().st_size == pytest.approx(buf.tell(), rel=0.02)
    back = quantize.load(_lm(dict(kind="hypercube", schedule="rot"), seed=5), tmp_path / "m.int8.pt")
    ids = torch.randint(0, 97, (2, 32), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        assert torch.equal(back(ids), q(ids))


def _qwen(tied: bool, vocab: int = 97):
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from fibexp.model.graft import GraftedLM, graft

    torch.manual_seed(0)
    config = Qwen3Config(vocab_size=vocab, hidden_size=128, intermediate_size=256, num_hidden_layers=4,
                         num_attention_heads=2, num_key_value_heads=1, head_dim=64, tie_word_embeddings=tied)
    return GraftedLM(graft(Qwen3ForCausalLM(config), [1, 3], "eq1", seq_len=16)).eval()


@pytest.mark.parametrize("tied", [True, False], ids=["tied-head", "untied-head"])
def test_int8_of_a_grafted_qwen3_quantizes_every_linear_and_the_embedding(tied):
    """task=graft's model: the Eq. (1) maps, every attention/MLP projection and the head become
    int8 (a tied head its own int8 copy, as torch's recipe for a causal LM makes it), the embedding
    int8 rows."""
    model = _qwen(tied)
    q = quantize.int8(model)
    linears = {n for n, m in model.named_modules() if type(m) is nn.Linear}
    quantized = {n for n, m in q.named_modules() if type(m) is DynamicLinear}
    assert {"hf.model.layers.1.self_attn.mixer.self_map", "hf.model.layers.3.self_attn.mixer.off_map",
            "hf.model.layers.0.self_attn.q_proj", "hf.model.layers.2.mlp.down_proj", "hf.lm_head"} <= quantized
    assert quantized == linears
    state = q.state_dict()
    assert state["hf.model.embed_tokens.qweight"].dtype == torch.int8 and "hf.model.embed_tokens.weight" not in state
    ids = torch.randint(0, 97, (2, 16), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        ref, got = model(ids), q(ids)
    assert 0 < float((got - ref).abs().mean()) < 0.2 * float(ref.abs().mean())


def test_int8_size_of_a_tied_qwen3_is_the_byte_count_by_hand():
    """fp32: 4 bytes a weight. int8: 1 byte a Linear weight, the tied embedding twice at 1 byte (its
    int8 rows and the head's int8 copy) plus a 4-byte scale per row, norms at 4 bytes. The
    serialized states match that count up to the archive's records (< 1 kB an entry), and so
    does their ratio: the paper's 3.2x is this arithmetic on Qwen3-0.6B (3.17x)."""
    vocab = 4096
    model = _qwen(True, vocab)
    params = {id(p): p for p in model.parameters()}.values()  # the tied matrix once
    linear = sum(m.weight.numel() for m in model.modules() if type(m) is nn.Linear and m.weight.shape[0] != vocab)
    emb = model.hf.model.embed_tokens.weight.numel()
    rest = sum(p.numel() for p in params) - linear - emb  # the norms
    assert rest == sum(m.weight.numel() for n, m in model.named_modules() if n.endswith("norm"))
    float_bytes, int8_bytes = 4 * (linear + emb + rest), linear + 2 * emb + 4 * vocab + 4 * rest
    q = quantize.int8(model)
    for m, want in ((model, float_bytes), (q, int8_bytes)):  # the archive adds < 1 kB of records per entry
        assert want < quantize.state_bytes(m) < want + 1024 * len(m.state_dict())
    assert quantize.state_bytes(model) / quantize.state_bytes(q) == pytest.approx(float_bytes / int8_bytes, rel=0.03)
    # Qwen3-0.6B by the same count: 440,401,920 Linear weights, 151,936 x 1,024 embedding, 65,536 norm weights
    L, E, V, N = 440_401_920, 151_936 * 1_024, 151_936, 65_536
    assert 4 * (L + E + N) / (L + 2 * E + 4 * V + 4 * N) == pytest.approx(3.17, abs=0.005)


def test_int8_embedding_rows_and_the_tied_head_stay_within_half_a_quantization_step():
    """Symmetric rounding per row: every weight within scale / 2 of the float one, so a tied head's
    logit for hidden state h moves by at most sum_j |h_j| x scale_v / 2 (the bound, not a run)."""
    model = _lm(dict(kind="hypercube", schedule="rot"))
    q = quantize.int8(model)
    w, scale = model.embed.weight.detach(), q.embed.scale
    assert isinstance(q.embed, quantize.Int8Embedding) and q.embed.qweight.dtype == torch.int8
    assert torch.equal(scale, w.abs().amax(dim=1) / 127)
    err = (q.embed.weight - w).abs()
    assert bool((err <= scale[:, None] / 2 + 1e-7).all()) and float(err.max()) > 0
    ids = torch.randint(0, 97, (3, 32), generator=torch.Generator().manual_seed(1))
    assert torch.equal(q.embed(ids), q.embed.weight[ids])
    h = torch.randn(3, 32, 64, generator=torch.Generator().manual_seed(2))
    moved = (h @ q.embed.weight.T - h @ w.T).abs()
    bound = h.abs() @ (scale / 2)[None, :].expand(64, -1)
    assert bool((moved <= bound + 1e-5).all())
