"""MLflow plumbing: where the store is, making sure it exists once, and runs that can be
resumed (same run id across restarts) and compared (tags of the contract, flat params), and
how the MLflow UI presents them (experiment kind, run descriptions, a saved runs-table view)."""
from __future__ import annotations

import fcntl
import json
import logging
import os
import re
import socket
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient

from fibexp.errors import Refusal
from fibexp.tracking import journal, waiting


log = logging.getLogger("fibexp.tracking.store")


class TrackingError(Refusal, RuntimeError):
    """The tracking store cannot be used; refused before any compute."""


def resolve_uri(configured: str | None, output_dir: Path) -> str:
    """logger.tracking_uri, else $MLFLOW_TRACKING_URI, else a sqlite db under outputs/."""
    return configured or os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{Path(output_dir).resolve()}/mlflow.db"


def check_reachable(uri: str, timeout: float = 20.0) -> None:
    if uri.startswith(("http://", "https://")):
        try:
            with urllib.request.urlopen(uri.rstrip("/") + "/health", timeout=timeout) as r:
                r.read()
        except (urllib.error.URLError, OSError) as e:
            raise TrackingError("logger.tracking_uri", f"{uri} unreachable ({getattr(e, 'reason', e)})", "a running "
                                "server (`make mlflow-server`), or null for the local sqlite store") from None


def ensure_experiment(uri: str, name: str, artifact_root: Path, wait_s: float = waiting.WAIT_S) -> str:
    """Create the store (schema) and the experiment once, with artifacts pinned under outputs/;
    a locked store is waited for up to `wait_s` (logger.outage_wait_s)."""
    check_reachable(uri)
    if not uri.startswith("sqlite:///"):
        return _ensure_experiment(uri, name, artifact_root, wait_s)
    db = Path(uri[len("sqlite:///"):])
    db.parent.mkdir(parents=True, exist_ok=True)
    # MLflow builds a new sqlite store's schema unguarded: of two runs started at once on a fresh
    # store, one fails with "table ... already exists" (measured). One process at a time makes it.
    with open(db.with_name(db.name + ".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _ensure_experiment(uri, name, artifact_root, wait_s)


def _ensure_experiment(uri: str, name: str, artifact_root: Path, wait_s: float) -> str:
    client = waiting.Client(uri, wait_s)
    exp = client.get_experiment_by_name(name)
    if exp is None:
        location = None if uri.startswith(("http://", "https://")) else (Path(artifact_root).resolve() / name).as_uri()
        try:
            return client.create_experiment(name, artifact_location=location, tags=experiment_tags())
        except MlflowException:  # another process created it first (runs started at once)
            exp = client.get_experiment_by_name(name)
            if exp is None:
                raise
    for key, value in experiment_tags().items():  # a store made before fibexp set them; a user's kind is kept
        if key not in exp.tags:
            shared_write(client.set_experiment_tag, exp.experiment_id, key, value)
    return exp.experiment_id


def shared_write(call, *args, **kwargs):
    """A write that inserts a row shared by an experiment's runs (an experiment tag, a dataset)
    races in MLflow's sqlite store, which SELECTs, then INSERTs: of processes writing the same new
    row at once, all but one fail with a UNIQUE constraint (measured: 3 of 4 for a new tag, 5 of
    20 for dataset inputs, each such failure a failed cell). Once the row exists the same write
    finds it, so retry."""
    for attempt in range(3):
        try:
            return call(*args, **kwargs)
        except MlflowException as e:
            if "UNIQUE constraint" not in str(e) or attempt == 2:
                raise


def git_sha(root: Path) -> str:
    """Commit of the code that ran, with '-dirty' when the work tree differs from it."""
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True,
                             check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True).stdout.strip()
        return sha + ("-dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def flatten(tree: dict, prefix: str = "") -> dict[str, str]:
    """Nested config -> {"model.n_layers": "4", ...} (the params contract: keys joined with '.')."""
    out = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flatten(value, name + "."))
        else:
            out[name] = str(value)
    return out


def log_params(client: MlflowClient, run_id: str, params: dict[str, str]) -> None:
    from mlflow.entities import Param

    items = [Param(k, v[:6000]) for k, v in sorted(params.items())]
    for i in range(0, len(items), 100):
        client.log_batch(run_id, params=items[i:i + 100])


def find_runs(client: MlflowClient, experiment_id: str, config_hash: str, status: str | None = None):
    query = f"tags.`fibexp.config_hash` = '{config_hash}'"
    if status:
        query += f" and attributes.status = '{status}'"
    return client.search_runs([experiment_id], query, order_by=["attributes.start_time DESC"])


def live_run(client: MlflowClient, run_id: str, experiment_id: str):
    """`run_id`'s run when it is a live run of this experiment in the client's store, else None."""
    try:
        found = client.get_run(run_id)
    except MlflowException as e:
        if e.error_code == "RESOURCE_DOES_NOT_EXIST":
            return None
        raise
    return found if found.info.lifecycle_stage == "active" and found.info.experiment_id == experiment_id else None


def finished_run(client: MlflowClient, run_dir: Path, experiment_id: str):
    """The run dir's recorded MLflow run when it is FINISHED in the client's store, else None."""
    recorded = journal.recorded_run(run_dir)
    found = live_run(client, recorded["run_id"], experiment_id) if recorded else None
    return found if found is not None and found.info.status == "FINISHED" else None


def distinct_name(client: MlflowClient, experiment_id: str, name: str, config_hash: str) -> str:
    """`name`, or `name` and the config's short hash where a run of another config already bears that
    name in the experiment: names list the keys that differ from the defaults, and two configs can
    still share them (a key the name leaves out), which the UI could not tell apart."""
    clash = client.search_runs([experiment_id], f"attributes.run_name = '{name}' and "
                               f"tags.`fibexp.config_hash` != '{config_hash}'", max_results=1)
    return f"{name}-{config_hash[:6]}" if clash else name


def end_orphans(client, experiment_id: str, config_hash: str, run_dir: Path, why: str) -> list[str]:
    """End as FAILED, tagged `fibexp.failure` with `why`, the runs of this run dir that a new run is
    about to replace: still RUNNING (its process died) or KILLED (stopped to be resumed), but no
    longer resumable. Left open, they would show as running, or as waiting for a resume, forever.
    The run dir's lock is held: no live process is training any of them. They are ended in the
    store directly (waiting out a lock), after what a previous process left in the run dir's
    journal: the journal's own end is this run's."""
    found = client.search_runs([experiment_id], f"tags.`fibexp.config_hash` = '{config_hash}'")
    orphans = [old for old in found
               if old.data.tags.get("fibexp.run_dir") == str(run_dir) and old.info.status in ("RUNNING", "KILLED")]
    if orphans and isinstance(client, journal.JournaledClient):
        client.flush(client.wait_s)
        client = waiting.Client(client.tracking_uri, client.wait_s)
    for old in orphans:
        client.set_tag(old.info.run_id, "fibexp.failure", f"cannot be resumed: {why}")
        client.set_terminated(old.info.run_id, "FAILED")
        log.warning("run %s (%s) cannot be resumed: %s; it is now FAILED, and this run starts over as a new "
                    "run", old.info.run_id, old.info.status, why)
    return [old.info.run_id for old in orphans]


# --- how the MLflow UI (3.17) shows fibexp's runs ---------------------------------------------
KIND_TAG = "mlflow.experimentKind"
EXPERIMENT_KIND = "custom_model_development"  # the UI's "Machine learning" kind (not GenAI traces)
NOTE_TAG = "mlflow.note.content"  # the Description column and the run page's description
VIEW_KEY = "fibexp"  # saved runs-table view: experiment tag mlflow.sharedViewState.<key>
SEED_VIEW_KEY = "fibexp-seeds"  # the same view grouped by seed group (each group's mean per metric)
SEED_GROUP_TAG = "fibexp.seed_group"  # a cell's group of seeds, set by its sweep (fibexp.report.groups)
VIEW_PREFIX = "mlflow.sharedViewState."
# The metric the UI's default charts lead with, the compare view's parallel-coordinates chart
# included; unset, it takes the first metric logged (train/loss).
PRIMARY_METRIC_TAG = "mlflow.experiment.primaryMetric.name"
MAX_VIEW_CHARS = 20000  # MLflow's limit on an experiment tag's value
# Parameters that say what a cell is; shown as columns when they differ between runs.
VIEW_PARAMS = ("attention.base", "attention.schedule", "attention.window", "seed", "attention.kind", "optim.lr",
               "trainer.max_steps", "model.seq_len", "task.name")
CELL_PARAMS = VIEW_PARAMS[:4]  # a cell's identity: shown first whenever logged; the others where they differ


def experiment_tags() -> dict[str, str]:
    """Set once, by whoever creates the experiment (a sweep's submitting process): the saved view
    exists from the start, so the cells that rewrite it at their end only ever update its row."""
    return {KIND_TAG: EXPERIMENT_KIND,
            NOTE_TAG: "fibexp runs: one per (cell, seed), sweep cells nested under their sweep's parent run. "
                      "Open the saved view (the link fibexp-train prints) for the headline metric columns.",
            VIEW_PREFIX + VIEW_KEY: json.dumps(view_state([])),
            VIEW_PREFIX + SEED_VIEW_KEY: json.dumps(view_state([], SEED_GROUP_TAG))}


def describe(cell: str, steps: int, corpus: str, seed: int | None = None, task: str = "lm") -> str:
    """A run's one-line description (the UI's Description column): what was trained, how long, on what."""
    parts = [cell if task == "lm" else f"{task} {cell}", f"{steps} steps"]
    if seed is not None:
        parts.append(f"seed {seed}")
    parts.append(f"corpus {corpus[:16]}")
    return " · ".join(parts)


def ui_tags(cell: str, steps: int, corpus: str, seed: int | None = None, task: str = "lm",
            sweep_child: bool = False) -> dict[str, str]:
    """Tags a run gets at creation for the UI: its description, and for a sweep cell the run type
    `evaluation`, the only tag on which MLflow 3.17's runs table opens a parent row expanded
    (every fibexp cell ends with its held-out evaluation)."""
    tags = {NOTE_TAG: describe(cell, steps, corpus, seed, task)}
    if sweep_child:
        tags["mlflow.runType"] = "evaluation"
    return tags


def headline_metrics(names) -> list[str]:
    """The metrics worth a column, one number per run that ranks it: the mean held-out ppl at each
    length (1x, 2x, 4x) and its change at the largest, bpc per set for characters, task accuracy.
    The per-set ppl and changes stay a click away: five columns that differ only after the
    header's cut would read as one."""
    names = set(names)
    length = lambda n: int(re.search(r"_(\d+)x", n).group(1))  # mean_ppl_4x, ppl_change_4x_pct: 4
    means = sorted((n for n in names if n.startswith("mean_ppl_")), key=length)
    changes = sorted((n for n in names if n.startswith("ppl_change_")), key=length)
    accuracy = ["task/acc"] if "task/acc" in names else []
    return accuracy + means + changes[-1:] + sorted(n for n in names if n.startswith("val/bpc/"))


def publish_view(client: MlflowClient, experiment_id: str, max_runs: int = 2000) -> dict:
    """(Re)write the experiment's saved runs-table view from what its runs logged: the cell's
    identity params and those that differ between runs, the headline metric columns, and the
    first headline metric as the charts' primary metric; newest first so sweep cells nest under
    their parent. Recomputed from the store, so any run may call it at its end (concurrent calls
    converge on the same content)."""
    runs = client.search_runs([experiment_id], "", order_by=["attributes.start_time DESC"], max_results=max_runs)
    metrics = headline_metrics({k for r in runs for k in r.data.metrics})
    logged = {p for r in runs for p in r.data.params}
    params = [p for p in VIEW_PARAMS if p in CELL_PARAMS and p in logged
              or len({r.data.params.get(p) for r in runs if p in r.data.params}) > 1]
    columns = [f"params.`{p}`" for p in params] + [f"metrics.`{m}`" for m in metrics]
    view = view_state(list(columns))
    shared_write(client.set_experiment_tag, experiment_id, VIEW_PREFIX + VIEW_KEY, json.dumps(view))
    shared_write(client.set_experiment_tag, experiment_id, VIEW_PREFIX + SEED_VIEW_KEY,
                 json.dumps(view_state(list(columns), SEED_GROUP_TAG)))
    if metrics:
        shared_write(client.set_experiment_tag, experiment_id, PRIMARY_METRIC_TAG, metrics[0])
    return view


def view_state(columns: list[str], group_by: str | None = None) -> dict:
    """The runs table's saved state: `columns` (the cell's params, then its headline metrics) placed
    right after the run's name and sized for a laptop's screen (1,366-1,600 px), Duration after them
    and the cell tag last; the Description hidden (in Columns); cut to MLflow's experiment-tag
    limit. MLflow 3.17 cannot hide Created (its date column holds the nesting's expander) or
    Duration, but it takes their order and widths from the view (`columnOrder`, `columnWidths`).
    `group_by`: a tag to group the rows on (each group's metrics averaged, its name in the Run Name
    column, widened for it; the seed column left out, an average of seeds says nothing)."""
    if group_by:
        columns = [c for c in columns if c != "params.`seed`"]
    columns = [*columns, CELL_COLUMN]
    view = {"searchFilter": "", "orderByKey": "attributes.start_time", "orderByAsc": False, "startTime": "ALL",
            "lifecycleFilter": "Active", "modelVersionFilter": "All Runs", "datasetsFilter": [],
            "selectedColumns": columns, "runsHiddenMode": "SHOW_ALL", "viewMaximized": True}
    if group_by:
        view["groupBy"] = {"aggregateFunction": "average", "groupByKeys": [{"mode": "tag", "groupByData": group_by}]}
    while len(json.dumps(_placed(view))) > MAX_VIEW_CHARS:  # keep the first columns
        columns.pop(-2)
    return _placed(view)


# the runs table's own column ids (MLflow 3.17): the run's name, its date (pinned, with the nesting's
# expander), its duration
NAME_COLUMN, DATE_COLUMN, DURATION_COLUMN = "attributes.`Run Name`", "runDateAndNestInfo", "duration"
CELL_COLUMN = "tags.`fibexp.cell`"
# pixels: a nested run's name (`sparse-fib-stagger-W12-s44`, indented under its parent) uncut, a seed group's name
# (`Group: sparse/fib/stagger/W8 · mean_ppl_1x 808.2 [726.3, 890.2]`), the date cut to its start
# (to its status icon where grouped: a group row has no date)
NAME_PX, GROUP_NAME_PX, DATE_PX, GROUP_DATE_PX, DURATION_PX = 300, 520, 100, 70, 80


def column_px(column: str) -> int:
    """A param or metric column as wide as its header (UI font: about 6.5 px a character), at most
    120 px (`attention.schedule` reads `attention.sched…`), at least 60 (a 4-figure number)."""
    name = column.split(".", 1)[1].strip("`")
    return min(120, max(60, round(6.5 * len(name) + 28)))


def _placed(view: dict) -> dict:
    columns = view["selectedColumns"]
    order = [NAME_COLUMN, DATE_COLUMN, *columns[:-1], DURATION_COLUMN, columns[-1]]
    grouped = "groupBy" in view
    widths = {NAME_COLUMN: GROUP_NAME_PX if grouped else NAME_PX, DATE_COLUMN: GROUP_DATE_PX if grouped else DATE_PX,
              DURATION_COLUMN: DURATION_PX, **{c: column_px(c) for c in columns}}
    return {**view, "columnOrder": order, "columnWidths": widths}


UI_RECORD = "mlflow-ui.json"  # where `make ui` / `make mlflow-server` say they serve, beside the store


def ui_base(tracking_uri: str | None) -> str:
    """The server a link should point at: the tracking server itself when runs log over HTTP; else
    $MLFLOW_HOST:$MLFLOW_PORT when set; else where `make ui` (or `make mlflow-server`) serves this
    store, as it recorded in `mlflow-ui.json` beside the store while it runs; else 127.0.0.1:5000."""
    if tracking_uri and tracking_uri.startswith(("http://", "https://")):
        return tracking_uri.rstrip("/")
    host, port = os.environ.get("MLFLOW_HOST"), os.environ.get("MLFLOW_PORT")
    if not (host or port) and (served := _served(tracking_uri)):
        host, port = served
    return f"http://{host or '127.0.0.1'}:{port or '5000'}"


def _served(tracking_uri: str | None) -> tuple[str, str] | None:
    """(host, port) of the live UI recorded beside a sqlite store; 0.0.0.0 (every interface) as
    127.0.0.1. None when nothing serves it (no record, or its process on this machine is gone; one
    recorded on another machine sharing the folder is taken at its word)."""
    if not (tracking_uri or "").startswith("sqlite:///"):
        return None
    try:
        rec = json.loads((Path(tracking_uri[len("sqlite:///"):]).parent / UI_RECORD).read_text())
        if rec.get("hostname", socket.gethostname()) == socket.gethostname():
            os.kill(int(rec["pid"]), 0)
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    host = str(rec.get("host") or "127.0.0.1")
    return ("127.0.0.1" if host in ("0.0.0.0", "::") else host), str(rec["port"])


def ui_url(experiment_id: str, base: str | None = None, run_id: str | None = None, view: str = VIEW_KEY) -> str:
    """A run's page (`run_id`), else the experiment's runs table with fibexp's saved `view`, on
    `base` (default: `ui_base` of a local store), in the model-training layout. The UI picks GenAI
    or training from the `workflowType` parameter (else the browser's last choice), not from the
    experiment's kind tag, so the link says it."""
    base = (base or ui_base(None)).rstrip("/")
    if run_id:
        return f"{base}/#/experiments/{experiment_id}/runs/{run_id}?workflowType=machine_learning"
    return f"{base}/#/experiments/{experiment_id}/runs?workflowType=machine_learning&viewStateShareKey={view}"
