"""Decode tokens/s and cache bytes at 1x / 4x / 16x the training length, dense vs sparse, side by
side (`fibexp-bench decode [--out DIR]`: DIR/decode.json). Models at scale=cpu's size
(5 layers, width 128, 4 heads, T = 64, vocabulary 512), random weights (speed and cache size do
not depend on training), fp32, one thread, batch 1, greedy."""
from __future__ import annotations

import json
import time
from pathlib import Path

import torch

from fibexp.deploy import decode
from fibexp.model.lm import LM
from fibexp.model.spec import AttentionSpec

CELLS = {
    "dense": dict(kind="dense"),
    "fib stagger W4": dict(kind="sparse", schedule="stagger", window=4),
    "hypercube rot": dict(kind="hypercube", schedule="rot"),
    "hypercube hybrid": dict(kind="hypercube", schedule="hybrid"),
}
T = 64


def measure(cell: str, lengths=(T, 4 * T, 16 * T)) -> dict:
    torch.manual_seed(0)
    model = LM(5, 128, 4, 4, 512, T, AttentionSpec(**CELLS[cell])).eval()
    dec = decode.Decoder(model, max(lengths))
    out, done, start, ids = {}, 0, time.perf_counter(), torch.zeros(1, 1, dtype=torch.long)
    last_t, last_done = start, 0
    for length in lengths:
        while done < length:
            logits = dec.feed(ids)
            ids = logits.argmax(-1, keepdim=True)
            done += 1
        now = time.perf_counter()
        out[f"x{length // T}"] = {"tokens": length, "cache_bytes": dec.cache_bytes(),
                                  "tokens_per_s": round((done - last_done) / (now - last_t), 1)}
        last_t, last_done = now, done
    return out


def run(args) -> None:
    """Every cell at 1x, 4x and 16x: the printed table and `args.out`/decode.json."""
    torch.set_num_threads(1)
    results = {cell: measure(cell) for cell in CELLS}
    print(f"{'cell':18} " + "  ".join(f"{k:>24}" for k in ("1x (64)", "4x (256)", "16x (1024)")))
    print(f"{'':18} " + "  ".join(f"{'cache KiB':>12}{'tokens/s':>12}" for _ in range(3)))
    for cell, r in results.items():
        print(f"{cell:18} " + "  ".join(f"{v['cache_bytes'] / 1024:12.1f}{v['tokens_per_s']:12.1f}" for v in r.values()))
    print("tokens/s: mean over the tokens since the previous length (1x: tokens 1-64, 4x: 65-256, 16x: 257-1024)")
    out = Path(args.out) / "decode.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"T": T, "cells": results}, indent=1))
    print(f"wrote {out}")
