"""Typed schemas of every config group, registered with Hydra's ConfigStore, so a misspelt
key or a wrongly typed value fails at composition, and `validate` checks the values
(allowed names, ranges) before any data is read or any run is created."""
from __future__ import annotations

import hashlib
import json
import typing
from dataclasses import dataclass, field
from enum import Enum
from numbers import Real
from typing import Any, Callable, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, DictConfig, OmegaConf

from fibexp import tasks
from fibexp.data.corpus import DOMAINS
from fibexp.data.sources import SourceConf, check_data
from fibexp.data.tokenizer import BPE_MIN_VOCAB, MAX_VOCAB
from fibexp.model.mixers import AttentionSpec, Impl

EVAL_VERSION = "1"  # bump when the evaluation protocol changes: runs across versions are not comparable


@dataclass
class AttentionConf(AttentionSpec):
    _target_: str = "fibexp.model.AttentionSpec"


@dataclass
class ModelConf:
    _target_: str = "fibexp.model.LM"
    n_layers: int = 4
    d_model: int = 128
    n_heads: int = 4
    n_kv_heads: int = 2
    vocab_size: int = 4096
    seq_len: int = 256
    ffn_hidden: Optional[int] = None  # None: ceil(8/3 d_model), the paper's SwiGLU width
    rope_theta: float = 1e4
    norm_eps: float = 1e-6
    attention: Any = "${attention}"


@dataclass
class DataConf:
    source: str = "embedded"
    domains: list[str] = field(default_factory=lambda: list(DOMAINS))
    tokenizer: str = "bpe"  # bpe | char (char runs also log val/bpc/<set>) | hf:<tokenizer.json, folder or Hub id>
    # training weight per domain ({drama: 2, prose: 1}; unlisted domains: 0); None: by token count.
    # Typed Any, not Optional[dict]: OmegaConf cannot merge a command-line dict into a typed None
    # node (`data.mixture={drama:1}` failed), so the weights are checked by `validate` instead.
    mixture: Any = None
    sources: list[SourceConf] = field(default_factory=list)  # source=hf: the datasets (conf/data/hf.yaml)
    train_tokens: int = 0  # source=hf: training tokens prepared, split by weight; 0: all of every source
    num_proc: int = 0  # source=hf: processes preparing (source, split) pairs at once; 0: auto (1 for small local files)
    batch_size: int = 16
    eval_tokens: int = 32768  # first N tokens of each held-out set (0: all)
    num_workers: int = 0


@dataclass
class OptimConf:
    lr: float = 3e-4
    betas: list[float] = field(default_factory=lambda: [0.9, 0.95])
    weight_decay: float = 0.1
    warmup_steps: int = 300
    min_lr_ratio: float = 0.1
    grad_clip: float = 1.0


@dataclass
class TrainerConf:
    max_steps: int = 300
    accelerator: str = "auto"
    devices: Any = 1
    num_nodes: int = 1
    strategy: str = "auto"
    precision: Optional[str] = None  # None: bf16-mixed on GPU, 32 on CPU
    checkpoint_every_n_steps: int = 100
    val_every_n_steps: int = 0  # 0: validate only at the end (the final evaluation always runs)
    log_every_n_steps: int = 10
    threads: int = 0  # torch intra-op threads; 0: leave torch's default
    compile: bool = False  # torch.compile the model; off: on CPU it pays off only after ~1,000 steps (fibexp-bench model)
    callbacks: list[Any] = field(default_factory=list)  # extra Lightning callbacks ({_target_: ...})


@dataclass
class EvalConf:
    extrapolation: list[int] = field(default_factory=lambda: [1, 2, 4])
    batch_tokens: int = 16384  # windows per forward = batch_tokens // length
    aux: bool = True  # task=lm: RULER variable tracking and LEGO after the held-out evaluation


@dataclass
class LoggerConf:
    tracking_uri: Optional[str] = None  # None: $MLFLOW_TRACKING_URI, else sqlite:///<project>/outputs/mlflow.db
    experiment: str = "fibexp"
    run_name: Optional[str] = None  # None: from the cell, e.g. sparse-fib-stagger-W8-s42
    outage_wait_s: float = 300.0  # a run's end waits this long for a tracking server that went away (fibexp.tracking.journal)


@dataclass
class PathsConf:
    root: str = "${hydra:runtime.cwd}"
    output_dir: str = "${paths.root}/outputs"
    cache_dir: str = "${paths.output_dir}/cache"


@dataclass
class SweepConf:
    id: Optional[str] = None  # set by the sweeper for every cell it launches
    parent_run_id: Optional[str] = None


@dataclass
class TrainConf:
    model: ModelConf = MISSING
    attention: AttentionConf = MISSING
    data: DataConf = MISSING
    optim: OptimConf = field(default_factory=OptimConf)
    trainer: TrainerConf = MISSING
    task: tasks.TaskConf = MISSING  # lm | count_ones | shift_copy | kv_retrieval (conf/task/)
    eval: EvalConf = field(default_factory=EvalConf)
    logger: LoggerConf = field(default_factory=LoggerConf)
    paths: PathsConf = field(default_factory=PathsConf)
    sweep: SweepConf = field(default_factory=SweepConf)
    seed: int = 42
    ckpt_path: Optional[str] = None  # None: resume from the run dir's last.ckpt if present; "last": require it; or a file


def register() -> None:
    """Schemas for Hydra, and the resolver naming a run's directory after its cell and config."""
    if not OmegaConf.has_resolver("fibexp_run_dir"):
        OmegaConf.register_new_resolver("fibexp_run_dir", lambda *, _root_: f"{run_name(_root_)}-{config_hash(_root_)}")
    if not OmegaConf.has_resolver("fibexp_task_vocab"):  # model.vocab_size of a synthetic task (its yaml)
        OmegaConf.register_new_resolver("fibexp_task_vocab", lambda *, _root_: tasks.get(_root_.task.name).vocab_size(_root_))
    cs = ConfigStore.instance()
    cs.store(name="train_schema", node=TrainConf)
    for group, node in [("model", ModelConf), ("attention", AttentionConf), ("data", DataConf),
                        ("trainer", TrainerConf)]:
        cs.store(group=group, name=f"{group}_schema", node=node)
    for name, task in tasks.TASKS.items():
        cs.store(group="task", name=f"{name}_schema", node=task.schema)


def _accelerators() -> tuple[str, ...]:
    from lightning.pytorch.accelerators import AcceleratorRegistry

    return ("auto", "gpu", *sorted(AcceleratorRegistry.available_accelerators()))


def _strategies() -> tuple[str, ...]:
    from lightning.pytorch.strategies import StrategyRegistry

    return ("auto", *StrategyRegistry.available_strategies())


def _precisions() -> tuple[str, ...]:
    from lightning.fabric.connector import _PRECISION_INPUT_STR

    return typing.get_args(_PRECISION_INPUT_STR)


def on_cuda(c: TrainConf) -> bool:
    """Whether the run trains on CUDA: trainer.accelerator gpu/cuda, or auto where a GPU is present."""
    import torch

    return c.trainer.accelerator in ("gpu", "cuda") or (c.trainer.accelerator == "auto" and torch.cuda.is_available())


def _devices_ok(d) -> bool:
    """What Lightning's `devices` takes: auto, -1 (all), a count >= 1, or a list / "0,1" of indices."""
    if isinstance(d, str):
        parts = [p.strip() for p in d.split(",") if p.strip()]
        return d == "auto" or (bool(parts) and all(p.lstrip("-").isdigit() for p in parts))
    if isinstance(d, bool):
        return False
    if isinstance(d, int):
        return d >= 1 or d == -1
    return isinstance(d, (list, tuple)) and len(d) > 0 and all(isinstance(i, int) and not isinstance(i, bool)
                                                              and i >= 0 for i in d)


def _mixture_ok(c: TrainConf) -> bool:
    """null, or weights >= 0 with a positive sum (over data.domains, for the embedded corpus)."""
    m = c.data.mixture
    if m is None:
        return True
    if not hasattr(m, "items") or not m:
        return False
    w = list(m.values())
    return (all(isinstance(x, Real) and not isinstance(x, bool) and x >= 0 for x in w) and sum(w) > 0
            and (c.data.source != "embedded" or set(m) <= set(c.data.domains)))


def _corpus(c: TrainConf) -> bool:
    return tasks.get(c.task.name).uses_corpus


# Every range and cross-key rule the types do not carry: (key, allowed, test). `allowed` is
# formatted with the config (c) and printed as `<key>: <value>; allowed: <allowed>`. Rules run
# in order and the first failure is reported, so a rule may assume the ones above it hold.
Rule = tuple[str, str, Callable[[TrainConf], bool]]
RULES: list[Rule] = [
    ("seed", "0 <= seed < 2**32 (numpy's seed range)", lambda c: 0 <= c.seed < 2**32),
    ("model.n_layers", "an integer >= 1", lambda c: c.model.n_layers >= 1),
    ("model.d_model", "an integer >= 1", lambda c: c.model.d_model >= 1),
    ("model.n_heads", "an integer >= 1", lambda c: c.model.n_heads >= 1),
    ("model.n_kv_heads", "an integer >= 1", lambda c: c.model.n_kv_heads >= 1),
    ("model.n_kv_heads", "a divisor of model.n_heads={c.model.n_heads} (GQA groups)",
     lambda c: c.model.n_heads % c.model.n_kv_heads == 0),
    ("model.n_heads", "a divisor of model.d_model={c.model.d_model} leaving an even head dim (RoPE)",
     lambda c: c.model.d_model % c.model.n_heads == 0 and (c.model.d_model // c.model.n_heads) % 2 == 0),
    ("model.seq_len", "an integer >= 1", lambda c: c.model.seq_len >= 1),
    ("model.vocab_size", "an integer >= 1", lambda c: c.model.vocab_size >= 1),
    ("model.vocab_size", f"<= {MAX_VOCAB} for task={{c.task.name}} (token files store ids as uint16)",
     lambda c: not _corpus(c) or c.model.vocab_size <= MAX_VOCAB),
    ("model.vocab_size", f">= {BPE_MIN_VOCAB} with data.tokenizer=bpe (256 bytes + the separator)",
     lambda c: not _corpus(c) or c.data.tokenizer != "bpe" or c.model.vocab_size >= BPE_MIN_VOCAB),
    ("model.ffn_hidden", "null or an integer >= 1", lambda c: c.model.ffn_hidden is None or c.model.ffn_hidden >= 1),
    ("model.rope_theta", "> 0", lambda c: c.model.rope_theta > 0),
    ("model.norm_eps", "> 0", lambda c: c.model.norm_eps > 0),
    ("attention.window", "an integer >= 1 (the local window {{0..W}})", lambda c: c.attention.window >= 1),
    ("attention.impl", "auto, gather, mask with trainer.accelerator={c.trainer.accelerator} (flex trains on CUDA only)",
     lambda c: c.attention.impl is not Impl.flex or on_cuda(c)),
    ("data.batch_size", "an integer >= 1", lambda c: c.data.batch_size >= 1),
    ("data.domains", "a non-empty list of distinct domains", lambda c: len(set(c.data.domains)) == len(c.data.domains) > 0),
    ("data.mixture", "null, or {{domain: weight}} over data.domains={c.data.domains}, weights >= 0 with a positive sum",
     _mixture_ok),
    ("data.eval_tokens", "0 (all) or an integer >= 1", lambda c: c.data.eval_tokens >= 0),
    ("data.eval_tokens", "0 (all) or > model.seq_len x max(eval.extrapolation) = {reach} (a window at every "
                         "evaluated length)",
     lambda c: not _corpus(c) or c.data.eval_tokens == 0 or not c.eval.extrapolation
     or c.data.eval_tokens > c.model.seq_len * max(c.eval.extrapolation)),
    ("data.num_workers", "an integer >= 0", lambda c: c.data.num_workers >= 0),
    ("data.num_proc", "an integer >= 0 (0: auto)", lambda c: c.data.num_proc >= 0),
    ("optim.lr", "0 < lr < 1", lambda c: 0 < c.optim.lr < 1),
    ("optim.betas", "two numbers in [0, 1), e.g. [0.9,0.95]",
     lambda c: len(c.optim.betas) == 2 and all(0 <= b < 1 for b in c.optim.betas)),
    ("optim.weight_decay", ">= 0", lambda c: c.optim.weight_decay >= 0),
    ("optim.warmup_steps", "an integer >= 0", lambda c: c.optim.warmup_steps >= 0),
    ("optim.min_lr_ratio", "0 <= min_lr_ratio <= 1 (the cosine's floor, a share of optim.lr)",
     lambda c: 0 <= c.optim.min_lr_ratio <= 1),
    ("optim.grad_clip", ">= 0 (0: no clipping)", lambda c: c.optim.grad_clip >= 0),
    ("trainer.max_steps", "an integer >= 1", lambda c: c.trainer.max_steps >= 1),
    ("trainer.checkpoint_every_n_steps", "an integer >= 1", lambda c: c.trainer.checkpoint_every_n_steps >= 1),
    ("trainer.val_every_n_steps", "an integer >= 0 (0: only the final evaluation)", lambda c: c.trainer.val_every_n_steps >= 0),
    ("trainer.log_every_n_steps", "an integer >= 1", lambda c: c.trainer.log_every_n_steps >= 1),
    ("trainer.threads", "an integer >= 0 (0: torch's default)", lambda c: c.trainer.threads >= 0),
    ("trainer.num_nodes", "an integer >= 1", lambda c: c.trainer.num_nodes >= 1),
    ("trainer.devices", "auto, -1 (all), a count >= 1, or device indices ([0,1] or '0,1')",
     lambda c: _devices_ok(c.trainer.devices)),
    ("trainer.accelerator", "{accelerators}", lambda c: c.trainer.accelerator in _accelerators()),
    ("trainer.strategy", "{strategies}", lambda c: c.trainer.strategy in _strategies()),
    ("trainer.precision", "null (bf16-mixed on GPU, 32-true on CPU), {precisions}",
     lambda c: c.trainer.precision is None or c.trainer.precision in _precisions()),
    ("trainer.callbacks", "a list of {{_target_: <class>, ...}}",
     lambda c: all(hasattr(cb, "get") and isinstance(cb.get("_target_"), str) for cb in c.trainer.callbacks)),
    ("eval.extrapolation", "a non-empty list of integers >= 1",
     lambda c: len(c.eval.extrapolation) > 0 and min(c.eval.extrapolation) >= 1),
    ("eval.batch_tokens", "an integer >= 1", lambda c: c.eval.batch_tokens >= 1),
    ("task.heldout_seed", "0 <= heldout_seed < 2**32",
     lambda c: not hasattr(c.task, "heldout_seed") or 0 <= c.task.heldout_seed < 2**32),
    ("logger.experiment", "a non-empty name", lambda c: bool(c.logger.experiment.strip())),
    ("logger.outage_wait_s", ">= 0 (seconds)", lambda c: c.logger.outage_wait_s >= 0),
    ("ckpt_path", "null, last, or a .ckpt file", lambda c: c.ckpt_path in (None, "last") or c.ckpt_path.endswith(".ckpt")),
]


def _shown(value) -> str:
    """A value as the user typed it (enums by their value, dicts and lists without OmegaConf types)."""
    if isinstance(value, Enum):
        return str(value.value)
    if isinstance(value, DictConfig) or hasattr(value, "items"):
        return str(dict(value))
    return str(value)


def check_rules(c: TrainConf) -> None:
    """Raise the first failing rule of RULES as `<key>: <value>; allowed: <allowed>`."""
    for key, allowed, test in RULES:
        if not test(c):
            value = c
            for part in key.split("."):
                value = getattr(value, part)
            lists = {"accelerators": ", ".join(_accelerators()), "strategies": ", ".join(_strategies()),
                     "precisions": ", ".join(_precisions()), "reach": c.model.seq_len * max(c.eval.extrapolation or [1])}
            raise ValueError(f"{key}: {_shown(value)}; allowed: {allowed.format(c=c, **lists)}")


def validate(cfg: DictConfig) -> TrainConf:
    """Build the typed config (runs every schema's checks) and check ranges; one-line errors.
    Accepts a job config as composed by a sweeper too (with its `hydra` node)."""
    if "hydra" in cfg:
        cfg = OmegaConf.merge(TrainConf, OmegaConf.masked_copy(cfg, [k for k in cfg if k != "hydra"]))
    task = tasks.get(cfg.task.name)
    composed = OmegaConf.get_type(cfg.task)
    if not issubclass(composed, task.schema):
        raise ValueError(f"task.name: {cfg.task.name}; allowed: {composed.name} (to run {cfg.task.name}, select "
                         f"task={cfg.task.name}: the group also sets the model it needs)")
    OmegaConf.to_object(cfg.task)  # the task's own keys first,
    task.check(cfg)  # then what it needs of the model (e.g. a non-causal mixer), before the model's checks
    obj: TrainConf = OmegaConf.to_object(cfg)
    for d in obj.data.domains:
        if d not in DOMAINS:
            raise ValueError(f"data.domains: unknown {d!r}; allowed: {', '.join(DOMAINS)}")
    check_rules(obj)
    check_data(obj.data)  # tokenizer, source and (hf) the sources' names, weights and held-out rules
    return obj


def identity(cfg: DictConfig) -> dict:
    """The part of the resolved config that decides a run's result (what a rerun must match)."""
    keep = ("model", "attention", "data", "optim", "eval", "task")
    out = {k: OmegaConf.to_container(cfg[k], resolve=True, enum_to_str=True) for k in keep}
    out["model"].pop("attention", None)
    out["attention"].pop("impl", None)  # how the same offsets are computed: every path gives the same result
    if not tasks.get(cfg.task.name).uses_corpus:  # generated data: the corpus and LM evaluation play no part
        out["data"] = {"batch_size": out["data"]["batch_size"]}
        out.pop("eval")
    out.update(seed=cfg.seed, max_steps=cfg.trainer.max_steps)
    return out


def config_hash(cfg: DictConfig) -> str:
    return hashlib.sha256(json.dumps(identity(cfg), sort_keys=True).encode()).hexdigest()[:10]


def cell(cfg) -> str:
    """The comparison cell: e.g. sparse/fib/stagger/W8, dense, hypercube/rot."""
    a = cfg.attention
    kind = getattr(a.kind, "value", a.kind)
    if kind == "dense":
        return "dense"
    if kind == "hypercube":
        return f"hypercube/{a.schedule}"
    return f"sparse/{getattr(a.base, 'value', a.base)}/{a.schedule}/W{a.window}"


def run_name(cfg) -> str:
    """e.g. sparse-fib-stagger-W8-s42; a synthetic task's name comes first: count_ones-hypercube-rot-s42."""
    task = "" if cfg.task.name == "lm" else f"{cfg.task.name}-"
    return cfg.logger.run_name or f"{task}{cell(cfg).replace('/', '-')}-s{cfg.seed}"
