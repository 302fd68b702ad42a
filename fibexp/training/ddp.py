"""Several processes per run (DDP): how many, which one this is, and on one machine the ranks
fibexp starts itself.

`trainer.devices=N` (x `trainer.num_nodes=M`) trains one run in N x M processes. Who starts them:
- SLURM (`srun`, a submitit job with `tasks_per_node = devices`, `nodes = num_nodes`) or
  torchrun start every rank; each runs the whole job and Lightning reads its rank from the
  environment (SLURM_PROCID, ...).
- Otherwise (one machine, a plain run or a Hydra multirun cell) rank 0 is the process Hydra
  runs the job in, and it starts ranks 1..N-1 itself (`Ranks`), after every check and before any
  MLflow run exists: each is `python -m fibexp.cli.rank RUN_DIR RANK`, which loads the job's
  resolved config that rank 0 pickled into `RUN_DIR/.ddp/` (`job`) and trains with it. No rank
  re-parses the command line, so Hydra composes once, in one run dir, and a multirun is never re-entered
  (Lightning's own launcher re-runs `sys.argv`).

Only rank 0 talks to MLflow (the run, every metric, the end status); the others never open the
store. A rank that dies (an exception, SIGKILL) is seen by rank 0 within `POLL_S`: it records the
run FAILED with that rank's reason in `fibexp.failure`, stops the other ranks and ends the job;
a rank blocked in a collective meets `trainer.collective_timeout_s` (120 s) at the latest. The ranks started here
die with rank 0 (PR_SET_PDEATHSIG), so none outlives a killed job."""
from __future__ import annotations

import ctypes
import json
import os
import pickle
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path

from lightning.fabric.plugins.environments import SLURMEnvironment, TorchElasticEnvironment

from fibexp.checks.meta_model import processes_here

POLL_S = 0.5  # how often rank 0 looks at the ranks it started
GRACE_S = 20.0  # after a rank died: rank 0's own failure handling may record the run meanwhile
ENV_KEYS = ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "NODE_RANK", "LOCAL_RANK", "RANK")


def world_size(cfg) -> int:
    return processes_here(cfg.trainer.devices, cfg.trainer.accelerator) * int(cfg.trainer.num_nodes)


def external() -> bool:
    """Whether something outside fibexp starts the ranks (srun under SLURM, torchrun, or us)."""
    return SLURMEnvironment.detect() or TorchElasticEnvironment.detect() or "LOCAL_RANK" in os.environ


def rank() -> int:
    """This process's global rank, from the environment its starter gave it (0 when alone)."""
    if "RANK" in os.environ:
        return int(os.environ["RANK"])
    if SLURMEnvironment.detect():
        return int(os.environ.get("SLURM_PROCID", 0))
    return int(os.environ.get("LOCAL_RANK", 0))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _die_with_parent() -> None:  # preexec_fn: the child gets SIGKILL when rank 0 goes away
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def failure_file(run_dir: Path, r: int) -> Path:
    return Path(run_dir) / ".ddp" / f"rank{r}.failure"


class Ranks:
    """Ranks 1..n-1 of a run on this machine, started and watched by rank 0."""

    def __init__(self, run_dir: Path, n: int):
        self.run_dir, self.n = Path(run_dir), n
        self.procs: list[subprocess.Popen] = []
        self._env_before: dict[str, str | None] = {}
        self._reason: str | None = None
        self.recorded = threading.Event()  # set once the run's failure is recorded (by either thread)
        self._stopping = False

    def start(self, cfg, ckpt: Path | None) -> None:
        """Pickle the resolved job config, set this process's rank-0 environment, start the others."""
        from omegaconf import OmegaConf

        d = self.run_dir / ".ddp"
        d.mkdir(parents=True, exist_ok=True)
        for old in d.glob("rank*.failure"):
            old.unlink()
        job = cfg.copy()
        OmegaConf.resolve(job)  # ${hydra:...} and friends: the ranks have no Hydra
        (d / "job.pkl").write_bytes(pickle.dumps(job))
        (d / "launch.json").write_text(json.dumps({"ckpt": str(ckpt) if ckpt else None, "world": self.n}))
        env = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port()), "WORLD_SIZE": str(self.n),
               "NODE_RANK": "0"}
        for k in ENV_KEYS:
            self._env_before[k] = os.environ.get(k)
        os.environ.update(env, LOCAL_RANK="0", RANK="0")
        for r in range(1, self.n):
            child_env = {**os.environ, **env, "LOCAL_RANK": str(r), "RANK": str(r)}
            self.procs.append(subprocess.Popen([sys.executable, "-m", "fibexp.cli.rank", str(self.run_dir), str(r)],
                                               env=child_env, preexec_fn=_die_with_parent))

    def dead(self) -> str | None:
        """The first rank that ended badly, with its reason; None while all live or ended well."""
        for r, p in enumerate(self.procs, start=1):
            code = p.poll()
            if code:
                return f"rank {r} of {self.n} {self._said(r, code)}"
            f = failure_file(self.run_dir, r)
            if f.exists():  # written as the exception left the rank, before its (slow) exit
                return f"rank {r} of {self.n} failed: {f.read_text().strip()}"
        return None

    def _said(self, r: int, code: int) -> str:
        f = failure_file(self.run_dir, r)
        for _ in range(10):  # the rank writes it just before it exits
            if f.exists():
                return f"failed: {f.read_text().strip()}"
            time.sleep(0.1)
        if code < 0:
            return f"died ({signal.Signals(-code).name})"
        return f"exited with code {code}"

    def reason(self, wait_s: float = 5.0) -> str | None:
        """A dead rank's reason, waiting up to `wait_s` for one (rank 0 failing in a collective
        usually means another rank died a moment before)."""
        deadline = time.monotonic() + wait_s
        while True:
            found = self._reason or self.dead()
            if found or time.monotonic() > deadline:
                return found
            time.sleep(0.1)

    def watch(self, on_death) -> None:
        """In a thread: when a rank dies, give rank 0's own handling GRACE_S to record the run
        (a collective usually fails at once), else record it with `on_death(reason)` and end."""

        def loop():
            while not self._stopping:
                found = self.dead()
                if found:
                    self._reason = found
                    print(f"fibexp: {found}; stopping the run", file=sys.stderr, flush=True)
                    if self.recorded.wait(GRACE_S):
                        return
                    try:
                        on_death(found)
                    finally:
                        self.stop()
                        os._exit(1)
                if all(p.poll() == 0 for p in self.procs):
                    return
                time.sleep(POLL_S)

        threading.Thread(target=loop, name="fibexp-ranks", daemon=True).start()

    def join(self, timeout_s: float) -> None:
        """Wait for every rank to end; raise if one ended badly."""
        deadline = time.monotonic() + timeout_s
        for p in self.procs:
            try:
                p.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        found = self.dead() or next((f"rank {r} of {self.n} still running {timeout_s:.0f} s after rank 0 ended"
                                     for r, p in enumerate(self.procs, 1) if p.poll() is None), None)
        if found:
            raise RuntimeError(found)

    def stop(self) -> None:
        """End every rank still running and restore this process's environment."""
        self._stopping = True
        for p in self.procs:
            if p.poll() is None:
                p.kill()
        for p in self.procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                pass
        for k, v in self._env_before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        self._env_before = {}


def job(run_dir: Path) -> tuple:
    """(the job's resolved config, the checkpoint to resume or None) that rank 0 left for the
    ranks it starts (`Ranks.start`)."""
    d = Path(run_dir) / ".ddp"
    ckpt = json.loads((d / "launch.json").read_text())["ckpt"]
    return pickle.loads((d / "job.pkl").read_bytes()), Path(ckpt) if ckpt else None


def record_failure(run_dir: Path, r: int, e: BaseException) -> None:
    """Rank `r`'s exception, where rank 0's watcher reads it (`failure_file`) and its traceback beside it."""
    failure_file(run_dir, r).write_text(traceback.format_exception_only(e)[-1].strip()[:2000] + "\n")
    (Path(run_dir) / ".ddp" / f"rank{r}.traceback.txt").write_text(traceback.format_exc())
