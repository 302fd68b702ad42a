"""Tracking that survives an `mlflow server` outage or a locked sqlite store: every write of a
run (metrics, params, tags, artifacts, status) is appended to a journal in the run dir first,
then sent by one background thread; training never waits for the store.

Why not MLflow's own async logging: it hands each batch to a pool of threads that give up after
MLflow's HTTP retries (MLFLOW_HTTP_REQUEST_MAX_RETRIES, about 4 minutes by default) and then
drop it with an error line; a process that dies loses its queue. Here MLflow's HTTP retries stay
short (set only when the user has not), this sender retries a failed call until it lands, in
order, and the journal outlives the process: a run that resumes from the same run dir sends
what is left first, and `fibexp-upload RUN_DIR` sends it when the server is back after the run
ended. Re-sending is harmless: MLflow keeps one row per (key, timestamp, step, value) of a
metric, params may be logged again with the same value, tags, status and artifacts are
overwritten. A run's terminal status is sent last and waits for everything before it."""
from __future__ import annotations

import json
import logging
import os
import shutil
import sys
import threading
import time
from pathlib import Path

from mlflow.entities import Metric, Param, RunTag
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient

from fibexp.errors import Refusal
from fibexp.tracking import waiting
from fibexp.tracking.waiting import EX_TEMPFAIL, WAIT_S, locked

log = logging.getLogger("fibexp.tracking.journal")

JOURNAL = "tracking-journal.jsonl"  # in the run dir; present only while something is not acknowledged
ARTIFACTS = "tracking-journal"  # copies of the artifacts not yet uploaded
KILLED_WAIT_S = 10.0  # a stopped run must exit within the scheduler's grace period; the rest resumes with it
# MLflow's own per-call retries, kept short so the sender notices a server that is back.
HTTP_DEFAULTS = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2", "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
                 "MLFLOW_HTTP_REQUEST_TIMEOUT": "30"}
MAX_BACKOFF_S = 5.0
BATCH = 1000  # MLflow's limit on metrics + params + tags in one log_batch


class TrackingUnavailable(waiting.TryLater):
    """The run ended but the server did not come back in time: its journal waits for upload."""


def transient(e: BaseException) -> bool:
    """Connection refused, timeouts, 5xx and a locked sqlite store are worth retrying; a 4xx
    answer is final."""
    return locked(e) or not isinstance(e, MlflowException) or e.get_http_status_code() >= 500


class JournaledClient(waiting.Client):
    """An MlflowClient whose run writes go through the journal of `run_dir` (reads go to the
    store directly, waiting out a lock). Entries a previous process left unacknowledged are re-sent first."""

    def __init__(self, tracking_uri: str, run_dir: Path, wait_s: float = WAIT_S):
        if tracking_uri.startswith(("http://", "https://")):
            for key, value in HTTP_DEFAULTS.items():
                os.environ.setdefault(key, value)
        super().__init__(tracking_uri, wait_s)
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / JOURNAL
        self._cv = threading.Condition()
        self._pending: list[dict] = []
        self._seq = 0
        self._closed = False
        self._down_since: float | None = None
        self._locked = False  # what the store's last failure was: a lock, else the server unreachable
        self._write_lock = threading.Lock()
        if self.path.exists():
            self._pending, self._seq = read_pending(self.path)
            if self._pending:
                log.warning("re-sending %d tracking calls left in %s", len(self._pending), self.path)
        threading.Thread(target=self._send_loop, name="fibexp-tracking-journal", daemon=True).start()

    # --- the writes of a run ---
    def log_batch(self, run_id, metrics=(), params=(), tags=(), synchronous=None) -> None:
        self._add({"op": "batch", "run_id": run_id, "metrics": [[m.key, m.value, m.timestamp, m.step] for m in metrics],
                   "params": [[p.key, p.value] for p in params], "tags": [[t.key, t.value] for t in tags]})

    def log_metric(self, run_id, key, value, timestamp=None, step=None, synchronous=None, **_) -> None:
        self.log_batch(run_id, metrics=[Metric(key, float(value), timestamp or int(time.time() * 1000), step or 0)])

    def log_param(self, run_id, key, value, synchronous=None):
        self.log_batch(run_id, params=[Param(key, str(value))])
        return value

    def set_tag(self, run_id, key, value, synchronous=None) -> None:
        self.log_batch(run_id, tags=[RunTag(key, str(value))])

    def update_run(self, run_id, status=None, name=None) -> None:
        self._add({"op": "update", "run_id": run_id, "status": status, "name": name})

    def log_artifact(self, run_id, local_path, artifact_path=None) -> None:
        copy = self._artifact_dir() / Path(local_path).name
        shutil.copyfile(local_path, copy)
        self._add_artifact(run_id, copy, artifact_path)

    def log_text(self, run_id, text, artifact_file) -> None:
        copy = self._artifact_dir() / Path(artifact_file).name
        copy.write_text(text)
        self._add_artifact(run_id, copy, str(Path(artifact_file).parent) if "/" in artifact_file else None)

    def log_figure(self, run_id, figure, artifact_file, *, save_kwargs=None) -> None:
        copy = self._artifact_dir() / Path(artifact_file).name
        figure.savefig(copy, **(save_kwargs or {}))
        self._add_artifact(run_id, copy, str(Path(artifact_file).parent) if "/" in artifact_file else None)

    def set_terminated(self, run_id, status=None, end_time=None) -> None:
        """The run's last write: sent after every earlier one. Waits for the store up to
        `wait_s` (logger.outage_wait_s; KILLED: a few seconds, the rest is re-sent on resume);
        past that a FINISHED/FAILED run raises TrackingUnavailable (exit 75) with the command
        that uploads it. No write is taken after it."""
        if self._closed:
            return
        status = status or "FINISHED"
        self._add({"op": "terminate", "run_id": run_id, "status": status,
                   "end_time": end_time or int(time.time() * 1000)})
        wait = min(KILLED_WAIT_S, self.wait_s) if status == "KILLED" else self.wait_s
        done = self.flush(wait)
        self._closed = True
        if done:
            self._remove_journal()
        elif status != "KILLED":
            error = TrackingUnavailable(
                f"fibexp-train: error: {self._down()} for {wait:.0f} s at the run's end; "
                f"{len(self._pending)} tracking calls kept in {self.path}; send them with `fibexp-upload {self.run_dir}`")
            print(error, file=sys.stderr)
            raise error

    def flush(self, timeout: float) -> bool:
        """Wait until every journaled write is acknowledged (True) or `timeout` s pass (False)."""
        deadline = time.monotonic() + timeout
        with self._cv:
            while self._pending and (left := deadline - time.monotonic()) > 0:
                self._cv.wait(min(left, 1.0))
            return not self._pending

    # --- journal ---
    def _artifact_dir(self) -> Path:
        d = self.run_dir / ARTIFACTS / str(self._seq + 1)
        d.mkdir(parents=True, exist_ok=True)
        return d

    def _add_artifact(self, run_id, copy: Path, artifact_path) -> None:
        self._add({"op": "artifact", "run_id": run_id, "local": str(copy.relative_to(self.run_dir)),
                   "artifact_path": artifact_path})

    def _add(self, entry: dict) -> None:
        if self._closed:
            log.debug("dropped after the run's terminal status: %s", entry["op"])
            return
        with self._cv:
            self._seq += 1
            entry = {"seq": self._seq, **entry}
            self._append(entry)
            self._pending.append(entry)
            self._cv.notify_all()

    def _append(self, line: dict) -> None:
        with self._write_lock:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            with open(self.path, "a") as f:
                f.write(json.dumps(line) + "\n")

    def _remove_journal(self) -> None:
        with self._write_lock:
            self.path.unlink(missing_ok=True)
            shutil.rmtree(self.run_dir / ARTIFACTS, ignore_errors=True)

    # --- sender ---
    def _send_loop(self) -> None:
        backoff = 0.5
        while True:
            with self._cv:
                while not self._pending:
                    self._cv.wait()
                group = self._next_group()
            tried = time.monotonic()
            try:
                self._send(group)
            except Exception as e:  # noqa: BLE001 - any failure is either retried or recorded
                if transient(e):
                    if self._down_since is None:  # since the try began: it waited for a timeout
                        self._down_since, self._locked = tried, locked(e)
                        why = "" if self._locked else f" ({str(e).splitlines()[0][:160]})"
                        log.warning("%s%s: training goes on, its tracking calls wait in %s", self._down(), why,
                                    self.path)
                    time.sleep(backoff)
                    backoff = min(2 * backoff, MAX_BACKOFF_S)
                    continue
                log.error("tracking call refused by the server, not retried: %s: %s", group[0]["op"],
                          str(e).splitlines()[0][:300])
                self._ack(group, error=str(e).splitlines()[0][:300])
                continue
            if self._down_since is not None:
                log.warning("%s after %.0f s: sending the calls it missed", self._down(back=True),
                            time.monotonic() - self._down_since)
                self._down_since = None
            backoff = 0.5
            self._ack(group)

    def _down(self, back: bool = False) -> str:
        """What kept the calls waiting (`back`: that it is over), in the words of a log line."""
        if self._locked:
            return "tracking store free again" if back else f"tracking store is locked ({waiting.where(self.tracking_uri)})"
        if self.tracking_uri.startswith(("http://", "https://")):
            return f"tracking server {self.tracking_uri} {'back' if back else 'unreachable'}"
        return f"tracking store {waiting.where(self.tracking_uri)} {'back' if back else 'unavailable'}"

    def _next_group(self) -> list[dict]:
        """The oldest pending entry, with the metric batches of the same run right after it
        (up to MLflow's batch limit): catching up after an outage takes few calls."""
        first = self._pending[0]
        group = [first]
        if first["op"] == "batch" and not first["params"] and not first["tags"]:
            n = len(first["metrics"])
            for e in self._pending[1:]:
                if e["op"] != "batch" or e["run_id"] != first["run_id"] or e["params"] or e["tags"] \
                        or n + len(e["metrics"]) > BATCH:
                    break
                group.append(e)
                n += len(e["metrics"])
        return group

    def _send(self, group: list[dict]) -> None:
        """One call to the store itself (MlflowClient's own, not waiting.Client's): the sender
        retries on its own, and a thread must not end on StoreLocked."""
        store = MlflowClient
        e = group[0]
        op, run_id = e["op"], e["run_id"]
        if op == "batch":
            metrics = [Metric(k, v, t, s) for g in group for k, v, t, s in g["metrics"]]
            params, tags = [Param(*p) for p in e["params"]], [RunTag(*t) for t in e["tags"]]
            first = BATCH - len(params) - len(tags)
            store.log_batch(self, run_id, metrics=metrics[:first], params=params, tags=tags)
            for i in range(first, len(metrics), BATCH):
                store.log_batch(self, run_id, metrics=metrics[i:i + BATCH])
        elif op == "update":
            store.update_run(self, run_id, status=e["status"], name=e["name"])
        elif op == "artifact":
            store.log_artifact(self, run_id, str(self.run_dir / e["local"]), e["artifact_path"])
        elif op == "terminate":
            store.set_terminated(self, run_id, e["status"], e["end_time"])
        else:
            raise ValueError(f"journal entry {e['seq']}: unknown op {op}")

    def _ack(self, group: list[dict], error: str | None = None) -> None:
        for e in group:
            self._append({"ack": e["seq"], **({"error": error} if error else {})})
        with self._cv:
            del self._pending[:len(group)]
            self._cv.notify_all()


def read_pending(path: Path) -> tuple[list[dict], int]:
    """(entries without an ack, in order; the highest sequence number). A torn last line (the
    process died while writing it) is skipped."""
    entries, acked, seq = {}, set(), 0
    for line in path.read_text().splitlines():
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue
        if "ack" in rec:
            acked.add(rec["ack"])
        elif "seq" in rec:
            entries[rec["seq"]] = rec
            seq = max(seq, rec["seq"])
    return [entries[s] for s in sorted(entries) if s not in acked], seq


def client_for(uri: str, run_dir: Path, journal: bool = True, wait_s: float = WAIT_S) -> MlflowClient:
    """A run's client: journaled for a tracking server (it can go away during the run) and a
    sqlite store (another process can hold it locked); other stores, and `journal=False`, write
    directly, waiting out a lock."""
    if journal and uri.startswith(("http://", "https://", "sqlite:")):
        _send_to_its_own_store(Path(run_dir), uri)
        return JournaledClient(uri, run_dir, wait_s)
    return waiting.Client(uri, wait_s)


RUN_RECORD = "mlflow_run.json"  # in a run dir: its MLflow run's id and the store that holds it


def recorded_run(run_dir: Path) -> dict | None:
    """The run dir's record of its MLflow run (`run_id`, `tracking_uri`), None where it has none."""
    path = Path(run_dir) / RUN_RECORD
    return json.loads(path.read_text()) if path.exists() else None


def record_run(run_dir: Path, run_id: str, tracking_uri: str) -> None:
    """Keep the run's id and store beside its checkpoints: what a resume continues, and where the
    journal's calls belong."""
    path = Path(run_dir) / RUN_RECORD
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"run_id": run_id, "tracking_uri": tracking_uri}))


def _send_to_its_own_store(run_dir: Path, uri: str, timeout: float = 30.0) -> None:
    """Calls a killed process left in the journal belong to the store its run is recorded in; when
    the rerun logs elsewhere (the user switched stores: it becomes a new run there), they go to
    that store first, else the new store would refuse them (a run it does not hold)."""
    record = recorded_run(run_dir) if (run_dir / JOURNAL).exists() else None
    recorded = record and record.get("tracking_uri")
    if not recorded or recorded == uri:
        return
    try:
        sent = upload(run_dir, recorded, timeout)
        log.warning("sent %d tracking calls left in %s to the run's own store %s", sent, run_dir / JOURNAL, recorded)
    except TrackingUnavailable as e:
        log.warning("%s; this run logs to %s instead, and those calls are dropped", e, uri)


def upload(run_dir: Path, uri: str | None = None, timeout: float = 120.0) -> int:
    """Send what a run dir's journal holds; returns how many calls were sent (0: nothing left)."""
    run_dir = Path(run_dir)
    path = run_dir / JOURNAL
    if not path.exists():
        return 0
    if uri is None:
        if (record := recorded_run(run_dir)) is None:
            raise Refusal("run_dir", f"{run_dir} has no {RUN_RECORD}", "a fibexp run dir, or pass --tracking-uri")
        uri = record["tracking_uri"]
    pending, _ = read_pending(path)
    client = JournaledClient(uri, run_dir)
    if not client.flush(timeout):
        raise TrackingUnavailable(f"fibexp-upload: error: {uri} unreachable for {timeout:.0f} s; "
                                  f"{len(client._pending)} calls still in {path}")
    client._remove_journal()
    return len(pending)
