"""8-bit deployment of a trained LM (`fibexp-export --int8`, `eval.int8=true`): torch's own dynamic
quantization (`torch.ao.quantization.quantize_dynamic`) of every `nn.Linear` to int8 weights,
activations quantized per batch at run time. Embeddings and norms stay fp32, and so does an output
head tied to the input embedding (fibexp's LM multiplies by the embedding itself; a grafted Hugging
Face model's tied `lm_head` is an `nn.Linear` sharing that weight, and quantizing it would ship an
int8 copy of the vocabulary matrix beside the fp32 one). An untied head is an ordinary Linear and
is quantized. And the size of a model as its serialized state dict (what a deployment ships).

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
    from torch.ao.quantization import default_dynamic_qconfig, quantize_dynamic

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r".*torch\.ao\.quantization is deprecated", category=DeprecationWarning)
        warnings.filterwarnings("ignore", message=r"torch\.quantize_per_tensor.*are deprecated")
        q = copy.deepcopy(model).eval().cpu()  # deepcopy keeps a tied weight shared
        return quantize_dynamic(q, {name: default_dynamic_qconfig for name in quantized_linears(q)}, dtype=torch.qint8)


def quantized_linears(model: nn.Module) -> list[str]:
    """Names of the `nn.Linear` modules `int8` quantizes: all but those whose weight is an
    embedding's (a tied output head)."""
    embedded = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    return [name for name, m in model.named_modules() if type(m) is nn.Linear and id(m.weight) not in embedded]


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
