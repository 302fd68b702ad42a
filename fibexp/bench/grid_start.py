"""`fibexp-bench grid`: how long a sweep takes, from its command to its first job, to compose every
cell and check it (the validation pass each cell must pass before anything starts), by default the
paper grid (`--config-name reproduce scale=paper`). Each repeat is a fresh process, as a launch is:
the process's wall time, and inside it the time to compose the master config and expand the grid,
then to compose and check the cells (`fibexp.sweep.composed_and_checked`, what the sweeper runs).
`--skip TEXT` leaves out the cells one of whose overrides contains TEXT (the paper grid's graft
cells need Qwen3-0.6B's files, which an offline machine lacks: `--skip graft`). Target: under 30 s
on an idle machine (load recorded at the start and the end). JSON: <out>/grid-<stamp>.json and
grid-latest.json."""
from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

from fibexp.bench import harness

TARGET_S = 30.0


def child(config_name: str, overrides: list[str], skip: str | None) -> dict:
    """One launch's composing and checking, timed in this (fresh) process."""
    t0 = time.perf_counter()
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.hydra_config import HydraConfig

    from fibexp.config import schema
    from fibexp.config.overrides import expand
    from fibexp.sweep.runner import composed_and_checked

    conf = schema.CONF_DIR
    sweeps = str(Path(conf).parent / "sweeps")
    t1 = time.perf_counter()
    with initialize_config_dir(sweeps, version_base="1.3"):
        loader = GlobalHydra.instance().config_loader()
        master = compose(config_name, overrides=[f"hydra.searchpath=[file://{conf}]", *overrides],
                         return_hydra_config=True)
        HydraConfig.instance().set_config(master)
        cells = expand([dict(g) for g in master.hydra.sweeper.grids], overrides, loader)
        skipped = [c for c in cells if skip and any(skip in o for o in c)]
        cells = [c for c in cells if c not in skipped]
        t2 = time.perf_counter()
        composed_and_checked(cells, master, loader)
        t3 = time.perf_counter()
    return {"cells": len(cells), "skipped": len(skipped), "import_s": t1 - t0, "expand_s": t2 - t1,
            "compose_check_s": t3 - t2}


def run(args) -> dict:
    start_load = harness.load()
    cmd = ["_grid", "--config-name", args.config_name, *(["--skip", args.skip] if args.skip else []), "--",
           *args.overrides]
    rows = []
    for _ in range(args.repeats):
        t = time.perf_counter()
        got = harness.run_json_child(cmd, timeout=600)
        got["process_s"] = time.perf_counter() - t
        rows.append(got)
        if got["status"] != "ok":
            break
    ok = [r for r in rows if r["status"] == "ok"]
    summary = {k: _spread([r[k] for r in ok]) for k in ("process_s", "compose_check_s", "expand_s", "import_s")} if ok else {}
    passed = bool(ok) and len(ok) == len(rows) and summary["process_s"]["median"] < TARGET_S
    checks = [harness.check(f"{args.config_name} {' '.join(args.overrides)}: command to first job",
                            summary.get("process_s", {}).get("median"), f"< {TARGET_S:.0f} s", passed)]
    report = {"kind": "grid", "timestamp": harness.timestamp(), "argv": sys.argv, "config_name": args.config_name,
              "overrides": args.overrides, "skip": args.skip, "repeats": args.repeats, "target_s": TARGET_S,
              "machine": harness.machine(), "load_start": start_load, "load_end": harness.load(),
              "runs": rows, "summary": summary, "checks": checks}
    if ok:
        print(f"{ok[0]['cells']} cells ({ok[0]['skipped']} skipped), {len(ok)} fresh processes; median (min-max):")
        for k, what in (("process_s", "whole process"), ("compose_check_s", "compose and check the cells"),
                        ("expand_s", "compose the sweep, expand its grid"), ("import_s", "imports")):
            s = summary[k]
            print(f"  {what:<36} {s['median']:6.1f} s  ({s['min']:.1f}-{s['max']:.1f})")
    else:
        print(f"failed: {rows[-1].get('reason')}")
    print(f"load average {start_load['load1']:.2f} at the start, {report['load_end']['load1']:.2f} at the end "
          f"({harness.n_threads()} CPUs)")
    harness.print_checks(checks, False)
    harness.write_report(args.out, "grid", report)
    return report


def _spread(xs: list[float]) -> dict:
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs), "all": xs}
