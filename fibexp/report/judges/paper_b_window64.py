"""Paper B §5.3, window 64 (B7, B8: `sweeps/hypercube_w64.yaml`): the hybrid level with attention at
a fraction of its links, and every pure sparse schedule behind dense mixing. Window-64 claims:
runs at another window are `not at this scale`. Links and weights are what the runs logged."""
from __future__ import annotations

from fibexp.report.cell_runs import at_scale, cell_runs, present
from fibexp.report.claims import NOT_REPRODUCED, REPRODUCED, TIE, Absent, Missing, Result
from fibexp.report.runs import Group, bpc
from fibexp.report.seeds import Seeds, compare, level, seeded, worst

CELLS = {"attn": "dense", "hybrid": "hypercube/hybrid", "local": "hypercube/local", "rot": "hypercube/rot",
         "mixa": "hypercube/mixa", "dense": "hypercube/dense"}
_f = lambda x: f"{x:.3f}"


def _cell(g: Group, name: str) -> Seeds:
    return seeded(cell_runs(g, CELLS[name], score=bpc), bpc, f"{name} ({CELLS[name]}) at window {g.n}",
                  "val/bpc/<set>")


def _census(g: Group, name: str, metric: str) -> float:
    vs = {r.metrics.get(metric) for r in g.runs if r.family == CELLS[name]} - {None}
    if not vs:
        raise Missing(f"{name} runs have no {metric} (logged by fibexp.model.census)")
    return max(vs)


def _runs(g: Group, *names: str):
    return [r for r in g.runs if r.family in {CELLS[n] for n in names}]


def judge_b7(c, g):
    """Hybrid level with attention inside the paper's band (a match, not a win), at <= the paper's
    share of its links and fewer weights."""
    present(g, CELLS["hybrid"], CELLS["attn"], what="hybrid and attn (attention=dense)")
    at_scale(c, _runs(g, "hybrid", "attn"))
    t = c.thresholds
    links = _census(g, "hybrid", "model/links") / _census(g, "attn", "model/links")
    weights = _census(g, "hybrid", "model/weights") / _census(g, "attn", "model/weights")
    h, a = _cell(g, "hybrid"), _cell(g, "attn")
    verdict, words = level(h, a, t["band"])
    cost = links <= t["max_links_ratio"] and weights < t["max_weights_ratio"]
    return Result(worst([verdict, REPRODUCED if cost else NOT_REPRODUCED]),
                  f"window 64 bpc: hybrid {h.show(_f)} vs attn {a.show(_f)} ({words}); links 1/{1 / links:.1f}, "
                  f"weights {weights:.2f}x (logged by the runs)")


def judge_b8(c, g):
    """Every pure sparse schedule (local, rot, mixa) behind dense mixing, seed ranges disjoint."""
    names = ("local", "rot", "mixa", "dense")
    if not _runs(g, *names):
        raise Absent("needs local, rot, mixa and dense mixing (hypercube/dense) (no run)")
    present(g, *(CELLS[n] for n in names))
    at_scale(c, _runs(g, *names))
    d = _cell(g, "dense")
    signs, ours = [], []
    for name in names[:3]:
        v = _cell(g, name)
        s = compare(v, d)
        signs.append(s)
        ours.append(f"{name} {v.show(_f)}{'' if s == '>' else ' (overlap)' if s == '~' else ' (ahead)'}")
    verdict = NOT_REPRODUCED if "<" in signs else TIE if "~" in signs else REPRODUCED
    return Result(verdict, f"window 64 bpc: {', '.join(ours)} vs dense mixing {d.show(_f)}")
