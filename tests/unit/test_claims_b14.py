"""Claim B14 (int8 degradation, paper B §8) on hand-made MLflow runs shaped as `fibexp-export --int8`
logs them: the reproduced, tie, not-reproduced and insufficient paths, and the size criterion."""
from __future__ import annotations

import pytest

from fibexp.report.claims import INSUFFICIENT, NOT_REPRODUCED, REPRODUCED, TIE
from fibexp.report.ledger import judge
from fibexp.report.runs import comparable, load_runs
from helpers.mlflow_runs import SETS, log_run, new_experiment, sqlite_store

SEEDS = (42, 43, 44)
DENSE = (0.010, 0.011, 0.012)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    return sqlite_store(tmp_path_factory, "claims_b14")


def _b14(store, cells: dict, size=1.5):
    """cells: {cell: degradation per seed (None: the run was never quantized)}; one group."""
    exp = new_experiment(store)
    for cell, vals in cells.items():
        for seed, d in zip(SEEDS, vals):
            m = {f"val/ppl/{s}": 30.0 for s in SETS}
            if d is not None:
                m |= {"int8/degradation": d, "int8/size_ratio": size}
            log_run(store, exp, cell, seed=seed, metrics=m)
    views, _ = load_runs(store, [exp])
    groups, _ = comparable(views)
    return {v.claim.id: v for v in judge(groups)}["B14"]


def test_b14_sparse_degrades_more_beyond_every_seed(store):
    v = _b14(store, {"dense": DENSE, "hypercube/rot": (0.014, 0.015, 0.016)})
    assert v.verdict == REPRODUCED
    assert v.line() == ("B14 reproduced      int8 bpc degradation: rot +1.50% ± 0.08% (seeds 42,43,44) vs dense "
                        "+1.10% ± 0.08% (seeds 42,43,44): 1.36x as much (no overlap); int8 1.50-1.50x smaller "
                        "(paper: sparse degrades 1.32x as much as unmodified, 3 seeds, no overlap; 3.2x smaller)")


def test_b14_overlap_is_a_tie_and_less_degradation_is_not_reproduced(store):
    assert _b14(store, {"dense": DENSE, "hypercube/rot": (0.011, 0.013, 0.02)}).verdict == TIE
    v = _b14(store, {"dense": DENSE, "hypercube/rot": (0.005, 0.006, 0.007)})
    assert v.verdict == NOT_REPRODUCED and "0.55x as much (less, no overlap)" in v.detail
    # every measured hypercube cell is judged: one overlapping cell makes the claim a tie
    v = _b14(store, {"dense": DENSE, "hypercube/rot": (0.014, 0.015, 0.016), "hypercube/hybrid": (0.011, 0.012, 0.013)})
    assert v.verdict == TIE and "hybrid" in v.detail and "rot" in v.detail


def test_b14_an_int8_state_no_smaller_than_float_is_not_reproduced(store):
    v = _b14(store, {"dense": DENSE, "hypercube/rot": (0.014, 0.015, 0.016)}, size=0.9)
    assert v.verdict == NOT_REPRODUCED and "int8 0.90-0.90x smaller" in v.detail


def test_b14_insufficient_without_int8_runs_or_seeds(store):
    v = _b14(store, {"dense": (None,) * 3, "hypercube/rot": (None,) * 3})
    assert v.verdict == INSUFFICIENT and "fibexp-export RUN --int8" in v.detail
    v = _b14(store, {"dense": DENSE, "hypercube/rot": (0.014, 0.015)})
    assert v.line().startswith("B14 insufficient (2 seeds) hypercube/rot with int8/degradation: paper B's bar")
    v = _b14(store, {"dense": (None,) * 3, "hypercube/rot": (0.014, 0.015, 0.016)})
    assert v.verdict == INSUFFICIENT and "dense (attention) with int8/degradation has no int8/degradation" in v.detail
