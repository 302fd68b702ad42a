"""A trained model as ONNX, checked against PyTorch in onnxruntime (`fibexp-export`).

Paper B's point is that static wiring needs no custom kernels: its hypercube models (local,
fixed, rot, mixa, dense; causal or XOR) export with standard ONNX operators, and so do fixed
offset attention (fixed, stagger, coprime: an index gather), hybrid and dense attention. Learned
alpha does not: its offsets are read from a weight at run time (data-dependent shapes).

torch 2.13's default exporter (`dynamo=True`, built on torch.export and onnxscript) is used: the
older TorchScript exporter has no translation for `aten::rms_norm`, which every block uses.
Input `ids` [batch, seq_len] (int64; batch is dynamic, the length is the training length);
output `logits` [batch, seq_len, vocab]."""
from __future__ import annotations

import logging
import warnings
from pathlib import Path

import torch

from fibexp.errors import Refusal

TOLERANCE = 1e-4  # max |logit difference| accepted between onnxruntime and PyTorch (fp32)
# torch.onnx lists optional torchvision ops it skips; not ours to act on.
logging.getLogger("torch.onnx._internal.exporter._registration").setLevel(logging.ERROR)


class ExportError(ValueError):
    """The export itself failed (the `export` extra is missing, or torch.onnx.export raised): not
    a refusal of the input, which is a Refusal naming the key (a learned schedule, a growing cache)."""


def check_exportable(model: torch.nn.Module) -> None:
    spec = getattr(model, "spec", None)
    if spec is not None and spec.kind.value == "sparse" and spec.schedule == "learned":
        raise Refusal("attention.schedule", "learned", "fixed, stagger, coprime for ONNX export (learned alpha "
                      "picks its offsets from a weight at run time)")


def requirements():
    try:
        import onnx
        import onnxruntime
        import onnxscript  # noqa: F401  (torch's exporter needs it)
    except ImportError as e:
        raise ExportError(f"ONNX export needs the `export` extra ({e.name} is missing); "
                          "install it with: pip install -e '.[export]'") from None
    return onnx, onnxruntime


def export_model(model: torch.nn.Module, out: Path, seq_len: int) -> Path:
    """Write `model` (eval mode, CPU) to `out` as one self-contained ONNX file."""
    requirements()
    check_exportable(model)
    model = model.eval().cpu()
    example = torch.zeros(2, seq_len, dtype=torch.long)
    out.parent.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings():
        # torch.export notes that cached offset tables become constants: they are, by design
        warnings.filterwarnings("ignore", message="The tensor attributes .* were assigned during export")
        warnings.filterwarnings("ignore", message=r"`isinstance\(treespec, LeafSpec\)` is deprecated")
        try:
            torch.onnx.export(model, (example,), str(out), dynamo=True, external_data=False, verbose=False,
                              input_names=["ids"], output_names=["logits"],
                              dynamic_shapes={"ids": {0: torch.export.Dim("batch")}})
        except Exception as e:
            raise ExportError(f"torch.onnx.export failed: {type(e).__name__}: {str(e).splitlines()[0][:200]}") from None
    return out


def verify(model: torch.nn.Module, path: Path, seq_len: int, vocab_size: int, batch: int = 3, seed: int = 0):
    """Run the ONNX file in onnxruntime and PyTorch on the same random token ids (a batch size
    other than the export's, so the dynamic axis is exercised). Returns (max |deviation|, ops)."""
    onnx, ort = requirements()
    ids = torch.randint(0, vocab_size, (batch, seq_len), generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        expected = model.eval()(ids).numpy()
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    got = session.run(["logits"], {"ids": ids.numpy()})[0]
    ops = sorted({node.op_type for node in onnx.load(str(path)).graph.node})
    return float(abs(got - expected).max()), ops


def export_decode(model: torch.nn.Module, out: Path, max_len: int) -> tuple[Path, list[str]]:
    """The one-token step (fibexp.deploy.decode.StepModel) as ONNX: inputs ids [1, 1], pos []
    (int64) and cache0..cacheN, outputs logits [1, 1, vocab] and cache0_out..cacheN_out (the
    same shapes: feed them back). Only constant caches: dense attention's grows, and mixers
    without a constant-cache step are refused by layer."""
    requirements()
    from fibexp.deploy import decode

    step = decode.StepModel(model.eval().cpu(), max_len).eval()
    growing = [f"layer {l}: dense attention (its KV cache grows)" for l, s in enumerate(step.steps)
               if type(s) is decode._KVStep]
    why = step.length_dependent + step.fallbacks + growing
    if why:
        raise Refusal("--decode", why[0], "layers with a constant cache (Eq. (1) shift layers, fixed-offset "
                      "attention with fib, or pow2 with alpha >= 1)")
    caches = step.init_caches(1, fixed=True)
    names = [f"cache{i}" for i in range(len(caches))]
    out.parent.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore")
        try:
            torch.onnx.export(step, (torch.zeros(1, 1, dtype=torch.long), torch.tensor(0), *caches), str(out),
                              dynamo=True, external_data=False, verbose=False,
                              input_names=["ids", "pos", *names], output_names=["logits", *[n + "_out" for n in names]])
        except Exception as e:
            raise ExportError(f"torch.onnx.export failed: {type(e).__name__}: {str(e).splitlines()[0][:200]}") from None
    return out, names


def verify_decode(model: torch.nn.Module, path: Path, names: list[str], vocab_size: int, max_len: int,
                  steps: int = 64, seed: int = 0) -> tuple[float, list[str]]:
    """A `steps`-token rollout in onnxruntime, cache fed back each step, against PyTorch's full
    forward over the same ids. `max_len`: the graph's, which sizes its caches (a Fibonacci layer
    keeps every offset below it). Returns (max |deviation| of the logits, operators used)."""
    onnx, ort = requirements()
    import numpy as np

    from fibexp.deploy import decode

    step = decode.StepModel(model.eval(), max_len, check=False)
    ids = torch.randint(0, vocab_size, (1, steps), generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        expected = model(ids)[0].numpy()
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    caches = [c.numpy() for c in step.init_caches(1, fixed=True)]
    worst = 0.0
    for i in range(steps):
        out = session.run(None, {"ids": ids[:, i:i + 1].numpy(), "pos": np.array(i, dtype=np.int64),
                                 **dict(zip(names, caches))})
        caches = out[1:]
        worst = max(worst, float(np.abs(out[0][0, -1] - expected[i]).max()))
    ops = sorted({node.op_type for node in onnx.load(str(path)).graph.node})
    return worst, ops
