"""`fibexp-bench cli`: how fast fibexp's commands answer `--help`, TAB completion and bad input.

Each case is a whole process, as a user starts it (`python -m fibexp.cli.<command> ...`: the console
scripts run the same `main`), timed `--repeats` times in rotating order (load changes hit every case
alike) beside the reference `python -c "import torch, lightning"`, the import these answers avoid.
Each case also runs once under a watcher that lists the heavy modules it imported (torch, Lightning,
MLflow, datasets, lm-eval, transformers): the answer must come before any of them. Refusals write
into a temporary folder, which must stay empty. Target: a median under 2 s on an idle machine (the
load average is recorded at the start and the end). JSON: <out>/cli-<stamp>.json and cli-latest.json."""
from __future__ import annotations

import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from fibexp.bench import harness

HEAVY = ("torch", "lightning", "mlflow", "datasets", "lm_eval", "transformers")
TARGET_S = 2.0
REFERENCE = "import torch, lightning"
# Runs a fibexp command as `python -m` would, then writes which heavy modules it imported to $FIBEXP_WATCH.
WATCH = """
import json, os, runpy, sys
module, sys.argv = sys.argv[1], [sys.argv[1], *sys.argv[2:]]
try:
    runpy.run_module(module, run_name="__main__", alter_sys=True)
except SystemExit:
    pass
finally:
    heavy = sorted({m.split(".")[0] for m in sys.modules} & set(os.environ["FIBEXP_HEAVY"].split(",")))
    with open(os.environ["FIBEXP_WATCH"], "w") as f:
        json.dump(heavy, f)
"""


def cases(tmp: Path) -> list[dict]:
    """(name, module, args, env, expected exit code) of every timed answer; `tmp` holds their inputs
    and receives whatever a refusal would wrongly create."""
    out = tmp / "outputs"
    run_dir = tmp / "run"  # a run dir as training leaves it, whose checkpoint is not even read
    (run_dir / "checkpoints").mkdir(parents=True, exist_ok=True)
    (run_dir / "checkpoints" / "last.ckpt").write_bytes(b"")
    (run_dir / "mlflow_run.json").write_text(json.dumps({"run_id": "0" * 32, "tracking_uri": f"sqlite:///{tmp}/no.db"}))
    (tmp / "empty.ckpt").write_bytes(b"")
    where = [f"paths.output_dir={out}", f"paths.cache_dir={out / 'cache'}"]
    none = f"sqlite:///{tmp}/no.db"

    def case(name, module, args=(), rc=2, env=None):
        return {"name": name, "module": f"fibexp.cli.{module}", "args": list(args), "env": env or {}, "rc": rc}

    return [
        case("fibexp-train --help", "train", ["--help"], rc=0),
        case("fibexp-train TAB (attention=)", "train", ["-sc", "query=bash"], rc=0,
             env={"COMP_LINE": "fibexp-train attention="}),
        case("fibexp-train TAB (trainer.)", "train", ["-sc", "query=bash"], rc=0, env={"COMP_LINE": "fibexp-train trainer."}),
        case("fibexp-train typo'd key", "train", [*where, "model.n_layer=3"]),
        case("fibexp-train word for an int", "train", [*where, "trainer.max_steps=abc"]),
        case("fibexp-train inf weight", "train", [*where, "data.mixture={drama:inf}"]),
        case("fibexp-train foreign _target_", "train", [*where, "model._target_=builtins.dict"]),
        case("fibexp-train empty checkpoint", "train", [*where, f"ckpt_path={tmp / 'empty.ckpt'}"]),
        case("fibexp-prepare --help", "prepare", ["--help"], rc=0),
        case("fibexp-prepare bad value", "prepare", [*where, "data.eval_tokens=-5"]),
        case("fibexp-generate --help", "generate", ["--help"], rc=0),
        case("fibexp-generate RUN (no --prompt)", "generate", [str(run_dir)]),
        case("fibexp-generate unknown run id", "generate", ["nosuchrun", "--prompt", "a", "--tracking-uri", none]),
        case("fibexp-eval --help", "eval", ["--help"], rc=0),
        case("fibexp-eval RUN --tasks nosuch", "eval", [str(run_dir), "--tasks", "nosuch"]),
        case("fibexp-export --help", "export", ["--help"], rc=0),
        case("fibexp-export unknown run id", "export", ["nosuchrun", "--tracking-uri", none]),
        case("fibexp-report --help", "report", ["--help"], rc=0),
        case("fibexp-upload --help", "upload", ["--help"], rc=0),
        case("fibexp-plan --help", "plan", ["--help"], rc=0),
        case("fibexp-bench --help", "bench", ["--help"], rc=0),
    ]


def _time(cmd: list[str], env: dict) -> tuple[float, float, int]:
    """(wall s, CPU s of the child, exit code) of one process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, env=env, stdin=subprocess.DEVNULL, timeout=600)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), proc.returncode


def imported(module: str, args: list[str], env: dict | None = None) -> tuple[list[str], subprocess.CompletedProcess]:
    """The heavy modules (HEAVY) a command imported, and its completed process."""
    with tempfile.TemporaryDirectory() as tmp:
        watch = Path(tmp) / "imported.json"
        full = {**os.environ, **(env or {}), "FIBEXP_WATCH": str(watch), "FIBEXP_HEAVY": ",".join(HEAVY)}
        proc = subprocess.run([sys.executable, "-c", WATCH, module, *args], capture_output=True, text=True,
                              env=full, stdin=subprocess.DEVNULL, timeout=600)
        return json.loads(watch.read_text()), proc


def _stats(xs: list[float]) -> dict:
    q1, q3 = harness.quartiles(xs)
    return {"median_s": statistics.median(xs), "q1_s": q1, "q3_s": q3, "min_s": min(xs), "max_s": max(xs)}


def measure(repeats: int, only: str | None = None) -> dict:
    """Every case (and the reference) `repeats` times, rotating; the heavy imports of each once."""
    with tempfile.TemporaryDirectory(prefix="fibexp-bench-cli-") as t:
        tmp = Path(t)
        todo = [c for c in cases(tmp) if not only or only in c["name"]]
        env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "HYDRA_"))}
        commands = {"reference: python -c \"import torch, lightning\"": ([sys.executable, "-c", REFERENCE], env)}
        for c in todo:
            commands[c["name"]] = ([sys.executable, "-m", c["module"], *c["args"]], {**env, **c["env"]})
        walls = {n: [] for n in commands}
        cpus = {n: [] for n in commands}
        codes = {n: set() for n in commands}
        names = list(commands)
        for r in range(repeats):
            for n in names[r % len(names):] + names[:r % len(names)]:
                wall, cpu, rc = _time(*commands[n])
                walls[n].append(wall)
                cpus[n].append(cpu)
                codes[n].add(rc)
        rows = []
        for c in todo:
            heavy, _ = imported(c["module"], c["args"], {**env, **c["env"]})
            n = c["name"]
            rows.append({"name": n, "command": f"python -m {c['module']} " + " ".join(c["args"]), "env": c["env"],
                         "exit_codes": sorted(codes[n]), "expected_exit": c["rc"], "heavy_imports": heavy,
                         **_stats(walls[n]), "cpu_median_s": statistics.median(cpus[n]), "walls_s": walls[n]})
        created = sorted(str(p.relative_to(tmp)) for p in (tmp / "outputs").rglob("*")) if (tmp / "outputs").exists() else []
        ref = next(iter(commands))
        reference = {"name": ref, **_stats(walls[ref]), "cpu_median_s": statistics.median(cpus[ref]),
                     "walls_s": walls[ref]}
    return {"rows": rows, "reference": reference, "created": created}


def run(args) -> dict:
    start_load = harness.load()
    got = measure(args.repeats, args.only)
    checks = []
    for row in got["rows"]:
        ok = row["exit_codes"] == [row["expected_exit"]] and not row["heavy_imports"] and row["median_s"] < TARGET_S
        row["result"] = "PASS" if ok else "FAIL"
        checks.append(harness.check(row["name"], row["median_s"], f"< {TARGET_S} s, exit {row['expected_exit']}, "
                                    "no heavy import", ok))
    checks.append(harness.check("nothing created by a refusal", len(got["created"]), "0 files", not got["created"]))
    report = {"kind": "cli", "timestamp": harness.timestamp(), "argv": sys.argv, "repeats": args.repeats,
              "target_s": TARGET_S, "heavy": list(HEAVY), "machine": harness.machine(), "load_start": start_load,
              "load_end": harness.load(), "reference": got["reference"], "cases": got["rows"],
              "created": got["created"], "checks": checks}
    ref = got["reference"]
    print(f"{'case':<38} {'median':>7} {'q1-q3':>13} {'cpu':>6}  heavy imports  exit")
    print(f"{ref['name'][:38]:<38} {ref['median_s']:6.2f}s {ref['q1_s']:5.2f}-{ref['q3_s']:5.2f}s "
          f"{ref['cpu_median_s']:5.2f}s  (torch, lightning)")
    for row in got["rows"]:
        print(f"{row['name'][:38]:<38} {row['median_s']:6.2f}s {row['q1_s']:5.2f}-{row['q3_s']:5.2f}s "
              f"{row['cpu_median_s']:5.2f}s  {', '.join(row['heavy_imports']) or '-':<13}  "
              f"{','.join(map(str, row['exit_codes']))}")
    print(f"load average {start_load['load1']:.2f} at the start, {report['load_end']['load1']:.2f} at the end "
          f"({harness.n_threads()} CPUs)")
    harness.print_checks(checks, False)
    harness.write_report(args.out, "cli", report)
    return report
