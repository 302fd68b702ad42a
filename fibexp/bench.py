"""Benchmarks: one attention layer (`attention`) and the whole model (`model`).

    fibexp-bench attention [--lengths 1024 4096 16384] [--repeats N] [--out DIR] [--quick]
    fibexp-bench model [--lengths 64 256 1024 4096] [--repeats N] [--no-compile] [--quick]

`model` (see MODEL_METHOD below): the training step and inference forward of the whole
model for dense, static fib stagger W8 (attention.impl=auto), learned, hypercube rot, hybrid
and the no-mixer bound, tiny preset at T = 64 and 256, paper width at 1,024 and 4,096, with
torch.compile of dense and static, and the gather/mask crossover that attention.impl=auto
takes its switch length from (fibexp.model.mixers.CPU_MASK_BELOW). JSON: outputs/bench/model-*.json.

`attention`, one layer:

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
    from fibexp.science import patterns

    return patterns.layer_alphas("stagger", N_LAYERS)[LAYER]


def n_threads() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - non-Linux
        return os.cpu_count() or 1


# ---------------------------------------------------------------------------- geometry

def learned_geometry(alpha: float, t: int) -> tuple[list[int], int]:
    """(gathered rows, number of mixed columns) of LearnedOffsets at alpha, as it builds them."""
    from fibexp.science import patterns

    kept = patterns.interpolated_rungs(W, "fib", alpha, t)
    near = list(range(min(W, t - 1) + 1))
    lows = [lo for _, lo, _ in kept]
    rows = sorted(set(near) | set(lows) | {lo + 1 for lo in lows})
    return rows, len(near) + len(kept)


def _valid_columns(rows, t: int) -> int:
    """Sum over query positions i < t of #{d in rows : d <= i}."""
    return sum(t - d for d in rows if d < t)


def attention_flops(path: str, t: int, alpha: float) -> int:
    from fibexp.science import patterns

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

    from fibexp.science import patterns
    from fibexp.model import kernels, mixers

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
    return {"path": path, "T": t, **_run_json_child(["_measure", "--path", path, "--length", str(t), "--repeats",
                                                     str(repeats), "--threads", str(threads)], timeout)}


def _run_json_child(cmd: list[str], timeout: float, env: dict | None = None) -> dict:
    """`python -m fibexp.bench <cmd>` in a fresh process; its last stdout line is its JSON."""
    try:
        proc = subprocess.run([sys.executable, "-m", "fibexp.bench", *cmd], capture_output=True, text=True,
                              timeout=timeout, env={**os.environ, **(env or {})})
    except subprocess.TimeoutExpired:
        return {"status": "failed", "reason": f"timed out after {timeout:.0f} s"}
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
        return {"status": "failed", "reason": f"exit {proc.returncode}: " + " | ".join(tail)}
    return {"status": "ok", **json.loads(proc.stdout.strip().splitlines()[-1])}


def _code_changed(start: dict, end: dict) -> bool:
    return any(start[k] != end[k] for k in start if k.endswith("_sha256"))


def _write_report(out: str, kind: str, report: dict) -> Path:
    """outputs/bench/<kind>-<stamp>.json and <kind>-latest.json; prints both paths."""
    out_dir = Path(out)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{kind}-{report['timestamp']}.json"
    text = json.dumps(report, indent=1)
    path.write_text(text)
    (out_dir / f"{kind}-latest.json").write_text(text)
    print(f"JSON: {path.resolve()} (and {(out_dir / f'{kind}-latest.json').resolve()})")
    return path


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


def print_checks(checks: list[dict], code_changed: bool) -> None:
    """PASS/MISS per target, and a warning when the measured code changed under the run."""
    for c in checks:
        v = "-" if c["value"] is None else f"{c['value']:.3f}"
        print(f"{c['result']:<4} {c['target']}: {v} (target {c['limit']})")
    if code_changed:
        print("WARNING: the measured modules changed on disk during the run; figures mix two versions")


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
    code_changed = _code_changed(code_start, code_end)

    print()
    print(table(results))
    print()
    print_checks(checks, code_changed)
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    report = {
        "benchmark": "attention",
        "timestamp": stamp,
        "quick": bool(args.quick),
        "config": {"B": B, "heads": H, "kv_heads": HKV, "head_dim": D, "dtype": "float32",
                   "window": W, "base": "fib", "alpha": alpha,
                   "alpha_source": f'fibexp.science.patterns.layer_alphas("stagger", {N_LAYERS})[{LAYER}] '
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
    print(f"\nload average: start {load_start['load1']:.2f}, end {load_end['load1']:.2f} (1 min)")
    return _write_report(args.out, "attention", report)


# ============================================================================ whole model
#
# `fibexp-bench model`: the whole model's training step (forward, backward, gradient clipping,
# AdamW) and inference forward, every mixer side by side at each length, plus the crossover
# scan that `attention.impl=auto` takes its switch length from. See MODEL_METHOD.

MODEL_PRESETS = {
    "tiny": dict(n_layers=4, d_model=128, n_heads=4, n_kv_heads=2),  # conf/model/tiny.yaml (the CPU default)
    # conf/model/paper60m.yaml's width (d 512, 8 heads / 2 KV, SwiGLU 1366) at half its 16 layers
    "paper-width": dict(n_layers=8, d_model=512, n_heads=8, n_kv_heads=2, ffn_hidden=1366),
}
MODEL_VOCAB = 2048  # the CPU tokenizer's vocabulary (tiny preset) for both: the tied head is cost every path shares
MODEL_CASES = (("tiny", 64, 16), ("tiny", 256, 8), ("paper-width", 1024, 2), ("paper-width", 4096, 1))
QUICK_MODEL_CASES = (("tiny", 32, 2), ("tiny", 64, 2))
MODEL_ROUNDS = {64: 7, 256: 7, 1024: 5, 4096: 3}  # timed rounds per T (--repeats overrides); short steps are noisier
STATIC = dict(kind="sparse", base="fib", schedule="stagger", window=8)
MODEL_PATHS = {
    "dense": dict(kind="dense"),
    "static": STATIC,  # fib stagger W8, attention.impl as configured (auto)
    "learned": dict(kind="sparse", base="fib", schedule="learned", window=8, alpha_init="stagger"),
    "hypercube-rot": dict(kind="hypercube", schedule="rot"),
    "hybrid": dict(kind="hypercube", schedule="hybrid"),
    "no-mixer": STATIC,  # the bound: the static model with attention that costs nothing (NoMixing)
}
COMPILE_PATHS = ("dense", "static")
COMPILE_MAX_T = 256  # torch.compile is measured up to this length (compiling costs 15-70 s per graph on CPU)
CROSSOVER_LENGTHS = (64, 128, 256, 512, 1024, 2048)
QUICK_CROSSOVER_LENGTHS = (32, 64)
CROSSOVER_TOKENS = 2048  # batch = tokens // T at each scanned length
MODEL_TARGETS = [  # (name, ratio, preset, T or None for every case, comparison, limit)
    ("static train step / dense", "static_vs_dense", "tiny", 64, ">=", 1.0),
    ("static train step / dense", "static_vs_dense", "tiny", 256, ">=", 1.0),
    ("static train step / dense", "static_vs_dense", "paper-width", 1024, ">=", 1.15),
    ("static train step / dense", "static_vs_dense", "paper-width", 4096, ">=", 1.8),
    ("static step time / no-mixer step time", "static_over_bound", "paper-width", 4096, "<=", 1.25),
    ("learned step time / static step time", "learned_over_static", None, None, "<=", 1.2),
    ("static inference / dense", "static_infer_vs_dense", None, None, ">=", 1.0),
]

MODEL_METHOD = {
    "step": "training step = forward, token cross-entropy of fp32 logits (as fibexp.model.lm.nll), backward, "
            "clip_grad_norm_(1.0), AdamW (lr 1e-3, betas 0.9/0.95, weight decay 0.1 on matrices only, as "
            "fibexp.lit.LitLM), zero_grad(set_to_none); inference = model(ids) under torch.inference_mode",
    "interleaving": "one process per (preset, T) holds every path's model; each round times one step of "
                    "every path, the starting path rotating per round, so load changes hit all paths alike",
    "ratios": "x dense = median over rounds of dense_ms / path_ms of the same round (paired); "
              "/ bound = median of path_ms / no-mixer_ms; learned / static likewise",
    "no-mixer": "the static model with its attention kernel replaced by y_i = q_i + k_i + v_i per KV "
                "group: projections, RoPE and their gradients run, no token is mixed (the attention-"
                "costs-nothing bound)",
    "memory": "peak of one training step (and one inference forward): CPU VmHWM - VmRSS before, after "
              "gc + malloc_trim, with /proc/self/clear_refs resetting the mark; CUDA max_memory_allocated",
    "compile": "torch.compile(model) of the dense and static paths up to T=%d, inductor caches off (cold, "
               "as a first run): compile_s = first compiled step minus an eager step; then timed rounds of "
               "eager and compiled interleaved; break_even_steps = compile_s / time saved per step" % COMPILE_MAX_T,
    "crossover": "one static attention layer (projections included), gather vs mask path, forward+backward "
                 "and inference forward, interleaved rounds at each scanned T, batch = %d // T; the "
                 "crossover is the shortest T from which the gather wins at every longer scanned T"
                 % CROSSOVER_TOKENS,
}


def _no_mixing():
    from torch import nn

    class NoMixing(nn.Module):
        """Attention that costs nothing: each position's output is q + k + v of its own KV group."""

        def forward(self, q, k, v):
            b, t, h, d = q.shape
            return (q.view(b, t, k.shape[2], h // k.shape[2], d) + (k + v)[:, :, :, None]).reshape(b, t, h, d)

    return NoMixing


def build_model(path: str, preset: str, t: int, vocab: int = MODEL_VOCAB, seed: int = 0):
    import torch

    from fibexp.model import LM, AttentionSpec

    torch.manual_seed(seed)
    model = LM(**MODEL_PRESETS[preset], vocab_size=vocab, seq_len=t, attention=AttentionSpec(**MODEL_PATHS[path]))
    if path == "no-mixer":
        for block in model.blocks:
            block.mixer.pattern = _no_mixing()()
    return model


def adamw(model):
    """fibexp.lit.LitLM.configure_optimizers' AdamW (weight decay on matrices only)."""
    import torch

    from fibexp.model.lm import param_groups

    return torch.optim.AdamW(param_groups(model), lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1)


def training_loss(model, x, y):
    """The LM task's training loss (fibexp.model.lm.nll, averaged)."""
    from fibexp.model.lm import nll

    return nll(model, x, y).mean()


def _resolved_impl(model, t: int, device) -> str | None:
    from fibexp.model import mixers

    spec = model.spec
    if spec.kind is not mixers.Kind.sparse:
        return None
    return mixers.resolve_impl(spec.impl, device, t, spec.schedule == "learned").value


class _Clock:
    """Wall and process-CPU milliseconds of a call, synchronising CUDA around it."""

    def __init__(self, device):
        import torch

        self.sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)

    def __call__(self, fn) -> tuple[float, float]:
        self.sync()
        w0, c0 = time.perf_counter(), time.process_time()
        fn()
        self.sync()
        return (time.perf_counter() - w0) * 1e3, (time.process_time() - c0) * 1e3


def _peak_mib(fn, device) -> tuple[float | None, str]:
    """Peak memory one call adds (see MODEL_METHOD['memory'])."""
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        fn()
        torch.cuda.synchronize()
        return (torch.cuda.max_memory_allocated() - before) / MIB, "cuda max_memory_allocated"
    _trim()
    rss = _status_kib("VmRSS")
    if not _reset_peak():
        fn()
        return None, "unavailable (/proc/self/clear_refs not writable)"
    fn()
    return max(_status_kib("VmHWM") - rss, 0) / 1024, "VmHWM - VmRSS"


def _rounds(fns: dict, repeats: int, clock) -> dict[str, dict[str, list[float]]]:
    names = list(fns)
    out = {n: {"wall": [], "cpu": []} for n in names}
    for r in range(repeats):
        for n in names[r % len(names):] + names[:r % len(names)]:
            wall, cpu = clock(fns[n])
            out[n]["wall"].append(wall)
            out[n]["cpu"].append(cpu)
    return out


def model_case(preset: str, t: int, batch: int, repeats: int, threads: int, device: str, compile_: bool) -> dict:
    """Every path of one (preset, T) in this process, measured interleaved (MODEL_METHOD)."""
    import torch

    torch.set_num_threads(threads)
    device = torch.device(device)
    clock = _Clock(device)
    gen = torch.Generator().manual_seed(1)
    x = torch.randint(0, MODEL_VOCAB, (batch, t), generator=gen).to(device)
    y = torch.randint(0, MODEL_VOCAB, (batch, t), generator=gen).to(device)
    autocast = (torch.autocast("cuda", dtype=torch.bfloat16) if device.type == "cuda"
                else torch.autocast("cpu", enabled=False))
    models, train, infer, res = {}, {}, {}, {}
    for name in MODEL_PATHS:
        model = build_model(name, preset, t).to(device).train()
        models[name] = model
        train[name], infer[name] = _step_and_forward(model, adamw(model), x, y, autocast)
        res[name] = {"n_params": model.n_params(), "impl": _resolved_impl(model, t, device)}
    for name in MODEL_PATHS:  # warm-up (first-call allocations, thread pools), then the memory steps
        train[name]()
        res[name]["peak_train_mib"], method = _peak_mib(train[name], device)
    timed = _rounds(train, repeats, clock)
    for m in models.values():
        m.eval()
    for name in MODEL_PATHS:
        infer[name]()
        res[name]["peak_infer_mib"], _ = _peak_mib(infer[name], device)
    timed_infer = _rounds(infer, repeats, clock)
    for name in MODEL_PATHS:
        res[name].update(train_ms=timed[name]["wall"], train_cpu_ms=timed[name]["cpu"],
                         infer_ms=timed_infer[name]["wall"], infer_cpu_ms=timed_infer[name]["cpu"])
    compiled = {}
    if compile_:
        for name in COMPILE_PATHS:
            compiled[name] = _compiled(models[name], train[name], infer[name], name, preset, t, batch, x, y,
                                       autocast, repeats, clock, device)
    return {"preset": preset, "T": t, "batch": batch, "tokens": batch * t, "device": str(device),
            "threads": torch.get_num_threads(), "memory_method": method, "paths": res, "compile": compiled}


def _step_and_forward(model, opt, x, y, autocast):
    """One training step as fibexp-train runs it (loss, backward, clipping, AdamW) and one
    inference forward, of an eager or a compiled model (a compiled one shares its parameters)."""
    import torch

    def step():
        with autocast:
            loss = training_loss(model, x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)

    def forward():
        with torch.inference_mode(), autocast:
            model(x)

    return step, forward


def _compiled(model, eager_step, eager_forward, name, preset, t, batch, x, y, autocast, repeats, clock,
              device) -> dict:
    """torch.compile of one path: compile time (first call minus an eager call) and steady state."""
    import torch

    try:
        torch._dynamo.reset()
        cmodel = build_model(name, preset, t).to(device).train()
        cmodel.load_state_dict(model.state_dict())
        step, forward = _step_and_forward(torch.compile(cmodel), adamw(cmodel), x, y, autocast)
        first, _ = clock(step)
        eager, _ = clock(eager_step)
        both = _rounds({"eager": eager_step, "compiled": step}, repeats, clock)
        cmodel.eval()
        model.eval()
        first_infer, _ = clock(forward)
        eager_infer, _ = clock(eager_forward)
        both_infer = _rounds({"eager": eager_forward, "compiled": forward}, repeats, clock)
        model.train()
        return {"status": "ok", "compile_train_s": (first - eager) / 1e3, "compile_infer_s": (first_infer - eager_infer) / 1e3,
                "train_ms": both["compiled"]["wall"], "eager_train_ms": both["eager"]["wall"],
                "infer_ms": both_infer["compiled"]["wall"], "eager_infer_ms": both_infer["eager"]["wall"]}
    except Exception as e:  # a path that does not compile is a finding, not a crash of the bench
        return {"status": "failed", "reason": f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"}


def crossover_scan(preset: str, lengths, tokens: int, repeats: int, threads: int, device: str) -> list[dict]:
    """Gather vs mask path of one static attention layer at each T (MODEL_METHOD['crossover'])."""
    import torch

    from fibexp.model import mixers
    from fibexp.model.layers import rope_tables

    torch.set_num_threads(threads)
    device = torch.device(device)
    clock = _Clock(device)
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
        tr, inf = _rounds(train, repeats, clock), _rounds(infer, repeats, clock)
        out.append({"T": t, "batch": b,
                    **{f"{k}_train_ms": statistics.median(v["wall"]) for k, v in tr.items()},
                    **{f"{k}_infer_ms": statistics.median(v["wall"]) for k, v in inf.items()},
                    **{f"{k}_train_cpu_ms": statistics.median(v["cpu"]) for k, v in tr.items()}})
    return out


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


def _median(xs):
    return statistics.median(xs) if xs else None


def _quartiles(xs):
    if len(xs) < 2:
        return (xs[0], xs[0]) if xs else (None, None)
    q = statistics.quantiles(xs, n=4, method="inclusive")
    return q[0], q[2]


def _paired(num: list[float], den: list[float]) -> float | None:
    """Median over rounds of num_r / den_r."""
    return statistics.median(a / b for a, b in zip(num, den)) if num and den else None


def summarize_case(case: dict) -> dict:
    """Medians, spreads, tokens/s and the paired ratios of one (preset, T)."""
    paths, tokens = case["paths"], case["tokens"]
    dense, bound, static = paths.get("dense"), paths.get("no-mixer"), paths.get("static")
    for r in paths.values():
        for key in ("train_ms", "infer_ms", "train_cpu_ms", "infer_cpu_ms"):
            r[f"{key}_median"] = _median(r[key])
        r["train_ms_p25"], r["train_ms_p75"] = _quartiles(r["train_ms"])
        r["infer_ms_p25"], r["infer_ms_p75"] = _quartiles(r["infer_ms"])
        r["train_tokens_per_s"] = tokens / r["train_ms_median"] * 1e3
        r["infer_tokens_per_s"] = tokens / r["infer_ms_median"] * 1e3
        r["train_vs_dense"] = _paired(dense["train_ms"], r["train_ms"]) if dense else None
        r["infer_vs_dense"] = _paired(dense["infer_ms"], r["infer_ms"]) if dense else None
        r["train_cpu_vs_dense"] = _paired(dense["train_cpu_ms"], r["train_cpu_ms"]) if dense else None
        r["train_over_bound"] = _paired(r["train_ms"], bound["train_ms"]) if bound else None
    case["ratios"] = {
        "static_vs_dense": static and static["train_vs_dense"],
        "static_infer_vs_dense": static and static["infer_vs_dense"],
        "static_over_bound": static and static["train_over_bound"],
        "bound_vs_dense": bound and bound["train_vs_dense"],
        "learned_over_static": (_paired(paths["learned"]["train_ms"], static["train_ms"])
                                if static and "learned" in paths else None),
    }
    for c in case.get("compile", {}).values():
        if c.get("status") == "ok":
            c["speedup_train"] = _paired(c["eager_train_ms"], c["train_ms"])
            c["speedup_infer"] = _paired(c["eager_infer_ms"], c["infer_ms"])
            med = statistics.median(c["eager_train_ms"]) - statistics.median(c["train_ms"])
            c["break_even_steps"] = c["compile_train_s"] * 1e3 / med if med > 0 else None
    return case


def model_targets(cases: list[dict]) -> list[dict]:
    out = []
    for name, ratio, preset, t, cmp, limit in MODEL_TARGETS:
        sel = [c for c in cases if c.get("status") == "ok" and (preset is None or c["preset"] == preset)
               and (t is None or c["T"] == t)]
        for c in (sel if t is None else sel[:1]) or [None]:
            v = c["ratios"][ratio] if c else None
            where = f"{preset or (c and c['preset'])} T={t or (c and c['T'])}"
            passed = None if v is None else (v >= limit if cmp == ">=" else v <= limit)
            out.append({"target": f"{name} at {where}", "value": v, "limit": f"{cmp} {limit}",
                        "result": "n/a" if passed is None else ("PASS" if passed else "FAIL"),
                        "full_case": c is not None and (c["preset"], c["T"], c["batch"]) in MODEL_CASES})
    return out


def model_table(cases: list[dict]) -> str:
    lines = []
    for c in cases:
        head = (f"{c['preset']} T={c['T']} x{c['batch']} ({c['tokens']:,} tokens/step), {c.get('device', '?')}, "
                f"{c.get('threads', '?')} threads, load {c.get('load_start', {}).get('load1', float('nan')):.2f}")
        if c.get("status") != "ok":
            lines += [head, f"  failed: {c.get('reason')}", ""]
            continue
        lines.append(head)
        cols = (f"  {'path':<14} {'impl':<7} {'train ms [p25-p75]':>24} {'tok/s':>9} {'x dense':>8} "
                f"{'/ bound':>8} {'infer ms [p25-p75]':>24} {'tok/s':>9} {'x dense':>8} {'peak MiB':>9}")
        lines += [cols, "  " + "-" * (len(cols) - 2)]
        for name, r in c["paths"].items():
            lines.append(
                f"  {name:<14} {r['impl'] or '-':<7} "
                f"{r['train_ms_median']:>9.1f} [{r['train_ms_p25']:.1f}-{r['train_ms_p75']:.1f}]".ljust(49)
                + f" {r['train_tokens_per_s']:>9,.0f} {_fmt(r['train_vs_dense'], '7.2f')}x "
                f"{_fmt(r['train_over_bound'], '7.2f')}x "
                + f"{r['infer_ms_median']:>9.1f} [{r['infer_ms_p25']:.1f}-{r['infer_ms_p75']:.1f}]".rjust(24)
                + f" {r['infer_tokens_per_s']:>9,.0f} {_fmt(r['infer_vs_dense'], '7.2f')}x "
                f"{_fmt(r['peak_train_mib'], '9.1f')}")
        for name, k in c.get("compile", {}).items():
            if k.get("status") != "ok":
                lines.append(f"  compile {name}: failed: {k.get('reason')}")
                continue
            be = k["break_even_steps"]
            lines.append(f"  compile {name}: {k['compile_train_s']:.1f} s (+{k['compile_infer_s']:.1f} s inference); "
                         f"train x{k['speedup_train']:.2f}, inference x{k['speedup_infer']:.2f} vs eager; "
                         + (f"pays off after {be:,.0f} steps" if be else "never pays off (not faster)"))
        lines.append("")
    lines.append("x dense = dense step time / path step time (paired per round, median); / bound = path step "
                 "time / no-mixer step time; peak = one training step")
    return "\n".join(lines)


def run_model(args) -> Path:
    import torch

    from fibexp.model import mixers

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    threads = args.threads or n_threads()
    cases = list(QUICK_MODEL_CASES if args.quick else MODEL_CASES)
    if args.lengths:
        cases = [c for c in cases if c[1] in args.lengths] or [(("tiny" if t <= 256 else "paper-width"), t,
                                                                  max(1, 2048 // t)) for t in args.lengths]
    repeats = args.repeats or (2 if args.quick else max(MODEL_ROUNDS.values()))
    scan = list(QUICK_CROSSOVER_LENGTHS if args.quick else CROSSOVER_LENGTHS)
    tokens = 256 if args.quick else CROSSOVER_TOKENS
    compile_ = args.compile if args.compile is not None else not args.quick
    load_start, code_start = _load(), _code()
    started = time.time()
    print(f"model bench: {device}, {threads} threads, cases {', '.join(f'{p} T={t} x{b}' for p, t, b in cases)}; "
          f"load {load_start['load1']:.2f}", flush=True)

    crossover = {}
    for preset in (["tiny"] if args.quick else list(MODEL_PRESETS)):
        t0 = time.time()
        r = _run_json_child(["_crossover", "--preset", preset, "--lengths", *map(str, scan), "--tokens", str(tokens),
                             "--repeats", str(repeats), "--threads", str(threads), "--device", device], args.timeout)
        if r["status"] == "ok":
            pts = r["points"]
            crossover[preset] = {"points": pts, "train": crossover_length(pts, "train"),
                                 "infer": crossover_length(pts, "infer")}
            print(f"  crossover {preset}: gather beats mask from T={crossover[preset]['train']} (training), "
                  f"T={crossover[preset]['infer']} (inference)  ({time.time() - t0:.0f} s)", flush=True)
        else:
            crossover[preset] = r
            print(f"  crossover {preset}: {r['reason']}", flush=True)

    rounds = {t: args.repeats or (2 if args.quick else MODEL_ROUNDS.get(t, 5)) for _, t, _ in cases}
    results = []
    for preset, t, batch in cases:
        t0, load = time.time(), _load()
        cmd = ["_model_case", "--preset", preset, "--length", str(t), "--batch", str(batch), "--repeats",
               str(rounds[t]), "--threads", str(threads), "--device", device]
        env = None
        if compile_ and t <= COMPILE_MAX_T:
            cmd.append("--compile")
            env = {"TORCHINDUCTOR_FORCE_DISABLE_CACHES": "1"}  # cold compile times, as a fresh clone's first run
        r = _run_json_child(cmd, args.timeout, env)
        if r["status"] != "ok":
            r.update(preset=preset, T=t, batch=batch, tokens=t * batch)
        r.update(load_start=load, load_end=_load(), elapsed_s=time.time() - t0)
        if r["status"] == "ok":
            summarize_case(r)
        results.append(r)
        print(f"  {preset} T={t} x{batch}: {r['status']} ({r['elapsed_s']:.0f} s)", flush=True)
    checks = model_targets(results)
    load_end, code_end = _load(), _code()
    code_changed = _code_changed(code_start, code_end)

    print()
    print(model_table(results))
    print()
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
    if device == "cpu" and not args.quick and tiny.get("train") not in (None, mixers.CPU_MASK_BELOW):
        print(f"NOTE: set fibexp.model.mixers.CPU_MASK_BELOW = {tiny['train']} if this machine is the one to tune for "
              "(and the run was quiet)")
    if max(load_start["load1"], load_end["load1"]) > threads:
        print(f"WARNING: load average above {threads} (the threads used): other processes shared the cores, so "
              "the timings (2-thread ones most) are unreliable; rerun on an idle machine")
    print()
    print_checks(checks, code_changed)
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    report = {
        "benchmark": "model", "timestamp": stamp, "quick": bool(args.quick), "device": device,
        "config": {"presets": MODEL_PRESETS, "vocab": MODEL_VOCAB, "cases": [list(c) for c in cases],
                   "paths": MODEL_PATHS, "repeats": repeats, "threads": threads, "compile": compile_,
                   "rounds": {str(t): n for t, n in rounds.items()},
                   "crossover_lengths": scan, "crossover_tokens": tokens},
        "method": MODEL_METHOD, "machine": _machine(),
        "load_start": load_start, "load_end": load_end,
        "code": {"start": code_start, "end": code_end, "changed_during_run": code_changed},
        "elapsed_s": time.time() - started,
        "crossover": crossover, "auto_cpu_mask_below": mixers.CPU_MASK_BELOW,
        "results": results, "targets": checks,
    }
    print(f"\nload average: start {load_start['load1']:.2f}, end {load_end['load1']:.2f} (1 min); "
          f"{time.time() - started:.0f} s")
    return _write_report(args.out, "model", report)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="fibexp-bench", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True, metavar="{attention,model}")
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
    mod = sub.add_parser("model", help="the whole model: training step and inference of every mixer, "
                                       "the no-mixer bound, torch.compile, and auto's crossover")
    mod.add_argument("--lengths", type=int, nargs="+", default=None, metavar="T",
                     help="only these of the cases (tiny T=64 x16, 256 x8; paper-width T=1024 x2, 4096 x1)")
    mod.add_argument("--repeats", type=int, default=None,
                     help="timed rounds, median reported (default: 7 at T <= 256, 5 at 1024, 3 at 4096; --quick: 2)")
    mod.add_argument("--threads", type=int, default=None, help="torch threads (default: the CPUs this process may use)")
    mod.add_argument("--device", choices=("cpu", "cuda"), default=None, help="default: cuda when available")
    mod.add_argument("--compile", dest="compile", action="store_true", default=None,
                     help=f"measure torch.compile of {', '.join(COMPILE_PATHS)} (default: on, up to T={COMPILE_MAX_T}; "
                          "off with --quick)")
    mod.add_argument("--no-compile", dest="compile", action="store_false")
    mod.add_argument("--out", default="outputs/bench", help="output folder (default outputs/bench, relative to cwd)")
    mod.add_argument("--quick", action="store_true", help="smoke run in seconds (tiny preset, T=32 64 x2, 2 rounds)")
    mod.add_argument("--timeout", type=float, default=1800, help="seconds per (preset, T) process")
    for name in ("_measure", "_measure_mem_first"):  # internal: one fresh process per measurement
        m = sub.add_parser(name)
        m.add_argument("--path", choices=PATHS, required=True)
        m.add_argument("--length", type=int, required=True)
        m.add_argument("--repeats", type=int, default=1)
        m.add_argument("--threads", type=int, default=n_threads())
    for name in ("_model_case", "_crossover"):  # internal: one fresh process per (preset, T) / preset
        m = sub.add_parser(name)
        m.add_argument("--preset", choices=tuple(MODEL_PRESETS), required=True)
        m.add_argument("--length", type=int)
        m.add_argument("--lengths", type=int, nargs="+")
        m.add_argument("--batch", type=int)
        m.add_argument("--tokens", type=int, default=CROSSOVER_TOKENS)
        m.add_argument("--repeats", type=int, default=1)
        m.add_argument("--threads", type=int, default=n_threads())
        m.add_argument("--device", default="cpu")
        m.add_argument("--compile", action="store_true")
    args = parser.parse_args(argv)
    if args.cmd in ("attention", "model"):
        if args.repeats is not None and args.repeats < 1:
            parser.error("--repeats: must be >= 1")
        if args.lengths is not None and min(args.lengths) < 1:
            parser.error("--lengths: must be >= 1")
    if args.cmd == "attention":
        run_attention(args)
    elif args.cmd == "model":
        run_model(args)
    elif args.cmd == "_measure":
        _child_main(args)
    elif args.cmd == "_model_case":
        print(json.dumps(model_case(args.preset, args.length, args.batch, args.repeats, args.threads, args.device,
                                    args.compile)))
    elif args.cmd == "_crossover":
        print(json.dumps({"points": crossover_scan(args.preset, args.lengths, args.tokens, args.repeats,
                                                   args.threads, args.device)}))
    else:
        print(json.dumps(_measure_fallback_no_warmup(args.path, args.length, 1, args.threads, stagger_alpha())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
