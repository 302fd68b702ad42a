"""Seed groups: a sweep's cells that differ only in seed, with each headline metric's mean and 95%
interval (the claims report's Student-t numbers), tagged for the UI's Group by and tabled on the
parent run."""
from __future__ import annotations

import json

import pytest
from mlflow.tracking import MlflowClient

from fibexp.report import groups
from fibexp.report.runs import RunView
from fibexp.report.stats import mean_interval

PARAMS = {"attention.base": "fib", "attention.window": "4", "attention.impl": "gather", "optim.lr": "0.001",
          "trainer.max_steps": "8", "data.tokens.drama.train": "100", "logger.run_name": "x"}


def view(cell, seed, ppl, start, **params):
    p = {**PARAMS, "seed": str(seed), "logger.run_name": f"{cell}-s{seed}", **params}
    return RunView(f"{cell}-{seed}-{start}", cell, p, {"mean_ppl_1x": ppl, "mean_ppl_4x": 2 * ppl,
                                                       "ppl_change_4x_pct": 5.0, "train/loss": 1.0},
                   {"fibexp.cell": cell}, start)


def test_groups_are_cells_that_differ_only_in_seed():
    runs = [view("dense", 42, 30.0, 1), view("dense", 43, 32.0, 2), view("dense", 44, 37.0, 3),
            view("dense", 42, 99.0, 0),  # an older run of seed 42: the newest counts
            # another attention path (the same offsets): the same group, its newest seed 42
            view("dense", 42, 50.0, 4, **{"attention.impl": "dense"}),
            view("sparse/fib/fixed/W4", 42, 40.0, 5), view("sparse/fib/fixed/W4", 43, 41.0, 6),
            view("sparse/fib/fixed/W4", 42, 45.0, 7, **{"optim.lr": "0.002"})]
    got = {g.label: g for g in groups.seed_groups(runs)}
    assert set(got) == {"dense", "sparse/fib/fixed/W4 optim.lr=0.001", "sparse/fib/fixed/W4 optim.lr=0.002"}
    dense = got["dense"]
    assert dense.seeds == [42, 43, 44]
    assert dense.stats["mean_ppl_1x"] == mean_interval([50.0, 32.0, 37.0])  # seed 42's newest run
    m, lo, hi = dense.stats["mean_ppl_1x"]
    assert lo < m < hi and m == pytest.approx(119 / 3)
    assert list(dense.stats) == ["mean_ppl_1x", "mean_ppl_4x", "ppl_change_4x_pct"]  # headline only, no train/loss
    one = got["sparse/fib/fixed/W4 optim.lr=0.002"]
    assert one.stats["mean_ppl_1x"] == (45.0, 45.0, 45.0)
    assert dense.tag() == f"dense · mean_ppl_1x {m:.4g} [{lo:.4g}, {hi:.4g}]"
    sparse = got["sparse/fib/fixed/W4 optim.lr=0.001"].stats
    assert groups.lines(got.values()) == [  # in the order they ran; a group of one seed has no interval to print
        f"  dense (3 seeds): mean_ppl_1x {m:.4g} [{lo:.4g}, {hi:.4g}]; mean_ppl_4x {2 * m:.4g} "
        f"[{2 * lo:.4g}, {2 * hi:.4g}]; ppl_change_4x_pct 5 [5, 5]",
        "  sparse/fib/fixed/W4 optim.lr=0.001 (2 seeds): "
        + "; ".join(f"{k} {a:.4g} [{b:.4g}, {c:.4g}]" for k, (a, b, c) in sparse.items())]


def test_publish_tags_the_cells_and_tables_the_groups(tmp_path, capsys):
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    client = MlflowClient(uri)
    exp = client.create_experiment("fibexp", artifact_location=(tmp_path / "art").as_uri())
    parent = client.create_run(exp, tags={"fibexp.sweep": "s1", "fibexp.sweep_parent": "true"}).info.run_id
    ids = {}
    for cell, acc in [("hypercube/rot", (0.9, 0.95, 0.97)), ("hypercube/fixed", (0.5, 0.55, 0.6))]:
        for seed, a in zip((42, 43, 44), acc):
            r = client.create_run(exp, tags={"fibexp.cell": cell, "fibexp.sweep": "s1", "fibexp.task": "count_ones",
                                             "mlflow.parentRunId": parent}).info.run_id
            for k, v in {**PARAMS, "seed": str(seed), "task.name": "count_ones"}.items():
                client.log_param(r, k, v)
            client.log_metric(r, "task/acc", a)
            client.set_terminated(r)
            ids[(cell, seed)] = r
    failed = client.create_run(exp, tags={"fibexp.cell": "hypercube/rot", "fibexp.sweep": "s1"}).info.run_id
    client.set_terminated(failed, "FAILED")

    got = groups.publish(client, exp, "s1", parent, list(ids.values()))
    rot = mean_interval([0.9, 0.95, 0.97])
    assert [g.label for g in got] == ["hypercube/rot", "hypercube/fixed"]  # in the order they ran
    tag = client.get_run(ids[("hypercube/rot", 43)]).data.tags["fibexp.seed_group"]
    assert tag == f"hypercube/rot · task/acc {rot[0]:.4g} [{rot[1]:.4g}, {rot[2]:.4g}]"
    assert "fibexp.seed_group" not in client.get_run(failed).data.tags
    table = json.loads((tmp_path / "art" / parent / "artifacts" / "seed_groups.json").read_text())
    rows = [dict(zip(table["columns"], row)) for row in table["data"]]
    row = next(r for r in rows if r["group"] == "hypercube/rot")
    assert (row["metric"], row["n"], row["seeds"]) == ("task/acc", 3, "42,43,44")
    assert (row["mean"], row["ci95_lo"], row["ci95_hi"]) == pytest.approx(rot)
    out = capsys.readouterr().out
    assert f"hypercube/rot (3 seeds): task/acc {rot[0]:.4g} [{rot[1]:.4g}, {rot[2]:.4g}]" in out
    assert f"#/experiments/{exp}/runs?workflowType=machine_learning&viewStateShareKey=fibexp-seeds" in out


def test_the_report_tables_the_seed_groups_with_the_uis_numbers():
    from fibexp.report import render

    runs = [view("dense", 42, 30.0, 1), view("dense", 43, 32.0, 2), view("dense", 44, 37.0, 3),
            view("sparse/fib/fixed/W4", 42, 40.0, 5)]  # one seed: no interval, not tabled
    text = "\n".join(render._seed_groups(runs))
    (dense,) = [g for g in groups.seed_groups(runs) if g.label == "dense"]
    m, lo, hi = mean_interval([30.0, 32.0, 37.0])
    assert dense.tag() == f"dense · mean_ppl_1x {m:.4g} [{lo:.4g}, {hi:.4g}]"  # what the UI groups on
    assert f"| dense | 42,43,44 | mean_ppl_1x | {m:.4g} [{lo:.4g}, {hi:.4g}] |" in text
    assert "sparse/fib/fixed/W4" not in text and text.startswith("## Seed groups")
    assert render._seed_groups(runs[3:]) == []
