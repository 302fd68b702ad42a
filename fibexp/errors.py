"""The suite's one refusal: bad input, named by its key, what was given and what is allowed.

Every entry point prints it as one line `<prog>: error: <key>: <value>; allowed: <allowed>` and
exits 2 before anything is created. It is a ValueError, so code that checks values (schemas'
`__post_init__`, the rule table, a task's checks, the science, the model, the corpus) raises it
where the value is read; a caller that knows more (the cell) adds it with `within`."""
from __future__ import annotations

import re
from typing import NoReturn

SHOWN_CHARS = 400  # a value longer than this is shown by its head and its length
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def shown(value: object) -> str:
    """A value as one short line: control characters escaped (a newline would split the refusal),
    an over-long value cut to its head and its length (a 100,000-character name is not echoed)."""
    text = _CONTROL.sub(lambda m: repr(m[0])[1:-1], str(value))
    if len(text) > SHOWN_CHARS:
        text = f"{text[:SHOWN_CHARS]}... ({len(str(value)):,} characters)"
    return text


def shown_bytes(n: int) -> str:
    """Bytes as a person reads them: 1.0 GiB, 312 MiB."""
    return f"{n / 2**30:,.1f} GiB" if n >= 2**30 else f"{n / 2**20:,.0f} MiB"


class Refusal(ValueError):
    """`<key>: <value>; allowed: <allowed>`; `key` is the config key (or argument) refused."""

    def __init__(self, key: str, value: object, allowed: str):
        super().__init__(f"{key}: {shown(value)}; allowed: {allowed}")
        self.key, self.value, self.allowed = key, value, allowed

    def within(self, context: str) -> "Refusal":
        """This refusal with where it was met appended to its line (` [cell: seed=1]`): its class,
        key, value and allowed kept, so a caller adds context without rephrasing it."""
        out = type(self).__new__(type(self))
        out.__dict__.update(self.__dict__)
        ValueError.__init__(out, f"{self}{context}")
        return out


def refuse(key: str, value: object, allowed: str) -> NoReturn:
    raise Refusal(key, value, allowed)


def first_line(e: BaseException) -> str:
    """What a one-line report shows of an exception: its message's first line, else its type."""
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def one_line(text: str) -> str:
    """A refusal as printed: control characters escaped, so it stays one line whatever was typed."""
    return _CONTROL.sub(lambda m: repr(m[0])[1:-1], text)


class RefusalExit(BaseException):
    """A Refusal on its way out through Hydra, which turns an Exception raised by a callback into
    a warning and logs one raised by a job ("Error executing job ..."): a BaseException passes,
    and the entry point prints it as the one line."""


class JobDied(RuntimeError):
    """A job that ended without a result: the scheduler's job id, state and reason (the fibexp
    launchers return it as a failed job's value; the sweep records it in MLflow)."""

    def __init__(self, job_id: str, state: str, reason: str):
        super().__init__(f"job {job_id} ended {state} without a result: {reason}")
        self.job_id, self.state, self.reason = job_id, state, reason


class RunBusy(Refusal):
    """Another live process holds the run dir (fibexp.training.lock): the cell is being trained
    there, so this process leaves it alone. Not an error of the input: the CLI prints one line
    naming the cell and exits 0."""

    def __init__(self, pid: int | None, run_dir: object):
        ValueError.__init__(self, f"{run_dir} is being trained by pid {pid if pid else '?'}")
        self.key, self.value, self.allowed = "run_dir", str(run_dir), "a run dir no other process is training"
        self.pid, self.run_dir = pid, run_dir


class OutOfMemory(Refusal):
    """A run that outgrew the memory it may hold while training (fibexp.training.memory_guard):
    the size key to lower, what the process held and the limit, in the refusal's one line."""

    def __init__(self, key: str, value: object, held: int, limit: int, where: str, step: int):
        super().__init__(key, value, f"a size whose run fits in memory: this run held {shown_bytes(held)} at step {step} "
                                     f"against a limit of {shown_bytes(limit)} ({where}); lower data.batch_size, "
                                     "model.seq_len, model.d_model or model.n_layers")
        self.held, self.limit, self.where, self.step = held, limit, where, step
