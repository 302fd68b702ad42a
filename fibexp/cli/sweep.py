"""fibexp-sweep: follow a sweep from any shell, whether or not the process that launched it lives.

  fibexp-sweep list                 the sweeps under outputs/, newest first, with their counts
  fibexp-sweep status SWEEP         each cell as MLflow and the scheduler see it, and the parent
  fibexp-sweep wait SWEEP           progress lines until the sweep is closed; exit 1 if a cell failed
  fibexp-sweep cancel SWEEP         stop a detached sweep's jobs: cells checkpoint and end KILLED
  fibexp-sweep rerun RUN_ID         train a logged run again as a new run (a sweep's parent: its failed cells)

SWEEP is a sweep's id (`table1-1a2b3c4d`) or its home folder. Bad input is one line, exit 2,
before MLflow (or torch) is imported."""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from fibexp.errors import Refusal

PROG = "fibexp-sweep"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):
        print(f"{PROG}: error: {message}", file=sys.stderr)
        sys.exit(2)


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog=PROG, description=__doc__.split("\n\n")[0])
    p.add_argument("--output-dir", default="outputs", type=Path, help="paths.output_dir of the sweeps (default outputs)")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)
    sub.add_parser("list", help="the sweeps, newest first, with their counts")
    for name, text in (("status", "each cell's state"), ("wait", "progress until the sweep is closed"),
                       ("cancel", "stop a detached sweep's jobs")):
        s = sub.add_parser(name, help=text)
        s.add_argument("sweep", help="a sweep id or its home folder")
        if name == "wait":
            s.add_argument("--poll-s", type=float, default=5.0, help="seconds between looks (default 5)")
    r = sub.add_parser("rerun", help="train a logged run again (a sweep's parent id: its failed cells)")
    r.add_argument("run_id", help="an MLflow run id")
    r.add_argument("--tracking-uri", default=None,
                   help="the store (default $MLFLOW_TRACKING_URI, else sqlite under --output-dir)")
    return p


def _client(record: dict):
    from fibexp.tracking import waiting

    return waiting.Client(record["uri"], record.get("outage_wait_s", 60))


def _runs(client, record: dict) -> dict[str, object]:
    """The newest run of each cell (by config hash) that carries the sweep's tag: one query."""
    found = client.search_runs([record["experiment_id"]], f"tags.`fibexp.sweep` = '{record['id']}'",
                               order_by=["attributes.start_time DESC"], max_results=50000)
    newest = {}
    for r in found:
        newest.setdefault(r.data.tags.get("fibexp.config_hash"), r)
    return newest


def _jobs(record: dict) -> dict:
    from fibexp.sweep import scheduler

    ids = [c["job"] for c in record["cells"] if c.get("job")] + ([record["closer"]] if record.get("closer") else [])
    return scheduler.states(ids) if ids else {}


def status(home: Path) -> int:
    from fibexp.sweep import state
    from fibexp.sweep.progress import headline

    record = state.read(home)
    client = _client(record)
    runs, jobs = _runs(client, record), _jobs(record)
    parent = client.get_run(record["parent"])
    code = record.get("code")
    print(f"Sweep {record['id']}: parent run {record['parent']} {parent.info.status}; home {home}"
          + (f"; code {code['commit'][:12]}+{code['diff']}" if code else "")
          + (f"; at most {record['array_parallelism']} cells at once" if record.get("array_parallelism") else ""))
    rows, open_cells = [], 0
    for c in record["cells"]:
        run = runs.get(c["hash"])
        job = jobs.get(c.get("job")) if c.get("job") else None
        if c.get("outcome") and run is None:
            rows.append((c["name"], c["outcome"][0], "-", f"run {c['outcome'][1] or '-'}"))
            continue
        mlflow = run.info.status if run else "-"
        detail = ""
        if run and run.info.status == "FINISHED":
            detail = headline(run.data.metrics)
        elif run and run.info.status == "FAILED":
            detail = (run.data.tags.get("fibexp.failure") or "").splitlines()[0][:120] if run.data.tags.get(
                "fibexp.failure") else ""
        elif run and run.info.status == "RUNNING":
            history = client.get_metric_history(run.info.run_id, "train/loss")
            detail = f"step {max(m.step for m in history)}" if history else "starting"
        sched = f"{job.state} {c['job']}" + (f" ({job.reason})" if job.reason and not job.ended else "") if job else "-"
        if job and job.requeues:
            detail += f"  requeued {job.requeues}x"
        if job and not job.ended:
            open_cells += 1
        rows.append((c["name"], mlflow, sched, detail))
    width = max(len(r[0]) for r in rows)
    for name, mlflow, sched, detail in rows:
        print(f"  {name:<{width}}  {mlflow:<9} {sched:<28} {detail}".rstrip())
    if any(j.source == "squeue" for j in jobs.values()):
        print("Slurm states from squeue where sacct is unavailable, has no record yet or lags behind the queue")
    closer = record.get("closer")
    if closer:
        said = jobs.get(closer)
        where = f"{said.state}" + (f" ({said.reason})" if said and said.reason else "") if said else "?"
        print(f"The parent is closed by job {closer} ({where}) once every cell's job has ended: "
              f"{open_cells} of {sum(1 for c in record['cells'] if c.get('job'))} still queued or running")
    return 0


def wait(home: Path, poll_s: float) -> int:
    """Progress lines as the sweep's own (`[k/N] start`, `[k/N] done`) until it is closed, then its summary."""
    from fibexp.sweep import state
    from fibexp.sweep.progress import Progress

    record = state.read(home)
    client = _client(record)
    todo = [c for c in record["cells"] if not c.get("outcome")]
    progress = Progress(client, record["experiment_id"], [c["name"] for c in todo], [c["hash"] for c in todo])
    while True:
        jobs = _jobs(record)
        runs = _runs(client, record)
        for i, c in enumerate(todo):
            job, run = jobs.get(c.get("job")), runs.get(c["hash"])
            if (job and job.state != "PENDING") or run is not None:
                progress.started(i)
            if (job and job.ended) or (run is not None and run.info.status != "RUNNING" and not job):
                progress.ended(i)
        closer = jobs.get(record.get("closer"))
        status = client.get_run(record["parent"]).info.status
        if (closer.ended if closer else status != "RUNNING") and status != "RUNNING":
            break
        if closer and closer.ended:  # ended without closing the parent (cancelled, killed)
            print(f"{PROG}: the closing job {record['closer']} ended {closer.state} and left the parent RUNNING; "
                  f"close it: {PROG} cancel {record['id']}", file=sys.stderr)
            return 1
        time.sleep(poll_s)
    summary = home / "summary.txt"
    if summary.is_file():
        print(summary.read_text(), end="")
    return 0 if status == "FINISHED" else 1


def cancel(home: Path) -> int:
    """As Ctrl-C on a waiting sweep: the closing job cancelled, every cell's job signalled
    (SIGTERM: it checkpoints, its run ends KILLED), then the sweep closed here, KILLED."""
    from fibexp.sweep import detach, scheduler, state

    record = state.read(home)
    if not record.get("closer"):
        raise Refusal("sweep", record["id"], "a detached SLURM sweep (one that waits is stopped by Ctrl-C or "
                      "`kill <pid>` of its process)")
    scheduler.cancel([record["closer"]])
    jobs = [c["job"] for c in record["cells"] if c.get("job")]
    scheduler.cancel(sorted({j.split("_")[0] for j in jobs}))
    print(f"{PROG}: cancelling the jobs of sweep {record['id']}; waiting for each cell to checkpoint", flush=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and (not all(s.ended for s in scheduler.states(jobs).values())
                                           or scheduler.queued(jobs + [record["closer"]])):
        time.sleep(1)
    counts = detach.close(str(home), detach.stopped_by("SIGTERM"))
    return 0 if counts is not None else 1


def list_sweeps(output_dir: Path) -> int:
    from fibexp.sweep import state

    homes = state.homes(output_dir)
    if not homes:
        print(f"no sweeps under {output_dir / 'sweeps'}")
        return 0
    records = [(h, state.read(h)) for h in homes]
    parents = {}
    for h, r in records:
        try:
            parents[r["id"]] = _client(r).get_run(r["parent"])
        except Exception as e:  # a sweep whose store is gone is still listed
            parents[r["id"]] = e
    for h, r in records:
        p = parents[r["id"]]
        tags = getattr(getattr(p, "data", None), "tags", {})
        counts = ", ".join(f"{tags[f'fibexp.{k}']} {k}" for k in ("finished", "skipped", "failed", "killed")
                           if f"fibexp.{k}" in tags)
        how = "detached" if r.get("closer") else r.get("launcher", "")
        print(f"{r['id']:<28} {getattr(getattr(p, 'info', None), 'status', 'UNREACHABLE'):<9} "
              f"{len(r['cells']):>4} cells  {counts or '-'}  ({how})  {h}")
    return 0


def rerun(run_id: str, output_dir: Path, uri: str | None) -> int:
    """Each run trained again (`fibexp.sweep.rerun`); exit 1 unless every rerun FINISHED."""
    from fibexp.sweep.rerun import Rerun
    from fibexp.tracking import store, waiting

    uri = store.resolve_uri(uri, output_dir)
    if uri.startswith("sqlite:///") and not Path(uri.removeprefix("sqlite:///")).is_file():  # not made here
        raise Refusal("--tracking-uri", uri, "an existing store (give --tracking-uri, or --output-dir of its runs)")
    reruns = Rerun(waiting.Client(uri, 60), output_dir)
    old = reruns.run_of(run_id)
    targets = reruns.targets(old)
    if not targets:
        print(f"{PROG}: sweep {old.data.tags.get('fibexp.sweep')} has no failed cell to rerun")
        return 0
    ended = [reruns.again(t) for t in targets]
    return 0 if all(s == "FINISHED" for s in ended) else 1


def main(argv: list[str] | None = None) -> None:
    args = _parser().parse_args(argv)
    try:
        if args.command == "list":
            sys.exit(list_sweeps(args.output_dir))
        if args.command == "rerun":
            sys.exit(rerun(args.run_id, args.output_dir, args.tracking_uri))
        from fibexp.sweep import state

        home = state.find(args.sweep, args.output_dir)
        if args.command == "status":
            sys.exit(status(home))
        if args.command == "wait":
            sys.exit(wait(home, args.poll_s))
        sys.exit(cancel(home))
    except Refusal as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
