"""`fibexp-eval`: a trained run scored by lm-evaluation-harness on the shipped last-word task and
on lm-eval's own lambada_openai read from the `datasets` cache, offline, with lm-eval's numbers
equal to fibexp's own model scoring the same examples, logged into the run's MLflow run; and its
refusals (one line, exit 2) before any compute."""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("lm_eval")

from fibexp.cli import eval as cli_eval  # noqa: E402
from fibexp.deploy import lm_eval  # noqa: E402
from helpers.mlflow_runs import fibexp_runs, new_experiment, run_dir_of, sqlite_store  # noqa: E402

LIMIT = 24


def _lastword_by_fibexp(run_dir, examples):
    """lm-eval's loglikelihood protocol with fibexp's own model and tokenizer: the target's tokens
    are those of context + target beyond the context's, the window left-truncated to the training
    length; (log-likelihood of each target, whether greedy decoding gives it)."""
    from fibexp.deploy.restore import load_run, run_tokenizer

    cfg, model = load_run(run_dir)
    tok, t = run_tokenizer(cfg), int(cfg.model.seq_len)
    lls, greedy = [], []
    for e in examples:
        ctx = tok.encode(e["context"])
        cont = tok.encode(e["context"] + " " + e["target"])[len(ctx):]
        ids = (ctx + cont)[-(t + 1):]
        with torch.no_grad():
            logp = torch.log_softmax(model(torch.tensor([ids[:-1]]))[0, -len(cont):].double(), -1)
        target = torch.tensor(cont)
        lls.append(float(logp.gather(1, target[:, None]).sum()))
        greedy.append(bool((logp.argmax(-1) == target).all()))
    return lls, greedy


def _cache_lambada(cache: Path, examples) -> None:
    """lm-eval's lambada_openai data (Hub dataset EleutherAI/lambada_openai, config default, split
    test) laid out as the `datasets` cache holds it after an online load, its texts `examples`: built
    by the json builder under the dataset's name, then moved to the Hub dataset's cache folder."""
    from datasets.packaged_modules.json.json import Json

    cache.mkdir(parents=True)
    src = cache / "lambada.jsonl"
    src.write_text("".join(json.dumps({"text": f"{e['context']} {e['target']}"}) + "\n" for e in examples),
                   encoding="utf-8")
    builder = Json(cache_dir=str(cache), dataset_name="lambada_openai", config_name="default",
                   data_files={"test": str(src)}, hash="0" * 16)
    builder.download_and_prepare()
    made = Path(builder.cache_dir)  # cache/lambada_openai/default-<files>/0.0.0/<hash>
    target = cache / "EleutherAI___lambada_openai" / "default" / "0.0.0" / made.name
    target.parent.mkdir(parents=True)
    made.rename(target)


@pytest.mark.slow
def test_fibexp_eval_scores_a_run_as_fibexp_does_and_logs_into_its_run(train_cli, tmp_path):
    """The shipped task and lm-eval's own lambada_openai (its data from the cache, the same sentences):
    both score as fibexp's model does."""
    train_cli("eval.aux=false")
    run_dir = next((train_cli.out / "runs").iterdir())
    examples = [json.loads(line) for line in lm_eval.LASTWORD.read_text(encoding="utf-8").splitlines()[:LIMIT]]
    _cache_lambada(tmp_path / "datasets", examples)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "TRANSFORMERS_"))}
    env["HF_DATASETS_CACHE"] = str(tmp_path / "datasets")
    proc = subprocess.run([sys.executable, "-m", "fibexp.cli.eval", str(run_dir), "--limit", str(LIMIT),
                           "--tasks", "fibexp_lastword,lambada_openai"],
                          capture_output=True, text=True, env=env, stdin=subprocess.DEVNULL, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    _, runs = fibexp_runs(train_cli.out)
    (run,) = runs
    m = {k: v for k, v in run.data.metrics.items() if k.startswith("lm_eval/")}
    for task in ("fibexp_lastword", "lambada_openai"):
        assert {f"lm_eval/{task}/acc", f"lm_eval/{task}/perplexity"} <= set(m)
    for k, v in m.items():  # printed as logged
        assert f"{k:<44} {v:.4f}" in proc.stdout
    assert f"logged {len(m)} lm_eval/... metrics into run {run.info.run_id}" in proc.stdout
    assert json.loads(run.data.tags["fibexp.lm_eval"]) == {"tasks": ["fibexp_lastword", "lambada_openai"],
                                                            "limit": LIMIT}
    lls, greedy = _lastword_by_fibexp(run_dir, examples)
    for task in ("fibexp_lastword", "lambada_openai"):
        assert m[f"lm_eval/{task}/perplexity"] == pytest.approx(math.exp(-sum(lls) / LIMIT), rel=1e-4)
        assert m[f"lm_eval/{task}/acc"] == sum(greedy) / LIMIT
    assert not any(p.name.startswith("fibexp-eval-") for p in run_dir.iterdir())  # the export was temporary


def _refused(argv, capsys) -> str:
    assert cli_eval.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


def test_fibexp_eval_refuses_a_run_without_checkpoint(tmp_path, capsys):
    run_dir = run_dir_of(tmp_path, ckpt=False)
    assert _refused([str(run_dir)], capsys) == (
        f"fibexp-eval: error: run: {run_dir} (no checkpoint at {run_dir}/checkpoints/last.ckpt); "
        "allowed: a run that has reached its first checkpoint")


@pytest.mark.slow
def test_fibexp_eval_refuses_an_unknown_task_naming_the_local_ones(tmp_path, capsys):
    run_dir = run_dir_of(tmp_path)  # an empty checkpoint: any compute would fail on it
    assert _refused([str(run_dir), "--tasks", "fibexp_lastword,no_such_task"], capsys) == (
        "fibexp-eval: error: --tasks: no_such_task; allowed: an lm-eval task: the local ones, fibexp_lastword "
        "(fibexp/deploy/lm_eval_tasks and --include-path dirs), or one of lm-eval's own (`lm-eval ls tasks`)")
    assert not (tmp_path / "none.db").exists() and sorted(p.name for p in run_dir.iterdir()) == [
        "checkpoints", "mlflow_run.json"]


@pytest.mark.slow
def test_fibexp_eval_refuses_an_lm_eval_task_whose_data_is_not_cached(tmp_path, tmp_path_factory, capsys, monkeypatch):
    import datasets.config

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "empty")
    client = sqlite_store(tmp_path_factory, "eval_uncached")
    run_id = client.create_run(new_experiment(client)).info.run_id
    client.set_terminated(run_id, "FINISHED")  # a run fit to score: only the task's data is missing
    run_dir = run_dir_of(tmp_path, run_id, client.tracking_uri)
    capsys.readouterr()
    assert _refused([str(run_dir), "--tasks", "fibexp_lastword,hellaswag"], capsys) == (
        f"fibexp-eval: error: --tasks: hellaswag; allowed: a task whose data is in the datasets cache "
        f"({tmp_path / 'empty'}): Couldn't reach 'Rowan/hellaswag' on the Hub (OfflineModeIsEnabled); run it "
        "once where the Hub is reachable")
    assert sorted(p.name for p in run_dir.iterdir()) == ["checkpoints", "mlflow_run.json"]


def test_fibexp_eval_refuses_a_run_that_has_not_finished(tmp_path, tmp_path_factory, capsys):
    client = sqlite_store(tmp_path_factory, "eval_running")
    run_id = client.create_run(new_experiment(client)).info.run_id  # RUNNING: its checkpoint may not be final
    run_dir = run_dir_of(tmp_path, run_id, client.tracking_uri)
    capsys.readouterr()  # MLflow's own log lines of creating the store
    assert _refused([str(run_dir)], capsys) == (
        f"fibexp-eval: error: run: {run_id} (RUNNING); allowed: a FINISHED run (fibexp-eval reads its last "
        "checkpoint and logs into it)")
    assert client.get_run(run_id).data.metrics == {}
