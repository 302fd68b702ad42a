"""Paper B's new sweeps expand to their cells (test_sweep validates every cell), and at scale=paper the
window-64 sweep's models have paper B's link counts."""
from __future__ import annotations

import pytest
import torch
from hydra.utils import instantiate

from fibexp.config import identity
from fibexp.model import census
from helpers.sweeps import expand, value

PAPER_W64_LINKS = {"dense": 24_960, "hypercube/local": 1_524, "hypercube/rot": 1_152, "hypercube/hybrid": 5_306,
                   "hypercube/mixa": 1_338, "hypercube/dense": 24_960}


@pytest.mark.parametrize("name, n", [("hypercube_w64", 18), ("hierarchy", 108), ("dynamics", 90)])
def test_paper_b_sweeps_expand(name, n):
    cells, _ = expand(name, ["scale=smoke"], compose_cells=False)
    assert len(cells) == n and len({tuple(c) for c in cells}) == n


@pytest.mark.slow  # test-fast stays under 2 minutes (make test runs it)
def test_window_64_sweep_builds_paper_bs_models():
    cells, composed = expand("hypercube_w64", ["scale=paper", "paths.root=."])
    seen = {}
    for cfg in composed:
        assert (cfg.model.n_layers, cfg.model.d_model, cfg.model.seq_len, cfg.optim.lr) == (12, 128, 64, 0.002)
        with torch.device("meta"):
            seen[identity.cell(cfg)] = census.links(instantiate(cfg.model))
    assert seen == PAPER_W64_LINKS


@pytest.mark.slow  # test-fast stays under 2 minutes (make test runs it)
def test_hierarchy_cells_are_distinct_runs():
    cells, composed = expand("hierarchy", ["scale=smoke"])
    assert {identity.cell(c) for c in composed} == {"hypercube/hybrid", "hypercube/hybrid/hier"}
    assert len({identity.config_hash(c) for c in composed}) == 108
    assert {value(c, "trainer.max_steps") for c in cells} == {"500", "1000", "2500"}



@pytest.mark.slow
def test_new_cells_train_and_log_what_the_claims_need(tmp_path, monkeypatch):
    """A dynamics LM and a hierarchical warp model on assoc_recall train through `fibexp-train`
    and log the census (model/links, model/weights; effective partners before and after)."""
    import sys

    from fibexp.cli import train as cli_train
    from helpers.mlflow_runs import fibexp_runs

    out = tmp_path / "outputs"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{out}/mlflow.db")
    for name, overrides in [("dyn", ["+scale=smoke", "attention=dynamics", "attention.form=ph", "attention.steps=2"]),
                            ("hier", ["task=assoc_recall", "+scale=smoke", "attention=hypercube",
                                      "attention.schedule=warp", "attention.hierarchy=true", "model.n_layers=4",
                                      "trainer.max_steps=8"])]:
        monkeypatch.setattr(sys, "argv", ["fibexp-train", *overrides, "trainer.threads=1", f"paths.output_dir={out}",
                                          "hydra.run.dir=" + str(out / "runs" / name)])
        cli_train.main()
    _, found = fibexp_runs(out)
    m = {r.data.tags["fibexp.cell"]: r.data.metrics for r in found}
    dyn, hier = m["dynamics/ph/T2"], m["hypercube/warp/hier"]
    assert dyn["attn/effective_partners"] >= 1 and dyn["attn/effective_partners_init"] >= 1
    assert dyn["model/links"] == 2 * 32 * 33 // 2  # smoke: 2 layers at T = 32, every causal pair
    assert 0 <= hier["task/acc"] <= 1 and hier["task/chance"] > 0
    assert hier["model/links"] > 0 and hier["model/weights"] > 0
