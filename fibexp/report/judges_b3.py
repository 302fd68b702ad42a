"""Paper B's judges for learned coordinates, the hierarchy and the dynamics (B9-B12), paper
numbers beside ours.

B9 and B12 are "no advantage" claims: they hold where the compared seed ranges overlap or the
challenger is behind, and fail only where it is ahead beyond every seed. B10 reads the hierarchy
sweep's step budgets together (`Needs.across`) and uses the paper's own test, a one-sided exact
permutation test over seeds. B11 is three rankings (T 1 -> 8 per form) plus the partner counts."""
from __future__ import annotations

from typing import Sequence

from fibexp.report.claims import (NOT_REPRODUCED, REPRODUCED, TIE, Missing, Seeds, cell_runs, compare, mean,
                                  permutation_p, seeded)
from fibexp.report.judges_b import bpc_cells
from fibexp.report.runs import Group, RunView, acc, bpc

_f = lambda x: f"{x:.3f}"
_pts = lambda x: f"{100 * x:.1f}"


def _best(g: Group, family: str, what: str) -> tuple[float | None, Seeds]:
    """A cell at its own best lr: (that lr, its >= 3 seeds)."""
    runs = cell_runs(g, family, score=bpc)
    return (runs[0].lr if runs else None), seeded(runs, bpc, what, "val/bpc/<set>")


def _no_advantage(challenger: Seeds, base: Seeds) -> str:
    """'no advantage' holds on overlap or where the challenger is behind; a tie is not possible."""
    return NOT_REPRODUCED if compare(challenger, base) == "<" else REPRODUCED


def judge_b9(c, g):
    """Warp (learned coordinates) at its best lr brings no advantage over the fixed hybrid at its own."""
    bpc_cells(c, g, ("warp", "hybrid"))
    (lw, w), (lh, h) = _best(g, "hypercube/warp", "warp"), _best(g, "hypercube/hybrid", "hybrid")
    sign = compare(w, h)
    links = {r.metrics.get("model/links") for r in g.runs if r.family == "hypercube/warp"} - {None}
    where = {"<": "ahead beyond every seed", "~": "seed ranges overlap", ">": "behind beyond every seed"}[sign]
    return (_no_advantage(w, h),
            f"bpc at each one's best lr: warp {w.show(_f)} (lr {lw:g}) vs hybrid {h.show(_f)} (lr {lh:g}): {where}"
            + (f"; warp links {max(links):,.0f}" if links else ""), None)


# ---- B10: the hierarchy ----
def _arm(g: Group, family: str, hier: bool, steps: int) -> Seeds:
    name = family + ("/hier" if hier else "")
    runs = [r for r in g.runs if r.family == name and r.max_steps == steps]
    return _per_seed(runs, f"{name.replace('hypercube/', '')}{' ' if hier else ' without '}at {steps} steps")


def _per_seed(runs: Sequence[RunView], what: str) -> Seeds:
    """Each seed's accuracy, the mean over the difficulties it ran (the paper's 6 seeds per arm)."""
    by: dict[int, list[float]] = {}
    for r in runs:
        if (v := acc(r)) is not None:
            by.setdefault(r.seed, []).append(v)
    diffs = {r.params.get("task.difficulty") for r in runs}
    full = {s: vs for s, vs in by.items() if len(vs) == len(diffs)}
    pseudo = [RunView(str(s), "x", {"seed": str(s)}, {"task/acc": mean(vs)}) for s, vs in sorted(full.items())]
    return seeded(pseudo, acc, what, "task/acc")


def judge_b10(c, g):
    """Trainability, not capacity: at the smallest step budget the hierarchy is ahead (one-sided exact
    permutation test over seeds, p <= max_p) with a smaller seed spread; at the largest both reach the
    same asymptote (means within asymptote_tol, or seed ranges overlapping)."""
    t = c.thresholds
    pairs = sorted({r.family[:-len("/hier")] for r in g.runs if r.family.endswith("/hier")}
                   & {r.family for r in g.runs})
    if not pairs:
        raise Missing("needs assoc_recall runs with and without attention.hierarchy (sweeps/hierarchy.yaml)")
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
        spread = lambda s: max(s.vals) - min(s.vals)
        same = abs(w1.mean - n1.mean) <= t["asymptote_tol"] or compare(w1, n1) == "~"
        faster = w0.mean > n0.mean
        narrower = spread(w0) < spread(n0)
        ok = same and faster and narrower
        verdicts.append(NOT_REPRODUCED if not ok else REPRODUCED if p <= t["max_p"] else TIE)
        ours.append(f"{fam.replace('hypercube/', '')}: at {lo} steps with {w0.show(_pts)} vs without "
                    f"{n0.show(_pts)} (p = {p:.4f}, spread {_pts(spread(w0))} vs {_pts(spread(n0))} points); "
                    f"at {hi} steps {_pts(w1.mean)} vs {_pts(n1.mean)}"
                    f"{'' if same else ' (asymptotes differ)'} (accuracy %, mean over difficulties per seed)")
    verdict = next(v for v in (NOT_REPRODUCED, TIE, REPRODUCED) if v in verdicts)
    return verdict, "; ".join(ours), None


# ---- B11, B12: the dynamics variants ----
_FORMS = ("dyn", "fld", "ph")


def _dyn(g: Group, form: str, steps: int) -> tuple[float | None, Seeds, list[RunView]]:
    fam = f"dynamics/{form}/T{steps}"
    runs = cell_runs(g, fam, score=bpc)
    return (runs[0].lr if runs else None), seeded(runs, bpc, f"{form} T={steps}", "val/bpc/<set>"), runs


def _partners(runs: Sequence[RunView], what: str) -> list[float]:
    vals = [v for r in runs if (v := r.metric("attn/effective_partners")) is not None]
    if not vals:
        raise Missing(f"{what} runs have no attn/effective_partners (logged by fibexp.model.census)")
    return vals


def _steps(g: Group) -> tuple[int, int]:
    ts = sorted({int(r.family.rsplit("/T", 1)[1]) for r in g.runs if r.family.startswith("dynamics/")})
    if len(ts) < 2:
        raise Missing("needs attention=dynamics runs at two attention.steps (sweeps/dynamics.yaml: T 1 and 8)")
    return ts[0], ts[-1]


def judge_b11(c, g):
    """The sign of T lo -> hi reverses: worse for the saturated kernel (dyn), better for the scaled
    ones (fld, ph), each at its best lr, seed ranges disjoint; dyn's effective partners stay <=
    max_dyn_partners and the scaled forms' reach >= min_scaled_partners, every run."""
    lo, hi = _steps(g)
    t = c.thresholds
    signs, ours, partners_ok = [], [], True
    for form in _FORMS:
        (l0, s0, r0), (l1, s1, r1) = _dyn(g, form, lo), _dyn(g, form, hi)
        want = ">" if form == "dyn" else "<"
        s = compare(s1, s0)
        signs.append("ok" if s == want else "~" if s == "~" else "against")
        ps = _partners(r0 + r1, form)
        partners_ok &= (max(ps) <= t["max_dyn_partners"]) if form == "dyn" else (min(ps) >= t["min_scaled_partners"])
        ours.append(f"{form} T={lo} {s0.show(_f)} (lr {l0:g}) -> T={hi} {s1.show(_f)} (lr {l1:g}) "
                    f"[{s1.mean - s0.mean:+.3f}], partners {min(ps):.1f}..{max(ps):.1f}")
    verdict = (NOT_REPRODUCED if "against" in signs or not partners_ok else TIE if "~" in signs else REPRODUCED)
    return verdict, "; ".join(ours), None


def judge_b12(c, g):
    """Velocity never helps: ph is not ahead of fld beyond every seed at any T, each at its best lr."""
    verdicts, ours = [], []
    for steps in _steps(g):
        (lp, ph, _), (lf, fld, _) = _dyn(g, "ph", steps), _dyn(g, "fld", steps)
        verdicts.append(_no_advantage(ph, fld))
        ours.append(f"T={steps}: ph {ph.show(_f)} (lr {lp:g}) vs fld {fld.show(_f)} (lr {lf:g}) "
                    f"[{ph.mean - fld.mean:+.3f}]")
    return (NOT_REPRODUCED if NOT_REPRODUCED in verdicts else REPRODUCED), "; ".join(ours), None
