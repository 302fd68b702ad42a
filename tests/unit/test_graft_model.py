"""task=graft's model (paper B §8): Eq. (1) layers grafted into a tiny random Qwen3 built here
(Qwen3-0.6B's weights cannot be downloaded offline): exactly the chosen layers change, only they
train, the Eq. (1) layer starts as the attention it replaces sees itself; and the uint32 token
caches a vocabulary above 65,536 ids (Qwen3's 151,669) needs."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM

from fibexp.data.tokenizer import Tokenizer
from fibexp.data.tokens import token_stream
from fibexp.model.graft import Eq1Attention, GraftedLM, decoder_layers, graft, grafted
from fibexp.tasks.graft.config import graft_layers

CHOSEN = [1, 3]


def _load(folder):
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_pretrained(str(folder), local_files_only=True, dtype=torch.float32)


def _trainable_layers(model) -> set[int]:
    names = [n for n, p in model.named_parameters() if p.requires_grad]
    assert names and all(".self_attn." in n for n in names), names
    return {int(n.split("layers.")[1].split(".")[0]) for n in names}


def test_eq1_replaces_exactly_the_chosen_layers_gives_finite_logits_and_trains_only_them(tiny_qwen3):
    lm = GraftedLM(graft(_load(tiny_qwen3), CHOSEN, "eq1", seq_len=16))
    blocks = decoder_layers(lm.hf)
    assert grafted(lm.hf) == CHOSEN
    assert [type(b.self_attn).__name__ for b in blocks] == ["Qwen3Attention", "Eq1Attention", "Qwen3Attention",
                                                           "Eq1Attention"]
    assert [blocks[i].self_attn.mixer.k for i in CHOSEN] == [1, 2]  # rot's jumps 2^0, 2^1 on the 16-cube
    assert _trainable_layers(lm) == set(CHOSEN)
    assert lm.n_trainable() == 2 * 2 * 32 * 32  # W_self and W_off of width 32, in 2 layers
    ids = torch.randint(0, 257, (2, 16), generator=torch.Generator().manual_seed(1))
    logits = lm(ids)
    assert logits.shape == (2, 16, 257) and torch.isfinite(logits).all()
    logits.float().logsumexp(-1).mean().backward()
    with_grad = {n for n, p in lm.named_parameters() if p.grad is not None and p.grad.abs().sum() > 0}
    assert with_grad and all(any(f"layers.{i}.self_attn.mixer." in n for i in CHOSEN) for n in with_grad)


def test_the_control_keeps_the_same_attention_layers_and_trains_only_them(tiny_qwen3):
    base = _load(tiny_qwen3)
    before = {n: p.clone() for n, p in base.named_parameters()}
    lm = GraftedLM(graft(base, CHOSEN, "attention", seq_len=16))
    assert grafted(lm.hf) == [] and _trainable_layers(lm) == set(CHOSEN)
    assert all(torch.equal(p, before[n]) for n, p in lm.hf.named_parameters())  # unchanged, only unfrozen
    kinds = {n.split("self_attn.")[1].split(".")[0] for n, p in lm.named_parameters() if p.requires_grad}
    assert kinds == {"q_proj", "k_proj", "v_proj", "o_proj", "q_norm", "k_norm"}


def test_eq1_starts_as_the_attention_it_replaces_at_a_position_that_hears_no_partner(tiny_qwen3):
    """Position 0 attends only to itself: attention gives W_o W_v x_0 there, and so does the
    Eq. (1) layer initialised from it (init=self), whose partner term is 0 at i = 0."""
    base = _load(tiny_qwen3)
    x = torch.randn(1, 8, 32, generator=torch.Generator().manual_seed(2))
    rotary = base.model.rotary_emb(x, torch.arange(8)[None])
    attn = decoder_layers(base)[1].self_attn
    want, _ = attn(x, position_embeddings=rotary, attention_mask=None)
    graft(base, [1], "eq1", seq_len=8)
    got, weights = decoder_layers(base)[1].self_attn(x, position_embeddings=rotary, attention_mask=None)
    assert weights is None and torch.allclose(got[:, 0], want[:, 0], atol=1e-5)
    assert not torch.allclose(got[:, 1:], want[:, 1:], atol=1e-3)  # elsewhere attention also hears the past
    zero = graft(_load(tiny_qwen3), [1], "eq1", seq_len=8, init="zero")
    assert torch.count_nonzero(decoder_layers(zero)[1].self_attn(x)[0]) == 0


def test_eq1_refuses_a_key_value_cache_and_graft_refuses_bad_layers(tiny_qwen3):
    layer = graft(_load(tiny_qwen3), [0], "eq1", seq_len=8).model.layers[0].self_attn
    assert isinstance(layer, Eq1Attention)
    with pytest.raises(ValueError, match="use_cache"):
        layer(torch.zeros(1, 4, 32), past_key_values=object())
    with pytest.raises(ValueError, match=r"task.layers: \[0, 4\]; allowed: distinct indices in \[0, 3\]"):
        graft(_load(tiny_qwen3), [0, 4], "eq1", seq_len=8)
    with pytest.raises(ValueError, match="task.replace"):
        graft(_load(tiny_qwen3), [0], "mlp", seq_len=8)


def test_which_layers_a_graft_changes():
    assert graft_layers("spread", 2, 28) == [7, 21]
    assert graft_layers("spread", 12, 28) == [1, 3, 5, 8, 10, 12, 15, 17, 19, 22, 24, 26]
    assert graft_layers("spread", 28, 28) == list(range(28))
    assert graft_layers("first", 3, 28) == [0, 1, 2] and graft_layers("last", 2, 28) == [26, 27]
    assert graft_layers([4, 9], 2, 28) == [4, 9] and graft_layers("spread", 0, 28) == []


class _Corpus:
    fingerprint, domains = "feedc0ffee00", ("drama",)

    def documents(self, domain, split):
        yield from ["ab", "abc"]


def test_a_vocabulary_above_65536_ids_is_cached_as_uint32(tmp_path):
    """Qwen3's tokenizer has 151,669 ids: its embedded-corpus caches hold uint32, read back exactly."""
    big = [70_000, 151_668, 65_536]
    tok = Tokenizer("hf", "wide", 151_669, lambda texts: [big[:len(t)] for t in texts], lambda ids: "", eos_id=3)
    s = token_stream(_Corpus(), tok, "drama", "train", tmp_path)
    assert s.path.suffix == ".u32" and s.path.stat().st_size == 4 * s.n_tokens
    assert s.ids.dtype == np.uint32 and s.ids.tolist() == [70_000, 151_668, 3, 70_000, 151_668, 65_536, 3]
    again = token_stream(_Corpus(), tok, "drama", "train", tmp_path)  # the cache verifies: not rebuilt as damaged
    assert again.ids.tolist() == s.ids.tolist()


def test_training_windows_read_uint32_files(tmp_path):
    from fibexp.data.datamodule import RandomWindows

    path = tmp_path / "drama.train.u32"
    (np.arange(100, dtype=np.uint32) + 70_000).tofile(path)  # token i is 70,000 + i
    x, y = next(iter(RandomWindows([[(path, 100)]], [1.0], seq_len=8, batch_size=2, seed=0)))
    assert x.min() >= 70_000 and torch.equal(y[:, :-1], x[:, 1:]) and torch.equal(x[:, 1:] - x[:, :-1], torch.ones(2, 7, dtype=torch.int64))


def test_a_hub_name_is_read_from_the_local_hugging_face_cache_without_a_download(tiny_qwen3, tmp_path, monkeypatch):
    """task.model=owner/name works offline once the model sits in the HF cache: its config, weights
    and tokenizer are found there; a name not in the cache is refused by task.model."""
    import shutil

    from huggingface_hub import constants

    from fibexp.data.tokenizer import _load_pretrained
    from fibexp.errors import Refusal
    from fibexp.tasks.graft.config import pretrained_config

    repo = tmp_path / "hub" / "models--fibexp-test--tiny-qwen3"
    shutil.copytree(tiny_qwen3, repo / "snapshots" / "0123abcd")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0123abcd")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert pretrained_config("fibexp-test/tiny-qwen3")["num_hidden_layers"] == 4
    tok, _ = _load_pretrained("hf:fibexp-test/tiny-qwen3", None, "fibexp-test/tiny-qwen3/tokenizer.json", None)
    assert tok.get_vocab_size() == 257
    hf = AutoModelForCausalLM.from_pretrained("fibexp-test/tiny-qwen3", local_files_only=True,
                                              cache_dir=str(tmp_path / "hub"))
    assert len(decoder_layers(hf)) == 4
    with pytest.raises(Refusal, match=r"^task.model: fibexp-test/absent \(cannot be loaded offline"):
        pretrained_config("fibexp-test/absent")
