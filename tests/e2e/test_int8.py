"""`fibexp-export RUN --int8` (and `eval.int8=true` at the end of training, which measures the
same): a trained run quantized by torch's dynamic int8, its held-out ppl and
bpc before and after measured by the LM task's evaluator (the float numbers equal those the run
logged when it trained), the size ratio, all logged into the run's own MLflow run as int8/...;
the int8 state reads back to the model it measured."""
from __future__ import annotations

import math
import subprocess
import sys

import pytest
import torch

from fibexp.cli import export as cli_export
from helpers.mlflow_runs import fibexp_runs, new_experiment, run_dir_of, sqlite_store


@pytest.mark.slow
def test_export_int8_measures_and_logs_into_the_run(train_cli):
    train_cli("data.tokenizer=char", "eval.aux=false", "eval.int8=true")  # a character run logs val/bpc/<set>
    run_dir = next((train_cli.out / "runs").iterdir())
    _, (trained,) = fibexp_runs(train_cli.out)
    at_training = {k: v for k, v in trained.data.metrics.items() if k.startswith("int8/")}
    proc = subprocess.run([sys.executable, "-m", "fibexp.cli.export", str(run_dir), "--int8"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    _, (run,) = fibexp_runs(train_cli.out)
    m = run.data.metrics
    sets = sorted(k.split("/")[-1] for k in m if k.startswith("val/bpc/"))
    assert sets == ["drama", "prose"]
    for s in sets:
        # the same evaluator on the same windows: the float numbers are the run's own
        assert m[f"int8/bpc_float/{s}"] == pytest.approx(m[f"val/bpc/{s}"], rel=1e-6)
        assert m[f"int8/ppl_float/{s}"] == pytest.approx(m[f"val/ppl/{s}"], rel=1e-6)
        assert m[f"int8/ppl/{s}"] != m[f"int8/ppl_float/{s}"]  # quantized
        # bpc and ppl of one set are one measurement: bpc ratio = log-ppl ratio
        assert m[f"int8/bpc/{s}"] / m[f"int8/bpc_float/{s}"] == pytest.approx(
            math.log(m[f"int8/ppl/{s}"]) / math.log(m[f"int8/ppl_float/{s}"]), rel=1e-9)
        assert f"{m[f'int8/bpc_float/{s}']:>10.4f}{m[f'int8/bpc/{s}']:>10.4f}" in proc.stdout
    mean = lambda key: sum(m[f"{key}/{s}"] for s in sets) / len(sets)
    assert m["int8/degradation"] == pytest.approx(mean("int8/bpc") / mean("int8/bpc_float") - 1, rel=1e-9)
    assert m["int8/size_ratio"] == pytest.approx(m["int8/bytes_float"] / m["int8/bytes_int8"])
    assert m["int8/size_ratio"] > 1.2
    assert f"({m['int8/size_ratio']:.2f}x smaller)" in proc.stdout and f"{m['int8/degradation']:+.3%}" in proc.stdout
    # eval.int8=true measured the same at the end of training as fibexp-export does from the checkpoint
    assert at_training == pytest.approx({k: v for k, v in m.items() if k.startswith("int8/")}, rel=1e-6)
    saved = run_dir / "model.int8.pt"
    assert saved.stat().st_size == pytest.approx(m["int8/bytes_int8"], rel=0.02)

    from fibexp.deploy import int8_export
    from fibexp.deploy.restore import load_run
    from fibexp.model import quantize
    from fibexp.evals.heldout import heldout

    cfg, model = load_run(run_dir)
    back = quantize.load(model, saved)
    got = heldout(back, int8_export.heldout_data(cfg), int(cfg.model.seq_len), int(cfg.eval.batch_tokens))
    assert {k: got[f"val/{k.split('/', 1)[1]}"] for k in m if k.startswith(("int8/bpc/", "int8/ppl/"))} == \
        pytest.approx({k: m[k] for k in m if k.startswith(("int8/bpc/", "int8/ppl/"))}, rel=1e-9)
    fresh = load_run(run_dir)[1].state_dict()  # the float model is untouched by quantizing a copy
    assert all(torch.equal(fresh[k], v) for k, v in model.state_dict().items())


def test_export_int8_refuses_a_graph_or_folder_format(capsys):
    with pytest.raises(SystemExit) as exit_:
        cli_export.main(["some-run", "--int8", "--format", "hf"])
    assert exit_.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "fibexp-export: error: --int8: with --format hf; allowed: --int8 alone (it writes the int8 state, "
        "not a graph or a folder)")


def test_export_int8_refuses_a_run_that_has_not_finished(tmp_path, tmp_path_factory, capsys):
    client = sqlite_store(tmp_path_factory, "int8_running")
    run_id = client.create_run(new_experiment(client)).info.run_id
    client.set_terminated(run_id, "FAILED")
    capsys.readouterr()  # MLflow's own log lines of creating the store
    assert cli_export.main([str(run_dir_of(tmp_path, run_id, client.tracking_uri)), "--int8"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"fibexp-export: error: run: {run_id} (FAILED); allowed: a FINISHED run (fibexp-export --int8 reads its "
        "last checkpoint and logs into it)"]
    assert client.get_run(run_id).data.metrics == {} and not (tmp_path / "run" / "model.int8.pt").exists()
