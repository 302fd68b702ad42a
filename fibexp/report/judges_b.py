"""Paper B's judges (B1-B6): hypercube wiring on count-ones and the window-256 LR grid."""
from __future__ import annotations

from typing import Sequence

from fibexp.report.claims import (DEGENERATE, NOT_REPRODUCED, REPRODUCED, TIE, Missing, cell_runs, cube_dims,
                                  degenerate, link_count, mean, offsets, rank, seeds_note, span_str, values)
from fibexp.report.runs import Group, RunView, acc, bpc
from fibexp.science import wiring


def _count_cell(g: Group, family: str, depth: int, order: str | None = None) -> list[RunView]:
    return cell_runs(g, family, n_layers=depth, order=order, score=acc, higher_is_better=True)


def _chance(runs: Sequence[RunView]) -> float:
    ch = [v for r in runs if (v := r.metric("task/chance")) is not None]
    if not ch:
        raise Missing("count-ones runs have no task/chance")
    return mean(ch)


def judge_b1(c, g):
    b = cube_dims(g)
    rot, fixed = _count_cell(g, "hypercube/rot", b, "rot"), _count_cell(g, "hypercube/fixed", b)
    if d := degenerate(rot, fixed, "rot", "fixed"):
        return DEGENERATE, d, None
    vr = values(rot, acc, f"rot at n={g.n}, {b} layers", "task/acc")
    vf = values(fixed, acc, f"fixed at n={g.n}, {b} layers", "task/acc")
    chance = _chance(rot + fixed)
    t = c.thresholds
    ok = min(vr) >= t["min_acc"] and max(vf) <= chance + t["max_above_chance"]
    dense = [v for r in _count_cell(g, "hypercube/dense", b) + _count_cell(g, "dense", b) if (v := acc(r)) is not None]
    if dense:
        ok = ok and min(dense) >= t["min_acc"]
    extra = f", dense {span_str(dense, lambda x: f'{x:.1%}')}" if dense else ""
    return ((REPRODUCED if ok else NOT_REPRODUCED),
            f"n={g.n}, {b} layers: rot {span_str(vr, lambda x: f'{x:.1%}')}, fixed {span_str(vf, lambda x: f'{x:.1%}')}"
            f"{extra} (chance {chance:.1%}){seeds_note(vr, vf)}", None)


def judge_b2(c, g):
    b = cube_dims(g)
    t, f = c.thresholds, lambda x: f"{x:.1%}"
    short = values(_count_cell(g, "hypercube/rot", b - 1, "rot"), acc, f"rot at n={g.n}, {b - 1} layers", "task/acc")
    base = values(_count_cell(g, "hypercube/rot", b, "rot"), acc, f"rot at n={g.n}, {b} layers", "task/acc")
    chance = _chance(_count_cell(g, "hypercube/rot", b, "rot"))
    ok = max(short) <= chance + t["fail_max_above_chance"] and min(base) >= t["min_acc"]
    ours = f"n={g.n} rot: {b - 1} layers {span_str(short, f)}, {b} layers {span_str(base, f)}"
    deep = sorted({r.n_layers for r in g.runs if r.family == "hypercube/rot" and r.order == "rot"
                   and r.n_layers >= 2 * b})
    if deep:
        vd = values(_count_cell(g, "hypercube/rot", deep[0], "rot"), acc, f"rot at {deep[0]} layers", "task/acc")
        ok = ok and min(vd) >= mean(base) - t["saturate_tol"]
        ours += f", {deep[0]} layers {span_str(vd, f)}"
    return (REPRODUCED if ok else NOT_REPRODUCED), ours + f" (chance {chance:.1%})", None


def judge_b3(c, g):
    t, f = c.thresholds, lambda x: f"{x:.1%}"
    depths = sorted({r.n_layers for r in g.runs if r.family == "hypercube/rot" and r.order == "gray"}
                    & {r.n_layers for r in g.runs if r.family == "hypercube/rot" and r.order == "random"})
    if not depths:
        raise Missing(f"needs rot with attention.order=random and =gray at the same depth (n={g.n})")
    depth = depths[-1]
    rr, rg = _count_cell(g, "hypercube/rot", depth, "random"), _count_cell(g, "hypercube/rot", depth, "gray")
    if d := degenerate(rr, rg, "random order", "gray order"):
        return DEGENERATE, d, None
    plan = offsets(rg[0])[2]
    if wiring.reach(plan, g.n, rg[0].causal) == set(range(g.n)):
        return DEGENERATE, (f"gray order visits every cube dimension in {depth} layers at n={g.n}: it reaches every "
                            "position, so it is no failing control (the paper's 16 layers at n=64 never visit "
                            "dimension 5)"), None
    vr = values(rr, acc, "random order", "task/acc")
    vg = values(rg, acc, "gray order", "task/acc")
    chance = _chance(rr + rg)
    ok = min(vr) >= t["min_acc"] and max(vg) <= chance + t["fail_max_above_chance"]
    return ((REPRODUCED if ok else NOT_REPRODUCED),
            f"n={g.n}, {depth} layers: random {span_str(vr, f)}, gray {span_str(vg, f)} (chance {chance:.1%})", None)


_B_CELLS = {"attn": "dense", "hybrid": "hypercube/hybrid", "rot": "hypercube/rot"}


def _bpc_cells(c, g, names):
    """The compared schedules' runs; each must exist, be swept over the lr and log bpc."""
    cells = {name: [r for r in g.runs if r.family == _B_CELLS[name]] for name in names}
    if absent := [f"{n} ({_B_CELLS[n]})" for n, rs in cells.items() if not rs]:
        raise Missing(f"needs char-level runs (val/bpc/<set>) of {', '.join(absent)}")
    for name, rs in cells.items():
        lrs = {r.lr for r in rs}
        if c.needs.lr_sweep and len(lrs) < c.thresholds["min_lrs"]:
            raise Missing(f"{name} was run at {len(lrs)} lr; SPEC: sweep the lr of every compared cell "
                          f"(>= {c.thresholds['min_lrs']:.0f})")
        if not any(bpc(r) is not None for r in rs) and not all(r.diverged for r in rs):
            raise Missing(f"{name} has no val/bpc/<set> (char-level runs: data=char)")
    return cells


def judge_b4(c, g):
    cells = _bpc_cells(c, g, ("attn", "hybrid", "rot"))
    best = {}
    for name, rs in cells.items():
        picked = cell_runs(g, _B_CELLS[name], score=bpc)
        best[name] = (picked[0].lr, values(picked, bpc, name, "val/bpc/<set>", c.needs.min_seeds))
    signs = [rank(best[n][1], best["attn"][1]) for n in ("hybrid", "rot")]
    verdict = NOT_REPRODUCED if ">" in signs else TIE if "~" in signs else REPRODUCED
    f = lambda x: f"{x:.3f}"
    ours = ", ".join(f"{n} {span_str(best[n][1], f)} (lr {best[n][0]:g})" for n in ("hybrid", "rot", "attn"))
    return verdict, f"bpc at each one's best lr: {ours}{seeds_note(*(v for _, v in best.values()))}", None


def _usable(rs: Sequence[RunView], within: float) -> tuple[list[float], list[float]]:
    """(lrs whose mean bpc is within `within` of the best, lrs that diverged at every seed)."""
    by: dict[float, list[float]] = {}
    for r in rs:
        by.setdefault(r.lr, [])
        if (v := bpc(r)) is not None:
            by[r.lr].append(v)
    means = {lr: mean(v) for lr, v in by.items() if v}
    if not means:
        return [], sorted(by)
    best = min(means.values())
    usable = sorted(lr for lr, m in means.items() if m <= best * (1 + within))
    return usable, sorted(lr for lr, v in by.items() if not v)


def judge_b5(c, g):
    cells = _bpc_cells(c, g, ("attn", "hybrid"))
    grid = sorted({r.lr for r in cells["hybrid"]})
    if grid[-1] / grid[0] < c.thresholds["hybrid_min_range"]:
        raise Missing(f"hybrid's lr grid spans {grid[-1] / grid[0]:g}x; needs >= {c.thresholds['hybrid_min_range']:g}x")
    within = c.thresholds["within"]
    hu, hd = _usable(cells["hybrid"], within)
    au, ad = _usable(cells["attn"], within)
    span = lambda u: u[-1] / u[0] if u else 0.0
    ok = span(hu) >= c.thresholds["hybrid_min_range"] and span(hu) > span(au)
    fmt = lambda u, d: (f"{span(u):g}x ({u[-1]:g}..{u[0]:g})" if u else "no lr") + (
        f", diverged at {', '.join(f'{x:g}' for x in reversed(d))}" if d else "")
    return ((REPRODUCED if ok else NOT_REPRODUCED),
            f"within {within:.0%} of its best bpc: hybrid over {fmt(hu, hd)}; attn over {fmt(au, ad)}", None)


def judge_b6(c, g):
    attn = [r for r in g.runs if r.family == "dense"]
    hybrid = [r for r in g.runs if r.family == "hypercube/hybrid"]
    if not attn or not hybrid:
        raise Missing("needs attn (attention=dense) and hybrid runs of the same size")
    a, h = attn[0], hybrid[0]
    if a.n_params is None or h.n_params is None or not link_count(a) or link_count(h) is None:
        raise Missing("runs have no model.n_params, model.n_layers or model.seq_len")
    links = link_count(h) / link_count(a)
    weights = h.n_params / a.n_params
    t = c.thresholds
    ok = links <= t["max_links_ratio"] and weights < t["max_weights_ratio"]
    return ((REPRODUCED if ok else NOT_REPRODUCED),
            f"hybrid links 1/{1 / links:.1f} of attn's ({link_count(h):,} vs {link_count(a):,}), weights "
            f"{weights:.2f}x ({h.n_params:,} vs {a.n_params:,}) at {h.n_layers} layers, window {h.n}", None)
