"""8-bit deployment of a trained LM (`fibexp-export --int8`): torch's own dynamic quantization
(`torch.ao.quantization.quantize_dynamic`) of every `nn.Linear` to int8 weights, activations
quantized per batch at run time; the tied embedding/head and the norms stay fp32. And the size
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


def int8(model: nn.Module) -> nn.Module:
    """A quantized copy of `model` (eval mode, CPU; `model` is left as it was)."""
    from torch.ao.quantization import quantize_dynamic

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r".*torch\.ao\.quantization is deprecated", category=DeprecationWarning)
        warnings.filterwarnings("ignore", message=r"torch\.quantize_per_tensor.*are deprecated")
        return quantize_dynamic(copy.deepcopy(model).eval().cpu(), {nn.Linear}, dtype=torch.qint8)


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
