"""A fibexp sweep: every `fibexp-train -m` (fibexp.sweep.runner checks, launches and summarises it),
its cells' configs and names (cells), what it will run, judge and cost (plan), how its cells are
launched (launchers, under the Hydra plugins), its home folder (home), record (state), interrupts
(interrupt), progress lines (progress), each cell's outcome (outcome), the summary that ends it
(summary), a SLURM sweep that submits and returns (detach, scheduler), sweep.max_failures
(failfast) and reruns of logged runs (rerun). Light on purpose: importing one of them
(`fibexp-sweep` answering bad input, a job reading its sweep's record, Hydra loading the
launchers) does not pull in the runner's MLflow, report and matplotlib; the runner's names are
still reachable from here."""
from __future__ import annotations

_RUNNER = {"run_sweep", "Sweep", "composed_and_checked", "STOP_WAIT_S", "_Checks", "_parent_run"}


def __getattr__(name: str):
    """`fibexp.sweep.run_sweep` and the like, imported when first asked for (PEP 562)."""
    if name in _RUNNER:
        from fibexp.sweep import runner

        return getattr(runner, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
