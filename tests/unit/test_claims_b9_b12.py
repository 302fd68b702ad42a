"""Claims B9-B12 (warp, the hierarchy, the dynamics variants) on hand-made MLflow runs: each one's
reproduced, tie and not-reproduced paths, and the permutation test against the paper's p."""
from __future__ import annotations

import pytest

from fibexp.report.claims import INSUFFICIENT, NOT_REPRODUCED, REPRODUCED, TIE, permutation_p
from fibexp.report.ledger import judge
from fibexp.report.runs import comparable, load_runs
from helpers.mlflow_runs import SETS, count, new_experiment, sqlite_store
from helpers.mlflow_runs import log_run

SEEDS = (42, 43, 44)
CHAR = {"data.tokenizer": "char"}


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    return sqlite_store(tmp_path_factory, "claims_b9_b12")


def verdicts(client, exp):
    views, _ = load_runs(client, [exp])
    groups, _ = comparable(views)
    return {v.claim.id: v for v in judge(groups)}


def _lm(client, exp, cell, lr, vals, extra=None):
    """One cell at one lr, a run per seed; vals: bpc per seed (None: diverged)."""
    for seed, b in zip(SEEDS, vals):
        m = {} if b is None else {f"val/bpc/{s}": b for s in SETS}
        log_run(client, exp, cell, seed=seed, lr=lr, layers=16, length=256, params=CHAR,
                metrics=m | (extra or {}), tags={"fibexp.diverged": "true"} if b is None else None)


# ---- B9: warp ----
def _warp(store, warp_best):
    exp = new_experiment(store)
    _lm(store, exp, "hypercube/hybrid", 0.002, (1.716, 1.718, 1.720))
    _lm(store, exp, "hypercube/hybrid", 0.001, (1.74, 1.75, 1.76))
    _lm(store, exp, "hypercube/warp", 0.001, warp_best, {"model/links": 72_184.0})
    _lm(store, exp, "hypercube/warp", 0.002, (1.80, 1.81, 1.82))
    return verdicts(store, exp)["B9"]


def test_b9_warp_no_advantage_over_the_hybrid(store):
    v = _warp(store, (1.75, 1.76, 1.77))  # behind, as in the paper
    assert v.verdict == REPRODUCED and "warp 1.760 ± 0.008 (seeds 42,43,44) (lr 0.001)" in v.detail
    assert "hybrid 1.718 ± 0.002 (seeds 42,43,44) (lr 0.002)" in v.detail and "warp links 72,184" in v.detail
    assert _warp(store, (1.70, 1.717, 1.73)).verdict == REPRODUCED  # overlap: no advantage either
    v = _warp(store, (1.69, 1.70, 1.71))  # ahead beyond every seed
    assert v.verdict == NOT_REPRODUCED and "ahead beyond every seed" in v.detail
    assert _warp(store, (1.75, 1.76)).line().startswith("B9  insufficient (2 seeds) ")


# ---- B10: the hierarchy ----
def _hier(store, lo, hi, seeds=SEEDS, difficulties=("hard",)):
    """lo / hi: {arm: accuracy per seed} at 500 and 2,500 steps; arm 'with' or 'without'."""
    exp = new_experiment(store)
    for steps, accs in ((500, lo), (2500, hi)):
        for arm, vals in accs.items():
            cell = "hypercube/hybrid" + ("/hier" if arm == "with" else "")
            for d in difficulties:
                for seed, a in zip(seeds, vals):
                    log_run(store, exp, cell, task="assoc_recall", seed=seed, steps=steps, layers=6,
                            params={"task.difficulty": d}, metrics={"task/acc": a, "task/chance": 0.07})
    return verdicts(store, exp)["B10"]


def test_permutation_test_gives_the_papers_p_for_six_separated_seeds():
    assert permutation_p([0.99] * 6, [0.5 + 0.01 * i for i in range(6)]) == pytest.approx(1 / 924)
    assert permutation_p([0.9, 0.91, 0.92], [0.5, 0.6, 0.7]) == pytest.approx(1 / 20)
    assert permutation_p([0.5, 0.6, 0.7], [0.9, 0.91, 0.92]) == 1.0
    assert 0.3 < permutation_p([0.5, 0.9, 0.7], [0.6, 0.8, 0.7]) < 0.8


def test_b10_trainability_not_capacity(store):
    six = (42, 43, 44, 45, 46, 47)
    lo = {"with": (0.985, 0.99, 0.99, 0.988, 0.992, 0.995), "without": (0.3, 0.5, 0.7, 0.8, 0.9, 0.95)}
    hi = {"with": (0.999,) * 6, "without": (0.994, 0.995, 0.993, 0.996, 0.994, 0.994)}
    v = _hier(store, lo, hi, six, ("easy", "hard"))
    assert v.verdict == REPRODUCED and "p = 0.0011" in v.detail and "at 2500 steps 99.9 vs 99.4" in v.detail
    # ahead with 3 overlapping seeds: not significant, a tie
    lo3 = {"with": (0.9, 0.95, 0.99), "without": (0.5, 0.92, 0.6)}
    assert _hier(store, lo3, {"with": (0.99,) * 3, "without": (0.99,) * 3}).verdict == TIE
    # the hierarchy raises the asymptote: capacity, not trainability
    v = _hier(store, {"with": (0.95, 0.96, 0.97), "without": (0.3, 0.5, 0.7)},
              {"with": (0.99,) * 3, "without": (0.90, 0.91, 0.92)})
    assert v.verdict == NOT_REPRODUCED and "asymptotes differ" in v.detail
    # behind at 500 steps
    assert _hier(store, {"with": (0.3, 0.4, 0.5), "without": (0.9, 0.92, 0.95)},
                 {"with": (0.99,) * 3, "without": (0.99,) * 3}).verdict == NOT_REPRODUCED


def test_b10_needs_two_budgets_and_both_arms(store):
    exp = new_experiment(store)
    for seed in SEEDS:
        log_run(store, exp, "hypercube/hybrid/hier", task="assoc_recall", seed=seed, steps=500,
                params={"task.difficulty": "hard"}, metrics={"task/acc": 0.9})
        log_run(store, exp, "hypercube/hybrid", task="assoc_recall", seed=seed, steps=500,
                params={"task.difficulty": "hard"}, metrics={"task/acc": 0.5})
    v = verdicts(store, exp)["B10"]
    assert v.verdict == INSUFFICIENT and "needs >= 2 step budgets" in v.detail


# ---- B11, B12: the dynamics variants ----
def _dynamics(store, bpcs, partners=None):
    """bpcs: {(form, T): bpc per seed} at lr 0.002 (and a worse lr 0.004, to be passed over)."""
    partners = {"dyn": 1.3, "fld": 55.0, "ph": 50.0} | (partners or {})
    exp = new_experiment(store)
    for (form, steps), vals in bpcs.items():
        extra = {"attn/effective_partners": partners[form]}
        _lm(store, exp, f"dynamics/{form}/T{steps}", 0.002, vals, extra)
        _lm(store, exp, f"dynamics/{form}/T{steps}", 0.004, tuple(v + 0.2 for v in vals), extra)
    return verdicts(store, exp)


PAPER_D = {("dyn", 1): (1.87, 1.873, 1.876), ("dyn", 8): (1.97, 1.975, 1.98),
           ("fld", 1): (1.868, 1.87, 1.872), ("fld", 8): (1.833, 1.835, 1.837),
           ("ph", 1): (1.868, 1.87, 1.872), ("ph", 8): (1.844, 1.846, 1.848)}


def test_b11_the_sign_of_more_steps_reverses_and_b12_velocity_never_helps(store):
    v = _dynamics(store, PAPER_D)
    assert v["B11"].verdict == REPRODUCED, v["B11"].detail
    assert "dyn T=1 1.873 ± 0.002 (seeds 42,43,44) (lr 0.002) -> T=8 1.975" in v["B11"].detail
    assert "[+0.102]" in v["B11"].detail and "partners 1.3..1.3" in v["B11"].detail
    assert v["B12"].verdict == REPRODUCED and "T=8: ph 1.846" in v["B12"].detail and "[+0.011]" in v["B12"].detail


def test_b11_not_reproduced_on_a_reversed_sign_or_partners_tie_on_overlap(store):
    same_sign = PAPER_D | {("dyn", 8): (1.80, 1.81, 1.82)}  # dyn helped by steps too
    assert _dynamics(store, same_sign)["B11"].verdict == NOT_REPRODUCED
    assert _dynamics(store, PAPER_D, {"fld": 4.0})["B11"].verdict == NOT_REPRODUCED  # scaled kernel not in the tens
    assert _dynamics(store, PAPER_D, {"dyn": 6.0})["B11"].verdict == NOT_REPRODUCED  # saturated kernel spread out
    overlap = PAPER_D | {("fld", 8): (1.85, 1.87, 1.90)}
    assert _dynamics(store, overlap)["B11"].verdict == TIE


def test_b12_not_reproduced_where_velocity_helps(store):
    v = _dynamics(store, PAPER_D | {("ph", 8): (1.80, 1.81, 1.82)})["B12"]
    assert v.verdict == NOT_REPRODUCED and "T=8: ph 1.810" in v.detail
    v = _dynamics(store, {k: vs[:2] for k, vs in PAPER_D.items()})["B12"]
    assert v.line().startswith("B12 insufficient (2 seeds) ")


def test_runs_without_an_lr_or_a_wiring_are_insufficient_not_a_crash(store):
    exp = new_experiment(store)
    _lm(store, exp, "hypercube/hybrid", 0.002, (1.72, 1.72, 1.72))
    for seed in SEEDS:  # an lr sweep's run that lost its optim.lr param
        log_run(store, exp, "hypercube/warp", seed=seed, layers=16, length=256, params=CHAR | {"optim.lr": None},
                metrics={f"val/bpc/{s}": 1.7 for s in SETS})
    v = verdicts(store, exp)["B9"]
    assert v.verdict == INSUFFICIENT and "without the optim.lr param" in v.detail
    exp = new_experiment(store)  # B3 on gray-order runs whose wiring the params do not say
    for order in ("random", "gray"):
        log_run(store, exp, "hypercube/rot", task="count_ones", layers=4, length=16, metrics=count(0.95),
                params={"attention.order": order, "attention.hybrid_layers": "[oops"})
    assert verdicts(store, exp)["B3"].verdict == NOT_REPRODUCED  # gray at 95%: no failing control
