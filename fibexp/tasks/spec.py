"""What a task is to the config layer: its typed schema (`task.*` keys), the model it needs and the
vocabulary it sets. No torch: these checks run when a config is composed, before anything is
built. The implementations (`fibexp.tasks.<name>`) extend these classes with data, loss and
evaluation."""
from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from fibexp.errors import refuse
from fibexp.science import wiring

MIN_HELDOUT = 2048
COUNT_ONES_HELDOUT_SHARE = 4  # count-ones: the 2^n possible inputs must be >= 4x the held-out set
ALPHA_INITS = ("uniform", "stagger")


def value(x):
    """An enum's value, or the value itself (typed configs hold enums, overrides strings)."""
    return getattr(x, "value", x)


@dataclass
class TaskConf:
    """`task.*`: which task a run trains on. Each task extends it with its own typed keys."""

    name: str = "lm"


@dataclass
class LMConf(TaskConf):
    name: str = "lm"


@dataclass
class SyntheticConf(TaskConf):
    heldout_examples: int = 4096  # size of the fixed held-out set (>= 2048)
    heldout_seed: int = 918273  # the held-out set's own seed: every run of a task scores the same set

    def __post_init__(self):
        if self.heldout_examples < MIN_HELDOUT:
            refuse("task.heldout_examples", self.heldout_examples, f">= {MIN_HELDOUT}")


@dataclass
class CountOnesConf(SyntheticConf):
    name: str = "count_ones"


@dataclass
class ShiftCopyConf(SyntheticConf):
    name: str = "shift_copy"
    payloads: int = 256  # payload ids per marker; vocabulary = payloads x len(distances)
    distances: list[int] = field(default_factory=lambda: [200, 350])  # copy distance of each marker
    alpha_init: str = "uniform"  # learned alpha's start: uniform (alpha 1) | stagger (sets attention.alpha_init)

    def __post_init__(self):
        super().__post_init__()
        if self.payloads < 2:
            refuse("task.payloads", self.payloads, "an integer >= 2")
        if not self.distances or min(self.distances) < 1 or len(set(self.distances)) != len(self.distances):
            refuse("task.distances", self.distances, "distinct integers >= 1")
        if self.alpha_init not in ALPHA_INITS:
            refuse("task.alpha_init", repr(self.alpha_init), ", ".join(ALPHA_INITS))


@dataclass
class KVRetrievalConf(SyntheticConf):
    name: str = "kv_retrieval"
    filler_tokens: int = 256  # ids [0, filler)
    key_tokens: int = 256  # ids [filler, filler + keys)
    value_tokens: int = 256  # ids [filler + keys, filler + keys + values)
    distractors: int = 4  # distractor key-value bigrams per example
    min_distance: int = 16
    max_distance: int = 900
    bands: list[int] = field(default_factory=lambda: [16, 64, 128, 256, 512, 900])  # band edges, logged as band<lo>_<hi>

    def __post_init__(self):
        super().__post_init__()
        if self.distractors < 1:
            refuse("task.distractors", self.distractors, "an integer >= 1")
        for key in ("filler_tokens", "key_tokens", "value_tokens"):
            if getattr(self, key) < self.distractors + 1:
                refuse(f"task.{key}", getattr(self, key), f">= task.distractors + 1 = {self.distractors + 1}")
        if not 1 <= self.min_distance <= self.max_distance:
            refuse("task.min_distance", self.min_distance, f"1 <= min_distance <= task.max_distance={self.max_distance}")
        b = self.bands
        if len(b) < 2 or any(lo >= hi for lo, hi in zip(b, b[1:])) or b[0] > self.min_distance or b[-1] < self.max_distance:
            refuse("task.bands", b, f"increasing edges from <= {self.min_distance} to >= {self.max_distance}")


DIFFICULTIES = ("easy", "medium", "hard")


@dataclass
class AssocRecallConf(SyntheticConf):
    name: str = "assoc_recall"
    group_size: int = 8  # positions per group (a label, then key-value pairs); model.seq_len a multiple
    value_tokens: int = 16  # value ids; chance ~ 1 / value_tokens
    difficulty: str = "medium"  # easy: keys unique | medium: a pool of 2 x pairs per group | hard: every group the same keys

    def __post_init__(self):
        super().__post_init__()
        if self.group_size < 3:
            refuse("task.group_size", self.group_size, "an integer >= 3 (a label and at least one key-value pair)")
        if self.value_tokens < 2:
            refuse("task.value_tokens", self.value_tokens, "an integer >= 2")
        if self.difficulty not in DIFFICULTIES:
            refuse("task.difficulty", repr(self.difficulty), ", ".join(DIFFICULTIES))


GRAFT_REPLACE = ("eq1", "attention")  # = fibexp.model.graft.REPLACE (this module imports no torch)
GRAFT_PLACEMENTS = ("spread", "first", "last")
GRAFT_SCHEDULES = ("rot", "local", "fixed", "mixa")  # paper B's schedules without attention or dense layers
GRAFT_INITS = ("self", "zero")


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

    def __post_init__(self):
        if self.replace not in GRAFT_REPLACE:
            refuse("task.replace", repr(self.replace), ", ".join(GRAFT_REPLACE))
        if self.schedule not in GRAFT_SCHEDULES:
            refuse("task.schedule", repr(self.schedule), ", ".join(GRAFT_SCHEDULES))
        if self.init not in GRAFT_INITS:
            refuse("task.init", repr(self.init), ", ".join(GRAFT_INITS))
        if self.k < 0:
            refuse("task.k", self.k, "an integer >= 0 (0: the unmodified model)")
        ok = self.layers in GRAFT_PLACEMENTS if isinstance(self.layers, str) else (
            hasattr(self.layers, "__len__") and all(isinstance(i, int) and not isinstance(i, bool) for i in self.layers))
        if not ok:
            refuse("task.layers", self.layers, f"{', '.join(GRAFT_PLACEMENTS)} or a list of layer indices")


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


AUX_METRICS = tuple(f"eval/ruler_vt/hop{k}" for k in (2, 3, 4)) + tuple(f"eval/lego/len{k}" for k in (2, 3, 4))
INT8_TOTALS = ("int8/bytes_float", "int8/bytes_int8", "int8/size_ratio", "int8/degradation")
POS_BINS = 8  # val/pos_loss/<set>/bin<j>, j < 8 (fibexp.tasks.heldout.position_bins)
# forward-only tokens/s by paper A's latency protocol (task=lm; claim A9): median of the timed passes, min, max
LATENCY = {"perf/fwd_tokens_per_s", "perf/fwd_tokens_per_s_min", "perf/fwd_tokens_per_s_max"}


def heldout_sets(cfg) -> list[str]:
    """The held-out sets an LM run is scored on: the corpus domains (embedded) or the sources'
    names (hf), assuming each holds at least one window at the training length."""
    return [str(s.name) for s in cfg.data.sources] if cfg.data.source == "hf" else [str(d) for d in cfg.data.domains]


def _training_metrics(cfg) -> set[str]:
    """What every training run logs: Lightning's epoch, the training curve (its speed from the
    second step on, the median step time from the third), the learned or fixed alpha of every
    offset layer, and the evaluation's speed."""
    steps = int(cfg.trainer.max_steps)
    out = {"epoch", "perf/tokens_per_s_eval", "train/loss", "train/lr"}
    out |= {"train/tokens_per_s"} if steps >= 2 else set()
    out |= {"perf/step_ms"} if steps >= 3 else set()
    if value(cfg.attention.kind) == "sparse":
        out |= {f"alpha/layer_{layer}" for layer in range(int(cfg.model.n_layers))}
    return out


def _census(cfg) -> set[str]:
    """fibexp.model.census: weights always, links unless a layer's links move (learned alpha),
    the coupling's effective partners for the dynamics variants."""
    a = cfg.attention
    out = {"model/weights"}
    if not (value(a.kind) == "sparse" and a.schedule == "learned"):
        out.add("model/links")
    if value(a.kind) == "dynamics":
        out |= {"attn/effective_partners", "attn/effective_partners_init"}
    return out


class TaskSpec:
    """Class-level facts of a task: its name, schema, whether it reads the corpus, the vocabulary
    it sets and the checks of the model it needs (all from the config alone)."""

    name: ClassVar[str]
    schema: ClassVar[type[TaskConf]]
    uses_corpus: ClassVar[bool] = False

    @classmethod
    def vocab_size(cls, cfg) -> int:
        """model.vocab_size the task needs (the task yaml interpolates it; LM: the preset's)."""
        return int(cfg.model.vocab_size)

    @classmethod
    def check(cls, cfg) -> None:
        """Refuse a model or input the task cannot use, naming the key (before anything runs)."""

    @classmethod
    def metric_names(cls, cfg) -> set[str]:
        """The MLflow metrics a run of this (composed) config logs when it finishes without
        diverging, from the config alone: what the report can count on before the run exists.
        Not declared: the periodic validation loss (trainer.val_every_n_steps > 0), which no
        claim reads."""
        return _training_metrics(cfg)


class LMSpec(TaskSpec):
    name = "lm"
    schema = LMConf
    uses_corpus = True

    @classmethod
    def check(cls, cfg) -> None:
        if not bool(cfg.attention.causal):
            refuse("attention.causal", cfg.attention.causal, "True for task=lm (next-token prediction)")

    bpc_always: ClassVar[bool] = False  # val/bpc/<set> whatever the tokenizer, not only for char runs

    @classmethod
    def metric_names(cls, cfg) -> set[str]:
        """Training, the held-out protocol (fibexp.tasks.heldout: ppl and loss per set at the
        training length, ppl and its change at every eval.extrapolation factor and their means over
        the sets, the position bins, bpc for characters), the census, and with eval.aux / eval.int8 their measurements."""
        return cls._heldout(cfg) | _training_metrics(cfg) | _census(cfg) | cls._int8(cfg) | LATENCY | (
            set(AUX_METRICS) if cfg.eval.aux else set())

    @classmethod
    def _heldout(cls, cfg) -> set[str]:
        factors = [int(k) for k in cfg.eval.extrapolation]
        bpc = cls.bpc_always or cfg.data.tokenizer == "char"
        out = set()
        for s in heldout_sets(cfg):
            for k in factors:
                out.add(f"extrap/ppl_x{k}/{s}")
                if 1 in factors:
                    out.add(f"extrap/rel_x{k}/{s}")
            if 1 in factors:
                out |= {f"val/ppl/{s}", f"val/loss/{s}"} | ({f"val/bpc/{s}"} if bpc else set())
                out |= {f"val/pos_loss/{s}/bin{j}" for j in range(POS_BINS)}
        if heldout_sets(cfg):  # fibexp.tasks.heldout.length_means
            out |= {f"mean_ppl_{k}x" for k in factors}
            out |= {f"ppl_change_{k}x_pct" for k in factors if k != 1} if 1 in factors else set()
        return out

    @classmethod
    def _int8(cls, cfg) -> set[str]:
        """fibexp.tasks.int8: both models' ppl and bpc per set, their sizes and the degradation."""
        if not cfg.eval.int8:
            return set()
        return {f"int8/{m}/{s}" for s in heldout_sets(cfg) for m in ("ppl", "ppl_float", "bpc", "bpc_float")} | set(
            INT8_TOTALS)


class SyntheticSpec(TaskSpec):
    causal: ClassVar[bool] = True  # what attention.causal must be

    @classmethod
    def check(cls, cfg) -> None:
        a = cfg.attention
        if bool(a.causal) != cls.causal:
            refuse("attention.causal", a.causal, f"{cls.causal} for task={cls.name}")
        need = cls.vocab_size(cfg)
        if int(cfg.model.vocab_size) < need:
            refuse("model.vocab_size", cfg.model.vocab_size,
                   f">= {need} for task={cls.name} (leave it unset: the task sets it)")

    @classmethod
    def task_vocab(cls, cfg) -> int:
        raise NotImplementedError

    @classmethod
    def groups(cls, cfg) -> tuple[str, ...]:
        """Suffixes of task/acc/<group> (the implementation's group_names)."""
        return ()

    @classmethod
    def metric_names(cls, cfg) -> set[str]:
        """Training, the held-out accuracy (overall, per group) and its chance level."""
        return _training_metrics(cfg) | {"task/acc", "task/chance"} | {f"task/acc/{g}" for g in cls.groups(cfg)}

    @classmethod
    def vocab_size(cls, cfg) -> int:
        return cls.task_vocab(cfg)


class CountOnesSpec(SyntheticSpec):
    name = "count_ones"
    schema = CountOnesConf
    causal = False

    @classmethod
    def task_vocab(cls, cfg) -> int:
        return int(cfg.model.seq_len) + 1  # answers 0..n; the bits are ids 0 and 1

    @classmethod
    def check(cls, cfg) -> None:
        kind = value(cfg.attention.kind)
        if kind not in ("dense", "hypercube"):
            refuse("attention.kind", kind, "dense, hypercube for task=count_ones (the answer is read at "
                   "position 0, which causal offset attention cannot reach from later positions)")
        super().check(cfg)
        if kind == "hypercube":
            wiring.cube_dims(int(cfg.model.seq_len))  # the cube's vertices are the positions: n = 2^b
        n, held = int(cfg.model.seq_len), int(cfg.task.heldout_examples)
        least = math.ceil(math.log2(COUNT_ONES_HELDOUT_SHARE * held))
        if n < least:
            refuse("model.seq_len", n, f">= {least} for task=count_ones with task.heldout_examples={held} "
                   f"(the held-out inputs must stay a small share of the 2^n possible ones)")


class ShiftCopySpec(SyntheticSpec):
    name = "shift_copy"
    schema = ShiftCopyConf
    causal = True

    @classmethod
    def task_vocab(cls, cfg) -> int:
        return int(cfg.task.payloads) * len(cfg.task.distances)

    @classmethod
    def groups(cls, cfg) -> tuple[str, ...]:
        return tuple(f"d{d}" for d in cfg.task.distances)

    @classmethod
    def metric_names(cls, cfg) -> set[str]:
        """Also, for offset attention, where alpha went: its range over layers and mean shift."""
        sparse = value(cfg.attention.kind) == "sparse"
        return super().metric_names(cfg) | ({"task/alpha_range", "task/alpha_shift"} if sparse else set())

    @classmethod
    def check(cls, cfg) -> None:
        super().check(cfg)
        t, far = int(cfg.model.seq_len), max(cfg.task.distances)
        if t <= far:
            refuse("model.seq_len", t, f"> {far} for task=shift_copy (task.distances up to {far} need "
                   "positions to copy to)")
        a, init = cfg.attention, cfg.task.alpha_init
        learned = value(a.kind) == "sparse" and a.schedule == "learned"
        if init != "uniform" and not learned:
            refuse("task.alpha_init", init, "uniform unless attention.schedule=learned (sparse): only "
                   "learned alpha has a start to choose")
        if learned and a.alpha_init != init:
            refuse("attention.alpha_init", a.alpha_init, f"{init} (task.alpha_init sets it for task=shift_copy)")


class KVRetrievalSpec(SyntheticSpec):
    name = "kv_retrieval"
    schema = KVRetrievalConf
    causal = True

    @classmethod
    def task_vocab(cls, cfg) -> int:
        t = cfg.task
        return int(t.filler_tokens) + int(t.key_tokens) + int(t.value_tokens)

    @classmethod
    def groups(cls, cfg) -> tuple[str, ...]:
        """band<lo>_<hi> per pair of task.bands edges."""
        b = [int(x) for x in cfg.task.bands]
        return tuple(f"band{lo}_{hi}" for lo, hi in zip(b, b[1:]))

    @classmethod
    def check(cls, cfg) -> None:
        super().check(cfg)
        t, far, k = int(cfg.model.seq_len), int(cfg.task.max_distance), int(cfg.task.distractors)
        need = max(far + 2, 4 * (k + 2))
        if t < need:
            refuse("model.seq_len", t, f">= {need} for task=kv_retrieval (the key sits at T - 2 - d for d up "
                   f"to task.max_distance={far}, with room for {k} distractor bigrams)")


class AssocRecallSpec(SyntheticSpec):
    name = "assoc_recall"
    schema = AssocRecallConf
    causal = True

    @staticmethod
    def layout(cfg) -> tuple[int, int, int]:
        """(groups, pairs per group, key ids): the last group holds the query."""
        g = int(cfg.task.group_size)
        groups, pairs = int(cfg.model.seq_len) // g, (g - 1) // 2
        return groups, pairs, (groups - 1) * pairs

    @classmethod
    def task_vocab(cls, cfg) -> int:
        groups, _, keys = cls.layout(cfg)
        return groups + keys + int(cfg.task.value_tokens) + 1  # labels, keys, values, filler

    @classmethod
    def metric_names(cls, cfg) -> set[str]:
        """Also paper B's census of the trained model."""
        return super().metric_names(cfg) | _census(cfg)

    @classmethod
    def check(cls, cfg) -> None:
        t, g = int(cfg.model.seq_len), int(cfg.task.group_size)
        if t % g or t // g < 2:
            refuse("model.seq_len", t, f"a multiple of task.group_size={g}, >= {2 * g} for task=assoc_recall "
                   "(at least one group of pairs and the query group)")
        super().check(cfg)


class GraftSpec(LMSpec):
    name = "graft"
    schema = GraftConf
    bpc_always = True  # paper B §8 reports bits per character, whatever the model's tokenizer

    @classmethod
    def metric_names(cls, cfg) -> set[str]:
        """The held-out protocol, what was trained (every weight, the trainable ones) and, with
        eval.int8, the int8 measurement; k = 0 only evaluates: no training metrics."""
        trained = _training_metrics(cfg) if int(cfg.task.k) else {"epoch", "perf/tokens_per_s_eval"}
        return cls._heldout(cfg) | trained | {"model/weights", "graft/trainable"} | cls._int8(cfg)

    @classmethod
    def vocab_size(cls, cfg) -> int:
        """The pretrained model's embedding rows (its config.json)."""
        return int(pretrained_config(cfg.task.model)["vocab_size"])

    @classmethod
    def check(cls, cfg) -> None:
        super().check(cfg)
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


SPECS: dict[str, type[TaskSpec]] = {s.name: s for s in (LMSpec, CountOnesSpec, ShiftCopySpec, KVRetrievalSpec,
                                                        AssocRecallSpec, GraftSpec)}


def get(name: str) -> type[TaskSpec]:
    if name not in SPECS:
        refuse("task.name", f"unknown {name!r}", ", ".join(SPECS))
    return SPECS[name]
