"""A language model against its int8 copy (claim B14): held-out ppl and bpc of both, measured by
the LM task's own evaluator (HeldoutPerplexity: contiguous windows at the training length, the
evaluated prefix of every held-out set), and the size ratio of their serialized states. One
measurement for both ways in: `fibexp-export RUN --int8` on a finished run, and `eval.int8=true`
at the end of training (so a sweep measures its cells without a second pass); for task=lm and
task=graft alike (a grafted Hugging Face model: what quantizes is fibexp.model.quantize's rule).

Metrics: int8/ppl_float/<set>, int8/ppl/<set>, int8/bpc_float/<set>, int8/bpc/<set> (bits per
character of the set's text, for BPE runs too: nats per token / ln 2 / characters per token),
int8/bytes_float, int8/bytes_int8, int8/size_ratio (float bytes / int8 bytes) and
int8/degradation (mean int8 bpc over the sets / mean float bpc - 1: the relative bpc increase)."""
from __future__ import annotations

import copy

import torch

from fibexp.evals.heldout import heldout
from fibexp.model import quantize


def measure(model: torch.nn.Module, dm, seq_len: int, batch_tokens: int,
            qmodel: torch.nn.Module | None = None) -> dict[str, float]:
    """The int8/... metrics of a float model and its quantized copy (made here unless given), both
    on CPU, where torch's dynamic int8 runs; `model` is left as it was."""
    model = copy.deepcopy(model).cpu().eval()
    qmodel = qmodel if qmodel is not None else quantize.int8(model)
    before, after = heldout(model, dm, seq_len, batch_tokens), heldout(qmodel, dm, seq_len, batch_tokens)
    out: dict[str, float] = {}
    for key in before:
        what, s = key.split("/")[1:]
        out[f"int8/{what}_float/{s}"], out[f"int8/{what}/{s}"] = before[key], after[key]
    fb = [v for k, v in before.items() if k.startswith("val/bpc/")]
    qb = [v for k, v in after.items() if k.startswith("val/bpc/")]
    fbytes, qbytes = quantize.state_bytes(model), quantize.state_bytes(qmodel)
    out |= {"int8/bytes_float": float(fbytes), "int8/bytes_int8": float(qbytes), "int8/size_ratio": fbytes / qbytes,
            "int8/degradation": (sum(qb) / len(qb)) / (sum(fb) / len(fb)) - 1}
    return out
