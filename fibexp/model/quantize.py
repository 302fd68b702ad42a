"""8-bit deployment of a trained LM (`fibexp-export --int8`, `eval.int8=true`): torch's own dynamic
quantization (`torch.ao.quantization.quantize_dynamic`) of every `nn.Linear` to int8 weights,
activations quantized per batch at run time, and every `nn.Embedding` to int8 weights per row
(`Int8Embedding`: one symmetric scale per vocabulary row; fibexp's own, because torch's quantized
Embedding has no weight tensor for a tied head to multiply by). Norms stay fp32.

A head tied to the input embedding: fibexp's LM multiplies by the embedding's weight itself, so
its head reads the same int8 rows. A grafted Hugging Face model's tied `lm_head` is an `nn.Linear`
sharing that weight; `quantize_dynamic` quantizes it like any Linear (its own int8 copy beside
the int8 rows), and that is the arithmetic behind paper B's size figure: for
Qwen3-0.6B (155.6M-weight tied embedding, 440.4M Linear weights) fp32 -> int8 that way is
3.17x smaller, with one shared int8 matrix 4.0x, with the embedding left fp32 2.2x. And the size
of a model as its serialized state dict (what a deployment ships).

torch 2.13 marks `torch.ao.quantization` deprecated in favour of the separate torchao package
(not a fibexp dependency); the eager `quantize_dynamic` still ships and is what runs here, with
its deprecation warnings silenced."""
from __future__ import annotations

import copy
import io
import warnings

import torch
from torch import nn
from torch.nn import functional as F


class Int8Embedding(nn.Module):
    """An embedding held as int8 rows with one fp32 scale each (symmetric: row / scale rounded into
    [-127, 127], scale = the row's largest |weight| / 127), so every weight is within scale / 2 of
    the float one. `weight` is the dequantized matrix, for a head that multiplies by it."""

    def __init__(self, emb: nn.Embedding):
        super().__init__()
        w = emb.weight.detach().float()
        scale = (w.abs().amax(dim=1) / 127).clamp_min(torch.finfo(torch.float32).tiny)
        self.register_buffer("qweight", torch.round(w / scale[:, None]).clamp(-127, 127).to(torch.int8))
        self.register_buffer("scale", scale)

    @property
    def weight(self) -> torch.Tensor:
        return self.qweight.float() * self.scale[:, None]

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return F.embedding(ids, self.qweight).float() * self.scale[ids].unsqueeze(-1)


def int8(model: nn.Module) -> nn.Module:
    """A quantized copy of `model` (eval mode, CPU; `model` is left as it was)."""
    from torch.ao.quantization import default_dynamic_qconfig, quantize_dynamic

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r".*torch\.ao\.quantization is deprecated", category=DeprecationWarning)
        warnings.filterwarnings("ignore", message=r"torch\.quantize_per_tensor.*are deprecated")
        q = copy.deepcopy(model).eval().cpu()  # deepcopy keeps a tied weight shared
        linears = quantized_linears(q)
        q = quantize_dynamic(q, {name: default_dynamic_qconfig for name in linears}, dtype=torch.qint8)
    for name, m in list(q.named_modules()):
        if type(m) is nn.Embedding:
            q.set_submodule(name, Int8Embedding(m))
    return q


def quantized_linears(model: nn.Module) -> list[str]:
    """Names of the `nn.Linear` modules `int8` quantizes: every one, a head tied to the embedding
    included (its own int8 copy)."""
    return [name for name, m in model.named_modules() if type(m) is nn.Linear]


def state_bytes(model: nn.Module) -> int:
    """Bytes of `torch.save(model.state_dict())` (quantized modules save packed int8 weights)."""
    buf = io.BytesIO()
    save(model, buf)
    return buf.tell()


def save(qmodel: nn.Module, out) -> None:
    """The int8 state dict, as `torch.save` writes it (read back with `load`)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.save(qmodel.state_dict(), out)


def load(model: nn.Module, path) -> nn.Module:
    """`model`'s architecture quantized, with the int8 state saved at `path` (read weights-only)."""
    q = int8(model)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="TypedStorage is deprecated")
        q.load_state_dict(torch.load(path, weights_only=True))
    return q
