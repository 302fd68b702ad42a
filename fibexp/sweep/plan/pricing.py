"""What a grid costs, before it runs: analytic training FLOPs (`fibexp.model.cost`), priced in
GPU-hours at a named GPU's peak times an MFU for GPU cells, and in hours on this machine for CPU
cells, from measured step times (the store's runs of the same shape, else a calibration the
caller times here)."""
from __future__ import annotations

import statistics
from dataclasses import dataclass, field, replace
from typing import Callable

from omegaconf import DictConfig

from fibexp.config import identity
from fibexp.model import cost
from fibexp.sweep.plan.grid import DUPLICATE, NEW, Cell
from fibexp.sweep.plan.size import flops_per_token
from fibexp.sweep.plan.stored import Store, logged_params, shape_of


@dataclass
class Cost:
    cells: int = 0  # new cells
    flops: float = 0.0  # analytic training FLOPs of the new cells whose size is known
    gpu_flops: float = 0.0
    gpu_cells: int = 0
    cpu_ms: float = 0.0  # training time of the new CPU cells on this machine, one after another
    cpu_cells: int = 0
    sources: dict[str, int] = field(default_factory=dict)  # where the CPU step times came from: cells per source
    unknown: dict[str, int] = field(default_factory=dict)  # why a cell could not be priced: cells per reason
    gpu: str = cost.DEFAULT_GPU
    mfu: float = cost.DEFAULT_MFU

    @property
    def gpu_hours(self) -> float:
        return self.gpu_flops / (cost.GPUS[self.gpu][1] * self.mfu) / 3600

    def line(self) -> str:
        parts = [f"cost: {self.cells} new cells, {self.flops:.3g} training FLOPs (analytic)"]
        if self.gpu_cells:
            parts.append(f"{self.gpu_hours:,.1f} GPU-hours for {self.gpu_cells} GPU cells at {cost.GPUS[self.gpu][0]} "
                         f"x MFU {self.mfu:g} (assumed)")
        if self.cpu_cells:
            how = ", ".join(f"{n} from {s}" for s, n in self.sources.items())
            hours = self.cpu_ms / 3.6e6
            shown = f"{hours:,.2f} CPU-hours" if hours >= 1 else f"{hours * 60:.1f} CPU-minutes"
            parts.append(f"{shown} for {self.cpu_cells} CPU cells on this machine, one cell at a time, training steps "
                         f"only (step times: {how})")
        if self.unknown:
            parts.append("not priced: " + "; ".join(f"{n} cells ({why})" for why, n in self.unknown.items()))
        return "; ".join(parts)


def price(planned: list[Cell], known: Store | None = None, calibrate: Callable[[DictConfig], float | None] | None = None,
          gpu: str = cost.DEFAULT_GPU, mfu: float = cost.DEFAULT_MFU) -> Cost:
    """The new cells' training FLOPs (tokens = max_steps x batch x length, times the model's
    FLOPs per token); GPU cells priced at the GPU's peak x MFU, CPU cells at their step time on
    this machine: the median perf/step_ms of the store's FINISHED runs of the same shape, else
    `calibrate(cfg)` (a training step timed here), once per shape."""
    cost.check_pricing(gpu, mfu)
    out, timed = Cost(gpu=gpu, mfu=mfu), {}
    for c in (c for c in planned if c.status == NEW):
        out.cells += 1
        job = c.cfg
        trains = not (job.task.name == "graft" and int(job.task.k) == 0)  # k = 0 only evaluates
        steps = int(job.trainer.max_steps) if trains else 0
        tokens = steps * int(job.data.batch_size) * int(job.model.seq_len)
        per_token = flops_per_token(job) if steps else 0.0
        if per_token is None:
            why = f"task.model={job.task.model}: no config.json at hand"
            out.unknown[why] = out.unknown.get(why, 0) + 1
            continue
        flops = tokens * per_token
        out.flops += flops
        if str(job.trainer.accelerator) in ("gpu", "cuda"):
            out.gpu_flops += flops
            out.gpu_cells += 1
            continue
        if not steps:
            out.cpu_cells += 1
            continue
        params = logged_params(job)
        shape = shape_of(params, identity.cell(job))
        if shape not in timed:
            measured = (known.step_ms.get(shape) if known else None) or []
            if measured:
                timed[shape] = (statistics.median(measured), f"the median perf/step_ms of FINISHED runs of the same "
                                                            f"shape in {known.uri}")
            elif calibrate and (ms := calibrate(c.cfg)) is not None:
                timed[shape] = (ms, "a 3-step calibration timed here")
            else:
                timed[shape] = (None, "")
        ms, source = timed[shape]
        if ms is None:
            why = "no step time measured for its shape"
            out.unknown[why] = out.unknown.get(why, 0) + 1
            continue
        out.cpu_ms += steps * ms
        out.cpu_cells += 1
        out.sources[source] = out.sources.get(source, 0) + 1
    return out


def per_cell(planned: list[Cell], known: Store, gpu: str, mfu: float) -> dict[str, tuple[str, float]]:
    """{task: (unit, the cost of one more cell)}, the mean over the plan's new cells of that task
    (GPU: analytic GPU-hours; CPU: minutes at the store's step times, else training FLOPs). A cell
    that already FINISHED counts as new here: one more seed of it costs what it cost."""
    out = {}
    for task in {str(c.cfg.task.name) for c in planned}:
        p = price([replace(c, status=NEW) for c in planned if str(c.cfg.task.name) == task and c.status != DUPLICATE],
                  known, None, gpu, mfu)
        if p.gpu_cells:
            out[task] = ("GPU-hours", p.gpu_hours / p.gpu_cells)
        elif p.cpu_cells and p.cpu_ms:
            out[task] = ("CPU-minutes", p.cpu_ms / p.cpu_cells / 6e4)
        elif p.cells:
            out[task] = ("training FLOPs", p.flops / p.cells)
    return out
