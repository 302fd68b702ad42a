"""The per-length means every LM run logs beside its per-set numbers: what the MLflow runs table
ranks runs by, under names the report never reads as a held-out set."""
from __future__ import annotations

import math

import pytest
from omegaconf import OmegaConf

from fibexp.report.runs import RunView
from fibexp.evals.heldout import evaluation_metrics
from fibexp.tasks.lm.config import heldout_metrics


def test_means_over_the_sets_at_each_length_and_the_change_in_percent():
    nll = {("drama", 1): 3.0, ("drama", 2): 3.1, ("drama", 4): 3.5, ("prose", 1): 4.0, ("prose", 2): 4.2, ("prose", 4): 4.3}
    m = evaluation_metrics(list(nll), list(nll.values()))
    for k in (1, 2, 4):
        assert m[f"mean_ppl_{k}x"] == pytest.approx((math.exp(nll["drama", k]) + math.exp(nll["prose", k])) / 2)
    change = [math.exp(nll[s, 4] - nll[s, 1]) - 1 for s in ("drama", "prose")]
    assert m["ppl_change_4x_pct"] == pytest.approx(100 * sum(change) / 2)  # 100 x the mean of extrap/rel_x4
    assert m["ppl_change_2x_pct"] > 0 and "ppl_change_1x_pct" not in m


def test_a_set_missing_a_length_is_left_out_of_every_mean():
    """Too short for 4x windows: averaging it in at 1x only would make 4x look better than 1x."""
    nll = {("drama", 1): 3.0, ("drama", 4): 3.5, ("prose", 1): 1.0}
    m = evaluation_metrics(list(nll), list(nll.values()))
    assert m["mean_ppl_1x"] == pytest.approx(math.exp(3.0)) and m["mean_ppl_4x"] == pytest.approx(math.exp(3.5))


def test_the_report_does_not_read_a_mean_as_a_held_out_set():
    nll = {("drama", 1): 3.0, ("drama", 4): 3.5}
    view = RunView(run_id="r", cell="dense", params={}, tags={}, metrics=evaluation_metrics(list(nll), list(nll.values())))
    assert set(view.per_set("extrap/ppl_x4/")) == set(view.per_set("extrap/rel_x4/")) == {"drama"}
    assert set(view.per_set("val/ppl/")) == {"drama"}


def test_every_lm_run_declares_the_means():
    cfg = OmegaConf.create({"data": {"source": "embedded", "domains": ["drama", "prose"], "tokenizer": "bpe"},
                            "eval": {"extrapolation": [1, 2, 4]}})
    names = heldout_metrics(cfg)
    assert {"mean_ppl_1x", "mean_ppl_2x", "mean_ppl_4x", "ppl_change_2x_pct", "ppl_change_4x_pct"} <= names
