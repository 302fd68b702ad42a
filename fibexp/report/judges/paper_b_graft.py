"""Paper B §8 (B13): Eq. (1) layers grafted into a pretrained model. Replacing k attention layers by
Eq. (1) layers leaves the bpc flat in k, while fine-tuning the same k attention layers (the
control) keeps improving it, so the penalty sparse - control grows with k.

Cells (`fibexp.cell`): graft/eq1/k<k>, graft/attention/k<k> and graft/none (the unmodified model,
shown beside). Each cell at its own best lr, >= 3 seeds; the penalty is paired by seed (the same
seed draws the same batches for both arms). Judged on grafts of the paper's pretrained model only
(fibexp.report.published.SCALES)."""
from __future__ import annotations

from fibexp.report.cell_runs import at_scale, cell_runs
from fibexp.report.claims import NOT_REPRODUCED, REPRODUCED, TIE, Absent, Missing, Result
from fibexp.report.published import GRAFT
from fibexp.report.runs import Group, RunView, bpc
from fibexp.report.seeds import Seeds, compare, mean, seeded

_f = lambda x: f"{x:.3f}"


def arm(g: Group, replace: str) -> dict[int, str]:
    """{k: cell} of one arm's cells in the group (the paper's default layout only)."""
    out = {}
    for r in g.runs:
        head, _, k = r.family.rpartition("/k")
        if head == f"graft/{replace}" and k.isdigit():
            out[int(k)] = r.family
    return out


def _penalty(sparse: list[RunView], control: list[RunView], k: int) -> Seeds:
    """Per seed run by both arms at k: sparse bpc - control bpc."""
    ctl = {r.seed: v for r in control if (v := bpc(r)) is not None}
    pairs = [RunView(str(r.seed), "x", {"seed": str(r.seed)}, {"val/bpc/all": v - ctl[r.seed]})
             for r in sparse if (v := bpc(r)) is not None and r.seed in ctl]
    return seeded(pairs, bpc, f"penalty at k={k} (seeds both arms ran)", "val/bpc/<set>")


def judge_b13(c, g):
    """Over the ks both arms ran (>= min_ks): the control's bpc falls beyond every seed at each step
    up in k, the paired penalty at the largest k lies wholly above the one at the smallest, and
    sparse's spread over k is at most flat_share of the control's fall (flat). Any part the other
    way: not reproduced; a seed overlap and nothing against: tie."""
    t = c.thresholds
    sparse_cells, control_cells = arm(g, "eq1"), arm(g, "attention")
    if not sparse_cells and not control_cells:
        raise Absent("needs task=graft runs of task.replace=eq1 and attention (sweeps/graft.yaml)")
    at_scale(c, [r for r in g.runs if r.family in set(sparse_cells.values()) | set(control_cells.values())])
    ks = sorted(set(sparse_cells) & set(control_cells))
    if len(ks) < t["min_ks"]:
        raise Missing(f"needs task=graft runs of task.replace=eq1 and attention at >= {t['min_ks']:g} common task.k "
                      f"(sweeps/graft.yaml); has eq1 k={sorted(sparse_cells)}, attention k={sorted(control_cells)}")
    runs = {(name, k): cell_runs(g, cells[k], score=bpc) for name, cells in (("eq1", sparse_cells),
                                                                           ("attention", control_cells)) for k in ks}
    sp = {k: seeded(runs["eq1", k], bpc, f"eq1 k={k}", "val/bpc/<set>") for k in ks}
    ct = {k: seeded(runs["attention", k], bpc, f"attention k={k}", "val/bpc/<set>") for k in ks}
    pen = {k: _penalty(runs["eq1", k], runs["attention", k], k) for k in (ks[0], ks[-1])}

    steps = [compare(ct[b], ct[a]) for a, b in zip(ks, ks[1:])]  # '<': the control improved from a to b
    grows = compare(pen[ks[-1]], pen[ks[0]])  # '>': the penalty grew
    fall = ct[ks[0]].mean - ct[ks[-1]].mean
    spread = max(s.mean for s in sp.values()) - min(s.mean for s in sp.values())
    flat = fall > 0 and spread <= t["flat_share"] * fall
    if ">" in steps or grows == "<" or not flat:
        verdict = NOT_REPRODUCED
    elif "~" in steps or grows == "~":
        verdict = TIE
    else:
        verdict = REPRODUCED
    signed = lambda x: f"{x:+.3f}"
    detail = (f"bpc sparse/control {', '.join(f'k={k} {_f(sp[k].mean)}/{_f(ct[k].mean)}' for k in ks)}; control "
              f"{ct[ks[0]].show(_f)} -> {ct[ks[-1]].show(_f)}, falling beyond every seed at {steps.count('<')} of "
              f"{len(steps)} steps; penalty {pen[ks[0]].show(signed)} -> {pen[ks[-1]].show(signed)} "
              f"({ {'>': 'grows', '~': 'seed ranges overlap', '<': 'shrinks'}[grows] }); ")
    detail += (f"sparse spread {_f(spread)} = {spread / fall:.0%} of the control's fall" if fall > 0
               else "the control does not fall, so sparse cannot be flat beside it")
    base = [v for r in g.runs if r.family == "graft/none" and (v := bpc(r)) is not None]
    if base:
        detail += f"; unmodified {_f(mean(base))}"
    notes = () if set(GRAFT) <= set(ks) else (f"at k={','.join(map(str, ks))} only; paper: k="
                                              f"{','.join(map(str, GRAFT))}",)
    return Result(verdict, detail, notes=notes)
