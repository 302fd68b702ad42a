"""Which runs a claim reads of a group: a cell's seeds at its best lr, whether a group holds a
claim's cells at the scale the paper measured them, and when two cells are one model."""
from __future__ import annotations

import ast
from pathlib import PurePosixPath
from typing import Callable, Iterable

from fibexp.report.claims import Absent, Claim, Missing, NotAtScale
from fibexp.report.published import MIN_SEEDS
from fibexp.report.runs import Group, RunView, ppl
from fibexp.report.seeds import mean
from fibexp.science import patterns
from fibexp.science import wiring


def label(family: str, window: int | None = None) -> str:
    """`fib stagger W8`, `rot` (hypercube cells without their prefix)."""
    return family.replace("hypercube/", "") + (f" W{window}" if window is not None else "")


def cell_runs(group: Group, family: str, window: int | None = None, n_layers: int | None = None,
              order: str | None = None, score: Callable[[RunView], float | None] = ppl,
              higher_is_better: bool = False, min_seeds: int = MIN_SEEDS) -> list[RunView]:
    """The runs (seeds) of one cell at its best lr when it was run at several (each configuration at
    its own best lr): the best among the lrs with >= min_seeds seeds holding the score, so that the
    seed bar never depends on which lr the values favour; none such: the lr with the most seeds."""
    rs = [r for r in group.runs if r.family == family and (window is None or r.window == window)
          and (n_layers is None or r.n_layers == n_layers) and (order is None or r.order == order)]
    by_lr: dict[float | None, list[float]] = {}
    for r in rs:
        by_lr.setdefault(r.lr, [])
        if (v := score(r)) is not None:
            by_lr[r.lr].append(-v if higher_is_better else v)
    if len(by_lr) > 1:
        full = [lr for lr, vs in by_lr.items() if len(vs) >= min_seeds]
        most = max(len(vs) for vs in by_lr.values())
        pool = full or [lr for lr, vs in by_lr.items() if len(vs) == most]
        best = min(pool, key=lambda lr: (mean(by_lr[lr]) if by_lr[lr] else 0.0, lr or 0.0))
        rs = [r for r in rs if r.lr == best]
    return rs


def windows(g: Group, *families: str) -> list[int]:
    """The W every family ran at."""
    sets = [{r.window for r in g.runs if r.family == f} for f in families]
    return sorted(set.intersection(*sets) - {None})


def present(g: Group, *families: str, what: str | None = None) -> None:
    """Absent (the group says nothing about the claim) unless every family has a run in it."""
    have = {r.family for r in g.runs}
    if absent := [f for f in families if f not in have]:
        raise Absent(f"needs {what or ', '.join(label(f) for f in absent)} (no run)")


def at_scale(c: Claim, runs: Iterable[RunView]) -> None:
    """NotAtScale unless the runs are at the window, on the device and of the pretrained model the
    paper measured the claim at (`Claim.scale`; fibexp.report.published.SCALES)."""
    s = c.scale
    if s is None:
        return
    runs = list(runs)
    if s.window is not None and (ws := sorted({r.n for r in runs} - {s.window})):
        raise NotAtScale(f"window {', '.join(map(str, ws))} runs (model.seq_len); {s.why}")
    if s.device is not None:
        devices = sorted({r.params.get("trainer.accelerator", "unknown") for r in runs} - {s.device})
        if devices:
            raise NotAtScale(f"timed on {', '.join(devices)} (trainer.accelerator); {s.why}")
    if s.model is not None:
        models = sorted({graft_model(r) for r in runs} - {s.model})
        if models:
            raise NotAtScale(f"grafted into {', '.join(models)} (task.model); {s.why}")


def graft_model(r: RunView) -> str:
    """The pretrained model a graft run modifies, by its name (a Hub id's or folder's last part)."""
    name = r.params.get("task.model") or r.params.get("data.tokenizer", "").removeprefix("hf:")
    return PurePosixPath(name).name or "unknown"


def offsets(r: RunView):
    """Per-layer attended offsets fixed by the config (None: dense or learned, which train them,
    or a run whose params do not say)."""
    p = r.params
    try:
        if r.kind == "sparse" and r.cell.split("/")[2] != "learned":
            base, schedule = r.cell.split("/")[1:3]
            return tuple(tuple(patterns.attended_distances(r.window, base, a, r.n))
                         for a in patterns.layer_alphas(schedule, r.n_layers))
        if r.kind == "hypercube":
            hybrid = p.get("attention.hybrid_layers", "None")
            hybrid = None if hybrid in ("None", "") else ast.literal_eval(hybrid)
            plan = wiring.layer_plan(r.cell.split("/")[1], r.n_layers, r.n, hybrid, r.order)
            return ("hypercube", r.causal, tuple(plan))
    except (ValueError, IndexError, SyntaxError):
        return None
    return None


def degenerate(a: list[RunView], b: list[RunView], la: str, lb: str) -> str | None:
    """Why comparing a and b proves nothing, when their layers attend exactly the same offsets."""
    if not a or not b:
        return None
    oa, ob = offsets(a[0]), offsets(b[0])
    if oa is None or oa != ob:
        return None
    r = a[0]
    why = f"{la} and {lb} attend identical per-layer offsets at {r.n_layers} layers"
    if "coprime" in (la + lb) and patterns.coprime_stride(r.n_layers) == 1:
        why += f" (no stride S in [2, L/2] is coprime with L = {r.n_layers}; needs L >= 5, L != 6)"
    return why


def link_count(r: RunView) -> int | None:
    """Links of a run's wiring (paper B's cost): standard attention = every causal pair per layer."""
    if r.kind == "hypercube":
        o = offsets(r)
        return None if o is None else wiring.links(o[2], r.n, r.causal)
    return wiring.links(["attn"] * r.n_layers, r.n, r.causal) if r.n_layers and r.n else None


def cube_dims(g: Group) -> int:
    """log2 n of a count-ones group (Missing when n is no power of two)."""
    try:
        return wiring.cube_dims(g.n)
    except ValueError:
        raise Missing(f"count-ones n={g.n} is no power of two") from None
