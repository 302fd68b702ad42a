"""Tracking: runs log over HTTP to `mlflow server` as a cluster's jobs do, an unreachable server is
named, DDP under SLURM is configured so that only submitit requeues, and the MLflow UI gets its
experiment kind, run descriptions, saved view and links."""
from __future__ import annotations

import json
import os
import signal
import socket

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from lightning.pytorch.plugins.environments import SLURMEnvironment
from mlflow.tracking import MlflowClient

from fibexp.config import schema
from fibexp.training import run as training_run
from fibexp.training.inputs import check_inputs
from helpers import servers

CONF = Path(schema.CONF_DIR)
SWEEPS = CONF.parent / "sweeps"


@pytest.mark.slow
def test_runs_log_over_http_to_mlflow_server(mlflow_server, train_cli):
    train_cli(f"logger.tracking_uri={mlflow_server.uri}")
    client = MlflowClient(mlflow_server.uri)
    (run,) = client.search_runs([client.get_experiment_by_name("fibexp").experiment_id])
    assert run.info.status == "FINISHED" and "val/ppl/drama" in run.data.metrics
    assert "config.yaml" in {a.path for a in client.list_artifacts(run.info.run_id)}
    assert not (train_cli.out / "mlflow.db").exists()  # nothing went to the local store


def test_unreachable_server_is_named(tmp_path):
    from fibexp.tracking import store

    with pytest.raises(store.TrackingError, match=r"logger.tracking_uri: http://127.0.0.1:9 unreachable .*; allowed: a running server"):
        store.ensure_experiment("http://127.0.0.1:9", "fibexp", tmp_path)


def test_multi_gpu_slurm_config_composes():
    """scale=paper on 4 GPUs per job: one SLURM task per device (Lightning DDP reads them)."""
    overrides = ["scale=paper", "hydra/launcher=slurm", "trainer.devices=4", "hydra.launcher.gpus_per_node=4",
                 f"hydra.searchpath=[file://{CONF}]", "paths.root=."]
    with initialize_config_dir(str(SWEEPS), version_base="1.3"):
        cfg = compose("table1", overrides=overrides, return_hydra_config=True)
    launcher = cfg.hydra.launcher
    assert launcher._target_.endswith("SlurmLauncher")
    assert launcher.tasks_per_node == 4 and launcher.gpus_per_node == 4 and launcher.max_num_timeout > 0
    assert cfg.trainer.accelerator == "gpu" and cfg.trainer.precision == "bf16-mixed"
    assert cfg.model.n_layers == 16 and cfg.trainer.max_steps == 13000


def test_lightning_does_not_requeue_under_slurm(monkeypatch, tmp_path, tiny):
    for k, v in {"SLURM_NTASKS": "1", "SLURM_JOB_NAME": "fibexp", "SLURM_JOB_ID": "7", "SLURM_PROCID": "0",
                 "SLURM_LOCALID": "0", "SLURM_NODEID": "0", "SLURM_NODELIST": "localhost"}.items():
        monkeypatch.setenv(k, v)
    with initialize_config_dir(str(CONF), version_base="1.3"):
        cfg = compose("train", overrides=[*tiny, "paths.root=.", f"paths.output_dir={tmp_path}",
                                          "trainer.accelerator=cpu"])
    run = check_inputs(cfg, tmp_path / "run", lead=False)  # a rank's: no tracking store
    trainer = training_run.build_trainer(run, logger=False)
    env = trainer._accelerator_connector.cluster_environment
    assert isinstance(env, SLURMEnvironment) and env.auto_requeue is False


@pytest.fixture(scope="module")
def ui_store(tmp_path_factory):
    """One sqlite store for the UI tests (creating one takes seconds): (uri, artifact root)."""
    root = tmp_path_factory.mktemp("ui_store")
    return f"sqlite:///{root}/m.db", root / "art"


def test_experiment_is_created_for_model_training(ui_store):
    """The UI reads `mlflow.experimentKind`; a store made before fibexp set it gets it too,
    while a kind the user chose is kept."""
    from fibexp.tracking import store

    uri, art = ui_store
    exp_id = store.ensure_experiment(uri, "fibexp-kind", art)
    client = MlflowClient(uri)
    assert client.get_experiment(exp_id).tags["mlflow.experimentKind"] == "custom_model_development"
    old = client.create_experiment("old")
    other = client.create_experiment("mine", tags={"mlflow.experimentKind": "genai_development"})
    assert store.ensure_experiment(uri, "old", art) == old
    assert store.ensure_experiment(uri, "mine", art) == other
    assert client.get_experiment(old).tags["mlflow.experimentKind"] == "custom_model_development"
    assert client.get_experiment(other).tags["mlflow.experimentKind"] == "genai_development"


def test_run_description_and_sweep_child_tags():
    from fibexp.tracking import store

    tags = store.ui_tags("sparse/fib/stagger/W8", 150, "embedded-0123456789abcdef0123", 42, sweep_child=True)
    assert tags == {"mlflow.note.content": "sparse/fib/stagger/W8 · 150 steps · seed 42 · corpus embedded-0123456",
                    "mlflow.runType": "evaluation"}
    assert store.ui_tags("hypercube/rot", 600, "c", task="count_ones") == {
        "mlflow.note.content": "count_ones hypercube/rot · 600 steps · corpus c"}


def test_saved_view_has_the_headline_columns(ui_store):
    import json

    from fibexp.tracking import store

    uri, art = ui_store
    exp_id = store.ensure_experiment(uri, "fibexp-view", art)
    client = MlflowClient(uri)
    for cell, seed, ppl in [("dense", "42", 30.0), ("sparse/fib/stagger/W8", "43", 40.0)]:
        run = client.create_run(exp_id, tags={"fibexp.cell": cell}).info.run_id
        for key, value in {"seed": seed, "model.seq_len": "256", "attention.base": "fib", "attention.window": "8",
                           "attention.schedule": "stagger", "optim.lr": "0.001"}.items():
            client.log_param(run, key, value)
        for name, value in {"val/ppl/drama": ppl, "val/loss/drama": 3.4, "extrap/rel_x2/drama": 0.1,
                            "extrap/rel_x4/drama": 0.2, "val/pos_loss/drama/bin0": 3.0, "train/loss": 3.0,
                            "mean_ppl_1x": ppl, "mean_ppl_2x": ppl, "mean_ppl_4x": ppl, "ppl_change_2x_pct": 10.0,
                            "ppl_change_4x_pct": 20.0}.items():
            client.log_metric(run, name, value)
    view = store.publish_view(client, exp_id)
    assert json.loads(client.get_experiment(exp_id).tags["mlflow.sharedViewState.fibexp"]) == view
    # the cell's identity first (logged: shown even where equal), then what else differs, then one
    # number per length, then the cell tag; the description hidden (in Columns)
    columns = ["params.`attention.base`", "params.`attention.schedule`", "params.`attention.window`",
               "params.`seed`", "metrics.`mean_ppl_1x`", "metrics.`mean_ppl_2x`", "metrics.`mean_ppl_4x`",
               "metrics.`ppl_change_4x_pct`"]
    assert view["selectedColumns"] == columns + ["tags.`fibexp.cell`"]
    # placed right after the name (Created stays pinned: it holds the nesting's expander), Duration after them
    assert view["columnOrder"] == ["attributes.`Run Name`", "runDateAndNestInfo", *columns, "duration",
                                   "tags.`fibexp.cell`"]
    assert view["columnWidths"]["attributes.`Run Name`"] >= 300  # `sparse-fib-stagger-W12-s42` uncut, nested
    # a 1,600 px window holds the name, date, cell and headline metrics: MLflow's side bar, the
    # checkbox column and the margins take 330 px (measured in chromium, tests/e2e/test_ui.py)
    assert sum(view["columnWidths"][c] for c in view["columnOrder"][:10]) <= 1600 - 330
    assert view["orderByKey"] == "attributes.start_time"  # the UI nests children only in date order
    seeds = json.loads(client.get_experiment(exp_id).tags["mlflow.sharedViewState.fibexp-seeds"])
    assert seeds["groupBy"] == {"aggregateFunction": "average",
                                "groupByKeys": [{"mode": "tag", "groupByData": "fibexp.seed_group"}]}
    # grouped: the seed column left out (an average of seeds), the name widened for the group's interval
    assert seeds["selectedColumns"] == [c for c in view["selectedColumns"] if c != "params.`seed`"]
    assert seeds["columnWidths"]["attributes.`Run Name`"] >= 400 and "groupBy" not in view
    # the compare view's charts lead with (and colour by) the ranking metric, not train/loss
    assert client.get_experiment(exp_id).tags["mlflow.experiment.primaryMetric.name"] == "mean_ppl_1x"
    assert store.ui_url(exp_id) == (f"http://127.0.0.1:5000/#/experiments/{exp_id}/runs"
                                       "?workflowType=machine_learning&viewStateShareKey=fibexp")
    assert store.ui_url(exp_id, view="fibexp-seeds").endswith("viewStateShareKey=fibexp-seeds")


def test_runs_started_at_once_share_a_fresh_store(tmp_path):
    """MLflow builds a new sqlite store's schema without a guard ("table ... already exists" for
    one of two `fibexp-train` started together, measured): each process creates it in turn."""
    import subprocess
    import sys

    uri = f"sqlite:///{tmp_path}/mlflow.db"
    code = ("import sys; from fibexp.tracking import store; "
            f"print(store.ensure_experiment({uri!r}, 'fibexp', sys.argv[1]))")
    procs = [subprocess.Popen([sys.executable, "-c", code, str(tmp_path / "art")], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(3)]
    results = [(p.wait(timeout=300), *p.communicate()) for p in procs]
    assert [rc for rc, _, _ in results] == [0] * 3, [err[-500:] for _, _, err in results]
    assert len({out for _, out, _ in results}) == 1  # one experiment, the same id for all


def test_printed_links_point_at_the_server_in_use(monkeypatch, tmp_path):
    """A run logging to a server links to that server; a local store links to $MLFLOW_HOST /
    $MLFLOW_PORT when set, else to where `make ui` serves that store (its record, while its process
    lives), else to 127.0.0.1:5000. A run's link opens its own page in the training layout."""
    import json
    import subprocess

    from fibexp.tracking import store

    for var in ("MLFLOW_PORT", "MLFLOW_HOST"):
        monkeypatch.delenv(var, raising=False)
    page = "/#/experiments/3/runs?workflowType=machine_learning&viewStateShareKey=fibexp"
    assert store.ui_url("3", store.ui_base("http://node7:5010/")) == "http://node7:5010" + page
    assert store.ui_url("3", store.ui_base("http://node7:5010/"), "ab12") == \
        "http://node7:5010/#/experiments/3/runs/ab12?workflowType=machine_learning"
    local = f"sqlite:///{tmp_path}/mlflow.db"
    assert store.ui_url("3", store.ui_base(local)) == "http://127.0.0.1:5000" + page
    (tmp_path / "mlflow-ui.json").write_text(json.dumps({"host": "0.0.0.0", "port": 5077, "pid": os.getpid()}))
    assert store.ui_base(local) == "http://127.0.0.1:5077"  # served on every interface: this host's loopback
    gone = subprocess.Popen(["true"])
    gone.wait()
    (tmp_path / "mlflow-ui.json").write_text(json.dumps({"host": "127.0.0.1", "port": 5077, "pid": gone.pid}))
    assert store.ui_base(local) == "http://127.0.0.1:5000"  # a UI that has stopped is not linked to
    (tmp_path / "mlflow-ui.json").write_text(json.dumps({"host": "127.0.0.1", "port": 5079, "pid": gone.pid,
                                                         "hostname": "login-node-of-a-shared-folder"}))
    assert store.ui_base(local) == "http://127.0.0.1:5079"  # another machine's UI: its pid means nothing here
    (tmp_path / "mlflow-ui.json").write_text("{not json")
    assert store.ui_base(local) == "http://127.0.0.1:5000"
    monkeypatch.setenv("MLFLOW_PORT", "5078")
    monkeypatch.setenv("MLFLOW_HOST", "0.0.0.0")
    assert store.ui_url("3", store.ui_base(local)) == "http://0.0.0.0:5078" + page


def test_make_ui_records_where_it_serves(tmp_path, monkeypatch):
    """`make ui MLFLOW_PORT=<port>` writes outputs/mlflow-ui.json beside the store while it serves,
    and a run on that store links there without any export."""
    import shutil
    import subprocess
    import sys
    import time
    import urllib.request

    from fibexp.tracking import store
    from helpers import servers

    if not shutil.which("make"):
        pytest.skip("needs make")
    for var in ("MLFLOW_PORT", "MLFLOW_HOST"):
        monkeypatch.delenv(var, raising=False)
    port = servers.free_port()
    root = Path(__file__).resolve().parents[2]
    bin_dir = Path(sys.executable).parent
    proc = subprocess.Popen(["make", "-s", "-C", str(tmp_path), "-f", str(root / "Makefile"), "-o", ".venv/.installed",
                             "ui", f"BIN={bin_dir}", f"MLFLOW_PORT={port}"], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2).read()
                break
            except OSError:
                time.sleep(0.5)
        record = json.loads((tmp_path / "outputs" / "mlflow-ui.json").read_text())
        assert record["port"] == port and record["host"] == "127.0.0.1" and record["hostname"] == socket.gethostname()
        assert store.ui_base(f"sqlite:///{tmp_path}/outputs/mlflow.db") == f"http://127.0.0.1:{port}"
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
    assert store.ui_base(f"sqlite:///{tmp_path}/outputs/mlflow.db") == "http://127.0.0.1:5000"
