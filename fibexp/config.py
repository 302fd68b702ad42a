"""Typed schemas of every config group, registered with Hydra's ConfigStore, so a misspelt
key or a wrongly typed value fails at composition, and `validate` checks the values
(allowed names, ranges) before any data is read or any run is created."""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, DictConfig, OmegaConf

from fibexp import tasks
from fibexp.data.corpus import DOMAINS
from fibexp.data.sources import SourceConf, check_data
from fibexp.model.mixers import AttentionSpec

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
    mixture: Optional[dict[str, float]] = None  # training weight per domain; None: by token count
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


def _positive(key: str, value, minimum=1):
    if value < minimum:
        raise ValueError(f"{key}: {value}; allowed: >= {minimum}")


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
    _positive("trainer.max_steps", obj.trainer.max_steps)
    _positive("trainer.checkpoint_every_n_steps", obj.trainer.checkpoint_every_n_steps)
    _positive("data.batch_size", obj.data.batch_size)
    _positive("optim.warmup_steps", obj.optim.warmup_steps, 0)
    if not 0 < obj.optim.lr < 1:
        raise ValueError(f"optim.lr: {obj.optim.lr}; allowed: 0 < lr < 1")
    check_data(obj.data)  # tokenizer, source and (hf) the sources' names, weights and held-out rules
    for d in obj.data.domains + list(obj.data.mixture or {}):
        if d not in DOMAINS:
            raise ValueError(f"data.domains: unknown {d!r}; allowed: {', '.join(DOMAINS)}")
    if not obj.eval.extrapolation or min(obj.eval.extrapolation) < 1:
        raise ValueError(f"eval.extrapolation: {obj.eval.extrapolation}; allowed: integers >= 1")
    if obj.ckpt_path not in (None, "last") and not obj.ckpt_path.endswith(".ckpt"):
        raise ValueError(f"ckpt_path: {obj.ckpt_path!r}; allowed: null, last, or a .ckpt file")
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
