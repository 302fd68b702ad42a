"""Claim B13 (paper B §8: Eq. (1) layers grafted into a pretrained model) on hand-made runs:
reproduced on the paper's own numbers, not reproduced, tie, insufficient, and not at this scale on
any model but the paper's pretrained Qwen3-0.6B."""
from __future__ import annotations

from fibexp.report.claims import INSUFFICIENT, NOT_AT_SCALE, NOT_REPRODUCED, REPRODUCED, TIE
from fibexp.report.published import GRAFT, GRAFT_UNMODIFIED
from helpers.claim_runs import bpc, run, verdict

KS = tuple(GRAFT)
SPARSE = tuple(s for s, _ in GRAFT.values())  # paper B §8
CONTROL = tuple(c for _, c in GRAFT.values())
JITTER = (-0.002, 0.0, 0.002)  # seeds 42, 43, 44
QWEN = "Qwen/Qwen3-0.6B"


def graft(cell, k, seed=42, model=QWEN, metrics=None, replace="eq1"):
    return run(cell, task="graft", seed=seed, length=512, steps=2000, lr=2e-4, metrics=metrics,
               params={"data.tokenizer": f"hf:{model}", "task.model": model, "task.k": k, "task.replace": replace})


def _b13(sparse=SPARSE, control=CONTROL, ks=KS, seeds=(42, 43, 44), model=QWEN):
    runs = [graft(f"graft/{replace}/k{k}", k, seed, model, bpc(b + j), replace)
            for replace, vals in (("eq1", sparse), ("attention", control)) for k, b in zip(ks, vals)
            for seed, j in zip(seeds, JITTER)]
    return verdict("B13", runs + [graft("graft/none", 0, model=model, metrics=bpc(GRAFT_UNMODIFIED))])


def test_b13_reproduced_on_the_papers_numbers():
    v = _b13()
    assert v.verdict == REPRODUCED and v.qualifier == "flat = at most half the control's fall; paper 27%; paper's rule: ranges disjoint; p = 0.10, weak", v.detail
    assert "k=2 3.704/3.667" in v.detail and "k=12 3.844/3.100" in v.detail and "at 4 of 4 steps" in v.detail
    assert "penalty +0.038 ± 0.000 (seeds 42,43,44) -> +0.744 ± 0.000 (seeds 42,43,44) (grows)" in v.detail
    assert "sparse spread 0.153 = 27% of the control's fall" in v.detail and "unmodified 3.751" in v.detail


def test_b13_not_reproduced_where_sparse_improves_like_the_control_or_the_control_stops():
    along = tuple(c + 0.04 for c in CONTROL)  # sparse falls with the control: the penalty stays, nothing is flat
    v = _b13(sparse=along)
    assert v.verdict == NOT_REPRODUCED and "(seed ranges overlap)" in v.detail and "= 100% of the control's" in v.detail
    v = _b13(control=(3.6665, 3.5551, 3.6, 3.3059, 3.1000))  # worse from k=4 to k=6 beyond every seed
    assert v.verdict == NOT_REPRODUCED and "at 3 of 4 steps" in v.detail
    v = _b13(control=(3.1, 3.3, 3.4, 3.5, 3.6))  # the control rises: sparse cannot be flat beside it
    assert v.verdict == NOT_REPRODUCED and "the control does not fall" in v.detail


def test_b13_tie_where_a_step_of_the_control_lies_inside_the_seed_spread():
    v = _b13(control=(3.6665, 3.6640, 3.4751, 3.3059, 3.1000))  # k=2 -> 4: 0.0025 apart, seeds +-0.002
    assert v.verdict == TIE and "at 3 of 4 steps" in v.detail and "(grows)" in v.detail


def test_b13_fewer_ks_than_the_paper_are_said_and_too_few_are_insufficient():
    v = _b13(ks=(2, 4, 6), sparse=SPARSE[:3], control=CONTROL[:3])
    assert v.verdict == REPRODUCED and v.qualifier == ("at k=2,4,6 only; paper: k=2,4,6,8,12; flat = at most half the control's "
                                                  "fall; paper 27%; paper's rule: ranges disjoint; p = 0.10, weak")
    assert _b13(seeds=(42, 43)).line().startswith("B13 insufficient (2 seeds) ")
    v = _b13(ks=(2, 4), sparse=SPARSE[:2], control=CONTROL[:2])
    assert v.verdict == INSUFFICIENT and "at >= 3 common task.k" in v.detail and "attention k=[2, 4]" in v.detail


def test_b13_on_a_random_tiny_model_is_not_at_this_scale():
    v = _b13(model="outputs/tiny-qwen3")
    assert v.verdict == NOT_AT_SCALE
    assert v.detail.startswith("grafted into tiny-qwen3 (task.model); paper B §8 grafts into pretrained Qwen3-0.6B")
