"""Local `mlflow server` / `mlflow ui` processes for tests: started on a free port, waited for
until /health answers, stopped with their whole process group (gunicorn/uvicorn workers too)."""
from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_healthy(base: str, proc: subprocess.Popen, within_s: float = 90) -> None:
    deadline = time.time() + within_s
    while True:
        try:
            urllib.request.urlopen(base + "/health", timeout=2).read()
            return
        except OSError:
            if time.time() > deadline or proc.poll() is not None:
                pytest.fail(f"{' '.join(proc.args[:2])} did not come up at {base}")
            time.sleep(0.5)


def stop(proc: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    proc.wait(timeout=30)


def start(command: str, *args: str, port: int | None = None, cwd: Path | None = None) -> tuple[str, subprocess.Popen]:
    """`mlflow <command> <args> --host 127.0.0.1 --port <port>`, once /health answers: (base URL, process)."""
    port = port or free_port()
    cmd = [str(Path(sys.executable).parent / "mlflow"), command, *args, "--host", "127.0.0.1", "--port", str(port)]
    proc = subprocess.Popen(cmd, env={**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}, cwd=cwd,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(base, proc)
    except BaseException:
        stop(proc)
        raise
    return base, proc


@contextlib.contextmanager
def mlflow(command: str, *args: str, port: int | None = None, cwd: Path | None = None):
    """`start`, stopped with its process group on leaving; yields the base URL."""
    base, proc = start(command, *args, port=port, cwd=cwd)
    try:
        yield base
    finally:
        stop(proc)


class Server:
    """`make mlflow-server`'s command on a temporary store, stopped and started on one port."""

    def __init__(self, root: Path):
        self.root, self.port, self.proc = root, free_port(), None
        self.uri = f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        _, self.proc = start("server", "--backend-store-uri", f"sqlite:///{self.root}/server.db",
                             "--artifacts-destination", str(self.root / "artifacts"), "--workers", "1", port=self.port)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            stop(self.proc)

