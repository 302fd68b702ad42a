"""The values the types do not carry: every range and cross-key rule, checked on the typed
config before any data is read or any run is created; each failure is one line naming the key.
Rules that need Lightning or the machine (accelerators, strategies, precisions, CUDA) are the
training layer's (`fibexp.training.preflight`)."""
from __future__ import annotations

from enum import Enum
from numbers import Real
from typing import Callable

from omegaconf import DictConfig, OmegaConf

from fibexp.config.schema import TrainConf
from fibexp.data.spec import BPE_MIN_VOCAB, DOMAINS, MAX_VOCAB, check_data
from fibexp.errors import refuse
from fibexp.tasks import spec as tasks


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
    list of indices); None for auto and -1, which the machine decides."""
    d = c.trainer.devices
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
    ("model.vocab_size", f"<= {MAX_VOCAB} for task={{c.task.name}} with data.tokenizer={{c.data.tokenizer}} (its "
                         "token files store ids as uint16)",
     lambda c: not _corpus(c) or c.data.tokenizer.startswith("hf:") or c.model.vocab_size <= MAX_VOCAB),
    ("model.vocab_size", f">= {BPE_MIN_VOCAB} with data.tokenizer=bpe (256 bytes + the separator)",
     lambda c: not _corpus(c) or c.data.tokenizer != "bpe" or c.model.vocab_size >= BPE_MIN_VOCAB),
    ("model.ffn_hidden", "null or an integer >= 1", lambda c: c.model.ffn_hidden is None or c.model.ffn_hidden >= 1),
    ("model.rope_theta", "> 0", lambda c: c.model.rope_theta > 0),
    ("model.norm_eps", "> 0", lambda c: c.model.norm_eps > 0),
    ("attention.window", "an integer >= 1 (the local window {{0..W}})", lambda c: c.attention.window >= 1),
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
    ("trainer.collective_timeout_s", "a number of seconds > 0", lambda c: c.trainer.collective_timeout_s > 0),
    ("trainer.threads", "an integer >= 0 (0: torch's default)", lambda c: c.trainer.threads >= 0),
    ("trainer.num_nodes", "an integer >= 1", lambda c: c.trainer.num_nodes >= 1),
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


def check_rules(c: TrainConf, rules: list[Rule] = RULES) -> None:
    """Raise the first failing rule of RULES as `<key>: <value>; allowed: <allowed>`."""
    for key, allowed, test in rules:
        if not test(c):
            value = c
            for part in key.split("."):
                value = getattr(value, part)
            reach = c.model.seq_len * max(c.eval.extrapolation or [1])
            ranks = (processes_per_node(c) or 1) * c.trainer.num_nodes
            refuse(key, _shown(value), allowed.format(c=c, reach=reach, ranks=ranks))


def validate(cfg: DictConfig) -> TrainConf:
    """Build the typed config (runs every schema's checks) and check ranges; one-line errors.
    Accepts a job config as composed by a sweeper too (with its `hydra` node)."""
    if "hydra" in cfg:
        cfg = OmegaConf.merge(TrainConf, OmegaConf.masked_copy(cfg, [k for k in cfg if k != "hydra"]))
    task = tasks.get(cfg.task.name)
    composed = OmegaConf.get_type(cfg.task)
    if not issubclass(composed, task.schema):
        refuse("task.name", cfg.task.name, f"{composed.name} (to run {cfg.task.name}, select "
               f"task={cfg.task.name}: the group also sets the model it needs)")
    OmegaConf.to_object(cfg.task)  # the task's own keys first,
    task.check(cfg)  # then what it needs of the model (e.g. a non-causal mixer), before the model's checks
    obj: TrainConf = OmegaConf.to_object(cfg)
    for d in obj.data.domains:
        if d not in DOMAINS:
            refuse("data.domains", f"unknown {d!r}", ", ".join(DOMAINS))
    check_rules(obj)
    check_data(obj.data)  # tokenizer, source and (hf) the sources' names, weights and held-out rules
    return obj
