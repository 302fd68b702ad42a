"""What a model costs, from its config alone (no torch): its parameters, counted as
`fibexp.model.lm.LM` builds them, and the analytic training FLOPs per token, so a sweep can be
priced before anything is built, at the peak of the GPU it names (`GPUS`).

Training FLOPs per token = 6 x (the non-embedding parameters + the output head, which fibexp's LM
computes at every position: its tied embedding used as a matmul) + 3 x the forward token-mixing
term (the forward pass, and a backward pass of twice its cost). The mixing term counts what
scales with the keys each query reaches, at the training length T, averaged over positions:
- attention (dense, and hybrid's attention layers): QK and AV, 4 x d_model FLOPs per key, over
  the causal keys ((T + 1) / 2 on average) or all T (non-causal);
- offset attention (paper A): the same 4 x d_model per attended distance that fits before the
  query (the window and the rungs; learned alpha gathers both neighbour rows of every rung, at
  its starting alpha);
- Eq. (1) jump and near layers (paper B): nothing beyond their two weight matrices (the partner
  term W_off x_j is one matmul per position, in the 6 x parameters);
- the `dense` mixer: its distance-weighted mixing, 2 x d_model per linked pair;
- the dynamics variants: per force step the pairwise distances and the pull (2 x coord_dim per
  pair each), the final coupling's distances and its readout (2 x d_model per pair), and the
  force law's extra applications beyond the one the parameters count.
"""
from __future__ import annotations

import math
from typing import Mapping

from fibexp.errors import refuse
from fibexp.science import patterns, wiring

# Dense (no sparsity) peak tensor throughput of the 16-bit formats training uses, from each vendor's datasheet.
GPUS: dict[str, tuple[str, float]] = {
    "h100-sxm": ("NVIDIA H100 SXM, bf16 dense peak 989 TFLOP/s", 989e12),
    "h100-pcie": ("NVIDIA H100 PCIe, bf16 dense peak 756 TFLOP/s", 756e12),
    "h200": ("NVIDIA H200 SXM, bf16 dense peak 989 TFLOP/s", 989e12),
    "a100": ("NVIDIA A100 SXM, bf16 dense peak 312 TFLOP/s", 312e12),
    "l40s": ("NVIDIA L40S, bf16 dense peak 362 TFLOP/s", 362e12),
    "rtx3090": ("NVIDIA RTX 3090, bf16 dense peak 71 TFLOP/s (fp32 accumulate)", 71e12),
}
DEFAULT_GPU, DEFAULT_MFU = "h100-sxm", 0.3


def check_pricing(gpu: str, mfu: float) -> None:
    """Refuse a GPU not in `GPUS`, or a model FLOPs utilisation outside (0, 1]."""
    if gpu not in GPUS:
        refuse("--gpu", gpu, ", ".join(GPUS))
    if not 0 < mfu <= 1:
        refuse("--mfu", mfu, "0 < mfu <= 1 (the share of the peak a training step reaches)")

OFFSETS, DYNAMICS = "offsets", "dynamics"  # layer kinds beside wiring's (jumps, near, attn, dense)


def ffn_width(model: Mapping) -> int:
    """SwiGLU width: model.ffn_hidden, else ceil(8/3 d_model) (fibexp.model.layers.ffn_hidden)."""
    return int(model.get("ffn_hidden") or math.ceil(8 * int(model["d_model"]) / 3))


def layers(model: Mapping, attention: Mapping) -> list:
    """What mixes tokens at each layer: "attn", OFFSETS, DYNAMICS, "dense", "near" or a cube jump."""
    n, kind = int(model["n_layers"]), str(attention["kind"])
    if kind == "dense":
        return ["attn"] * n
    if kind == "sparse":
        return [OFFSETS] * n
    if kind == "dynamics":
        return [DYNAMICS] * n
    hybrid = attention.get("hybrid_layers")
    return wiring.layer_plan(str(attention["schedule"]), n, int(model["seq_len"]),
                             None if hybrid is None else [int(h) for h in hybrid], str(attention.get("order", "rot")))


def _attention_weights(model: Mapping) -> int:
    d, h, kv = int(model["d_model"]), int(model["n_heads"]), int(model["n_kv_heads"])
    return 2 * d * d + 2 * d * kv * (d // h)  # q and o, k and v (grouped-query heads)


def n_params(model: Mapping, attention: Mapping) -> int:
    """Every parameter of the LM (`LM.n_params()`): the tied embedding, each block's two norms,
    mixer and SwiGLU, the final norm."""
    d, t = int(model["d_model"]), int(model["seq_len"])
    plan = layers(model, attention)
    total = int(model["vocab_size"]) * d + d + len(plan) * (2 * d + 3 * d * ffn_width(model))
    learned = attention.get("schedule") == "learned"
    for step in plan:
        if step in ("attn", OFFSETS):
            total += _attention_weights(model) + (step == OFFSETS and learned)
        elif step == DYNAMICS:
            c = int(attention.get("coord_dim", 48))
            total += d * c + c * c + 2 * d * d
        else:  # paper B's two maps, the dense mixer's weight per distance, the hierarchy's gate
            total += 2 * d * d + (2 * t - 1 if step == "dense" else 0)
            total += (d + 1) if attention.get("hierarchy") and step not in wiring.FULL else 0
    if attention.get("kind") == "hypercube" and attention.get("schedule") == "warp":
        total += t * wiring.cube_dims(t)  # the learned coordinates, one table for the model
    return total


def _keys(rows, t: int) -> float:
    """Mean over the T queries of the distances in `rows` that reach back to a position."""
    return sum(t - r for r in set(rows) if r < t) / t


def mixing_flops(model: Mapping, attention: Mapping) -> float:
    """Forward FLOPs per token of the token mixing beyond the weights, over every layer."""
    d, t, n = int(model["d_model"]), int(model["seq_len"]), int(model["n_layers"])
    causal = bool(attention.get("causal", True))
    pairs = (t + 1) / 2 if causal else float(t)
    window, base = int(attention.get("window", 8)), str(attention.get("base", "fib"))
    schedule = str(attention.get("schedule", "fixed"))
    if attention.get("kind") == "sparse":
        if schedule == "learned":
            starts = patterns.layer_alphas("stagger" if attention.get("alpha_init") == "stagger" else "learned", n)
        else:
            starts = patterns.layer_alphas(schedule, n)
    total = 0.0
    for layer, step in enumerate(layers(model, attention)):
        if step == "attn":
            total += 4 * d * pairs
        elif step == OFFSETS:
            a = starts[layer]
            if schedule == "learned":
                lows = [lo for _, lo, _ in patterns.interpolated_rungs(window, base, a, t)]
                rows = set(range(min(window, t - 1) + 1)) | set(lows) | {lo + 1 for lo in lows}
            else:
                rows = patterns.attended_distances(window, base, a, t)
            total += 4 * d * _keys(rows, t)
        elif step == "dense":
            total += 2 * d * pairs
        elif step == DYNAMICS:
            c, steps = int(attention.get("coord_dim", 48)), int(attention.get("steps", 1))
            total += pairs * ((2 * steps + 1) * 2 * c + 2 * d) + (steps - 1) * 2 * c * c
    return total


def non_embedding(model: Mapping, attention: Mapping) -> int:
    return n_params(model, attention) - int(model["vocab_size"]) * int(model["d_model"])


def train_flops_per_token(model: Mapping, attention: Mapping) -> float:
    """6 x (non-embedding parameters + the output head) + 3 x the forward mixing term."""
    head = int(model["vocab_size"]) * int(model["d_model"])  # the tied head: the embedding as a matmul
    return 6 * (non_embedding(model, attention) + head) + 3 * mixing_flops(model, attention)


def pretrained_params(conf: Mapping) -> tuple[int, int]:
    """(parameters, embedding parameters) of a Hugging Face decoder (Llama/Qwen layout) from its
    config.json: attention, SwiGLU MLP, two norms per layer (Qwen3 also normalises q and k per
    head), the final norm, and an output head unless it is tied to the embedding."""
    d, n, inner = int(conf["hidden_size"]), int(conf["num_hidden_layers"]), int(conf["intermediate_size"])
    h = int(conf["num_attention_heads"])
    kv = int(conf.get("num_key_value_heads") or h)
    hd = int(conf.get("head_dim") or d // h)
    v = int(conf["vocab_size"])
    per_layer = 2 * d * h * hd + 2 * d * kv * hd + 3 * d * inner + 2 * d + (2 * hd if conf.get("model_type") == "qwen3" else 0)
    head = 0 if conf.get("tie_word_embeddings", True) else v * d
    return v * d + n * per_layer + d + head, v * d


def pretrained_flops_per_token(conf: Mapping, seq_len: int) -> float:
    """Training FLOPs per token of a pretrained decoder at window seq_len, as if every weight
    trained (an upper bound where most are frozen): 6 x (its non-embedding parameters, head
    included) + 3 x causal attention's QK and AV."""
    total, embedding = pretrained_params(conf)
    tied = conf.get("tie_word_embeddings", True)
    h = int(conf["num_attention_heads"])
    hd = int(conf.get("head_dim") or int(conf["hidden_size"]) // h)
    head = embedding if tied else 0  # the tied head is computed too; an untied one is in `total`
    mixing = int(conf["num_hidden_layers"]) * 4 * h * hd * (seq_len + 1) / 2
    return 6 * (total - embedding + head) + 3 * mixing
