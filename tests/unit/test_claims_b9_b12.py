"""Claims B9-B12 (warp, the hierarchy, the dynamics variants) on hand-made runs: each one's verdicts
(the "no advantage" and "level" halves against the paper's own seed bands), and the permutation
test against the paper's p."""
from __future__ import annotations

import pytest

from fibexp.report.claims import INSUFFICIENT, NOT_AT_SCALE, NOT_REPRODUCED, REPRODUCED, TIE, UNDECIDED
from fibexp.report.seeds import permutation_p
from helpers.claim_runs import SEEDS, bpc, run, verdict

CHAR = {"data.tokenizer": "char"}


def lm(cell, lr, vals, extra=None, length=256):
    """One cell at one lr, a run per seed; vals: bpc per seed (None: diverged)."""
    return [run(cell, seed=s, lr=lr, layers=16, length=length, params=CHAR, diverged=b is None,
                metrics=({} if b is None else bpc(b)) | (extra or {})) for s, b in zip(SEEDS, vals)]


# ---- B9: warp, no advantage over the hybrid (band: warp's published seed spread, 2.7%) ----
def _warp(warp_best, length=256):
    return (lm("hypercube/hybrid", 0.002, (1.716, 1.718, 1.720), length=length)
            + lm("hypercube/hybrid", 0.001, (1.74, 1.75, 1.76), length=length)
            + lm("hypercube/warp", 0.001, warp_best, {"model/links": 72_184.0}, length=length)
            + lm("hypercube/warp", 0.002, (1.80, 1.81, 1.82), length=length))


def test_b9_warp_behind_the_hybrid_is_no_advantage():
    v = verdict("B9", _warp((1.75, 1.76, 1.77)))
    assert v.line().startswith("B9  reproduced (best of 2 lrs; paper: 7) bpc at each one's best lr: warp 1.760 ± "
                               "0.008 (seeds 42,43,44) (lr 0.001) vs hybrid 1.718 ± 0.002 (seeds 42,43,44) (lr 0.002): "
                               "lead -2.44% (95% CI -3.60%..-1.29%), band 2.73%: no advantage, the interval below the band "
                               "(one-sided p = 0.0013); warp links 72,184")


@pytest.mark.parametrize("warp, want, words", [
    # ahead, the whole interval of the lead below the band
    ((1.700, 1.705, 1.710), REPRODUCED, "lead +0.76% (95% CI +0.32%..+1.19%), band 2.73%: no advantage"),
    # a lead inside the band, its interval across it: a point estimate alone does not pass
    ((1.65, 1.70, 1.74), UNDECIDED, "lead +1.24% (95% CI -4.99%..+7.47%), band 2.73%: not shown, the interval crosses"),
    ((1.60, 1.61, 1.62), NOT_REPRODUCED, "lead +6.29% (95% CI +5.13%..+7.44%), band 2.73%: an advantage beyond the band"),
])
def test_b9_a_lead_is_judged_against_the_papers_band(warp, want, words):
    v = verdict("B9", _warp(warp))
    assert v.verdict == want and words in v.detail


def test_b9_not_at_this_scale_at_window_64_and_insufficient_below_three_seeds():
    v = verdict("B9", _warp((1.75, 1.76, 1.77), length=64))
    assert v.verdict == NOT_AT_SCALE and "window 256 (§5.1 lr grid, §9)" in v.detail
    runs = [r for r in _warp((1.75, 1.76, 1.77)) if not (r.family == "hypercube/warp" and r.seed == 44)]
    assert verdict("B9", runs).line().startswith("B9  insufficient (2 seeds) warp (hypercube/warp) has seeds 42,43")


def test_runs_without_an_lr_are_insufficient_not_a_crash():
    runs = lm("hypercube/hybrid", 0.002, (1.72, 1.72, 1.72)) + lm("hypercube/warp", None, (1.7, 1.7, 1.7))
    v = verdict("B9", runs)
    assert v.verdict == INSUFFICIENT and "without the optim.lr param" in v.detail


# ---- B10: the hierarchy ----
def _hier(lo, hi, seeds=SEEDS, difficulties=("hard",)):
    """lo / hi: {arm: accuracy per seed} at 500 and 2,500 steps; arm 'with' or 'without'."""
    out = []
    for steps, accs in ((500, lo), (2500, hi)):
        for arm, vals in accs.items():
            cell = "hypercube/hybrid" + ("/hier" if arm == "with" else "")
            out += [run(cell, task="assoc_recall", seed=s, steps=steps, layers=6, params={"task.difficulty": d},
                        metrics={"task/acc": a, "task/chance": 0.07})
                    for d in difficulties for s, a in zip(seeds, vals)]
    return verdict("B10", out)


def test_permutation_test_gives_the_papers_p_for_six_separated_seeds():
    assert permutation_p([0.99] * 6, [0.5 + 0.01 * i for i in range(6)]) == pytest.approx(1 / 924)
    assert permutation_p([0.9, 0.91, 0.92], [0.5, 0.6, 0.7]) == pytest.approx(1 / 20)
    assert permutation_p([0.5, 0.6, 0.7], [0.9, 0.91, 0.92]) == 1.0
    assert 0.3 < permutation_p([0.5, 0.9, 0.7], [0.6, 0.8, 0.7]) < 0.8


SIX = (42, 43, 44, 45, 46, 47)
LO = {"with": (0.985, 0.99, 0.99, 0.988, 0.992, 0.995), "without": (0.3, 0.5, 0.7, 0.8, 0.9, 0.95)}
HI = {"with": (0.999,) * 6, "without": (0.994, 0.995, 0.993, 0.996, 0.994, 0.994)}


def test_b10_trainability_not_capacity_with_its_weaker_bars_said():
    v = _hier(LO, HI, SIX, ("easy", "hard"))
    assert v.verdict == REPRODUCED and "p = 0.0011" in v.detail
    assert ("at 2500 steps 99.9 vs 99.4 (difference +0.47 points (95% CI +0.36 points..+0.58 points), band ±0.60 points: "
            "equivalent, the interval inside the band (TOST p = 0.01))") in v.detail
    assert v.qualifier == "p <= 0.05; paper p = 0.0011 over 6 seeds; spread direction only; paper 43x narrower"


def test_b10_tie_undecided_and_not_reproduced():
    lo3 = {"with": (0.9, 0.95, 0.99), "without": (0.5, 0.92, 0.6)}  # ahead, overlapping: not significant
    assert _hier(lo3, {"with": (0.99,) * 3, "without": (0.99,) * 3}).verdict == TIE
    lo = {"with": (0.95, 0.96, 0.97), "without": (0.3, 0.5, 0.7)}
    v = _hier(lo, {"with": (0.99,) * 3, "without": (0.90, 0.91, 0.92)})  # the hierarchy raises the asymptote
    assert v.verdict == NOT_REPRODUCED and "(95% CI +5.52 points..+10.48 points), band ±0.60 points: not level" in v.detail
    v = _hier(lo, {"with": (0.99,) * 3, "without": (0.97, 0.99, 1.0)})  # asymptote seeds 3 points apart
    assert v.verdict == UNDECIDED and "(95% CI -3.46 points..+4.13 points), band ±0.60 points: equivalence not " \
                                      "shown" in v.detail
    assert _hier({"with": (0.3, 0.4, 0.5), "without": (0.9, 0.92, 0.95)},
                 {"with": (0.99,) * 3, "without": (0.99,) * 3}).verdict == NOT_REPRODUCED  # behind at 500 steps


def test_b10_needs_two_budgets_and_both_arms():
    out = [run(c, task="assoc_recall", seed=s, steps=500, params={"task.difficulty": "hard"},
               metrics={"task/acc": 0.9}) for s in SEEDS for c in ("hypercube/hybrid/hier", "hypercube/hybrid")]
    v = verdict("B10", out)
    assert v.verdict == INSUFFICIENT and "needs >= 2 step budgets" in v.detail


# ---- B11, B12: the dynamics variants ----
def _dynamics(bpcs, partners=None, length=256, lrs=(0.002, 0.004, 0.008)):
    """bpcs: {(form, T): bpc per seed} at lr 0.002 (and worse lrs 0.004 and 0.008, to be passed over;
    lrs: those lrs only)."""
    partners = {"dyn": 1.3, "fld": 55.0, "ph": 50.0} | (partners or {})
    out = []
    for (form, steps), vals in bpcs.items():
        extra = {"attn/effective_partners": partners[form]}
        for lr in lrs:
            out += lm(f"dynamics/{form}/T{steps}", lr, tuple(v + 50 * (lr - 0.002) for v in vals), extra, length)
    return out


PAPER_D = {("dyn", 1): (1.87, 1.873, 1.876), ("dyn", 8): (1.97, 1.975, 1.98),
           ("fld", 1): (1.870, 1.8705, 1.871), ("fld", 8): (1.833, 1.835, 1.837),
           ("ph", 1): (1.8705, 1.871, 1.8715), ("ph", 8): (1.844, 1.846, 1.848)}


def test_b11_the_sign_of_more_steps_reverses_and_b12_velocity_never_helps():
    runs = _dynamics(PAPER_D)
    v = verdict("B11", runs)
    assert v.verdict == REPRODUCED, v.detail
    assert v.detail.startswith("window 256: dyn T=1 1.873 ± 0.002 (seeds 42,43,44) (lr 0.002) -> T=8 1.975")
    assert "[+0.102]" in v.detail and "partners 1.3..1.3" in v.detail
    v = verdict("B12", runs)
    assert v.verdict == REPRODUCED
    assert "T=1: ph 1.871 ± 0.000 (seeds 42,43,44) (lr 0.002) vs fld 1.870" in v.detail
    assert "T=8: ph 1.846 ± 0.002 (seeds 42,43,44) (lr 0.002) vs fld 1.835 ± 0.002 (seeds 42,43,44) (lr 0.002) " \
           "[+0.011; lead -0.60% (95% CI -0.60%..-0.60%), band 0.11%: no advantage, the interval below the band " \
           "(one-sided p = 0)]" in v.detail  # paired seeds 0.011 apart at every seed: the interval a point


def test_b11_not_reproduced_on_a_reversed_sign_or_partners_tie_on_overlap():
    assert verdict("B11", _dynamics(PAPER_D | {("dyn", 8): (1.80, 1.81, 1.82)})).verdict == NOT_REPRODUCED
    assert verdict("B11", _dynamics(PAPER_D, {"fld": 4.0})).verdict == NOT_REPRODUCED  # scaled kernel not in the tens
    assert verdict("B11", _dynamics(PAPER_D, {"dyn": 6.0})).verdict == NOT_REPRODUCED  # saturated kernel spread out
    assert verdict("B11", _dynamics(PAPER_D | {("fld", 8): (1.85, 1.87, 1.90)})).verdict == TIE


def test_b11_dyns_best_lr_moving_down_is_judged_where_the_grid_shows_it():
    """Paper B §7: the saturated kernel's best lr moves down 4-8x from T = 1 to 8. Judged by direction
    where dyn's lr grid reaches below T = 8's best; named not judged where that best is the grid's lowest."""
    v = verdict("B11", _dynamics(PAPER_D))  # both T best at 0.002, the lowest lr run: the grid cannot tell
    assert v.verdict == REPRODUCED
    assert "dyn's best lr moving down 4-8x not judged: T=8's best is the lowest lr it ran" in v.qualifier
    assert "lowest lr it ran; best of 3 lrs; paper: 5;" in v.qualifier
    v = verdict("B11", _dynamics(PAPER_D, lrs=(0.002, 0.0005)))  # two lrs: no best lr to read a move off
    assert v.verdict == REPRODUCED and "dyn's best lr moving down 4-8x not judged: needs dyn at >= 3 lrs per T, " \
                                      "has 2" in v.qualifier and "best of 2 lrs; paper: 5" in v.qualifier
    lower = lm("dynamics/dyn/T8", 0.0005, (1.96, 1.965, 1.97), {"attn/effective_partners": 1.3})
    v = verdict("B11", _dynamics(PAPER_D | {("dyn", 8): (1.99, 1.995, 2.0)}) + lower)
    assert v.verdict == REPRODUCED and "dyn's best lr 0.002 -> 0.0005 (4x down)" in v.detail
    assert "dyn's best lr by direction only; paper 4-8x down" in v.qualifier
    slower = lm("dynamics/dyn/T8", 0.0005, (2.2, 2.21, 2.22), {"attn/effective_partners": 1.3})
    v = verdict("B11", _dynamics(PAPER_D) + slower)  # T = 8's best stays at 0.002 with 0.0005 run: it did not move
    assert v.verdict == NOT_REPRODUCED and "dyn's best lr 0.002 -> 0.002" in v.detail


def test_b12_velocity_ahead_beyond_the_band_or_undecided_on_wide_seeds():
    v = verdict("B12", _dynamics(PAPER_D | {("ph", 8): (1.80, 1.81, 1.82)}))
    assert v.verdict == NOT_REPRODUCED and "T=8: ph 1.810" in v.detail and "lead +1.36% (95% CI +0.28%..+2.45%), band 0.11%: an advantage" in v.detail
    v = verdict("B12", _dynamics(PAPER_D | {("ph", 1): (1.86, 1.87, 1.88)}))  # overlap, 1.1% spread vs 0.11%
    assert v.verdict == UNDECIDED and "lead +0.03% (95% CI -1.23%..+1.29%), band 0.11%: not shown" in v.detail
    v = verdict("B12", _dynamics({k: vs[:2] for k, vs in PAPER_D.items()}))
    assert v.line().startswith("B12 insufficient (2 seeds) ")


def test_b11_b12_are_judged_at_any_window_and_say_which():
    v = verdict("B11", _dynamics(PAPER_D, length=64))
    assert v.verdict == REPRODUCED and v.detail.startswith("window 64: ")
