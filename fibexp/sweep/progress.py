"""What a sweep prints while it runs: a line when each cell starts and ends, led by `[ended/total]`
(cells ended so far, counted in the order they end), then the run name, its wall time and
headline metric (read from MLflow), and how many cells are running and have failed; and the
headline of a finished run for the closing summary."""
from __future__ import annotations

import statistics
import sys
import threading
import time

from fibexp.tracking import store


def headline(metrics: dict[str, float]) -> str:
    """The number a cell is judged by, from what its run logged: a language model's mean held-out
    ppl (and bpc for characters) over its held-out sets; a synthetic task's accuracy."""
    def mean(prefix: str) -> float | None:
        vals = [v for k, v in metrics.items() if k.startswith(prefix) and k.count("/") == 2]
        return statistics.fmean(vals) if vals else None

    parts = []
    if (ppl := mean("val/ppl/")) is not None:
        parts.append(f"val ppl {ppl:.1f}")
    if (bpc := mean("val/bpc/")) is not None:
        parts.append(f"val bpc {bpc:.3f}")
    if "task/acc" in metrics:
        parts.append(f"acc {metrics['task/acc']:.3f}")
    if not parts and "train/diverged_step" in metrics:
        parts.append(f"diverged at step {metrics['train/diverged_step']:.0f}")
    return ", ".join(parts)


class Progress:
    """Called by the fibexp launchers with a cell's index in the launch (`started`, `ended`);
    thread-safe, prints to stdout at once."""

    def __init__(self, client, experiment_id: str, names: list[str], hashes: list[str]):
        self.client, self.experiment_id = client, experiment_id
        self.names, self.hashes = names, hashes
        self.t0: dict[int, float] = {}
        self.n_ended = self.n_failed = 0
        self._lock = threading.Lock()

    @property
    def running(self) -> int:
        return sum(1 for t in self.t0.values() if t >= 0)

    def _say(self, line: str) -> None:
        print(line, flush=True)
        sys.stderr.flush()

    def started(self, i: int) -> None:
        with self._lock:
            if i in self.t0:
                return
            self.t0[i] = time.monotonic()
            self._say(f"[{self.n_ended}/{len(self.names)}] start {self.names[i]}  ({self.running} running)")

    def ended(self, i: int) -> None:
        with self._lock:
            if i not in self.t0 or self.t0[i] < 0:
                return
            wall = time.monotonic() - self.t0[i]
            self.t0[i] = -1.0
            self.n_ended += 1
            runs = store.find_runs(self.client, self.experiment_id, self.hashes[i])
            status = runs[0].info.status if runs else "NO RUN"
            word = "done" if status == "FINISHED" else status.lower()
            self.n_failed += status != "FINISHED"
            metric = headline(runs[0].data.metrics) if runs and status == "FINISHED" else ""
            self._say(f"[{self.n_ended}/{len(self.names)}] {word:<5} {self.names[i]}  {wall:.0f} s"
                      + (f"  {metric}" if metric else "") + f"  ({self.running} running, {self.n_failed} failed)")
