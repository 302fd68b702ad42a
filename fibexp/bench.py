"""Benchmark of one attention layer: dense SDPA against the Fibonacci offset paths.

    python -m fibexp.bench attention [--lengths 1024 4096 16384] [--repeats N] [--out DIR] [--quick]
    fibexp-bench attention ...

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
           is the same (non-integral) stagger alpha: interpolated rows mixed by a small matrix.

Measurement, one FRESH Python process per (path, T) (`python -m fibexp.bench _measure ...`),
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

import argparse
import ctypes
import datetime as _dt
import gc
import json
import math
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

B, H, HKV, D, W = 1, 8, 2, 64, 8
G = H // HKV
N_LAYERS, LAYER = 16, 8
PATHS = ("dense", "gather", "mask", "learned")
FULL_LENGTHS = (1024, 4096, 16384)
QUICK_LENGTHS = (64, 128)
MIB = 1 << 20

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
    from fibexp import patterns

    return patterns.layer_alphas("stagger", N_LAYERS)[LAYER]


def n_threads() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - non-Linux
        return os.cpu_count() or 1


# ---------------------------------------------------------------------------- geometry

def learned_geometry(alpha: float, t: int) -> tuple[list[int], int]:
    """(gathered rows, number of mixed columns) of LearnedOffsets at alpha, as it builds them."""
    from fibexp import patterns

    kept = patterns.interpolated_rungs(W, "fib", alpha, t)
    near = list(range(min(W, t - 1) + 1))
    lows = [lo for _, lo, _ in kept]
    rows = sorted(set(near) | set(lows) | {lo + 1 for lo in lows})
    return rows, len(near) + len(kept)


def _valid_columns(rows, t: int) -> int:
    """Sum over query positions i < t of #{d in rows : d <= i}."""
    return sum(t - d for d in rows if d < t)


def attention_flops(path: str, t: int, alpha: float) -> int:
    from fibexp import patterns

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
    return 22 * t * t / MIB


# ---------------------------------------------------------------------------- child process

def _status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def _reset_peak() -> bool:
    """Reset VmHWM to the current RSS; False when the kernel does not allow it."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        return False
    # the reset worked when the peak mark now sits at (about) the current RSS
    return _status_kib("VmHWM") - _status_kib("VmRSS") < 1024


def _trim() -> None:
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except OSError:  # pragma: no cover - not glibc
        pass


def build_case(path: str, t: int, alpha: float, seed: int = 0):
    """(callable running the layer forward, list of leaf tensors, upstream grad)."""
    import torch
    import torch.nn.functional as F

    from fibexp import patterns
    from fibexp.model import kernels, mixers

    gen = torch.Generator().manual_seed(seed)
    k = torch.randn(B, HKV, t, D, generator=gen).requires_grad_()
    v = torch.randn(B, HKV, t, D, generator=gen).requires_grad_()
    if path == "dense":
        q = torch.randn(B, H, t, D, generator=gen).requires_grad_()

        def fwd():
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        leaves = [q, k, v]
    else:
        q = torch.randn(B, HKV, t, G, D, generator=gen).requires_grad_()
        leaves = [q, k, v]
        if path == "learned":
            module = mixers.LearnedOffsets(W, mixers.Base.fib)
            with torch.no_grad():
                module.theta.fill_(math.log((alpha - 0.5) / (1.5 - alpha)))  # alpha = 0.5 + sigmoid(theta)
            if abs(float(module.alpha.detach()) - alpha) > 1e-6:
                raise RuntimeError(f"learned alpha {float(module.alpha)} != {alpha}")
            leaves.append(module.theta)

            def fwd():
                return module(q, k, v)
        else:
            rows = torch.tensor(patterns.attended_distances(W, "fib", alpha, t))
            kernel = kernels.gather_attention if path == "gather" else kernels.mask_attention

            def fwd():
                return kernel(q, k, v, rows)
    with torch.no_grad():
        shape = fwd().shape
    grad = torch.randn(shape, generator=gen).contiguous()
    return fwd, leaves, grad


def measure(path: str, t: int, repeats: int, threads: int, alpha: float) -> dict:
    import torch

    torch.set_num_threads(threads)
    fwd, leaves, grad = build_case(path, t, alpha)

    def clear():
        for x in leaves:
            x.grad = None

    def step():
        out = fwd()
        out.backward(grad)
        del out

    rss0 = _status_kib("VmRSS")
    method = "clear_refs"
    # peak memory of forward+backward
    step()  # warm-up: first-call allocations (thread pools, allocator arenas) are not the step's
    clear()
    _trim()
    rss_before = _status_kib("VmRSS")
    if _reset_peak():
        step()
        hwm = _status_kib("VmHWM")
        peak_mib = max(hwm - rss_before, 0) / 1024
    else:  # the peak mark cannot be reset: _child_main redoes the step first thing in a clean process
        method, hwm, peak_mib = "ru_maxrss", None, None
    clear()
    _trim()

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


def _measure_fallback_no_warmup(path: str, t: int, repeats: int, threads: int, alpha: float) -> dict:
    """ru_maxrss variant: the measured step is the first one in this process."""
    import torch

    torch.set_num_threads(threads)
    fwd, leaves, grad = build_case(path, t, alpha)
    _trim()
    rss_before = _status_kib("VmRSS")
    out = fwd()
    out.backward(grad)
    del out
    hwm = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"peak_mib": max(hwm - rss_before, 0) / 1024, "rss_before_mib": rss_before / 1024,
            "hwm_mib": hwm / 1024}


def _child_main(args) -> None:
    alpha = stagger_alpha()
    res = measure(args.path, args.length, args.repeats, args.threads, alpha)
    if res["memory_method"] == "ru_maxrss":
        # the warm-up already ran in this process: redo the memory step in a clean one
        cmd = [sys.executable, "-m", "fibexp.bench", "_measure_mem_first", "--path", args.path,
               "--length", str(args.length), "--threads", str(args.threads)]
        out = subprocess.run(cmd, capture_output=True, text=True, check=True)
        res.update(json.loads(out.stdout.strip().splitlines()[-1]))
    print(json.dumps(res))


# ---------------------------------------------------------------------------- parent

def _machine() -> dict:
    import torch

    model = "unknown"
    mem_total = None
    try:
        with open("/proc/cpuinfo") as f:
            model = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), model)
        with open("/proc/meminfo") as f:
            mem_total = next((int(ln.split()[1]) // 1024 for ln in f if ln.startswith("MemTotal")), None)
    except OSError:
        pass
    return {
        "nproc": n_threads(), "cpu_count": os.cpu_count(), "cpu_model": model,
        "mem_total_mib": mem_total, "platform": platform.platform(),
        "python": platform.python_version(), "torch": torch.__version__,
        "torch_threads": n_threads(),
        "allocator": f"LD_PRELOAD={os.environ['LD_PRELOAD']}" if os.environ.get("LD_PRELOAD") else "glibc malloc (default)",
    }


def _code() -> dict:
    """Which kernel code ran: git HEAD, dirty flag and sha256 of the measured modules (others
    edit them concurrently; compared at the start and the end of a run)."""
    import hashlib

    root = Path(__file__).resolve().parent
    files = {name: root / rel for name, rel in
             (("kernels", "model/kernels.py"), ("mixers", "model/mixers.py"), ("patterns", "patterns.py"))}
    info = {f"{n}_sha256": hashlib.sha256(f.read_bytes()).hexdigest()[:16] for n, f in files.items()}
    try:
        git = ["git", "-C", str(root.parent)]
        info["git_head"] = subprocess.run(git + ["rev-parse", "--short", "HEAD"], capture_output=True,
                                          text=True, timeout=10).stdout.strip() or None
        dirty = subprocess.run(git + ["status", "--porcelain", "--", *map(str, files.values())],
                               capture_output=True, text=True, timeout=10).stdout.strip()
        info["measured_modules_dirty"] = bool(dirty)
    except (OSError, subprocess.SubprocessError):
        info["git_head"] = None
    return info


def _load() -> dict:
    one, five, fifteen = os.getloadavg()
    try:
        text = subprocess.run(["uptime"], capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        text = None
    return {"load1": one, "load5": five, "load15": fifteen, "uptime": text,
            "time": _dt.datetime.now().isoformat(timespec="seconds")}


def _run_child(path: str, t: int, repeats: int, threads: int, timeout: float) -> dict:
    cmd = [sys.executable, "-m", "fibexp.bench", "_measure", "--path", path, "--length", str(t),
           "--repeats", str(repeats), "--threads", str(threads)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"path": path, "T": t, "status": "failed", "reason": f"timed out after {timeout:.0f} s"}
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
        return {"path": path, "T": t, "status": "failed",
                "reason": f"exit {proc.returncode}: " + " | ".join(tail)}
    return json.loads(proc.stdout.strip().splitlines()[-1])


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

    def add(name, value, limit, passed):
        out.append({"target": name, "value": value, "limit": limit,
                    "result": "n/a" if passed is None else ("PASS" if passed else "FAIL")})

    for t, need in ((4096, 3.0), (16384, 10.0)):
        g = _get(results, "gather", t)
        v = g and g["speedup_fwd_bwd_vs_dense"]
        add(f"gather fwd+bwd speedup vs dense at T={t}", v, f">= {need}", None if v is None else v >= need)
    g = _get(results, "gather", 16384)
    v = g and g["memory_ratio_vs_dense"]
    add("gather peak memory / dense at T=16384", v, "<= 2.0", None if v is None else v <= 2.0)
    g4, g16 = _get(results, "gather", 4096), _get(results, "gather", 16384)
    v = g16["peak_mib"] / g4["peak_mib"] if g4 and g16 and g4["peak_mib"] > 0 else None
    add("gather peak(16384) / peak(4096) (linear in T: 4)", v, "<= 4.5", None if v is None else v <= 4.5)
    for t in lengths:
        g, lr = _get(results, "gather", t), _get(results, "learned", t)
        v = lr["fwd_ms"] / g["fwd_ms"] if g and lr else None
        add(f"learned fwd / gather fwd at T={t}", v, "<= 1.5", None if v is None else v <= 1.5)
    return out


def _fmt(x, spec):
    return "-" if x is None else format(x, spec)


def table(results: list[dict]) -> str:
    head = f"{'path':<8} {'T':>6} {'fwd ms':>10} {'fwd+bwd ms':>11} {'peak MiB':>9} {'GFLOP':>8} {'speedup':>8} {'mem ratio':>9}"
    lines = [head, "-" * len(head)]
    for r in results:
        if r["status"] != "ok":
            lines.append(f"{r['path']:<8} {r['T']:>6} {r['status']}: {r.get('reason', '')}")
            continue
        lines.append(
            f"{r['path']:<8} {r['T']:>6} {_fmt(r['fwd_ms'], '10.2f')} {_fmt(r['fwd_bwd_ms'], '11.2f')} "
            f"{_fmt(r['peak_mib'], '9.1f')} {_fmt(r['gflop'], '8.3f')} "
            f"{_fmt(r['speedup_fwd_bwd_vs_dense'], '7.2f')}x {_fmt(r['memory_ratio_vs_dense'], '8.2f')}x")
    lines.append("speedup = dense fwd+bwd ms / path fwd+bwd ms; mem ratio = path peak / dense peak (same T); "
                 "GFLOP = analytic forward attention FLOPs / 1e9")
    return "\n".join(lines)


def run_attention(args) -> Path:
    import torch

    lengths = list(QUICK_LENGTHS) if args.quick and args.lengths is None else list(args.lengths or FULL_LENGTHS)
    repeats = args.repeats if args.repeats is not None else (1 if args.quick else 5)
    threads = n_threads()
    torch.set_num_threads(threads)
    alpha = stagger_alpha()
    load_start, code_start = _load(), _code()
    started = time.time()
    print(f"attention bench: B={B} H={H} Hkv={HKV} D={D} fp32 W={W} fib alpha={alpha:.6f} "
          f"(stagger, layer {LAYER} of {N_LAYERS}); T={lengths}; repeats={repeats}; threads={threads}; "
          f"load {load_start['load1']:.2f}", flush=True)

    results: list[dict] = []
    for t in sorted(lengths):
        for path in PATHS:
            if path == "mask":
                measured = [r for r in results if r["path"] == "mask" and r["status"] == "ok"]
                if measured:
                    m = max(measured, key=lambda r: r["T"])
                    est, how = m["peak_mib"] * (t / m["T"]) ** 2, f"quadratic extrapolation of T={m['T']}"
                else:
                    est, how = mask_estimate_mib(t), "analytic 22 B per T^2 element"
                if est > args.mask_limit_gib * 1024:
                    reason = (f"estimated peak {est / 1024:.1f} GiB ({how}) > {args.mask_limit_gib:g} GiB")
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
    load_end, code_end = _load(), _code()
    code_changed = any(code_start[k] != code_end[k] for k in code_start if k.endswith("_sha256"))

    print()
    print(table(results))
    print()
    for c in checks:
        v = "-" if c["value"] is None else f"{c['value']:.3f}"
        print(f"{c['result']:<4} {c['target']}: {v} (target {c['limit']})")

    if code_changed:
        print("WARNING: kernels/mixers/patterns changed on disk during the run; figures mix two versions")
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    report = {
        "benchmark": "attention",
        "timestamp": stamp,
        "quick": bool(args.quick),
        "config": {"B": B, "heads": H, "kv_heads": HKV, "head_dim": D, "dtype": "float32",
                   "window": W, "base": "fib", "alpha": alpha,
                   "alpha_source": f'fibexp.patterns.layer_alphas("stagger", {N_LAYERS})[{LAYER}] '
                                   "(middle layer of a 16-layer stagger schedule); learned path: "
                                   "LearnedOffsets with theta = logit(alpha - 0.5), non-integral -> interpolated",
                   "lengths": sorted(lengths), "repeats": repeats, "paths": list(PATHS),
                   "mask_limit_gib": args.mask_limit_gib},
        "method": METHOD,
        "machine": _machine(),
        "load_start": load_start, "load_end": load_end,
        "code": {"start": code_start, "end": code_end, "changed_during_run": code_changed},
        "elapsed_s": time.time() - started,
        "results": results,
        "targets": checks,
    }
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"attention-{stamp}.json"
    text = json.dumps(report, indent=1)
    path.write_text(text)
    (out_dir / "attention-latest.json").write_text(text)
    print(f"\nload average: start {load_start['load1']:.2f}, end {load_end['load1']:.2f} (1 min)")
    print(f"JSON: {path.resolve()} (and {(out_dir / 'attention-latest.json').resolve()})")
    return path


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="fibexp-bench", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True, metavar="{attention}")
    att = sub.add_parser("attention", help="one attention layer: dense vs gather vs mask vs learned")
    att.add_argument("--lengths", type=int, nargs="+", default=None, metavar="T",
                     help=f"sequence lengths (default {' '.join(map(str, FULL_LENGTHS))}; "
                          f"--quick: {' '.join(map(str, QUICK_LENGTHS))})")
    att.add_argument("--repeats", type=int, default=None, help="timed repeats, median reported (default 5; --quick: 1)")
    att.add_argument("--out", default="outputs/bench", help="output folder (default outputs/bench, relative to cwd)")
    att.add_argument("--quick", action="store_true", help="tiny smoke run (T=64 128, 1 repeat)")
    att.add_argument("--mask-limit-gib", type=float, default=8.0,
                     help="skip the quadratic mask path when its estimated peak exceeds this (default 8)")
    att.add_argument("--timeout", type=float, default=1800, help="seconds per (path, T) process")
    for name in ("_measure", "_measure_mem_first"):  # internal: one fresh process per measurement
        m = sub.add_parser(name)
        m.add_argument("--path", choices=PATHS, required=True)
        m.add_argument("--length", type=int, required=True)
        m.add_argument("--repeats", type=int, default=1)
        m.add_argument("--threads", type=int, default=n_threads())
    args = parser.parse_args(argv)
    if args.cmd == "attention":
        if args.repeats is not None and args.repeats < 1:
            parser.error("--repeats: must be >= 1")
        if args.lengths is not None and min(args.lengths) < 1:
            parser.error("--lengths: must be >= 1")
        run_attention(args)
    elif args.cmd == "_measure":
        _child_main(args)
    else:
        print(json.dumps(_measure_fallback_no_warmup(args.path, args.length, 1, args.threads, stagger_alpha())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
