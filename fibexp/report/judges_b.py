"""Paper B's judges (B1-B6): hypercube wiring on count-ones and the window-256 LR grid."""
from __future__ import annotations

from typing import Sequence

from fibexp.report.claims import (AT_CHANCE, DEGENERATE, NOT_REPRODUCED, REPRODUCED, TIE, Missing, cell_runs, compare,
                                  cube_dims, daggers, degenerate, mean, offsets, seeded, seeds_note, span_str, values)
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
    ok = min(vr) >= t["min_acc"] and max(vf) <= chance + AT_CHANCE
    dense = [v for r in _count_cell(g, "hypercube/dense", b) + _count_cell(g, "dense", b) if (v := acc(r)) is not None]
    if dense:
        ok = ok and min(dense) >= t["min_acc"]
    extra = f", dense {span_str(dense, lambda x: f'{x:.1%}')}" if dense else ""
    return ((REPRODUCED if ok else NOT_REPRODUCED),
            f"n={g.n}, {b} layers: rot {span_str(vr, lambda x: f'{x:.1%}')}, fixed {span_str(vf, lambda x: f'{x:.1%}')}"
            f"{extra} (chance {chance:.1%}){seeds_note(vr, vf)}", None)


def judge_b2(c, g):
    """What the paper states, where it states it: at n <= 64, log2 n - 1 layers at chance, log2 n
    layers succeed, ~2 log2 n saturate; at n = 256 (paper: 28.0% at 8 layers, 52.1% at 16, its
    log2 n layers do not succeed) only that 2 log2 n layers beat log2 n for every seed."""
    b = cube_dims(g)
    t, f = c.thresholds, lambda x: f"{x:.1%}"
    base_runs = _count_cell(g, "hypercube/rot", b, "rot")
    base = values(base_runs, acc, f"rot at n={g.n}, {b} layers", "task/acc")
    chance = _chance(base_runs)
    if g.n > 64:
        vd = values(_count_cell(g, "hypercube/rot", 2 * b, "rot"), acc, f"rot at n={g.n}, {2 * b} layers", "task/acc")
        ok = min(vd) > max(base)
        return ((REPRODUCED if ok else NOT_REPRODUCED),
                f"n={g.n} rot: {b} layers {span_str(base, f)}, {2 * b} layers {span_str(vd, f)} (chance {chance:.1%}; "
                f"paper n=256: 28.0% at 8, 52.1% at 16: depth helps, log2 n does not reach)", None)
    short = values(_count_cell(g, "hypercube/rot", b - 1, "rot"), acc, f"rot at n={g.n}, {b - 1} layers", "task/acc")
    ok = max(short) <= chance + AT_CHANCE and min(base) >= t["min_acc"]
    ours = f"n={g.n} rot: {b - 1} layers {span_str(short, f)}, {b} layers {span_str(base, f)}"
    deep = sorted({r.n_layers for r in g.runs if r.family == "hypercube/rot" and r.order == "rot"
                   and r.n_layers >= 2 * b})
    if not deep:
        raise Missing(f"needs rot at n={g.n}, {2 * b} layers (the saturation half)")
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
    plan = offsets(rg[0])
    if plan is not None and wiring.reach(plan[2], g.n, rg[0].causal) == set(range(g.n)):
        return DEGENERATE, (f"gray order visits every cube dimension in {depth} layers at n={g.n}: it reaches every "
                            "position, so it is no failing control (the paper's 16 layers at n=64 never visit "
                            "dimension 5)"), None
    vr = values(rr, acc, "random order", "task/acc")
    vg = values(rg, acc, "gray order", "task/acc")
    chance = _chance(rr + rg)
    ok = min(vr) >= t["min_acc"] and max(vg) <= chance + AT_CHANCE
    return ((REPRODUCED if ok else NOT_REPRODUCED),
            f"n={g.n}, {depth} layers: random {span_str(vr, f)}, gray {span_str(vg, f)} (chance {chance:.1%})", None)


_B_CELLS = {"attn": "dense", "hybrid": "hypercube/hybrid", "rot": "hypercube/rot", "warp": "hypercube/warp"}


def bpc_cells(c, g, names):
    """The compared schedules' runs; each must exist, be swept over the lr and log bpc."""
    cells = {name: [r for r in g.runs if r.family == _B_CELLS[name]] for name in names}
    if absent := [f"{n} ({_B_CELLS[n]})" for n, rs in cells.items() if not rs]:
        raise Missing(f"needs char-level runs (val/bpc/<set>) of {', '.join(absent)}")
    for name, rs in cells.items():
        lrs = {r.lr for r in rs}
        if c.needs.lr_sweep and None in lrs:
            raise Missing(f"{name} has runs without the optim.lr param (an lr sweep needs each run's lr)")
        if c.needs.lr_sweep and len(lrs) < c.thresholds["min_lrs"]:
            raise Missing(f"{name} was run at {len(lrs)} lr; SPEC: sweep the lr of every compared cell "
                          f"(>= {c.thresholds['min_lrs']:.0f})")
        if not any(bpc(r) is not None for r in rs) and not all(r.diverged for r in rs):
            raise Missing(f"{name} has no val/bpc/<set> (char-level runs: data=char)")
    return cells


def judge_b4(c, g):
    cells = bpc_cells(c, g, ("attn", "hybrid", "rot"))
    best = {}
    for name in cells:
        picked = cell_runs(g, _B_CELLS[name], score=bpc)
        best[name] = (picked[0].lr, seeded(picked, bpc, name, "val/bpc/<set>"))
    signs = [compare(best[n][1], best["attn"][1]) for n in ("hybrid", "rot")]
    verdict = NOT_REPRODUCED if ">" in signs else TIE if "~" in signs else REPRODUCED
    f = lambda x: f"{x:.3f}"
    ours = ", ".join(f"{n} {best[n][1].show(f)} (lr {best[n][0]:g})" for n in ("hybrid", "rot", "attn"))
    return verdict, f"bpc at each one's best lr: {ours}", None


def _lr_means(rs: Sequence[RunView]) -> dict[float, float | None]:
    """{lr: mean bpc over its seeds, None where every seed diverged}."""
    by: dict[float, list[float]] = {}
    for r in rs:
        by.setdefault(r.lr, [])
        if (v := bpc(r)) is not None:
            by[r.lr].append(v)
    return {lr: (mean(v) if v else None) for lr, v in sorted(by.items())}


def _usable(means: dict[float, float | None], within: float) -> tuple[list[float], list[float]]:
    """(the unbroken run of grid lrs around the best whose mean bpc is within `within` of it, the lrs
    outside it that lie between usable ones: gaps), lrs ascending."""
    ok = {lr: m is not None for lr, m in means.items()}
    finite = {lr: m for lr, m in means.items() if m is not None}
    if not finite:
        return [], []
    best_lr = min(finite, key=finite.get)
    good = [lr for lr in means if ok[lr] and finite[lr] <= finite[best_lr] * (1 + within)]
    grid = list(means)
    i = j = grid.index(best_lr)
    while i > 0 and grid[i - 1] in good:
        i -= 1
    while j < len(grid) - 1 and grid[j + 1] in good:
        j += 1
    run = grid[i:j + 1]
    gaps = [lr for lr in grid if min(good) < lr < max(good) and lr not in good]
    return run, gaps


def judge_b5(c, g):
    """Both halves: hybrid's usable lrs (within `within` of its best, no gap) span >= 8x, and
    attention fails (diverges, or is not usable) at every lr >= attn_fail_lr it was run at."""
    cells = bpc_cells(c, g, ("attn", "hybrid"))
    t = c.thresholds
    grid = sorted({r.lr for r in cells["hybrid"]})
    if grid[-1] / grid[0] < t["hybrid_min_range"]:
        raise Missing(f"hybrid's lr grid spans {grid[-1] / grid[0]:g}x; needs >= {t['hybrid_min_range']:g}x")
    high = sorted(lr for lr in {r.lr for r in cells["attn"]} if lr >= t["attn_fail_lr"])
    if not high:
        raise Missing(f"attn was not run at lr >= {t['attn_fail_lr']:g} (the failing half)")
    within = t["within"]
    hm, am = _lr_means(cells["hybrid"]), _lr_means(cells["attn"])
    hu, hgaps = _usable(hm, within)
    au, _ = _usable(am, within)
    span = lambda u: u[-1] / u[0] if u else 0.0
    attn_fails = [lr for lr in high if am[lr] is None or lr not in au]
    ok = span(hu) >= t["hybrid_min_range"] and not hgaps and attn_fails == high
    fmt = lambda u: f"{span(u):g}x ({u[-1]:g}..{u[0]:g})" if u else "no lr"
    gap = f", gaps at {', '.join(f'{x:g}' for x in hgaps)}" if hgaps else ""
    fails = ", ".join(f"{lr:g} " + ("\u2020" if am[lr] is None else f"{am[lr]:.3f}") for lr in high)
    return ((REPRODUCED if ok else NOT_REPRODUCED),
            f"within {within:.0%} of its best bpc: hybrid over {fmt(hu)}{gap}{daggers(cells['hybrid'])}; "
            f"attn over {fmt(au)}; attn at lr >= {t['attn_fail_lr']:g}: {fails}"
            f"{' (fails at each)' if attn_fails == high else ' (trains)'}{daggers(cells['attn'])}", None)


def judge_b6(c, g):
    """From what the runs logged (model/links, model/weights of fibexp.model.census), not the config,
    at the size the paper states it for (window 256; at window 64 its ratio is B7's 1/4.7)."""
    if g.n != 256:
        raise Missing(f"needs attn and hybrid runs at window 256, paper B's §5.1 size (this group: window {g.n})")
    attn = [r for r in g.runs if r.family == "dense"]
    hybrid = [r for r in g.runs if r.family == "hypercube/hybrid"]
    if not attn or not hybrid:
        raise Missing("needs attn (attention=dense) and hybrid runs of the same size")
    got = {}
    for name, rs in (("attn", attn), ("hybrid", hybrid)):
        for m in ("model/links", "model/weights"):
            vs = {r.metrics.get(m) for r in rs} - {None}
            if not vs:
                raise Missing(f"{name} runs have no {m} (logged by fibexp.model.census)")
            got[name, m] = max(vs)
    links = got["hybrid", "model/links"] / got["attn", "model/links"]
    weights = got["hybrid", "model/weights"] / got["attn", "model/weights"]
    t = c.thresholds
    ok = links <= t["max_links_ratio"] and weights < t["max_weights_ratio"]
    h = hybrid[0]
    return ((REPRODUCED if ok else NOT_REPRODUCED),
            f"hybrid links 1/{1 / links:.1f} of attn's ({got['hybrid', 'model/links']:,.0f} vs "
            f"{got['attn', 'model/links']:,.0f}), weights {weights:.2f}x ({got['hybrid', 'model/weights']:,.0f} vs "
            f"{got['attn', 'model/weights']:,.0f}) at {h.n_layers} layers, window {h.n} (logged by the runs)", None)
