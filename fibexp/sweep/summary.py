"""A sweep's summary, printed and tagged on its parent run when the sweep ends (fibexp.sweep.runner
when it waited for its cells, fibexp.sweep.detach's closing job when it did not): each cell's
status, run id and headline or failure, the seed groups and the report attached to the parent,
the parent closed, and the command that resumes a stopped sweep."""
from __future__ import annotations

import contextlib
import logging
import os
import shlex
import sys

from fibexp.report import groups as seed_groups, render as report
from fibexp.sweep.progress import headline

log = logging.getLogger("fibexp.sweep")


def _detail(client, status: str, run_id: str | None) -> str:
    """After a cell's run id in the summary: its headline metric, or why it failed (the run's
    fibexp.failure tag: exception or scheduler reason)."""
    if not run_id or status in ("duplicate", "pending"):
        return ""
    run = client.get_run(run_id)
    if status == "failed":
        reason = run.data.tags.get("fibexp.failure", "")
        return f"  ({reason.splitlines()[0][:200]})" if reason else ""
    metric = headline(run.data.metrics) if run.info.status == "FINISHED" else ""
    return f"  {metric}" if metric else ""


@contextlib.contextmanager
def _quiet_downloads():
    """MLflow draws a progress bar per downloaded artifact unless told not to."""
    before = os.environ.get("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR")
    os.environ["MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"] = "false"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR")
        else:
            os.environ["MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"] = before


def launched_args() -> list[str]:
    """The arguments that launched this sweep, as its user typed them (what fibexp.cli.app appends dropped)."""
    return [a for a in sys.argv[1:] if not a.startswith(("hydra/help=", "+hydra.callbacks.fibexp_preflight"))]


def resume_command() -> str:
    """The command that launched this sweep, as its user typed it."""
    return shlex.join(["fibexp-train", *launched_args()])


def summarise(client, experiment_id: str, parent: str, sweep_id: str, names, outcome, stopped, where,
              cut: str | None = None) -> dict:
    """The sweep's last lines: its counts, each cell's line, the parent run's tags and report, the
    parent closed; exit 130/143/129 when `stopped`, 1 when a cell failed, else the counts."""
    counts = {k: 0 for k in ("finished", "skipped", "failed", "killed", "pending", "busy", "duplicate")}
    lines = []
    for i, name in enumerate(names):
        status, run_id = outcome[i]
        counts[status] += 1
        lines.append(f"  {status:<9} {name:<32} {run_id or '-'}{_detail(client, status, run_id)}")
    always = ("finished", "skipped", "failed")
    print(f"\nSweep {sweep_id}: " + ", ".join(f"{v} {k}" for k, v in counts.items() if v or k in always), flush=True)
    if cut:  # sweep.max_failures stopped it
        print(cut, flush=True)
        client.set_tag(parent, "fibexp.cut", cut)
    elif "fibexp.cut" in client.get_run(parent).data.tags:  # an earlier launch's
        client.delete_tag(parent, "fibexp.cut")
    print("\n".join(lines), flush=True)
    for k, v in counts.items():
        client.set_tag(parent, f"fibexp.{k}", str(v))
    run_ids = [run_id for status, run_id in outcome.values() if status != "duplicate" and run_id]
    client.set_tag(parent, "fibexp.runs", ",".join(run_ids))  # skipped cells carry another sweep's tag
    if not stopped:
        seed_groups.publish(client, experiment_id, sweep_id, parent, run_ids)
        try:
            attached = report.attach_to_parent(client, experiment_id, sweep_id, parent, run_ids)
            with _quiet_downloads():
                for name in attached:
                    client.download_artifacts(parent, name, str(where))
            print(f"Report of sweep {sweep_id}: {', '.join(attached)} attached to its parent run {parent} "
                  f"and in {where}", flush=True)
        except Exception as e:  # a finished sweep is not failed by its report
            log.error("report of sweep %s not attached: %s: %s", sweep_id, type(e).__name__, e)
    client.set_terminated(parent, "KILLED" if stopped else "FAILED" if counts["failed"] else "FINISHED")
    if stopped:
        print(f"fibexp-train: sweep {sweep_id} stopped by {stopped.name}: {counts['finished'] + counts['skipped']} "
              f"cell(s) finished, {counts['killed'] + counts['pending']} to go; resume with: {resume_command()}",
              file=sys.stderr, flush=True)
        sys.exit(stopped.exit_code)
    if counts["failed"]:
        print(f"{counts['failed']} cell(s) failed: their MLflow runs hold the reason (tag fibexp.failure, "
              "traceback.txt or failure.txt)", file=sys.stderr)
        sys.exit(1)
    return counts
