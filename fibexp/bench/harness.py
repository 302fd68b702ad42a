"""What both benchmarks measure with: fresh child processes, clocks, memory peaks, medians and
spreads, the machine and code a run saw, PASS/FAIL lines and the JSON report. Knows no case."""
from __future__ import annotations

import ctypes
import datetime as _dt
import gc
import hashlib
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

from fibexp.model import kernels, mixers
from fibexp.science import patterns

MIB = 1 << 20
# Children are spawned through the CLI, so the hidden subcommands are parsed where the public ones are.
CHILD_MODULE = "fibexp.cli.bench"
MEASURED_MODULES = {"kernels": kernels, "mixers": mixers, "patterns": patterns}  # hashed into every report


def n_threads() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - non-Linux
        return os.cpu_count() or 1


# ---------------------------------------------------------------------------- child processes

def run_json_child(cmd: list[str], timeout: float, env: dict | None = None) -> dict:
    """`python -m fibexp.cli.bench <cmd>` in a fresh process (no allocator state leaks between
    measurements); its last stdout line is its JSON."""
    try:
        proc = subprocess.run([sys.executable, "-m", CHILD_MODULE, *cmd], capture_output=True, text=True,
                              timeout=timeout, env={**os.environ, **(env or {})})
    except subprocess.TimeoutExpired:
        return {"status": "failed", "reason": f"timed out after {timeout:.0f} s"}
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
        return {"status": "failed", "reason": f"exit {proc.returncode}: " + " | ".join(tail)}
    return {"status": "ok", **json.loads(proc.stdout.strip().splitlines()[-1])}


# ---------------------------------------------------------------------------- memory

def status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def reset_peak() -> bool:
    """Reset VmHWM to the current RSS; False when the kernel does not allow it."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        return False
    # the reset worked when the peak mark now sits at (about) the current RSS
    return status_kib("VmHWM") - status_kib("VmRSS") < 1024


def trim() -> None:
    """Return freed memory to the kernel, so a later RSS reading is the live memory."""
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except OSError:  # pragma: no cover - not glibc
        pass


def peak_mib(fn, device) -> tuple[float | None, str]:
    """Peak memory one call adds: CUDA max_memory_allocated, on CPU VmHWM - VmRSS before."""
    if device.type == "cuda":
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        fn()
        torch.cuda.synchronize()
        return (torch.cuda.max_memory_allocated() - before) / MIB, "cuda max_memory_allocated"
    trim()
    rss = status_kib("VmRSS")
    if not reset_peak():
        fn()
        return None, "unavailable (/proc/self/clear_refs not writable)"
    fn()
    return max(status_kib("VmHWM") - rss, 0) / 1024, "VmHWM - VmRSS"


# ---------------------------------------------------------------------------- timing and statistics

class Clock:
    """Wall and process-CPU milliseconds of a call, synchronising CUDA around it."""

    def __init__(self, device):
        self.sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)

    def __call__(self, fn) -> tuple[float, float]:
        self.sync()
        w0, c0 = time.perf_counter(), time.process_time()
        fn()
        self.sync()
        return (time.perf_counter() - w0) * 1e3, (time.process_time() - c0) * 1e3


def rounds(fns: dict, repeats: int, clock) -> dict[str, dict[str, list[float]]]:
    """Time every fn once per round, the starting one rotating, so load changes hit all alike."""
    names = list(fns)
    out = {n: {"wall": [], "cpu": []} for n in names}
    for r in range(repeats):
        for n in names[r % len(names):] + names[:r % len(names)]:
            wall, cpu = clock(fns[n])
            out[n]["wall"].append(wall)
            out[n]["cpu"].append(cpu)
    return out


def median(xs):
    return statistics.median(xs) if xs else None


def quartiles(xs):
    if len(xs) < 2:
        return (xs[0], xs[0]) if xs else (None, None)
    q = statistics.quantiles(xs, n=4, method="inclusive")
    return q[0], q[2]


def paired(num: list[float], den: list[float]) -> float | None:
    """Median over rounds of num_r / den_r."""
    return statistics.median(a / b for a, b in zip(num, den)) if num and den else None


# ---------------------------------------------------------------------------- what a run saw

def machine() -> dict:
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


def code() -> dict:
    """Which kernel code ran: git HEAD, dirty flag and sha256 of the measured modules (others
    edit them concurrently; compared at the start and the end of a run)."""
    files = {name: Path(module.__file__).resolve() for name, module in MEASURED_MODULES.items()}
    info = {f"{n}_sha256": hashlib.sha256(f.read_bytes()).hexdigest()[:16] for n, f in files.items()}
    try:
        git = ["git", "-C", str(Path(__file__).resolve().parents[2])]
        info["git_head"] = subprocess.run(git + ["rev-parse", "--short", "HEAD"], capture_output=True,
                                          text=True, timeout=10).stdout.strip() or None
        dirty = subprocess.run(git + ["status", "--porcelain", "--", *map(str, files.values())],
                               capture_output=True, text=True, timeout=10).stdout.strip()
        info["measured_modules_dirty"] = bool(dirty)
    except (OSError, subprocess.SubprocessError):
        info["git_head"] = None
    return info


def code_changed(start: dict, end: dict) -> bool:
    return any(start[k] != end[k] for k in start if k.endswith("_sha256"))


def load() -> dict:
    """The load average: on a shared machine it says how far the timings can be trusted."""
    one, five, fifteen = os.getloadavg()
    try:
        text = subprocess.run(["uptime"], capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        text = None
    return {"load1": one, "load5": five, "load15": fifteen, "uptime": text,
            "time": _dt.datetime.now().isoformat(timespec="seconds")}


# ---------------------------------------------------------------------------- reporting

def fmt(x, spec):
    return "-" if x is None else format(x, spec)


def check(name: str, value, limit: str, passed: bool | None) -> dict:
    """One target; passed None (its lengths were not run) is 'n/a'."""
    return {"target": name, "value": value, "limit": limit,
            "result": "n/a" if passed is None else ("PASS" if passed else "FAIL")}


def print_checks(checks: list[dict], changed: bool) -> None:
    """PASS/MISS per target, and a warning when the measured code changed under the run."""
    for c in checks:
        v = "-" if c["value"] is None else f"{c['value']:.3f}"
        print(f"{c['result']:<4} {c['target']}: {v} (target {c['limit']})")
    if changed:
        print("WARNING: the measured modules changed on disk during the run; figures mix two versions")


def timestamp() -> str:
    return _dt.datetime.now().strftime("%Y%m%d-%H%M%S")


def write_report(out: str, kind: str, report: dict) -> Path:
    """outputs/bench/<kind>-<stamp>.json and <kind>-latest.json; prints both paths."""
    out_dir = Path(out)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{kind}-{report['timestamp']}.json"
    text = json.dumps(report, indent=1)
    path.write_text(text)
    (out_dir / f"{kind}-latest.json").write_text(text)
    print(f"JSON: {path.resolve()} (and {(out_dir / f'{kind}-latest.json').resolve()})")
    return path
