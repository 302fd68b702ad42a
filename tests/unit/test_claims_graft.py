"""Claim B13 (paper B §8: Eq. (1) layers grafted into a pretrained model) on hand-made MLflow runs:
reproduced on the paper's own numbers, not reproduced, tie and insufficient."""
from __future__ import annotations

import pytest

from fibexp.report.claims import INSUFFICIENT, NOT_REPRODUCED, REPRODUCED, TIE, Claim, Needs
from fibexp.report.judges_graft import PAPER, judge_b13
from fibexp.report.ledger import judge
from fibexp.report.runs import comparable, load_runs
from helpers.mlflow_runs import SETS, log_run, new_experiment, sqlite_store

B13 = Claim("B13", "B", "grafted into a pretrained model, Eq. (1) is flat in k while the attention control keeps "
            "improving", Needs("graft", ("graft/eq1/k*", "graft/attention/k*")), "val/bpc/<set> (mean over sets)",
            "over the task.k both arms ran (>= min_ks), each cell at its best lr with >= 3 seeds: the control's "
            "bpc below its previous k's beyond every seed at each step up in k, the penalty (sparse - control, "
            "paired by seed) at the largest k wholly above the one at the smallest, and sparse's spread of means "
            "over k at most flat_share of the control's fall; any part the other way: not reproduced; a seed "
            "overlap and nothing against: tie", {"min_ks": 3, "flat_share": 0.5}, PAPER, judge_b13)

KS = (2, 4, 6, 8, 12)
SPARSE = (3.7041, 3.6912, 3.7008, 3.7315, 3.8444)  # paper B §8
CONTROL = (3.6665, 3.5551, 3.4751, 3.3059, 3.1000)
JITTER = (-0.002, 0.0, 0.002)  # seeds 42, 43, 44


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    return sqlite_store(tmp_path_factory, "claims_graft")


def _b13(store, sparse=SPARSE, control=CONTROL, ks=KS, seeds=(42, 43, 44), unmodified=3.7505):
    exp = new_experiment(store)
    for replace, vals in (("eq1", sparse), ("attention", control)):
        for k, b in zip(ks, vals):
            for seed, j in zip(seeds, JITTER):
                log_run(store, exp, f"graft/{replace}/k{k}", task="graft", seed=seed, length=512, steps=2000,
                        params={"data.tokenizer": "hf:Qwen/Qwen3-0.6B", "task.k": k, "task.replace": replace},
                        metrics={f"val/bpc/{s}": b + j for s in SETS})
    if unmodified is not None:
        log_run(store, exp, "graft/none", task="graft", length=512, steps=2000,
                params={"data.tokenizer": "hf:Qwen/Qwen3-0.6B", "task.k": 0}, metrics={f"val/bpc/{s}": unmodified for s in SETS})
    views, _ = load_runs(store, [exp])
    groups, _ = comparable(views)
    return judge(groups, (B13,))[0]


def test_b13_reproduced_on_the_papers_numbers(store):
    v = _b13(store)
    assert v.verdict == REPRODUCED, v.detail
    assert "k=2 3.704/3.667" in v.detail and "k=12 3.844/3.100" in v.detail and "at 4 of 4 steps" in v.detail
    assert "penalty +0.038 ± 0.000 (seeds 42,43,44) -> +0.744 ± 0.000 (seeds 42,43,44) (grows)" in v.detail
    assert "sparse spread 0.153 = 27% of the control's fall" in v.detail and "unmodified 3.751" in v.detail
    assert v.line().startswith("B13 reproduced ")


def test_b13_not_reproduced_where_sparse_improves_like_the_control_or_the_control_stops(store):
    along = tuple(c + 0.04 for c in CONTROL)  # sparse falls with the control: the penalty stays, nothing is flat
    v = _b13(store, sparse=along)
    assert v.verdict == NOT_REPRODUCED and "(seed ranges overlap)" in v.detail and "= 100% of the control's" in v.detail
    worse = (3.6665, 3.5551, 3.6, 3.3059, 3.1000)  # the control gets worse from k=4 to k=6 beyond every seed
    v = _b13(store, control=worse)
    assert v.verdict == NOT_REPRODUCED and "at 3 of 4 steps" in v.detail
    v = _b13(store, control=(3.1, 3.3, 3.4, 3.5, 3.6))  # the control rises: sparse cannot be flat beside it
    assert v.verdict == NOT_REPRODUCED and "the control does not fall" in v.detail


def test_b13_tie_where_a_step_of_the_control_lies_inside_the_seed_spread(store):
    v = _b13(store, control=(3.6665, 3.6640, 3.4751, 3.3059, 3.1000))  # k=2 -> 4: 0.0025 apart, seeds +-0.002
    assert v.verdict == TIE and "at 3 of 4 steps" in v.detail and "(grows)" in v.detail


def test_b13_insufficient_below_three_seeds_or_three_ks_or_without_the_control(store):
    assert _b13(store, seeds=(42, 43)).line().startswith("B13 insufficient (2 seeds) ")
    v = _b13(store, ks=(2, 4), sparse=SPARSE[:2], control=CONTROL[:2])
    assert v.verdict == INSUFFICIENT and "at >= 3 common task.k" in v.detail and "attention k=[2, 4]" in v.detail
    v = _b13(store, control=())
    assert v.verdict == INSUFFICIENT and "attention k=[]" in v.detail
