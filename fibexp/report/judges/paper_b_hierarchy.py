"""Paper B §6, the hierarchy (B10): it changes trainability, not capacity. The sweep's step budgets
are read together (`Needs.across`); each seed's accuracy is its mean over the difficulties it ran
(the paper: 6 seeds per arm, 3 difficulties). Trainability: at the smallest budget the hierarchy
ahead by the paper's own test (one-sided exact permutation test over seeds) with a narrower seed
spread. Capacity: at the largest budget both arms level inside the paper's asymptote band."""
from __future__ import annotations

from typing import Sequence

from fibexp.report.claims import NOT_REPRODUCED, REPRODUCED, TIE, Absent, Missing, Result
from fibexp.report.runs import Group, RunView, acc
from fibexp.report.seeds import Seeds, level, permutation_p, seeded, worst

_pts = lambda x: f"{100 * x:.1f}"


def _arm(g: Group, family: str, hier: bool, steps: int) -> Seeds:
    name = family + ("/hier" if hier else "")
    runs = [r for r in g.runs if r.family == name and r.max_steps == steps]
    return _per_seed(runs, f"{name.replace('hypercube/', '')}{' ' if hier else ' without '}at {steps} steps")


def _per_seed(runs: Sequence[RunView], what: str) -> Seeds:
    """Each seed's accuracy, the mean over the difficulties it ran (a seed missing one is left out)."""
    by: dict[int, list[float]] = {}
    for r in runs:
        if (v := acc(r)) is not None:
            by.setdefault(r.seed, []).append(v)
    diffs = {r.params.get("task.difficulty") for r in runs}
    full = {s: vs for s, vs in by.items() if len(vs) == len(diffs)}
    pseudo = [RunView(str(s), "x", {"seed": str(s)}, {"task/acc": sum(vs) / len(vs)}) for s, vs in sorted(full.items())]
    return seeded(pseudo, acc, what, "task/acc (every difficulty)")


def judge_b10(c, g):
    t = c.thresholds
    pairs = sorted({r.family[:-len("/hier")] for r in g.runs if r.family.endswith("/hier")}
                   & {r.family for r in g.runs})
    if not pairs:
        raise Absent("needs assoc_recall runs with and without attention.hierarchy (sweeps/hierarchy.yaml)")
    fams = set(pairs) | {f + "/hier" for f in pairs}
    budgets = sorted({r.max_steps for r in g.runs if r.family in fams})
    if len(budgets) < 2:
        raise Missing(f"needs >= 2 step budgets (trainer.max_steps; the paper: 500 and 2,500); has {budgets}")
    lo, hi = budgets[0], budgets[-1]
    verdicts, ours = [], []
    for fam in pairs:
        w0, n0 = _arm(g, fam, True, lo), _arm(g, fam, False, lo)
        w1, n1 = _arm(g, fam, True, hi), _arm(g, fam, False, hi)
        p = permutation_p(w0.vals, n0.vals)
        faster = w0.mean > n0.mean and w0.spread * t["min_spread_ratio"] < n0.spread
        train = NOT_REPRODUCED if not faster else REPRODUCED if p <= t["max_p"] else TIE
        same, words = level(w1, n1, t["band"], relative=False)
        verdicts += [train, same]
        ours.append(f"{fam.replace('hypercube/', '')}: at {lo} steps with {w0.show(_pts)} vs without "
                    f"{n0.show(_pts)} (p = {p:.4f}, spread {_pts(w0.spread)} vs {_pts(n0.spread)} points); "
                    f"at {hi} steps {_pts(w1.mean)} vs {_pts(n1.mean)} ({words}) (accuracy %, mean over "
                    "difficulties per seed)")
    return Result(worst(verdicts), "; ".join(ours))
