"""task=graft's keys (the pretrained model, how many of its layers and which, what replaces them),
reading the pretrained model's config.json offline (no torch, nothing downloaded), and what the
graft asks of the rest of the config: the model's own tokenizer, layers it has, a training length
on a cube for the Eq. (1) layers. Evaluated like task=lm (`fibexp.tasks.lm.config`)."""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from fibexp.errors import refuse
from fibexp.science import wiring
from fibexp.tasks.config import TaskConf, training_metrics
from fibexp.tasks.lm.config import LMConf, heldout_metrics, int8_metrics

REPLACE = ("eq1", "attention")  # = fibexp.model.graft.REPLACE (this module imports no torch)
PLACEMENTS = ("spread", "first", "last")
SCHEDULES = ("rot", "local", "fixed", "mixa")  # paper B's schedules without attention or dense layers
INITS = ("self", "zero")

_HUB_ID = re.compile(r"[\w.-]+/[\w.-]+")
_WEIGHTS = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin", "pytorch_model.bin.index.json")


def pretrained_file(ref: str, name: str) -> Path | None:
    """`name` of a model folder or of a Hub model already in the local Hugging Face cache (no
    download), else None."""
    local = Path(ref).expanduser()
    if local.is_dir():
        return local / name if (local / name).is_file() else None
    if not _HUB_ID.fullmatch(ref):
        return None
    from huggingface_hub import try_to_load_from_cache

    try:
        found = try_to_load_from_cache(ref, name)
    except ValueError:  # a name the Hub would not accept (e.g. "a--b/c")
        return None
    return Path(found) if isinstance(found, str) else None


def pretrained_config(ref: str) -> dict:
    """The config.json of `task.model`, read offline; refused in one line when it is not there."""
    allowed = ("a local model folder (config.json, tokenizer.json, weights) or a Hub name whose files are in "
               "the local Hugging Face cache (nothing is downloaded)")
    path = pretrained_file(ref, "config.json")
    if path is None or not any(pretrained_file(ref, w) for w in _WEIGHTS) or pretrained_file(ref, "tokenizer.json") is None:
        refuse("task.model", f"{ref} (cannot be loaded offline: no config.json, tokenizer.json and weights)", allowed)
    try:
        conf = json.loads(path.read_text(encoding="utf-8"))
        int(conf["num_hidden_layers"]), int(conf["vocab_size"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        refuse("task.model", f"{ref} (config.json unreadable: {type(e).__name__})", allowed)
    return conf


def graft_layers(layers, k: int, n_layers: int) -> list[int]:
    """The decoder layers a graft changes: k of n_layers, spread evenly (layer floor((j + 1/2) n / k)),
    the first or last k, or the given list."""
    if not isinstance(layers, str):
        return [int(i) for i in layers]
    if layers == "first":
        return list(range(k))
    if layers == "last":
        return list(range(n_layers - k, n_layers))
    return [int((j + 0.5) * n_layers / k) for j in range(k)]


@dataclass
class GraftConf(TaskConf):
    """Paper B §8: k attention layers of a pretrained causal LM replaced by Eq. (1) layers (or, the
    control, fine-tuned as they are), the rest frozen."""

    name: str = "graft"
    model: str = "Qwen/Qwen3-0.6B"  # a local folder, or a Hub name already in the Hugging Face cache (offline)
    k: int = 2  # layers replaced (eq1) or fine-tuned (attention); 0: the unmodified model, evaluated only
    replace: str = "eq1"  # eq1 | attention (the control)
    layers: Any = "spread"  # spread (evenly over depth) | first | last | a list of k layer indices
    schedule: str = "rot"  # the Eq. (1) layers' jumps, in paper B's plan at model.seq_len: rot | local | fixed | mixa
    init: str = "self"  # Eq. (1)'s start: self (W_self = the attention's W_o W_v, W_off 0) | zero

    uses_corpus: ClassVar[bool] = True
    bpc_always: ClassVar[bool] = True  # paper B §8 reports bits per character, whatever the model's tokenizer

    def __post_init__(self):
        if self.replace not in REPLACE:
            refuse("task.replace", repr(self.replace), ", ".join(REPLACE))
        if self.schedule not in SCHEDULES:
            refuse("task.schedule", repr(self.schedule), ", ".join(SCHEDULES))
        if self.init not in INITS:
            refuse("task.init", repr(self.init), ", ".join(INITS))
        if self.k < 0:
            refuse("task.k", self.k, "an integer >= 0 (0: the unmodified model)")
        ok = self.layers in PLACEMENTS if isinstance(self.layers, str) else (
            hasattr(self.layers, "__len__") and all(isinstance(i, int) and not isinstance(i, bool) for i in self.layers))
        if not ok:
            refuse("task.layers", self.layers, f"{', '.join(PLACEMENTS)} or a list of layer indices")

    @classmethod
    def metric_names(cls, cfg) -> set[str]:
        """The held-out protocol, what was trained (every weight, the trainable ones) and, with
        eval.int8, the int8 measurement; k = 0 only evaluates: no training metrics."""
        trained = training_metrics(cfg) if int(cfg.task.k) else {"epoch", "perf/tokens_per_s_eval"}
        return heldout_metrics(cfg, cls.bpc_always) | trained | {"model/weights", "graft/trainable"} | int8_metrics(cfg)

    @classmethod
    def vocab_size(cls, cfg) -> int:
        """The pretrained model's embedding rows (its config.json)."""
        return int(pretrained_config(cfg.task.model)["vocab_size"])

    @classmethod
    def check(cls, cfg) -> None:
        LMConf.check(cfg)  # next-token prediction, as task=lm
        t = cfg.task
        n = int(pretrained_config(t.model)["num_hidden_layers"])
        if not 0 <= t.k <= n:
            refuse("task.k", t.k, f"an integer in [0, {n}] ({t.model} has {n} attention layers)")
        chosen = graft_layers(t.layers, int(t.k), n)
        if len(chosen) != t.k or len(set(chosen)) != len(chosen) or any(not 0 <= i < n for i in chosen):
            refuse("task.layers", list(chosen), f"{t.k} distinct indices in [0, {n - 1}] (task.k={t.k})")
        if t.replace == "eq1" and t.k:
            wiring.cube_dims(int(cfg.model.seq_len))  # the Eq. (1) jumps are laid out on the training length's cube
        tok = str(cfg.data.tokenizer)
        if tok != f"hf:{t.model}":
            refuse("data.tokenizer", tok, f"hf:{t.model} for task=graft (the pretrained model's own tokenizer)")
