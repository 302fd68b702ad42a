"""A local (sqlite) tracking store that another process holds locked is waited for, not failed on.

MLflow's sqlite store gives up on a lock after its busy timeout (20 s, fixed in MLflow): the call
raises MlflowException(TEMPORARILY_UNAVAILABLE) from sqlalchemy's OperationalError "database is
locked"; a process that opens the store while it is locked gets the OperationalError itself,
after sqlite's own 5 s (both measured with MLflow 3.17). A lock held longer is ordinary: a
`sqlite3` shell or a backup inside a transaction, another tool reading a big store, and it
clears on its own. So a run's calls to the store outside its journal (the experiment, the run's
creation, searches, orphans, the saved view, a sweep's parent run) retry it with backoff for up
to WAIT_S, saying so in one line; the run's writes go through its journal
(fibexp.tracking.journal), whose sender retries them the same way while training goes on."""
from __future__ import annotations

import functools
import inspect
import logging
import sqlite3
import sys
import time

import sqlalchemy.exc
from mlflow.tracking import MlflowClient

log = logging.getLogger("fibexp.tracking.waiting")

WAIT_S = 300.0  # how long a run waits for its store: a lock here, an unreachable server in the journal (logger.outage_wait_s)
MAX_BACKOFF_S = 5.0  # between tries; each try itself waits MLflow's busy timeout
EX_TEMPFAIL = 75  # sysexits.h: try again later
LOCK_MESSAGES = ("database is locked", "database table is locked")  # SQLITE_BUSY, SQLITE_LOCKED


class TryLater(SystemExit):
    """The store could not be reached or used in time: one line (printed where it is raised),
    exit 75; what was not sent waits in the run dir's journal, or the command is run again."""

    def __init__(self, message: str):
        super().__init__(EX_TEMPFAIL)
        self.message = message

    def __str__(self) -> str:
        return self.message


class StoreLocked(TryLater):
    """The store stayed locked past the wait."""


def locked(e: BaseException | None) -> bool:
    """Whether `e`, or what it was raised from, is sqlite's lock error (MLflow wraps it)."""
    seen = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, (sqlite3.OperationalError, sqlalchemy.exc.OperationalError)) \
                and any(m in str(e) for m in LOCK_MESSAGES):
            return True
        e = e.__cause__ or e.__context__
    return False


def where(uri: str) -> str:
    """The store as a user finds it: the sqlite file, else the URI."""
    return uri[len("sqlite:///"):] if uri.startswith("sqlite:///") else uri


def wait_out(uri: str, wait_s: float, call, *args, prog: str = "fibexp-train", **kwargs):
    """`call(*args, **kwargs)`, retried with backoff while the store is locked, up to `wait_s`;
    past that StoreLocked. Safe to retry: MLflow rolls back a call that met the lock. `prog`: the
    command whose one-line messages these are."""
    started = None  # when the first try that met the lock began: it waited MLflow's busy timeout
    backoff = 0.5
    while True:
        tried = time.monotonic()
        try:
            result = call(*args, **kwargs)
        except Exception as e:
            if not locked(e):
                raise
            now = time.monotonic()
            if started is None:
                started = tried
                print(f"{prog}: tracking store is locked ({where(uri)}): waiting up to {wait_s:.0f} s for the "
                      "process that holds it", file=sys.stderr, flush=True)
            if now - started >= wait_s:
                error = StoreLocked(
                    f"{prog}: error: tracking store {where(uri)} locked by another process for {now - started:.0f} "
                    f"s; run the same command again once it is free (`fuser {where(uri)}` names the holder)")
                print(error, file=sys.stderr, flush=True)
                raise error from None
            time.sleep(min(backoff, max(0.0, started + wait_s - now)))
            backoff = min(2 * backoff, MAX_BACKOFF_S)
            continue
        if started is not None:
            log.info("tracking store %s free again after %.0f s", where(uri), time.monotonic() - started)
        return result


class _QuietLocks(logging.Filter):
    """MLflow logs every lock timeout with a whole traceback before raising it; a lock waited for
    is said once, by wait_out or the journal."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info and locked(record.exc_info[1]))


_QUIET = _QuietLocks()


class Client(MlflowClient):
    """An MlflowClient whose every call (and its construction, which reads the store's schema)
    waits out a locked store (`wait_out`, up to `wait_s`); `prog` names the command in its lines."""

    def __init__(self, tracking_uri: str, wait_s: float = WAIT_S, prog: str = "fibexp-train"):
        logging.getLogger("mlflow.store.db.utils").addFilter(_QUIET)  # the same filter once, however many clients
        self.wait_s, self.prog = wait_s, prog
        wait_out(tracking_uri, wait_s, MlflowClient.__init__, self, tracking_uri, prog=prog)


def _waiting(method):
    @functools.wraps(method)
    def call(self, *args, **kwargs):
        return wait_out(self.tracking_uri, self.wait_s, method, self, *args, prog=self.prog, **kwargs)
    return call


for _name, _method in list(vars(MlflowClient).items()):
    if inspect.isfunction(_method) and not _name.startswith("_"):
        setattr(Client, _name, _waiting(_method))
