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


@pytest.mark.parametrize("tied", [True, False], ids=["tied-head", "untied-head"])
def test_int8_of_a_grafted_qwen3_keeps_a_tied_head_fp32_and_quantizes_every_other_linear(tied):
    """task=graft's model: the Eq. (1) maps and every attention/MLP projection become int8; a head
    tied to the embedding stays the fp32 embedding (one copy in the int8 state), an untied one is
    quantized like any Linear."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from fibexp.model.graft import GraftedLM, graft

    torch.manual_seed(0)
    config = Qwen3Config(vocab_size=97, hidden_size=128, intermediate_size=256, num_hidden_layers=4,
                         num_attention_heads=2, num_key_value_heads=1, head_dim=64, tie_word_embeddings=tied)
    model = GraftedLM(graft(Qwen3ForCausalLM(config), [1, 3], "eq1", seq_len=16)).eval()
    q = quantize.int8(model)
    linears = {n for n, m in model.named_modules() if type(m) is nn.Linear}
    quantized = {n for n, m in q.named_modules() if type(m) is DynamicLinear}
    assert {"hf.model.layers.1.self_attn.mixer.self_map", "hf.model.layers.3.self_attn.mixer.off_map",
            "hf.model.layers.0.self_attn.q_proj", "hf.model.layers.2.mlp.down_proj"} <= quantized
    assert quantized == (linears - {"hf.lm_head"} if tied else linears)
    if tied:  # one fp32 vocabulary matrix in the int8 state, as in the float one
        state = q.state_dict()
        assert state["hf.lm_head.weight"].data_ptr() == state["hf.model.embed_tokens.weight"].data_ptr()
    ids = torch.randint(0, 97, (2, 16), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        ref, got = model(ids), q(ids)
    assert 0 < float((got - ref).abs().mean()) < 0.2 * float(ref.abs().mean())
    assert quantize.state_bytes(model) > 2.5 * quantize.state_bytes(q)  # Linear weights are most of the bytes
