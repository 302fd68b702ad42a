"""A locked sqlite store, met through MLflow's own code: its lock error is told from a refusal,
a call waits it out (one line) or ends in one line, and the journal holds a run's writes until
the lock clears. MLflow waits 20 s (PRAGMA busy_timeout, fixed in MLflow) before it raises; here
that pragma is set to 0 so a test takes a second: what MLflow raises is the same
(tests/e2e/test_store_lock.py holds the lock past the real 20 s)."""
from __future__ import annotations

import logging
import sqlite3
import threading
import time

import pytest
import sqlalchemy
from mlflow.entities import Metric
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient

from fibexp.tracking import journal, waiting
from helpers.mlflow_runs import new_experiment, sqlite_store


@pytest.fixture
def locked(tmp_path_factory, monkeypatch):
    """(uri, run id, a connection on the same file to lock it with); MLflow's busy timeout 0. The
    root logger without the handlers an earlier in-process Hydra job left on it (bound to a
    stream pytest has closed since): what the tests read is what this code prints."""
    monkeypatch.setattr(logging.getLogger(), "handlers", [])
    text = sqlalchemy.sql.text
    monkeypatch.setattr(sqlalchemy.sql, "text", lambda s: text(s.replace("busy_timeout = 20000", "busy_timeout = 0")))
    client = sqlite_store(tmp_path_factory, "locked")
    run_id = client.create_run(new_experiment(client)).info.run_id
    uri = client.tracking_uri
    holder = sqlite3.connect(waiting.where(uri), isolation_level=None, check_same_thread=False)
    yield uri, run_id, holder
    holder.close()


def lock(holder, release_after: float | None = None) -> None:
    holder.execute("BEGIN EXCLUSIVE")
    if release_after is not None:
        threading.Timer(release_after, holder.execute, ["COMMIT"]).start()


def steps(uri: str, run_id: str, key: str = "m") -> list[int]:
    return sorted(m.step for m in waiting.Client(uri).get_metric_history(run_id, key))


def test_the_lock_error_mlflow_raises_is_transient_and_a_refusal_is_not(locked):
    uri, run_id, holder = locked
    client = MlflowClient(uri)  # MLflow's own client: the error as MLflow raises it
    lock(holder)
    with pytest.raises(MlflowException) as met:
        client.log_batch(run_id, metrics=[Metric("m", 1.0, 0, 0)])
    assert met.value.error_code == "TEMPORARILY_UNAVAILABLE"
    assert isinstance(met.value.__cause__, sqlalchemy.exc.OperationalError)
    assert waiting.locked(met.value) and journal.transient(met.value)
    # a process opening the store meanwhile meets sqlite's own error, unwrapped
    engine = sqlalchemy.create_engine(uri, connect_args={"timeout": 0})
    with pytest.raises(sqlalchemy.exc.OperationalError) as opened, engine.connect() as c:
        c.execute(sqlalchemy.text("SELECT * FROM runs"))
    assert waiting.locked(opened.value) and journal.transient(opened.value)
    holder.execute("COMMIT")

    with pytest.raises(MlflowException) as refused:  # a 4xx answer: final
        client.get_run("0" * 32)
    assert not waiting.locked(refused.value) and not journal.transient(refused.value)
    with pytest.raises(sqlalchemy.exc.OperationalError) as other, engine.connect() as c:
        c.execute(sqlalchemy.text("SELECT * FROM no_such_table"))
    assert not waiting.locked(other.value)


def test_a_call_waits_out_a_lock_in_one_line(locked, capsys, caplog):
    uri, run_id, holder = locked
    client = waiting.Client(uri)
    lock(holder, release_after=1.5)
    t0 = time.monotonic()
    with caplog.at_level(logging.ERROR, logger="mlflow"):
        client.log_batch(run_id, metrics=[Metric("m", 1.0, 0, 0)])
    assert time.monotonic() - t0 >= 1.5
    said = capsys.readouterr().err.strip().splitlines()
    assert said == [f"fibexp-train: tracking store is locked ({waiting.where(uri)}): waiting up to "
                    f"{waiting.WAIT_S:.0f} s for the process that holds it"]
    assert not caplog.records  # MLflow's traceback per failed try is not shown
    assert steps(uri, run_id) == [0]


def test_a_lock_that_never_clears_ends_in_one_line_with_exit_75(locked, capsys):
    uri, run_id, holder = locked
    lock(holder)
    client = waiting.Client(uri, wait_s=1.0)
    t0 = time.monotonic()
    with pytest.raises(waiting.StoreLocked) as gave_up:
        client.set_tag(run_id, "k", "v")
    assert 1.0 <= time.monotonic() - t0 < 5
    assert gave_up.value.code == waiting.EX_TEMPFAIL == 75
    waited, error = capsys.readouterr().err.strip().splitlines()
    assert "tracking store is locked" in waited
    assert error == str(gave_up.value) and error.startswith(f"fibexp-train: error: tracking store {waiting.where(uri)} "
                                                            "locked by another process for 1 s; run the same command")


def test_the_journal_holds_a_runs_writes_while_the_store_is_locked_and_sends_them_in_order(locked, tmp_path, caplog):
    uri, run_id, holder = locked
    client = journal.client_for(uri, tmp_path / "run")
    assert isinstance(client, journal.JournaledClient)  # a sqlite store is journaled, as a server is
    lock(holder)
    with caplog.at_level(logging.WARNING, logger="fibexp.tracking.journal"):
        for step in range(5):
            client.log_metric(run_id, "m", float(step), step=step)  # returns at once
        assert not client.flush(1.5)  # nothing lands while the lock is held
        pending, _ = journal.read_pending(client.path)
        assert [e["metrics"][0][3] for e in pending] == list(range(5))
        holder.execute("COMMIT")
        client.set_terminated(run_id, "FINISHED")  # the last write: after every metric
    said = [r.getMessage() for r in caplog.records]
    assert any(m.startswith(f"tracking store is locked ({waiting.where(uri)}): training goes on") for m in said), said
    assert any(m.startswith("tracking store free again after") for m in said), said
    assert steps(uri, run_id) == list(range(5))
    assert waiting.Client(uri).get_run(run_id).info.status == "FINISHED"
    assert not client.path.exists()  # everything acknowledged


def test_the_commands_that_read_or_write_a_finished_run_wait_out_a_lock_under_their_own_name(locked, capsys):
    """fibexp-report reads through the waiting client, and fibexp-export --int8 logs its
    measurement through it: each says in one line that it waits, under its own name, then goes on."""
    from fibexp.cli import report as cli_report
    from fibexp.deploy import int8_export

    uri, run_id, holder = locked
    client = waiting.Client(uri)
    experiment = client.get_experiment(client.get_run(run_id).info.experiment_id).name
    lock(holder, release_after=1.5)
    assert cli_report.main(["--tracking-uri", uri, "--experiment", experiment, "--claims"]) == 0
    out, err = capsys.readouterr()
    assert err.strip().splitlines()[0] == (f"fibexp-report: tracking store is locked ({waiting.where(uri)}): "
                                           f"waiting up to {waiting.WAIT_S:.0f} s for the process that holds it")
    assert "A1" in out  # the claims report, printed once the lock cleared
    lock(holder, release_after=1.5)
    int8_export.log(run_id, uri, {"int8/degradation": 0.01})
    assert capsys.readouterr().err.strip().splitlines()[0].startswith("fibexp-export: tracking store is locked")
    assert steps(uri, run_id, "int8/degradation") == [0]
