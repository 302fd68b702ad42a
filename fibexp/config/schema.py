"""Typed schemas of every config group, registered with Hydra's ConfigStore, so a misspelt key
or a wrongly typed value fails at composition (`fibexp.checks.rules` then checks the values).
No torch: the schema plugin, notebooks and `fibexp-prepare` load it without the model."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, OmegaConf

from fibexp.config.identity import config_hash, run_name
from fibexp.data.spec import DOMAINS, SourceConf
from fibexp.model.spec import AttentionSpec
from fibexp.tasks import registry as tasks
from fibexp.tasks.config import TaskConf

CONF_DIR = str(Path(__file__).resolve().parents[2] / "conf")  # the repo's conf/ (editable install)


@dataclass
class AttentionConf(AttentionSpec):
    _target_: str = "fibexp.model.spec.AttentionSpec"


@dataclass
class ModelConf:
    _target_: str = "fibexp.model.lm.LM"
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
    collective_timeout_s: float = 120.0  # DDP: a collective waiting this long for a rank that is gone raises
    memory_limit_gb: Optional[float] = None  # CPU: the memory a run may hold (None: the SLURM job's, else this machine's)


@dataclass
class EvalConf:
    extrapolation: list[int] = field(default_factory=lambda: [1, 2, 4])
    batch_tokens: int = 16384  # windows per forward = batch_tokens // length
    aux: bool = True  # task=lm: RULER variable tracking and LEGO after the held-out evaluation
    int8: bool = False  # task=lm and graft: also measure the model quantized to int8 (int8/..., claim B14), as fibexp-export --int8


@dataclass
class LoggerConf:
    tracking_uri: Optional[str] = None  # None: $MLFLOW_TRACKING_URI, else sqlite:///<project>/outputs/mlflow.db
    experiment: str = "fibexp"
    run_name: Optional[str] = None  # None: from the cell, e.g. sparse-fib-stagger-W8-s42
    outage_wait_s: float = 300.0  # how long a run waits for its tracking store: a server that went away, a locked sqlite file


@dataclass
class PathsConf:
    root: str = "${hydra:runtime.cwd}"
    output_dir: str = "${paths.root}/outputs"
    cache_dir: str = "${paths.output_dir}/cache"


@dataclass
class SweepConf:
    id: Optional[str] = None  # set by the sweeper for every cell it launches
    parent_run_id: Optional[str] = None
    max_cells: int = 10_000  # the most cells a -m grid may have (fibexp.config.overrides.MAX_CELLS): a larger one is refused
    max_failures: Optional[int] = None  # stop the sweep after this many failed cells (fibexp.sweep.failfast); None: off


@dataclass
class TrainConf:
    model: ModelConf = MISSING
    attention: AttentionConf = MISSING
    data: DataConf = MISSING
    optim: OptimConf = field(default_factory=OptimConf)
    trainer: TrainerConf = MISSING
    task: TaskConf = MISSING  # lm | count_ones | shift_copy | kv_retrieval (conf/task/)
    eval: EvalConf = field(default_factory=EvalConf)
    logger: LoggerConf = field(default_factory=LoggerConf)
    paths: PathsConf = field(default_factory=PathsConf)
    sweep: SweepConf = field(default_factory=SweepConf)
    seed: int = 42
    ckpt_path: Optional[str] = None  # None: resume from the run dir's last.ckpt if present; "last": require it; or a file


SAVED_SUBDIR = "fibexp_saved_subdir"


def saved_subdir(subdir: str, run_dir: str) -> str | None:
    """hydra.output_subdir as a cell's job resolves it: None (nothing saved) where its run dir holds a
    saved config already, a finished or killed run's, which a relaunch must leave as it was."""
    return None if (Path(run_dir) / subdir / "config.yaml").is_file() else subdir


def _saved_subdir(subdir: str, *, _root_) -> str | None:
    """The resolver: the run dir is the job's, hydra.runtime.output_dir (set by Hydra's run_job)."""
    return saved_subdir(subdir, str(_root_.hydra.runtime.output_dir))


def register() -> None:
    """Schemas for Hydra, and the resolver naming a run's directory after its cell and config.

    The schemas sit at the config root (`/model_schema`, `/task_lm_schema`, ...), which the group
    files extend (`- /model_schema@_here_`), not inside the groups: there they would be options
    that `--help` and TAB completion offer, and `attention=attention_schema` would train the
    schema's defaults as if they were a preset."""
    if not OmegaConf.has_resolver("fibexp_run_dir"):
        OmegaConf.register_new_resolver("fibexp_run_dir", lambda *, _root_: f"{run_name(_root_)}-{config_hash(_root_)}")
    if not OmegaConf.has_resolver(SAVED_SUBDIR):  # a relaunched basic sweep's cells (fibexp.checks.preflight)
        OmegaConf.register_new_resolver(SAVED_SUBDIR, _saved_subdir)
    if not OmegaConf.has_resolver("fibexp_task_vocab"):  # model.vocab_size of a synthetic task (its yaml)
        OmegaConf.register_new_resolver("fibexp_task_vocab", lambda *, _root_: tasks.get(_root_.task.name).vocab_size(_root_))
    cs = ConfigStore.instance()
    cs.store(name="train_schema", node=TrainConf)
    for group, node in [("model", ModelConf), ("attention", AttentionConf), ("data", DataConf),
                        ("trainer", TrainerConf)]:
        cs.store(name=f"{group}_schema", node=node)
    for name, task in tasks.TASKS.items():
        cs.store(name=f"task_{name}_schema", node=task.config)
