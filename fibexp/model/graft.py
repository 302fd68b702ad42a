"""Paper B §8: Eq. (1) layers grafted into a pretrained Hugging Face causal LM.

`graft` replaces the attention module of chosen decoder layers by fibexp's own Eq. (1) layer
(`ShiftMixer`: y_i = W_self x_i + W_off x_j, the causal cube jump j = i - k where bit log2 k of
i is set, or the near shift j = i - 1), wrapped to the attention module's call and return, then
freezes every weight except those of the chosen layers. The control (`replace="attention"`)
keeps the chosen attention layers as they are and trains only them. Knows nothing of configs
or tasks: `fibexp.tasks.graft.task` builds it from a run's config."""
from __future__ import annotations

from typing import Sequence

import torch
from torch import nn

from fibexp.errors import Refusal
from fibexp.model.mixers import ShiftMixer
from fibexp.science import wiring

REPLACE = ("eq1", "attention")  # what the chosen layers become: Eq. (1) layers, or stay attention (the control)
INITS = ("self", "zero")  # Eq. (1)'s start: W_self = W_o W_v (attention attending to itself only), or 0


def decoder_layers(hf: nn.Module) -> nn.ModuleList:
    """The decoder blocks of a transformers causal LM whose blocks hold `self_attn` (Qwen, Llama,
    Mistral, ...: `model.layers`)."""
    layers = getattr(getattr(hf, "model", None), "layers", None)
    if not isinstance(layers, nn.ModuleList) or not all(hasattr(b, "self_attn") for b in layers):
        raise Refusal("task.model", f"{type(hf).__name__} (no model.layers[i].self_attn)",
                      "a decoder fibexp can graft (Qwen, Llama, Mistral, ...)")
    return layers


class Eq1Attention(nn.Module):
    """An Eq. (1) layer in the seat of a transformers attention module: the same call (hidden
    states [B, T, D] and the attention's keyword arguments, which it does not need) and the same
    return, (output, no attention weights). It keeps no key/value cache: positions are those of
    the window it is given, so it runs with use_cache=False."""

    def __init__(self, mixer: ShiftMixer, layer_idx: int):
        super().__init__()
        self.mixer, self.layer_idx = mixer, layer_idx

    def forward(self, hidden_states: torch.Tensor, position_embeddings=None, attention_mask=None,
                past_key_values=None, **kwargs):
        if past_key_values is not None:
            raise Refusal("use_cache", True, "False for a grafted model (an Eq. (1) layer keeps no "
                                             "key/value cache)")
        return self.mixer(hidden_states), None


def _eq1_from(attn: nn.Module, jump, d_model: int, init: str) -> ShiftMixer:
    """The Eq. (1) layer replacing `attn`, on its device and in its dtype. init `self`: W_self is
    the attention's value-output path W_o W_v (heads repeated over GQA groups), what the layer
    computes when every query attends to itself only; W_off starts at 0. `zero`: both 0 (the
    block starts without a mixer)."""
    weight = attn.o_proj.weight
    mixer = ShiftMixer(d_model, 1 if jump == wiring.NEAR else int(jump), causal=True, near=jump == wiring.NEAR)
    mixer.to(device=weight.device, dtype=weight.dtype)
    with torch.no_grad():
        mixer.off_map.weight.zero_()
        if init == "zero":
            mixer.self_map.weight.zero_()
        else:
            v = attn.v_proj.weight  # [Hkv * D, d_model]
            head_dim = attn.head_dim
            groups = weight.shape[1] // v.shape[0]
            per_head = v.view(-1, head_dim, v.shape[1]).repeat_interleave(groups, dim=0).reshape(-1, v.shape[1])
            mixer.self_map.weight.copy_(weight @ per_head)
    return mixer


def graft(hf: nn.Module, layers: Sequence[int], replace: str, seq_len: int, schedule: str = "rot",
          init: str = "self") -> nn.Module:
    """Replace (eq1) or keep (attention) the attention of `layers`, freeze everything else; the
    i-th chosen layer takes jump i of `schedule`'s plan at the training length `seq_len`
    (`wiring.layer_plan`; rot: 1, 2, 4, ...). Returns `hf`, changed in place."""
    if replace not in REPLACE:
        raise Refusal("task.replace", repr(replace), ", ".join(REPLACE))
    if init not in INITS:
        raise Refusal("task.init", repr(init), ", ".join(INITS))
    blocks = decoder_layers(hf)
    if any(not 0 <= i < len(blocks) for i in layers) or len(set(layers)) != len(layers):
        raise Refusal("task.layers", list(layers), f"distinct indices in [0, {len(blocks) - 1}]")
    hf.requires_grad_(False)
    plan = wiring.layer_plan(schedule, len(layers), seq_len) if layers else []
    d_model = hf.config.hidden_size
    for i, jump in zip(layers, plan):
        block = blocks[i]
        if replace == "eq1":
            block.self_attn = Eq1Attention(_eq1_from(block.self_attn, jump, d_model, init), i)
        block.self_attn.requires_grad_(True)
    return hf


def grafted(hf: nn.Module) -> list[int]:
    """Indices of the decoder layers whose attention is an Eq. (1) layer."""
    return [i for i, b in enumerate(decoder_layers(hf)) if isinstance(b.self_attn, Eq1Attention)]


class GraftedLM(nn.Module):
    """A transformers causal LM as the rest of fibexp sees a model: ids [B, T] -> logits
    [B, T, V] (no cache), alphas() (no offset patterns) and n_params()."""

    def __init__(self, hf: nn.Module):
        super().__init__()
        self.hf = hf

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.hf(input_ids=ids, use_cache=False).logits

    def alphas(self) -> list[float | None]:
        return []

    def n_params(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def n_trainable(self) -> int:
        return sum(p.numel() for p in self.parameters() if p.requires_grad)
