"""What a run prints: third-party notices a fibexp user cannot act on are silenced (each by its
exact message, so every other warning still shows), and each run says in one line where it
goes when it starts and what it measured when it ends."""
from __future__ import annotations

import logging
import math
import os
import re
import warnings

log = logging.getLogger("fibexp.run")

# (warning category, exact message start): emitted by libraries about their own internals.
NOISE_WARNINGS = [
    # Lightning's pytree helper still builds torch's deprecated LeafSpec; torch.export does too.
    (FutureWarning, "`isinstance(treespec, LeafSpec)` is deprecated"),
]
# The hint to prepend `srun`: right inside a SLURM allocation, noise on a machine that merely has
# the SLURM client installed. Lightning's PossibleUserWarning subclasses UserWarning.
SRUN_HINT = (UserWarning, "The `srun` command is available on your system but is not used")
# (logger, exact message start) of info lines Lightning and MLflow write through `logging`:
# Lightning's device census (the run's start line says where it runs) and its max_steps notice
# (every fibexp run ends at max_steps; on a terminal the notice lands on the progress bar's line),
# its Ctrl-C notice (the run says in one line where it stopped), MLflow's notes on building a new
# sqlite store's tables.
_LIGHTNING_INFO = ("💡 Tip: For seamless cloud logging", "GPU available: ", "TPU available: ", "HPU available: ",
                   "`Trainer.fit` stopped: `max_steps=", "\nDetected KeyboardInterrupt, attempting graceful shutdown")
NOISE_LOGS = [
    *(("lightning.pytorch.utilities.rank_zero", m) for m in _LIGHTNING_INFO),
    *(("lightning.fabric.utilities.rank_zero", m) for m in _LIGHTNING_INFO),
    ("mlflow.store.db.utils", "Creating initial MLflow database tables"),
    ("mlflow.store.db.utils", "Updating database tables"),
    # torch's ONNX exporter (onnxscript's IR) on an empty attribute list, once per such node
    ("onnx_ir._convenience", "Attribute type is ambiguous because it is an empty sequence"),
]


class _DropMessages(logging.Filter):
    def __init__(self, prefixes: list[str]):
        super().__init__()
        self.prefixes = tuple(prefixes)

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.getMessage()).startswith(self.prefixes)


def quiet() -> None:
    """Silence the known third-party noise; call once, before the Trainer is built. Idempotent."""
    noise = list(NOISE_WARNINGS)
    if "SLURM_JOB_ID" not in os.environ:
        noise.append(SRUN_HINT)
    for category, message in noise:
        warnings.filterwarnings("ignore", message=re.escape(message), category=category)
    by_logger: dict[str, list[str]] = {}
    for name, message in NOISE_LOGS:
        by_logger.setdefault(name, []).append(message)
    for name, messages in by_logger.items():
        logger = logging.getLogger(name)
        if not any(isinstance(f, _DropMessages) for f in logger.filters):
            logger.addFilter(_DropMessages(messages))
    once()


# Libraries that give their logger a console handler of their own (submitit at import; Lightning
# when the root had none yet) while it still propagates to the root, which Hydra gives one too.
OWN_HANDLERS = ("submitit", "lightning.pytorch", "lightning.fabric")


def once() -> None:
    """Each library line printed once: where the root logger has a handler (Hydra's job logging),
    a library logger that also propagates there drops its own console handler (submitit's "Job
    completed successfully" was printed twice in every cell's log)."""
    if not logging.getLogger().handlers:
        return
    for name in OWN_HANDLERS:
        logger = logging.getLogger(name)
        if logger.propagate:
            for h in [h for h in logger.handlers if type(h) is logging.StreamHandler]:
                logger.removeHandler(h)


def progress_bar():
    """Lightning's progress bar for runs that end at trainer.max_steps: rich's training bar says
    "Training", not "Epoch 0/-2" (it writes max_epochs - 1, and max_epochs is -1 when max_steps
    ends the run; without rich, Lightning's tqdm bar writes "Epoch 0", which is right)."""
    from lightning.pytorch.callbacks import RichProgressBar, TQDMProgressBar
    from lightning.pytorch.utilities.imports import _RICH_AVAILABLE

    if not _RICH_AVAILABLE:
        return TQDMProgressBar()

    class StepsBar(RichProgressBar):
        def _get_train_description(self, current_epoch: int) -> str:
            if (self.trainer.max_epochs or 0) >= 0:
                return super()._get_train_description(current_epoch)
            return f"{'Training':{len(self.validation_description)}}"

    return StepsBar()


def run_started(run, run_id: str | None = None) -> str:
    """One line when a run (a fibexp.training.inputs.Run) starts: which cell, which MLflow store
    (and run), which directory."""
    line = f"run {run.cell}: store {run.uri}" + (f" (run {run_id})" if run_id else "") + f", dir {run.dir}"
    log.info(line)
    return line


def headline(metrics: dict[str, float]) -> str:
    """The numbers a user looks at first: mean held-out ppl (or bpc) over the sets, the mean
    change at the largest length factor, task accuracy; the set count says what was averaged."""

    def mean_of(prefix: str):
        values = [v for k, v in metrics.items() if k.startswith(prefix) and math.isfinite(v)]
        return (sum(values) / len(values), len(values)) if values else (None, 0)

    parts = []
    if "task/acc" in metrics:
        parts.append(f"task/acc {metrics['task/acc']:.3f}")
    for prefix, fmt in (("val/bpc/", ".3f"), ("val/ppl/", ".2f")):
        value, n = mean_of(prefix)
        if value is not None:
            parts.append(f"{prefix.rstrip('/')} {value:{fmt}} (mean of {n} sets)")
    factors = [int(k.split("/")[1][len("rel_x"):]) for k in metrics if k.startswith("extrap/rel_x")]
    if factors and max(factors) > 1:
        k = max(factors)
        value, _ = mean_of(f"extrap/rel_x{k}/")
        if value is not None:
            parts.append(f"ppl change at {k}x length {value:+.1%}")
    return ", ".join(parts) or "no evaluation metrics"


def run_finished(cell: str, metrics: dict[str, float], ui_url: str | None = None) -> str:
    """One line when a run ends: its headline metrics, and where to compare it."""
    line = f"run {cell} finished: {headline(metrics)}" + (f"; compare: {ui_url}" if ui_url else "")
    log.info(line)
    return line


def already_finished(run) -> str:
    """One line when the same command meets its run (a fibexp.training.inputs.Run) FINISHED:
    nothing is trained or logged again."""
    done = run.finished
    line = (f"run {run.cell} is already FINISHED ({done.run_id}): {headline(done.metrics)}; nothing trained or "
            f"logged; compare: {done.url}")
    log.info(line)
    return line
