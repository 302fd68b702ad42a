"""Paper B §7, the dynamics variants (B11, B12; `sweeps/dynamics.yaml`), each form at its own best lr
with >= 3 seeds. B11 ranks T 1 -> 8 per form (the sign reverses between the saturated kernel and the
scaled ones) and bounds every run's effective partners; B12 is a "no advantage" claim (velocity),
its band the paper's own seed spread. The paper measured both at window 256 only, but nothing in
it ties them to the window (unlike B4, which its §5.3 contradicts at window 64): judged at any
window, which the line names."""
from __future__ import annotations

from typing import Sequence

from fibexp.report.cell_runs import cell_runs
from fibexp.report.claims import NOT_REPRODUCED, REPRODUCED, Absent, Missing, Result
from fibexp.report.published import DYN_LR_GRID
from fibexp.report.runs import Group, RunView, bpc
from fibexp.report.seeds import Seeds, compare, no_advantage, ranked, seeded, worst

_f = lambda x: f"{x:.3f}"
FORMS = ("dyn", "fld", "ph")


def _dyn(g: Group, form: str, steps: int) -> tuple[float | None, Seeds, list[RunView]]:
    runs = cell_runs(g, f"dynamics/{form}/T{steps}", score=bpc)
    return (runs[0].lr if runs else None), seeded(runs, bpc, f"{form} T={steps}", "val/bpc/<set>"), runs


def _partners(runs: Sequence[RunView], what: str) -> list[float]:
    vals = [v for r in runs if (v := r.metric("attn/effective_partners")) is not None]
    if len(vals) < len([r for r in runs if not r.diverged]):
        raise Missing(f"{what} runs lack attn/effective_partners (logged by fibexp.model.census)")
    return vals


def _steps(g: Group, forms: Sequence[str]) -> tuple[int, int]:
    fams = {r.family for r in g.runs if r.family.startswith("dynamics/")}
    if not any(f.split("/")[1] in forms for f in fams):
        raise Absent("needs attention=dynamics runs (sweeps/dynamics.yaml)")
    ts = sorted({int(f.rsplit("/T", 1)[1]) for f in fams})
    if len(ts) < 2:
        raise Missing("needs attention=dynamics runs at two attention.steps (sweeps/dynamics.yaml: T 1 and 8)")
    return ts[0], ts[-1]


def judge_b11(c, g):
    """T lo -> hi: dyn's bpc range above its lo range, fld's and ph's below (overlap: tie; a reversed
    sign: not reproduced); every dyn run's partners <= max_dyn_partners, every fld/ph run's >=
    min_scaled_partners; dyn's best lr lower at hi than at lo (the paper: 4-8x; a direction, judged
    where dyn ran >= min_lrs lrs at both T, else named not judged)."""
    lo, hi = _steps(g, FORMS)
    t = c.thresholds
    signs, ours, partners_ok = [], [], True
    for form in FORMS:
        (l0, s0, r0), (l1, s1, r1) = _dyn(g, form, lo), _dyn(g, form, hi)
        want = ">" if form == "dyn" else "<"
        s = compare(s1, s0)
        signs.append("ok" if s == want else "~" if s == "~" else "against")
        ps = _partners(r0 + r1, form)
        partners_ok &= (max(ps) <= t["max_dyn_partners"]) if form == "dyn" else (min(ps) >= t["min_scaled_partners"])
        ours.append(f"{form} T={lo} {s0.show(_f)} (lr {l0:g}) -> T={hi} {s1.show(_f)} (lr {l1:g}) "
                    f"[{s1.mean - s0.mean:+.3f}], partners {min(ps):.1f}..{max(ps):.1f}")
    verdict = ranked(signs) if partners_ok else NOT_REPRODUCED
    lr_verdict, lr_words, lr_note = _lr_moves(g, lo, hi, int(t["min_lrs"]))
    return Result(NOT_REPRODUCED if lr_verdict == NOT_REPRODUCED else verdict,
                  f"window {g.n}: " + "; ".join(ours) + lr_words, notes=(lr_note,) + _grid_note(g))


def _grid_note(g: Group) -> tuple[str, ...]:
    """`best of 3 lrs; paper: 5` where the dynamics cells ran fewer lrs than paper B's grid."""
    n = min(len({r.lr for r in g.runs if r.family == f} - {None}) for f in {r.family for r in g.runs}
            if f.startswith("dynamics/"))
    return (f"best of {n} lr{'' if n == 1 else 's'}; paper: {len(DYN_LR_GRID)}",) if n < len(DYN_LR_GRID) else ()


def _lr_moves(g: Group, lo: int, hi: int, min_lrs: int) -> tuple[str | None, str, str]:
    """dyn's best lr at T hi against T lo (paper: 4-8x lower), judged by direction where it can be
    seen: dyn ran >= min_lrs lrs at both T and its best at hi is not the lowest it ran there (else the
    grid cannot show where the best lies below it); (verdict or None, words, the note)."""
    grid = {t: sorted({r.lr for r in g.runs if r.family == f"dynamics/dyn/T{t}" and r.lr is not None}) for t in (lo, hi)}
    if min(len(v) for v in grid.values()) < min_lrs:
        return None, "", (f"dyn's best lr moving down 4-8x not judged: needs dyn at >= {min_lrs} lrs per T, "
                          f"has {min(len(v) for v in grid.values())}")
    (l0, _, _), (l1, _, _) = _dyn(g, "dyn", lo), _dyn(g, "dyn", hi)
    words = f"; dyn's best lr {l0:g} -> {l1:g}"
    if l1 == grid[hi][0] and l1 >= l0:
        return None, words, f"dyn's best lr moving down 4-8x not judged: T={hi}'s best is the lowest lr it ran"
    return (NOT_REPRODUCED if l1 >= l0 else REPRODUCED), words + f" ({l0 / l1:g}x down)", \
        "dyn's best lr by direction only; paper 4-8x down"


def judge_b12(c, g):
    """At every T both ran: ph's lead over fld at most the paper's band (no_advantage)."""
    _steps(g, ("ph", "fld"))
    ts = sorted({int(r.family.rsplit("/T", 1)[1]) for r in g.runs if r.family.startswith("dynamics/ph/")}
                & {int(r.family.rsplit("/T", 1)[1]) for r in g.runs if r.family.startswith("dynamics/fld/")})
    if not ts:
        raise Missing("needs ph and fld (attention.form) at the same attention.steps")
    verdicts, ours = [], []
    for steps in ts:
        (lp, ph, _), (lf, fld, _) = _dyn(g, "ph", steps), _dyn(g, "fld", steps)
        v, words = no_advantage(ph, fld, c.thresholds["band"])
        verdicts.append(v)
        ours.append(f"T={steps}: ph {ph.show(_f)} (lr {lp:g}) vs fld {fld.show(_f)} (lr {lf:g}) "
                    f"[{ph.mean - fld.mean:+.3f}; {words}]")
    return Result(worst(verdicts), f"window {g.n}: " + "; ".join(ours), notes=_grid_note(g))
