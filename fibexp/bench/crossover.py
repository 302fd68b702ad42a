"""`fibexp-bench model`'s crossover: where one static attention layer's gather path starts to
beat its mask path, the switch length attention.impl=auto takes on CPU
(fibexp.model.mixers.CPU_MASK_BELOW). One child process per preset scans the lengths; the
parent finds the crossover and says whether CPU_MASK_BELOW matches it."""
from __future__ import annotations

import statistics
import time

import torch

from fibexp.bench import harness
from fibexp.bench.attention import stagger_alpha
from fibexp.bench.cases import MODEL_PRESETS
from fibexp.model import mixers
from fibexp.model.layers import rope_tables

CROSSOVER_LENGTHS = (64, 128, 256, 512, 1024, 2048)
QUICK_CROSSOVER_LENGTHS = (32, 64)


# ---------------------------------------------------------------------------- child process

def crossover_scan(preset: str, lengths, tokens: int, repeats: int, threads: int, device: str) -> list[dict]:
    """Gather vs mask path of one static attention layer at each T (fibexp.bench.whole_model.MODEL_METHOD['crossover']);
    the layer is the attention benchmark's (same stagger alpha)."""
    torch.set_num_threads(threads)
    device = torch.device(device)
    clock = harness.Clock(device)
    p = MODEL_PRESETS[preset]
    d, h, hkv = p["d_model"], p["n_heads"], p["n_kv_heads"]
    alpha = stagger_alpha()
    out = []
    for t in lengths:
        b = max(1, tokens // t)
        torch.manual_seed(0)
        gen = torch.Generator().manual_seed(2)
        x = torch.randn(b, t, d, generator=gen).to(device).requires_grad_()
        g = torch.randn(b, t, d, generator=gen).to(device)
        cos, sin = rope_tables(t, d // h, 1e4, device)
        base = mixers.Attention(d, h, hkv).to(device)
        train, infer = {}, {}
        impls = (mixers.Impl.gather, mixers.Impl.mask) + ((mixers.Impl.flex,) if device.type == "cuda" else ())
        for impl in impls:
            layer = mixers.Attention(d, h, hkv, mixers.FixedOffsets(8, mixers.Base.fib, alpha, impl)).to(device)
            layer.load_state_dict(base.state_dict(), strict=False)

            def fb(layer=layer):
                x.grad = None
                layer(x, cos, sin).backward(g)

            def fwd(layer=layer):
                with torch.inference_mode():
                    layer(x, cos, sin)

            fb(), fwd()
            train[impl.value], infer[impl.value] = fb, fwd
        tr, inf = harness.rounds(train, repeats, clock), harness.rounds(infer, repeats, clock)
        out.append({"T": t, "batch": b,
                    **{f"{k}_train_ms": statistics.median(v["wall"]) for k, v in tr.items()},
                    **{f"{k}_infer_ms": statistics.median(v["wall"]) for k, v in inf.items()},
                    **{f"{k}_train_cpu_ms": statistics.median(v["cpu"]) for k, v in tr.items()}})
    return out


# ---------------------------------------------------------------------------- parent

def crossover_length(points: list[dict], mode: str) -> int | None:
    """Shortest scanned T from which the gather beats the mask path at every longer scanned T
    (None: the mask path wins at the longest)."""
    first = None
    for pt in sorted(points, key=lambda p: -p["T"]):
        if pt[f"gather_{mode}_ms"] < pt[f"mask_{mode}_ms"]:
            first = pt["T"]
        else:
            break
    return first


def scan_crossovers(presets, scan, tokens, repeats, threads, device, timeout) -> dict:
    """One `_crossover` process per preset; where the gather starts to win, for training and inference."""
    crossover = {}
    for preset in presets:
        t0 = time.time()
        r = harness.run_json_child(["_crossover", "--preset", preset, "--lengths", *map(str, scan), "--tokens",
                                    str(tokens), "--repeats", str(repeats), "--threads", str(threads),
                                    "--device", device], timeout)
        if r["status"] == "ok":
            pts = r["points"]
            crossover[preset] = {"points": pts, "train": crossover_length(pts, "train"),
                                 "infer": crossover_length(pts, "infer")}
            print(f"  crossover {preset}: gather beats mask from T={crossover[preset]['train']} (training), "
                  f"T={crossover[preset]['infer']} (inference)  ({time.time() - t0:.0f} s)", flush=True)
        else:
            crossover[preset] = r
            print(f"  crossover {preset}: {r['reason']}", flush=True)
    return crossover


def print_crossover(crossover: dict, device: str, quick: bool) -> None:
    """The scanned points, and whether mixers.CPU_MASK_BELOW matches what this run measured."""
    for preset, c in crossover.items():
        if "points" not in c:
            continue
        print(f"crossover {preset} (one layer, ms fwd+bwd / forward): " + ", ".join(
            f"T={p['T']}: gather {p['gather_train_ms']:.1f}/{p['gather_infer_ms']:.1f} mask "
            f"{p['mask_train_ms']:.1f}/{p['mask_infer_ms']:.1f}" for p in c["points"]))
    tiny = crossover.get("tiny", {})
    print(f"attention.impl=auto on CPU uses the mask path below T={mixers.CPU_MASK_BELOW} "
          f"(fibexp.model.mixers.CPU_MASK_BELOW); this run measured the crossover at T={tiny.get('train')} "
          "(tiny, training)")
    if device == "cpu" and not quick and tiny.get("train") not in (None, mixers.CPU_MASK_BELOW):
        print(f"NOTE: set fibexp.model.mixers.CPU_MASK_BELOW = {tiny['train']} if this machine is the one to tune for "
              "(and the run was quiet)")


