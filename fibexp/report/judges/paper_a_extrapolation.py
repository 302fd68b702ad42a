"""Paper A's length extrapolation (A6): at 4x its training length dense's ppl rises while every fib
cell stays within a few %. A threshold claim: >= 3 seeds per cell and the bars hold for every seed
(every fib cell the group ran, pow2 excluded: the paper's own pow2 fixed rose +11.3%)."""
from __future__ import annotations

from fibexp.report.cell_runs import cell_runs, label, present
from fibexp.report.claims import NOT_REPRODUCED, REPRODUCED, Absent, Missing, Result, pct, span_str
from fibexp.report.runs import rel
from fibexp.report.seeds import n_seeds, seeded


def judge_a6(c, g):
    k, t = c.needs.factor, c.thresholds
    metric = f"extrap/rel_x{k}/<set>"
    present(g, "dense")
    fib = sorted({(r.family, r.window) for r in g.runs if r.kind == "sparse" and r.family.startswith("fib")},
                 key=lambda fw: (fw[1], fw[0]))
    if not fib:
        raise Absent("needs at least one fib sparse cell beside dense")
    cells, short = {}, []
    for f, w in [("dense", None)] + fib:
        try:
            cells[label(f, w)] = seeded(cell_runs(g, f, w), lambda r: rel(r, k), label(f, w), metric)
        except Missing as e:
            short.append(e)
    if short:
        raise Missing.of(short, " (a threshold claim holds for every seed of every cell)")
    dense = cells.pop("dense")
    ok = min(dense.vals) > t["dense_min_rise"] and all(max(s.vals) <= t["sparse_max_rise"] for s in cells.values())
    if len(cells) <= 3:
        rest = ", ".join(f"{name} {span_str(s.vals, pct)}" for name, s in cells.items())
    else:
        top = max(cells, key=lambda n: max(cells[n].vals))
        rest = (f"{len(cells)} fib cells {pct(min(min(s.vals) for s in cells.values()))}.."
                f"{pct(max(max(s.vals) for s in cells.values()))} (highest: {top})")
    n = sorted({len(s.vals) for s in [dense, *cells.values()]})
    return Result(REPRODUCED if ok else NOT_REPRODUCED,
                  f"dense {span_str(dense.vals, pct)} vs {rest} at {k}x, every seed ({n_seeds(n[0])}"
                  f"{'' if len(n) == 1 else f'-{n[-1]}'} per cell)")
