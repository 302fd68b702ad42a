"""A sweep stopped by its user or its scheduler: the first SIGINT, SIGTERM or SIGHUP (a closed
terminal, a dropped SSH session) unwinds the launch as a KeyboardInterrupt (remembering which
signal), so the sweep can stop its cells, close their runs and its parent, and exit 130 / 143 /
129; a second one while the cells are stopping unwinds that wait: the cells are killed at once.
Once the launch is over (`settle`), one more signal is ignored (the summary takes seconds) and a
second one stops even that. After a SIGHUP the terminal is gone: what the sweep still prints goes
to a log file in its home instead (`Signals.log`)."""
from __future__ import annotations

import os
import signal
from contextlib import contextmanager
from pathlib import Path

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def is_sigterm(e: BaseException) -> bool:
    """Lightning's SIGTERMException (a SystemExit), raised by an in-process cell's own handler."""
    return type(e).__name__ == "SIGTERMException"


class Signals:
    """Which signal stopped the sweep (None: none yet) and how many arrived."""

    def __init__(self, log: Path | None = None):
        self.log = log
        self.signum: int | None = None
        self.count = 0
        self.settled = False
        self.late = 0

    def _handler(self, signum, frame) -> None:
        if signum == signal.SIGHUP:
            _off_the_terminal(self.log)
        if self.settled:
            self.late += 1
            if self.late < 2:
                return
        self.count += 1
        self.signum = self.signum or signum
        raise KeyboardInterrupt(signal.Signals(signum).name)

    def caught(self, e: BaseException) -> None:
        """The launch unwound by `e`: a signal this handler saw, a terminal's Ctrl-C that reached a
        cell first, or an in-process cell's SIGTERM."""
        if not self.count:
            self.count = 1
            self.signum = signal.SIGTERM if is_sigterm(e) else signal.SIGINT

    def settle(self) -> "Signals | None":
        """The launch is over: self if a signal stopped it, else None."""
        self.settled = True
        return self if self.count else None

    @property
    def exit_code(self) -> int:
        return 128 + (self.signum or signal.SIGINT)

    @property
    def name(self) -> str:
        return signal.Signals(self.signum or signal.SIGINT).name


def _off_the_terminal(log: Path | None) -> None:
    """stdout and stderr that are a terminal (hung up: a write would fail) now append to `log`."""
    ttys = [fd for fd in (1, 2) if os.isatty(fd)]
    if not ttys:
        return
    target = os.open(log or os.devnull, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    for fd in ttys:
        os.dup2(target, fd)
    os.close(target)


@contextmanager
def trapped(log: Path | None = None):
    """SIGINT, SIGTERM and SIGHUP raise KeyboardInterrupt in the main thread while inside; restored
    after. `log`: where the sweep's output goes once its terminal has hung up."""
    sigs = Signals(log)
    before = {s: signal.getsignal(s) for s in SIGNALS}
    for s in SIGNALS:
        signal.signal(s, sigs._handler)
    try:
        yield sigs
    finally:
        for s, h in before.items():
            signal.signal(s, h)
