"""`fibexp-bench attention`: one attention layer, dense vs the paper's sparse paths.

Setup: B=1, 8 query heads, 2 KV heads, head dim 64, fp32, window W=8, fib base, alpha of
the middle layer (index 8) of a 16-layer `stagger` schedule
(`patterns.layer_alphas("stagger", 16)[8]` = 1.0333...). Four paths, side by side:

- dense:   F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True),
           q [B, 8, T, 64], k/v [B, 2, T, 64]
- gather:  kernels.gather_attention(q5, k, v, rows), q5 [B, 2, T, 4, 64],
           rows = patterns.attended_distances(8, "fib", alpha, T)
- mask:    kernels.mask_attention(q5, k, v, rows): SDPA with a dense boolean T x T mask
           (quadratic reference; skipped when its estimated peak exceeds --mask-limit-gib)
- learned: mixers.LearnedOffsets(8, Base.fib) with theta = logit(alpha - 0.5), so its alpha
           is the same (non-integral) stagger alpha: interpolated rows mixed by a small matrix;
           q [B, T, 8, 64], k/v [B, T, 2, 64] (the layout the projections give it).

Measurement, one FRESH Python process per (path, T) (`python -m fibexp.cli.bench _measure ...`),
so one path's allocator state never leaks into another's:

1. allocate the inputs (q, k, v with requires_grad, a fixed random contiguous upstream
   gradient of the output's shape); torch threads = the CPUs this process may use;
2. peak memory of forward+backward: warm up with one forward+backward, drop grads,
   gc.collect(), libc malloc_trim(0); read VmRSS from /proc/self/status; write "5" to
   /proc/self/clear_refs (resets the kernel's peak-RSS mark VmHWM to the current RSS); run
   forward + out.backward(grad) once; read VmHWM. peak = VmHWM - VmRSS_before (MiB): the
   resident memory the step added, including allocator slack, excluding the inputs.
   If clear_refs cannot be written (or does not reset VmHWM), fall back to
   ru_maxrss - VmRSS_before with NO warm-up before the step (ru_maxrss cannot be reset, so
   a warm-up would pollute it); the JSON says which method was used;
3. forward time: under torch.no_grad(), one warm-up, then the median of N repeats;
4. forward+backward time: forward, then out.backward(grad) with the fixed contiguous grad
   (never .sum().backward(): its stride-0 gradient makes bmm loop per batch), grads reset
   to None between repeats; median of N repeats (the two memory-step runs are its warm-up).

FLOPs are analytic (forward attention only; a multiply-add counts 2): dense causal
8 * T(T+1)/2 * D * 2 * 2 (QK^T and PV); gather/mask: 8 * sum over queries of the valid
attended columns * D * 2 * 2 (mask is counted by what it attends, although SDPA computes
every masked column too); learned: the same over its gathered rows (floor and floor+1 of
each rung, plus the window) plus the two [S x Ncol] mix matmuls for every query and head.

Machine load matters (the whole benchmark is memory-bound on 2 cores): the load average is
recorded at the start and the end.
"""
from __future__ import annotations

import json
import math
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from fibexp.bench import harness
from fibexp.bench.cases import FULL_LENGTHS, PATHS, QUICK_LENGTHS
from fibexp.model import kernels, mixers
from fibexp.science import patterns

B, H, HKV, D, W = 1, 8, 2, 64, 8
G = H // HKV
N_LAYERS, LAYER = 16, 8

METHOD = {
    "memory": "fresh process per (path, T); one warm-up forward+backward; gc.collect(); "
              "malloc_trim(0); VmRSS before; clear_refs=5 resets VmHWM; one forward + "
              "out.backward(grad); peak = VmHWM - VmRSS_before (MiB)",
    "memory_fallback": "if /proc/self/clear_refs is not writable: ru_maxrss - VmRSS_before, "
                       "no warm-up before the measured step",
    "time": "median of N repeats; forward under torch.no_grad() after one warm-up; "
            "forward + out.backward(fixed random contiguous grad), grads set to None between repeats",
    "flops": "analytic forward attention FLOPs, multiply-add = 2: QK^T and PV over valid "
             "attended columns per query and head (dense: causal T(T+1)/2); learned adds its "
             "two [S x Ncol] mix matmuls per query and head",
}


def stagger_alpha() -> float:
    """The alpha of a middle layer of the paper's stagger schedule: non-integral, so learned interpolates."""
    return patterns.layer_alphas("stagger", N_LAYERS)[LAYER]


# ---------------------------------------------------------------------------- geometry

def learned_geometry(alpha: float, t: int) -> tuple[list[int], int]:
    """(gathered rows, number of mixed columns) of LearnedOffsets at alpha, as it builds them."""
    kept = patterns.interpolated_rungs(W, "fib", alpha, t)
    near = list(range(min(W, t - 1) + 1))
    lows = [lo for _, lo, _ in kept]
    rows = sorted(set(near) | set(lows) | {lo + 1 for lo in lows})
    return rows, len(near) + len(kept)


def _valid_columns(rows, t: int) -> int:
    """Sum over query positions i < t of #{d in rows : d <= i}."""
    return sum(t - d for d in rows if d < t)


def attention_flops(path: str, t: int, alpha: float) -> int:
    per_col = D * 2 * 2  # QK^T and PV, multiply-add = 2 FLOPs
    if path == "dense":
        return B * H * (t * (t + 1) // 2) * per_col
    if path in ("gather", "mask"):
        return B * H * _valid_columns(patterns.attended_distances(W, "fib", alpha, t), t) * per_col
    if path == "learned":
        rows, ncol = learned_geometry(alpha, t)
        mix = 2 * len(rows) * ncol * 2  # scores @ mix and p @ mix.T
        return B * H * (_valid_columns(rows, t) * per_col + t * mix)
    raise ValueError(path)


def mask_estimate_mib(t: int) -> float:
    """Rough analytic peak of the boolean-mask path: building the mask holds two int64 [T, T]
    (rel and its clamp) and three bool [T, T]; SDPA then turns the bool mask into a float
    one (4 B). About 22 bytes per T^2 element; overridden by extrapolating a measured
    smaller length quadratically when one exists."""
    return 22 * t * t / harness.MIB


# ---------------------------------------------------------------------------- child process

def build_case(path: str, t: int, alpha: float, seed: int = 0):
    """(callable running the layer forward, list of leaf tensors, upstream grad)."""
    gen = torch.Generator().manual_seed(seed)
    k = torch.randn(B, HKV, t, D, generator=gen).requires_grad_()
    v = torch.randn(B, HKV, t, D, generator=gen).requires_grad_()
    if path == "dense":
        q = torch.randn(B, H, t, D, generator=gen).requires_grad_()

        def fwd():
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        leaves = [q, k, v]
    elif path == "learned":  # the mixer takes the projections' layout: q [B, T, H, D], k/v [B, T, Hkv, D]
        q = torch.randn(B, t, H, D, generator=gen).requires_grad_()
        k, v = (x.detach().transpose(1, 2).contiguous().requires_grad_() for x in (k, v))
        module = mixers.LearnedOffsets(W, mixers.Base.fib)
        with torch.no_grad():
            module.theta.fill_(math.log((alpha - 0.5) / (1.5 - alpha)))  # alpha = 0.5 + sigmoid(theta)
        if abs(float(module.alpha.detach()) - alpha) > 1e-6:
            raise RuntimeError(f"learned alpha {float(module.alpha)} != {alpha}")
        leaves = [q, k, v, module.theta]

        def fwd():
            return module(q, k, v)
    else:
        q = torch.randn(B, HKV, t, G, D, generator=gen).requires_grad_()
        leaves = [q, k, v]
        rows = torch.tensor(patterns.attended_distances(W, "fib", alpha, t))
        kernel = kernels.gather_attention if path == "gather" else kernels.mask_attention

        def fwd():
            return kernel(q, k, v, rows)
    with torch.no_grad():
        shape = fwd().shape
    grad = torch.randn(shape, generator=gen).contiguous()
    return fwd, leaves, grad


def measure(path: str, t: int, repeats: int, threads: int, alpha: float) -> dict:
    torch.set_num_threads(threads)
    fwd, leaves, grad = build_case(path, t, alpha)

    def clear():
        for x in leaves:
            x.grad = None

    def step():
        out = fwd()
        out.backward(grad)
        del out

    rss0 = harness.status_kib("VmRSS")
    method = "clear_refs"
    # peak memory of forward+backward
    step()  # warm-up: first-call allocations (thread pools, allocator arenas) are not the step's
    clear()
    harness.trim()
    rss_before = harness.status_kib("VmRSS")
    if harness.reset_peak():
        step()
        hwm = harness.status_kib("VmHWM")
        peak_mib = max(hwm - rss_before, 0) / 1024
    else:  # the peak mark cannot be reset: measure_child redoes the step first thing in a clean process
        method, hwm, peak_mib = "ru_maxrss", None, None
    clear()
    harness.trim()

    # forward time
    with torch.no_grad():
        fwd()
        fwd_ms = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            out = fwd()
            fwd_ms.append((time.perf_counter() - t0) * 1e3)
            del out
    # forward + backward time
    fb_ms = []
    for _ in range(repeats):
        clear()
        t0 = time.perf_counter()
        step()
        fb_ms.append((time.perf_counter() - t0) * 1e3)
    clear()
    return {
        "path": path, "T": t, "status": "ok",
        "fwd_ms": statistics.median(fwd_ms), "fwd_bwd_ms": statistics.median(fb_ms),
        "fwd_ms_min": min(fwd_ms), "fwd_bwd_ms_min": min(fb_ms),
        "fwd_ms_all": fwd_ms, "fwd_bwd_ms_all": fb_ms,
        "peak_mib": peak_mib, "memory_method": method,
        "rss_kept_after_warmup_mib": (rss_before - rss0) / 1024,
        "rss_before_mib": rss_before / 1024, "hwm_mib": None if hwm is None else hwm / 1024,
        "threads": torch.get_num_threads(),
    }


def measure_first_step(path: str, t: int, threads: int, alpha: float) -> dict:
    """ru_maxrss variant: the measured step is the first one in this process."""
    torch.set_num_threads(threads)
    fwd, leaves, grad = build_case(path, t, alpha)
    harness.trim()
    rss_before = harness.status_kib("VmRSS")
    out = fwd()
    out.backward(grad)
    del out
    hwm = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"peak_mib": max(hwm - rss_before, 0) / 1024, "rss_before_mib": rss_before / 1024,
            "hwm_mib": hwm / 1024}


def measure_child(path: str, t: int, repeats: int, threads: int) -> dict:
    """The `_measure` subcommand: one (path, T), the memory step redone cleanly when needed."""
    res = measure(path, t, repeats, threads, stagger_alpha())
    if res["memory_method"] == "ru_maxrss":
        # the warm-up already ran in this process: redo the memory step in a clean one
        cmd = [sys.executable, "-m", harness.CHILD_MODULE, "_measure_mem_first", "--path", path,
               "--length", str(t), "--threads", str(threads)]
        out = subprocess.run(cmd, capture_output=True, text=True, check=True)
        res.update(json.loads(out.stdout.strip().splitlines()[-1]))
    return res


# ---------------------------------------------------------------------------- parent

def _run_child(path: str, t: int, repeats: int, threads: int, timeout: float) -> dict:
    return {"path": path, "T": t, **harness.run_json_child(["_measure", "--path", path, "--length", str(t),
                                                            "--repeats", str(repeats), "--threads", str(threads)],
                                                           timeout)}


def _ratios(results: list[dict]) -> None:
    dense = {r["T"]: r for r in results if r["path"] == "dense" and r["status"] == "ok"}
    for r in results:
        d = dense.get(r["T"])
        ok = r["status"] == "ok" and d is not None
        r["speedup_fwd_bwd_vs_dense"] = d["fwd_bwd_ms"] / r["fwd_bwd_ms"] if ok else None
        r["speedup_fwd_vs_dense"] = d["fwd_ms"] / r["fwd_ms"] if ok else None
        r["memory_ratio_vs_dense"] = (r["peak_mib"] / d["peak_mib"] if ok and d["peak_mib"] > 0 else None)


def _get(results, path, t):
    return next((r for r in results if r["path"] == path and r["T"] == t and r["status"] == "ok"), None)


def targets(results: list[dict], lengths) -> list[dict]:
    """The PASS/FAIL checks; a check whose lengths were not run is 'n/a'."""
    out = []
    for t, need in ((4096, 3.0), (16384, 10.0)):
        g = _get(results, "gather", t)
        v = g and g["speedup_fwd_bwd_vs_dense"]
        out.append(harness.check(f"gather fwd+bwd speedup vs dense at T={t}", v, f">= {need}",
                                 None if v is None else v >= need))
    g = _get(results, "gather", 16384)
    v = g and g["memory_ratio_vs_dense"]
    out.append(harness.check("gather peak memory / dense at T=16384", v, "<= 2.0", None if v is None else v <= 2.0))
    g4, g16 = _get(results, "gather", 4096), _get(results, "gather", 16384)
    v = g16["peak_mib"] / g4["peak_mib"] if g4 and g16 and g4["peak_mib"] > 0 else None
    out.append(harness.check("gather peak(16384) / peak(4096) (linear in T: 4)", v, "<= 4.5",
                             None if v is None else v <= 4.5))
    for t in lengths:
        g, lr = _get(results, "gather", t), _get(results, "learned", t)
        v = lr["fwd_ms"] / g["fwd_ms"] if g and lr else None
        out.append(harness.check(f"learned fwd / gather fwd at T={t}", v, "<= 1.5", None if v is None else v <= 1.5))
    return out


def table(results: list[dict]) -> str:
    fmt = harness.fmt
    head = f"{'path':<8} {'T':>6} {'fwd ms':>10} {'fwd+bwd ms':>11} {'peak MiB':>9} {'GFLOP':>8} {'speedup':>8} {'mem ratio':>9}"
    lines = [head, "-" * len(head)]
    for r in results:
        if r["status"] != "ok":
            lines.append(f"{r['path']:<8} {r['T']:>6} {r['status']}: {r.get('reason', '')}")
            continue
        lines.append(
            f"{r['path']:<8} {r['T']:>6} {fmt(r['fwd_ms'], '10.2f')} {fmt(r['fwd_bwd_ms'], '11.2f')} "
            f"{fmt(r['peak_mib'], '9.1f')} {fmt(r['gflop'], '8.3f')} "
            f"{fmt(r['speedup_fwd_bwd_vs_dense'], '7.2f')}x {fmt(r['memory_ratio_vs_dense'], '8.2f')}x")
    lines.append("speedup = dense fwd+bwd ms / path fwd+bwd ms; mem ratio = path peak / dense peak (same T); "
                 "GFLOP = analytic forward attention FLOPs / 1e9")
    return "\n".join(lines)


def _mask_skip(results: list[dict], t: int, limit_gib: float) -> tuple[str, float] | None:
    """Why the quadratic mask path is skipped at t (and its estimated peak), or None to run it."""
    measured = [r for r in results if r["path"] == "mask" and r["status"] == "ok"]
    if measured:
        m = max(measured, key=lambda r: r["T"])
        est, how = m["peak_mib"] * (t / m["T"]) ** 2, f"quadratic extrapolation of T={m['T']}"
    else:
        est, how = mask_estimate_mib(t), "analytic 22 B per T^2 element"
    if est > limit_gib * 1024:
        return f"estimated peak {est / 1024:.1f} GiB ({how}) > {limit_gib:g} GiB", est
    return None


def run(args) -> Path:
    """Every (path, T) in its own process, then ratios, targets, the table and the JSON report."""
    lengths = list(QUICK_LENGTHS) if args.quick and args.lengths is None else list(args.lengths or FULL_LENGTHS)
    repeats = args.repeats if args.repeats is not None else (1 if args.quick else 5)
    threads = harness.n_threads()
    torch.set_num_threads(threads)
    alpha = stagger_alpha()
    load_start, code_start = harness.load(), harness.code()
    started = time.time()
    print(f"attention bench: B={B} H={H} Hkv={HKV} D={D} fp32 W={W} fib alpha={alpha:.6f} "
          f"(stagger, layer {LAYER} of {N_LAYERS}); T={lengths}; repeats={repeats}; threads={threads}; "
          f"load {load_start['load1']:.2f}", flush=True)

    results: list[dict] = []
    for t in sorted(lengths):
        for path in PATHS:
            skip = _mask_skip(results, t, args.mask_limit_gib) if path == "mask" else None
            if skip:
                reason, est = skip
                results.append({"path": path, "T": t, "status": "skipped", "reason": reason,
                                "estimated_peak_mib": est})
                print(f"  {path:<8} T={t:<6} skipped: {reason}", flush=True)
                continue
            t0 = time.time()
            r = _run_child(path, t, repeats, threads, args.timeout)
            if r["status"] == "ok":
                print(f"  {path:<8} T={t:<6} fwd {r['fwd_ms']:9.2f} ms  fwd+bwd {r['fwd_bwd_ms']:9.2f} ms  "
                      f"peak {r['peak_mib']:8.1f} MiB  ({time.time() - t0:.0f} s)", flush=True)
            else:
                print(f"  {path:<8} T={t:<6} {r['status']}: {r['reason']}", flush=True)
            results.append(r)
    for r in results:
        r["flops"] = attention_flops(r["path"], r["T"], alpha)
        r["gflop"] = r["flops"] / 1e9
        if r["status"] == "ok":
            r["gflop_per_s_fwd"] = r["flops"] / (r["fwd_ms"] * 1e6)
    _ratios(results)
    checks = targets(results, sorted(lengths))
    load_end, code_end = harness.load(), harness.code()
    changed = harness.code_changed(code_start, code_end)

    print()
    print(table(results))
    print()
    harness.print_checks(checks, changed)
    report = {
        "benchmark": "attention",
        "timestamp": harness.timestamp(),
        "quick": bool(args.quick),
        "config": {"B": B, "heads": H, "kv_heads": HKV, "head_dim": D, "dtype": "float32",
                   "window": W, "base": "fib", "alpha": alpha,
                   "alpha_source": f'fibexp.science.patterns.layer_alphas("stagger", {N_LAYERS})[{LAYER}] '
                                   "(middle layer of a 16-layer stagger schedule); learned path: "
                                   "LearnedOffsets with theta = logit(alpha - 0.5), non-integral -> interpolated",
                   "lengths": sorted(lengths), "repeats": repeats, "paths": list(PATHS),
                   "mask_limit_gib": args.mask_limit_gib},
        "method": METHOD,
        "machine": harness.machine(),
        "load_start": load_start, "load_end": load_end,
        "code": {"start": code_start, "end": code_end, "changed_during_run": changed},
        "elapsed_s": time.time() - started,
        "results": results,
        "targets": checks,
    }
    print(f"\nload average: start {load_start['load1']:.2f}, end {load_end['load1']:.2f} (1 min)")
    return harness.write_report(args.out, "attention", report)
