"""What makes two runs the same run: the part of the config that decides a result (its hash
names the run dir and lets a sweep skip finished cells), the comparison cell and the run name."""
from __future__ import annotations

import hashlib
import json

from omegaconf import DictConfig, OmegaConf

from fibexp.tasks import registry as tasks

EVAL_VERSION = "1"  # bump when the evaluation protocol changes: runs across versions are not comparable


def identity(cfg: DictConfig) -> dict:
    """The part of the resolved config that decides a run's result (what a rerun must match)."""
    keep = ("model", "attention", "data", "optim", "eval", "task")
    out = {k: OmegaConf.to_container(cfg[k], resolve=True, enum_to_str=True) for k in keep}
    out["model"].pop("attention", None)
    out["attention"].pop("impl", None)  # how the same offsets are computed: every path gives the same result
    a = out["attention"]
    if a.get("kind") != "dynamics":  # the dynamics keys play no part elsewhere (older runs keep their hash)
        for key in ("form", "steps", "tau", "coord_dim"):
            a.pop(key, None)
    if not a.get("hierarchy"):
        a.pop("hierarchy", None)
    if not out["eval"].get("int8"):  # measuring int8 changes no result (runs before it keep their hash)
        out["eval"].pop("int8", None)
    if a.get("kind") == "hypercube" and a.get("causal", True):
        a["wiring"] = "bit"  # causal jumps follow paper B's bit rule (runs before it linked i - k everywhere)
    if a.get("kind") == "sparse" and a.get("schedule") == "learned":
        a["edges"] = "authors"  # learned alpha's edge rules are the authors' (runs before it read zeros before
        # position 0 and kept a rung whose floor was in the window)
    if not tasks.get(cfg.task.name).uses_corpus:  # generated data: the corpus and LM evaluation play no part
        out["data"] = {"batch_size": out["data"]["batch_size"]}
        out.pop("eval")
    out.update(seed=cfg.seed, max_steps=cfg.trainer.max_steps)
    return out


def config_hash(cfg: DictConfig) -> str:
    return digest(identity(cfg))


def digest(ident: dict) -> str:
    """The config hash of an `identity` computed already."""
    return hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:10]


def cell(cfg) -> str:
    """The comparison cell: e.g. sparse/fib/stagger/W8, dense, hypercube/rot."""
    t = getattr(cfg, "task", None)
    if t is not None and t.name == "graft":
        return _graft_cell(t)
    a = cfg.attention
    kind = getattr(a.kind, "value", a.kind)
    if kind == "dense":
        return "dense"
    if kind == "hypercube":
        return f"hypercube/{a.schedule}" + ("/hier" if a.get("hierarchy") else "")
    if kind == "dynamics":
        return f"dynamics/{a.form}/T{a.steps}"
    return f"sparse/{getattr(a.base, 'value', a.base)}/{a.schedule}/W{a.window}"


def _graft_cell(t) -> str:
    """graft/eq1/k4, graft/attention/k4 (the control), graft/none (unmodified); choices other than
    the defaults are appended (graft/eq1/k4/first/local/zero, graft/eq1/k2/L3-9), so they never
    pass for the paper's cells."""
    if not t.k:
        return "graft/none"
    layers = t.layers if isinstance(t.layers, str) else "L" + "-".join(str(i) for i in t.layers)
    extra = [layers] if layers != "spread" else []
    if t.replace == "eq1":  # the control has no Eq. (1) layers to lay out or start
        extra += [v for v, default in ((t.schedule, "rot"), (t.init, "self")) if v != default]
    return "/".join([f"graft/{t.replace}/k{t.k}", *extra])


def run_name(cfg, cell_name: str | None = None) -> str:
    """e.g. sparse-fib-stagger-W8-s42; a synthetic task's name comes first: count_ones-hypercube-rot-s42.
    `cell_name`: the config's `cell`, when computed already."""
    task = "" if cfg.task.name in ("lm", "graft") else f"{cfg.task.name}-"  # graft's cell names its task
    return cfg.logger.run_name or f"{task}{(cell_name or cell(cfg)).replace('/', '-')}-s{cfg.seed}"
