"""The values the types do not carry: every range and cross-key rule, checked on the typed
config before any data is read or any run is created; each failure is one line naming the key.
No torch or Lightning: Lightning's accelerator, strategy, precision and callback names are kept
here as static tuples (tests/unit/test_preflight.py holds them equal to Lightning's registries).
Rules that need the machine (CUDA, SLURM) or the outside world (files, the tracking store) are
checked beside these (machine, outside)."""
from __future__ import annotations

import dataclasses
import math
import re
from enum import Enum
from numbers import Real
from typing import Callable

from omegaconf import DictConfig, ListConfig, OmegaConf

from fibexp.config.schema import TrainConf
from fibexp.data.spec import BPE_MIN_VOCAB, DOMAINS, MAX_VOCAB, char_vocab, check_data
from fibexp.errors import refuse
from fibexp.tasks import registry as tasks

# Lightning 2.6's names (AcceleratorRegistry, StrategyRegistry, _PRECISION_INPUT_STR, and
# lightning.pytorch.callbacks without LambdaCallback, whose arguments are functions).
ACCELERATORS = ("auto", "gpu", "cpu", "cuda", "mps", "tpu")
STRATEGIES = ("auto", "ddp", "ddp_spawn", "ddp_fork", "ddp_notebook", "ddp_find_unused_parameters_false",
              "ddp_find_unused_parameters_true", "ddp_spawn_find_unused_parameters_false",
              "ddp_spawn_find_unused_parameters_true", "ddp_fork_find_unused_parameters_false",
              "ddp_fork_find_unused_parameters_true", "ddp_notebook_find_unused_parameters_false",
              "ddp_notebook_find_unused_parameters_true", "deepspeed", "deepspeed_stage_1", "deepspeed_stage_2",
              "deepspeed_stage_2_offload", "deepspeed_stage_3", "deepspeed_stage_3_offload",
              "deepspeed_stage_3_offload_nvme", "fsdp", "fsdp_cpu_offload", "single_device", "single_xla",
              "xla_debug", "xla", "single_tpu")
PRECISIONS = ("transformer-engine", "transformer-engine-float16", "16-true", "16-mixed", "bf16-true", "bf16-mixed",
              "32-true", "64-true")
LIGHTNING_CALLBACKS = ("BackboneFinetuning", "BaseFinetuning", "BasePredictionWriter", "BatchSizeFinder", "Callback",
                       "Checkpoint", "DeviceStatsMonitor", "EarlyStopping", "GradientAccumulationScheduler",
                       "LearningRateFinder", "LearningRateMonitor", "ModelCheckpoint", "ModelPruning", "ModelSummary",
                       "OnExceptionCheckpoint", "ProgressBar", "RichModelSummary", "RichProgressBar",
                       "StochasticWeightAveraging", "SpikeDetection", "ThroughputMonitor", "Timer",
                       "TQDMProgressBar", "EMAWeightAveraging", "WeightAveraging")
# fibexp's own callbacks a config may name, declared here: importing their modules imports torch.
FIBEXP_CALLBACKS = {"fibexp.training.faults": ("Preempt", "Crash", "Hang", "KillMidCheckpoint", "Hog", "Diverge",
                                               "Sleep", "Rendezvous", "Signal", "SignalTwice"),
                    "fibexp.training.memory_guard": ("MemoryGuard",)}
# What fibexp instantiates from the config, and the classes it may name (nothing else is ever called).
TARGETS = {"model": ("fibexp.model.lm.LM",), "attention": ("fibexp.model.spec.AttentionSpec",)}
CALLBACKS_ALLOWED = (f"lightning.pytorch.callbacks.<name> ({', '.join(LIGHTNING_CALLBACKS)}), or "
                     + ", ".join(f"{m}.{n}" for m, names in FIBEXP_CALLBACKS.items() for n in names))
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+=-]{0,149}")  # a run name is a folder name under runs/
NAME_ALLOWED = "letters, digits and _ . + = - (starting with a letter or digit, at most 150)"
EXPERIMENT_ALLOWED = ("a name of ASCII letters, digits, spaces and _ . + = - (starting with a letter or digit, at "
                      "most 150; it names a folder under paths.output_dir/mlartifacts)")
RUN_NAME_ALLOWED = (f"null (named after the cell), or a name of {NAME_ALLOWED}: it names the run's folder under "
                    "paths.output_dir/runs")
# Tracking stores MLflow serves to fibexp: its sqlite file, a tracking server, and the databases
# MLflow's SQL store speaks. A plain path or file: URI is MLflow's file store, which MLflow 3 no
# longer opens (it raises at the first call, after the run folder exists).
URI_SCHEMES = ("sqlite", "http", "https", "postgresql", "mysql", "mssql")
URI_ALLOWED = ("null (the local sqlite store), sqlite:///<file>, http(s)://<server>, or a database URI "
               "(postgresql://, mysql://, mssql://)")
MAX_INT = 2**63  # what torch, numpy and Lightning hold as an integer
# The attention keys each kind reads (the others change nothing but the config hash).
ATTENTION_KEYS = {"dense": {"kind", "impl", "causal"},
                  "sparse": {"kind", "base", "schedule", "window", "impl", "alpha_init", "causal"},
                  "hypercube": {"kind", "schedule", "hybrid_layers", "order", "causal", "hierarchy", "impl"},
                  "dynamics": {"kind", "form", "steps", "tau", "coord_dim", "causal", "impl"}}


def uri_ok(uri: str | None) -> bool:
    """Whether MLflow serves this tracking URI to fibexp (null: the local sqlite store)."""
    if uri is None:
        return True
    scheme, sep, rest = uri.partition("://")
    base = scheme.split("+", 1)[0].lower()
    if not sep or base not in URI_SCHEMES or not rest.strip("/"):
        return False
    return base != "sqlite" or uri.startswith("sqlite:///")


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


def processes_per_node(c: TrainConf) -> int | None:
    """The process count trainer.devices names when the config alone says it (a count >= 1 or a
    list of indices); None for auto and -1, which the machine decides (and for a value the
    trainer.devices rule refuses)."""
    d = c.trainer.devices
    if not _devices_ok(d):
        return None
    if isinstance(d, str):
        parts = [p for p in d.split(",") if p.strip()]
        return None if d == "auto" or d.strip() == "-1" else (int(parts[0]) if len(parts) == 1 and "," not in d
                                                               else len(parts))
    if isinstance(d, int) and not isinstance(d, bool):
        return d if d >= 1 else None
    return len(d)


def _batch_splits(c: TrainConf) -> bool:
    n = processes_per_node(c)
    return not n or c.data.batch_size % (n * c.trainer.num_nodes) == 0


def _mixture_ok(c: TrainConf) -> bool:
    """null, or weights >= 0 with a positive sum (over data.domains, for the embedded corpus)."""
    m = c.data.mixture
    if m is None:
        return True
    if not hasattr(m, "items") or not m:
        return False
    w = list(m.values())
    return (all(isinstance(x, Real) and not isinstance(x, bool) and 0 <= x < math.inf for x in w) and sum(w) > 0
            and (c.data.source != "embedded" or set(m) <= set(c.data.domains)))


def _kind(c: TrainConf) -> str:
    return str(getattr(c.attention.kind, "value", c.attention.kind))


def _corpus(c: TrainConf) -> bool:
    return tasks.get(c.task.name).uses_corpus


def _char_vocab(c: TrainConf) -> int:
    """Ids the char tokenizer needs on the embedded corpus's domains (0 where it is not that)."""
    if not _corpus(c) or c.data.tokenizer != "char" or c.data.source != "embedded":
        return 0
    return char_vocab(c.data.domains)


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
    ("model.seq_len", "an integer >= 2 (a next-token target needs two positions)", lambda c: c.model.seq_len >= 2),
    ("model.seq_len", "> attention.window={c.attention.window} with attention.kind=sparse (a sequence that holds "
                      "the window and a rung)",
     lambda c: _kind(c) != "sparse" or c.model.seq_len > c.attention.window),
    ("model.vocab_size", "an integer >= 1", lambda c: c.model.vocab_size >= 1),
    ("model.vocab_size", f"<= {MAX_VOCAB} for task={{c.task.name}} with data.tokenizer={{c.data.tokenizer}} (its "
                         "token files store ids as uint16)",
     lambda c: not _corpus(c) or c.data.tokenizer.startswith("hf:") or c.model.vocab_size <= MAX_VOCAB),
    ("model.vocab_size", f">= {BPE_MIN_VOCAB} with data.tokenizer=bpe (256 bytes + the separator)",
     lambda c: not _corpus(c) or c.data.tokenizer != "bpe" or c.model.vocab_size >= BPE_MIN_VOCAB),
    ("model.vocab_size", ">= {chars} with data.tokenizer=char on data.domains={c.data.domains} (the separator, "
                         "the unknown character and each character of their training text)",
     lambda c: c.model.vocab_size >= _char_vocab(c)),
    ("model.ffn_hidden", "null or an integer >= 1", lambda c: c.model.ffn_hidden is None or c.model.ffn_hidden >= 1),
    ("model.rope_theta", "> 0", lambda c: c.model.rope_theta > 0),
    ("model.norm_eps", "> 0", lambda c: c.model.norm_eps > 0),
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
    ("optim.warmup_steps", "an integer <= trainer.max_steps={c.trainer.max_steps} (the warmup ends within training)",
     lambda c: c.optim.warmup_steps <= c.trainer.max_steps),
    ("optim.min_lr_ratio", "0 <= min_lr_ratio <= 1 (the cosine's floor, a share of optim.lr)",
     lambda c: 0 <= c.optim.min_lr_ratio <= 1),
    ("optim.grad_clip", ">= 0 (0: no clipping)", lambda c: c.optim.grad_clip >= 0),
    ("trainer.max_steps", "an integer >= 1", lambda c: c.trainer.max_steps >= 1),
    ("trainer.checkpoint_every_n_steps", "an integer >= 1", lambda c: c.trainer.checkpoint_every_n_steps >= 1),
    ("trainer.val_every_n_steps", "an integer >= 0 (0: only the final evaluation)", lambda c: c.trainer.val_every_n_steps >= 0),
    ("trainer.log_every_n_steps", "an integer >= 1", lambda c: c.trainer.log_every_n_steps >= 1),
    ("trainer.collective_timeout_s", "a number of seconds > 0", lambda c: c.trainer.collective_timeout_s > 0),
    ("trainer.memory_limit_gb", "null (the SLURM job's memory, else this machine's) or a number of GiB > 0",
     lambda c: c.trainer.memory_limit_gb is None or c.trainer.memory_limit_gb > 0),
    ("trainer.threads", "an integer >= 0 (0: torch's default)", lambda c: c.trainer.threads >= 0),
    ("trainer.num_nodes", "an integer >= 1", lambda c: c.trainer.num_nodes >= 1),
    ("trainer.accelerator", ", ".join(ACCELERATORS), lambda c: c.trainer.accelerator in ACCELERATORS),
    ("trainer.strategy", ", ".join(STRATEGIES), lambda c: c.trainer.strategy in STRATEGIES),
    ("trainer.precision", "null (bf16-mixed on GPU, 32-true on CPU), " + ", ".join(PRECISIONS),
     lambda c: c.trainer.precision is None or c.trainer.precision in PRECISIONS),
    ("trainer.devices", "auto, -1 (all), a count >= 1, or device indices ([0,1] or '0,1')",
     lambda c: _devices_ok(c.trainer.devices)),
    ("data.batch_size", "a multiple of trainer.devices x trainer.num_nodes = {ranks} (the global batch, split evenly "
                        "over the ranks)", _batch_splits),
    ("trainer.callbacks", "a list of {{_target_: <class>, ...}}",
     lambda c: all(hasattr(cb, "get") and isinstance(cb.get("_target_"), str) for cb in c.trainer.callbacks)),
    ("eval.extrapolation", "a non-empty list of integers >= 1",
     lambda c: len(c.eval.extrapolation) > 0 and min(c.eval.extrapolation) >= 1),
    ("eval.batch_tokens", "an integer >= 1", lambda c: c.eval.batch_tokens >= 1),
    ("task.heldout_seed", "0 <= heldout_seed < 2**32",
     lambda c: not hasattr(c.task, "heldout_seed") or 0 <= c.task.heldout_seed < 2**32),
    ("logger.experiment", EXPERIMENT_ALLOWED,
     lambda c: bool(re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9 _.+=-]{0,149}", c.logger.experiment))),
    ("logger.run_name", RUN_NAME_ALLOWED, lambda c: c.logger.run_name is None or bool(_NAME.fullmatch(c.logger.run_name))),
    ("logger.tracking_uri", URI_ALLOWED, lambda c: uri_ok(c.logger.tracking_uri)),
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


def check_rules(c: TrainConf, rules: list[Rule] = RULES) -> None:
    """Raise the first failing rule of RULES as `<key>: <value>; allowed: <allowed>`."""
    for key, allowed, test in rules:
        if not test(c):
            value = c
            for part in key.split("."):
                value = getattr(value, part)
            reach = c.model.seq_len * max(c.eval.extrapolation or [1])
            ranks = (processes_per_node(c) or 1) * c.trainer.num_nodes
            refuse(key, _shown(value), allowed.format(c=c, reach=reach, ranks=ranks, chars=_char_vocab(c)))


def check_finite(node, key: str = "") -> None:
    """Every number of the typed config is finite: nan and inf pass the range rules' comparisons
    (inf >= 0) and fail only at the first batch or the first write."""
    if isinstance(node, float) and not math.isfinite(node):
        refuse(key, node, "a finite number")
    if isinstance(node, int) and not isinstance(node, bool) and not -MAX_INT <= node < MAX_INT:
        refuse(key, node, "an integer in [-2**63, 2**63) (a 64-bit integer)")
    if dataclasses.is_dataclass(node):
        for f in dataclasses.fields(node):
            if f"{key}.{f.name}" != "model.attention":  # the attention node, checked under its own name
                check_finite(getattr(node, f.name), f"{key}.{f.name}" if key else f.name)
    elif isinstance(node, (dict, DictConfig)):
        for k, v in node.items():
            check_finite(v, f"{key}.{k}")
    elif isinstance(node, (list, tuple, ListConfig)):
        for i, v in enumerate(node):
            check_finite(v, f"{key}[{i}]")


def _callback_ok(target) -> bool:
    if not isinstance(target, str):
        return False
    module, _, name = target.rpartition(".")
    return (module == "lightning.pytorch.callbacks" and name in LIGHTNING_CALLBACKS) or (
        name in FIBEXP_CALLBACKS.get(module, ()))


def _targets(node, key: str = ""):
    """(key, value) of every `_target_` in a config node, unresolved (an interpolation as written)."""
    if isinstance(node, DictConfig):
        for k in node.keys():
            sub = f"{key}.{k}" if key else str(k)
            child = node._get_node(k)
            if k == "_target_":
                yield sub, child._value()
            elif sub != "hydra":
                yield from _targets(child, sub)
    elif isinstance(node, ListConfig):
        for i in range(len(node)):
            yield from _targets(node._get_node(i), f"{key}[{i}]")


def check_attention_keys(cfg: DictConfig) -> None:
    """An attention key set on the command line of a single run that the chosen kind does not read
    is refused: it would change nothing but the config hash (attention=dense attention.base=pow2
    trained dense). Not in a sweep, nor in the plan of one (Hydra's mode is not RUN there): a key
    typed for every cell (table1 attention.window=16) may set cells of other kinds too."""
    if "hydra" not in cfg or str(cfg.hydra.get("mode")).rpartition(".")[2] != "RUN":  # a sweep's or a plan's cell
        return
    kind = str(cfg.attention.kind.value if hasattr(cfg.attention.kind, "value") else cfg.attention.kind)
    reads = ATTENTION_KEYS.get(kind)
    for line in cfg.hydra.overrides.task or []:
        key, eq, value = str(line).lstrip("+~").partition("=")
        name = key[len("attention."):] if key.startswith("attention.") else None
        if eq and reads is not None and name and "." not in name and name != "_target_" and name not in reads:
            refuse(key, value, f"the keys attention.kind={kind} reads: {', '.join(sorted(reads))} "
                               f"(attention.{name} applies to attention.kind="
                               f"{', '.join(k for k, v in ATTENTION_KEYS.items() if name in v) or 'none'})")


def check_targets(cfg: DictConfig) -> None:
    """What a run instantiates is fibexp's model and attention and the callbacks it names, checked
    before anything is imported or called: a `_target_` elsewhere, or naming another callable, is
    refused (Hydra would call it when the run builds its model or Trainer)."""
    for key, value in _targets(cfg):
        if key in ("model._target_", "model.attention._target_", "attention._target_"):
            allowed = TARGETS[key.split(".")[-2]]
            if value not in allowed:
                refuse(key, value, f"{', '.join(allowed)} (fibexp's own class)")
        elif re.fullmatch(r"trainer\.callbacks\[\d+\]\._target_", key):
            if not _callback_ok(value):
                refuse(key, value, CALLBACKS_ALLOWED)
        else:
            refuse(key, value, "no _target_ here (fibexp instantiates only model, attention and each "
                               "trainer.callbacks entry)")


def validate(cfg: DictConfig) -> TrainConf:
    """Build the typed config (runs every schema's checks) and check ranges; one-line errors.
    Accepts a job config as composed by a sweeper too (with its `hydra` node)."""
    full = cfg
    if "hydra" in cfg:
        cfg = OmegaConf.merge(TrainConf, OmegaConf.masked_copy(cfg, [k for k in cfg if k != "hydra"]))
    task = tasks.get(cfg.task.name)
    composed = OmegaConf.get_type(cfg.task)
    if not issubclass(composed, task):
        refuse("task.name", cfg.task.name, f"{composed.name} (to run {cfg.task.name}, select "
               f"task={cfg.task.name}: the group also sets the model it needs)")
    OmegaConf.to_object(cfg.task)  # the task's own keys first,
    task.check(cfg)  # then what it needs of the model (e.g. a non-causal mixer), before the model's checks
    check_targets(cfg)
    obj: TrainConf = OmegaConf.to_object(cfg)
    check_finite(obj)
    check_attention_keys(full)  # after each value's own checks: attention.window=-3 is out of range first
    for d in obj.data.domains:
        if d not in DOMAINS:
            refuse("data.domains", f"unknown {d!r}", ", ".join(DOMAINS))
    check_rules(obj)
    check_data(obj.data)  # tokenizer, source and (hf) the sources' names, weights and held-out rules
    return obj
