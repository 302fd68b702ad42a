"""Whether a CPU run can hold its training step in memory, from the config alone: a lower bound on
a step's bytes (weights, gradients and AdamW's two moments; each layer's saved activations; the
logits and their gradient over the vocabulary) against the memory the run gets (the SLURM job's
`mem_gb`, else this machine's RAM or its cgroup's limit). A size past it (a typo such as
data.batch_size=1000000000) is refused naming the key that grew, before any run exists: torch
would otherwise take the machine into swap before failing. No torch."""
from __future__ import annotations

import math
import os
from pathlib import Path

from fibexp.config.schema import DataConf, ModelConf, TrainConf
from fibexp.errors import refuse, shown_bytes

GIB = 2**30
# The sizes a step's memory grows with, and their schema defaults (the key named is the one
# furthest above its default).
SIZES = {"data.batch_size": DataConf.batch_size, "model.seq_len": ModelConf.seq_len,
         "model.vocab_size": ModelConf.vocab_size, "model.d_model": ModelConf.d_model,
         "model.n_layers": ModelConf.n_layers}


def step_bytes(c: TrainConf) -> int:
    """A lower bound on the bytes of one fp32 training step of the LM (`fibexp.model.lm.LM`)."""
    m = c.model
    ffn = m.ffn_hidden or math.ceil(8 * m.d_model / 3)  # the SwiGLU width fibexp.model.layers builds
    params = m.vocab_size * m.d_model + m.n_layers * (2 * m.d_model ** 2 + 3 * m.d_model * ffn)  # every mixer has 2 d^2
    tokens = c.data.batch_size * m.seq_len
    per_token = m.n_layers * (4 * m.d_model + 2 * ffn) + 2 * m.vocab_size
    return 16 * params + 4 * tokens * per_token


def _cgroup_limit() -> int | None:
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            text = Path(path).read_text(encoding="utf-8").strip()
        except OSError:
            continue
        if text.isdigit() and int(text) < 2**60:
            return int(text)
    return None


def machine_bytes() -> tuple[int, str]:
    """(the memory a process here can use, where that figure comes from)."""
    mem = os.environ.get("SLURM_MEM_PER_NODE", "")
    if mem.isdigit():
        return int(mem) * 2**20, "this SLURM job's --mem"
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    limit = _cgroup_limit()
    if limit is not None and limit < total:
        return limit, "this machine's cgroup memory limit"
    return total, "this machine's memory"


def sizes(c: TrainConf) -> dict[str, int]:
    """The sizes a step's memory grows with, as this config sets them."""
    return {"data.batch_size": c.data.batch_size, "model.seq_len": c.model.seq_len,
            "model.vocab_size": c.model.vocab_size, "model.d_model": c.model.d_model,
            "model.n_layers": c.model.n_layers}


def grown(values: dict[str, int]) -> str:
    """The size key furthest above its default: the one to lower first."""
    return max(values, key=lambda k: values[k] / SIZES[k])


def limit_of(c: TrainConf, launcher=None, machine: bool = True) -> tuple[int, str] | None:
    """(the bytes a CPU run may hold, the key or source that says so): trainer.memory_limit_gb, else
    a SLURM launcher's mem_gb, else (with `machine`) this machine's; None when nothing is known."""
    if c.trainer.memory_limit_gb is not None:
        return int(c.trainer.memory_limit_gb * GIB), f"trainer.memory_limit_gb={c.trainer.memory_limit_gb:g}"
    mem_gb = launcher.get("mem_gb") if launcher is not None and "Slurm" in str(launcher.get("_target_", "")) else None
    if mem_gb:
        return int(float(mem_gb) * GIB), f"hydra.launcher.mem_gb={mem_gb}"
    return machine_bytes() if machine else None


def check_memory(c: TrainConf, launcher, machine: bool) -> None:
    """Refuse a CPU run whose step cannot fit the memory it gets. `launcher`: the hydra.launcher
    node (its mem_gb for SLURM jobs); with neither a limit, a SLURM launcher nor `machine`, nothing is known."""
    known = limit_of(c, launcher, machine)
    if known is None:
        return
    limit, where = known
    need = step_bytes(c)
    if need <= limit:
        return
    values = sizes(c)
    key = grown(values)
    refuse(key, values[key], f"a size whose training step fits in memory: at least {shown_bytes(need)} estimated "
           f"(data.batch_size={c.data.batch_size} x model.seq_len={c.model.seq_len}, model.vocab_size="
           f"{c.model.vocab_size}, model.d_model={c.model.d_model}, model.n_layers={c.model.n_layers}) against "
           f"{shown_bytes(limit)} ({where})")
