"""Paper B §5.1, character-level LM at window 256 (B4-B6): the hybrid and rot against attention over
the lr grid, the hybrid's lr robustness, and the cost in links and weights. All three are window-256
claims (fibexp.report.published.SCALES): runs at another window are `not at this scale`."""
from __future__ import annotations

from typing import Sequence

from fibexp.report.cell_runs import at_scale, cell_runs, present
from fibexp.report.claims import NOT_REPRODUCED, REPRODUCED, TIE, Claim, Missing, Result
from fibexp.report.published import LR_GRID, MIN_SEEDS
from fibexp.report.runs import Group, RunView, bpc
from fibexp.report.seeds import Seeds, compare, daggers, seeded

CELLS = {"attn": "dense", "hybrid": "hypercube/hybrid", "rot": "hypercube/rot", "warp": "hypercube/warp"}
_f = lambda x: f"{x:.3f}"


def bpc_cells(c: Claim, g: Group, names: Sequence[str]) -> dict[str, list[RunView]]:
    """The compared schedules' runs, at the claim's scale, each swept over >= min_lrs lrs and with
    val/bpc/<set>: Absent without the cells, NotAtScale off its window, Missing otherwise."""
    present(g, *(CELLS[n] for n in names), what=" and ".join(f"{n} ({CELLS[n]})" for n in names))
    cells = {name: [r for r in g.runs if r.family == CELLS[name]] for name in names}
    at_scale(c, [r for rs in cells.values() for r in rs])
    for name, rs in cells.items():
        lrs = {r.lr for r in rs}
        if c.needs.min_lrs and None in lrs:
            raise Missing(f"{name} has runs without the optim.lr param (an lr sweep needs each run's lr)")
        if len(lrs) < c.needs.min_lrs:
            raise Missing(f"{name} was run at {len(lrs)} lr; each compared cell needs an lr sweep "
                          f"(>= {c.needs.min_lrs} lrs; paper B's grid: {len(LR_GRID)})")
        if not any(bpc(r) is not None for r in rs) and not all(r.diverged for r in rs):
            raise Missing(f"{name} has no val/bpc/<set> (character-level runs: data=char)")
    return cells


def best(g: Group, name: str) -> tuple[float | None, Seeds]:
    """A cell at its own best lr: (that lr, its >= 3 seeds)."""
    runs = cell_runs(g, CELLS[name], score=bpc)
    return (runs[0].lr if runs else None), seeded(runs, bpc, f"{name} ({CELLS[name]})", "val/bpc/<set>")


def lr_coverage(cells: dict[str, list[RunView]]) -> tuple[str, ...]:
    """`best of 2 lrs; paper: 7` where a cell's grid is smaller than paper B's."""
    n = min(len({r.lr for r in rs}) for rs in cells.values())
    return (f"best of {n} lrs; paper: {len(LR_GRID)}",) if n < len(LR_GRID) else ()


def judge_b4(c, g):
    """Hybrid and rot below attention, each at its own best lr, seed ranges disjoint."""
    cells = bpc_cells(c, g, ("attn", "hybrid", "rot"))
    got = {name: best(g, name) for name in ("hybrid", "rot", "attn")}
    signs = [compare(got[n][1], got["attn"][1]) for n in ("hybrid", "rot")]
    verdict = NOT_REPRODUCED if ">" in signs else TIE if "~" in signs else REPRODUCED
    ours = ", ".join(f"{n} {s.show(_f)} (lr {lr:g})" for n, (lr, s) in got.items())
    return Result(verdict, f"bpc at each one's best lr: {ours}", notes=lr_coverage(cells))


def _per_seed(rs: Sequence[RunView], name: str) -> dict[int, dict[float, float | None]]:
    """{seed: {lr: bpc, None where the run diverged}} for the seeds that ran every lr of the cell."""
    grid = sorted({r.lr for r in rs})
    out: dict[int, dict[float, float | None]] = {}
    for r in rs:
        v = bpc(r)
        if v is None and not r.diverged:
            raise Missing(f"{name} seed {r.seed} lr {r.lr:g} has no val/bpc/<set>")
        out.setdefault(r.seed, {})[r.lr] = v
    full = {s: lrs for s, lrs in out.items() if len(lrs) == len(grid)}
    if len(full) < MIN_SEEDS:
        gaps = ", ".join(f"seed {s} lacks lr {', '.join(f'{lr:g}' for lr in grid if lr not in lrs)}"
                         for s, lrs in sorted(out.items()) if s not in full)
        raise Missing(f"{name}: {len(full)} seeds ran every lr of its grid ({', '.join(f'{x:g}' for x in grid)}), "
                      f"needs >= {MIN_SEEDS}" + (f" ({gaps})" if gaps else ""), seeds=len(full))
    return dict(sorted(full.items()))


def _usable(by_lr: dict[float, float | None], within: float) -> tuple[list[float], list[float]]:
    """(the unbroken run of grid lrs around the best whose bpc is within `within` of it, the lrs
    outside it that lie between usable ones: gaps), lrs ascending."""
    finite = {lr: v for lr, v in by_lr.items() if v is not None}
    if not finite:
        return [], []
    best_lr = min(finite, key=finite.get)
    good = [lr for lr, v in finite.items() if v <= finite[best_lr] * (1 + within)]
    grid = sorted(by_lr)
    i = j = grid.index(best_lr)
    while i > 0 and grid[i - 1] in good:
        i -= 1
    while j < len(grid) - 1 and grid[j + 1] in good:
        j += 1
    gaps = [lr for lr in grid if min(good) < lr < max(good) and lr not in good]
    return grid[i:j + 1], gaps


def judge_b5(c, g):
    """Every seed: the hybrid's usable lrs (within `within` of that seed's best, no gap) span >=
    hybrid_min_range, and attention fails (diverges, or is not usable) at every lr >= attn_fail_lr
    it was run at."""
    cells = bpc_cells(c, g, ("attn", "hybrid"))
    t = c.thresholds
    grid = sorted({r.lr for r in cells["hybrid"]})
    if grid[-1] / grid[0] < t["hybrid_min_range"]:
        raise Missing(f"hybrid's lr grid spans {grid[-1] / grid[0]:g}x; needs >= {t['hybrid_min_range']:g}x")
    high = sorted(lr for lr in {r.lr for r in cells["attn"]} if lr >= t["attn_fail_lr"])
    if not high:
        raise Missing(f"attn was not run at lr >= {t['attn_fail_lr']:g} (the failing half)")
    hybrid, attn = _per_seed(cells["hybrid"], "hybrid"), _per_seed(cells["attn"], "attn")
    span = lambda u: u[-1] / u[0] if u else 0.0
    ok, by_band, ours = True, False, []
    for s, by_lr in hybrid.items():
        usable, gaps = _usable(by_lr, t["within"])
        ok &= span(usable) >= t["hybrid_min_range"] and not gaps
        ours.append(f"seed {s} {span(usable):g}x" + (f" ({usable[-1]:g}..{usable[0]:g})" if usable else "")
                    + (f" gaps at {', '.join(f'{x:g}' for x in gaps)}" if gaps else ""))
    fails = []
    for s, by_lr in attn.items():
        usable, _ = _usable(by_lr, t["within"])
        for lr in high:
            failed = by_lr[lr] is None or lr not in usable
            ok &= failed
            by_band |= failed and by_lr[lr] is not None
            fails.append(f"{s}@{lr:g} " + ("\u2020" if by_lr[lr] is None else _f(by_lr[lr])
                                            + ("" if failed else " trains")))
    notes = (f"attn's fails include bpc > {t['within']:.0%} above its best without divergence; paper: \u2020",) \
        if by_band else ()
    return Result(REPRODUCED if ok else NOT_REPRODUCED,
                  f"within {t['within']:.0%} of each seed's best bpc: hybrid over {'; '.join(ours)}"
                  f"{daggers(cells['hybrid'])}; attn at lr >= {t['attn_fail_lr']:g} (seed@lr): {', '.join(fails)}"
                  f"{daggers(cells['attn'])}", notes=notes)


def judge_b6(c, g):
    """Links and weights as the runs logged them (model/links, model/weights of fibexp.model.census),
    not the config; a count no seed changes, so one run per cell suffices. The paper's third cost,
    2.4x less wall time, is one GPU's timing: named in the line, not judged."""
    present(g, "dense", "hypercube/hybrid", what="attn (attention=dense) and hybrid")
    runs = {"attn": [r for r in g.runs if r.family == "dense"],
            "hybrid": [r for r in g.runs if r.family == "hypercube/hybrid"]}
    at_scale(c, runs["attn"] + runs["hybrid"])
    got = {}
    for name, rs in runs.items():
        for m in ("model/links", "model/weights"):
            vs = {r.metrics.get(m) for r in rs} - {None}
            if not vs:
                raise Missing(f"{name} runs have no {m} (logged by fibexp.model.census)")
            got[name, m] = max(vs)
    links = got["hybrid", "model/links"] / got["attn", "model/links"]
    weights = got["hybrid", "model/weights"] / got["attn", "model/weights"]
    t = c.thresholds
    ok = links <= t["max_links_ratio"] and weights < t["max_weights_ratio"]
    h = runs["hybrid"][0]
    return Result(REPRODUCED if ok else NOT_REPRODUCED,
                  f"hybrid links 1/{1 / links:.1f} of attn's ({got['hybrid', 'model/links']:,.0f} vs "
                  f"{got['attn', 'model/links']:,.0f}), weights {weights:.2f}x ({got['hybrid', 'model/weights']:,.0f} vs "
                  f"{got['attn', 'model/weights']:,.0f}) at {h.n_layers} layers, window {h.n} (logged by the runs)",
                  notes=("wall time not judged: paper 2.4x less, one GPU",))
