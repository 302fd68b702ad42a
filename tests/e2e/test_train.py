"""The training app end to end: configs compose, the metric contract lands in MLflow, resume
continues the same run, and bad input is refused before anything is logged."""
from __future__ import annotations

import math
import statistics
import sys
from itertools import product
from pathlib import Path

import pytest
import torch
from hydra.utils import instantiate

from fibexp.checks import rules
from fibexp.cli import train as cli_train
from fibexp.config import identity, schema
from fibexp.training import run as training_run
from helpers.cli import refused
from helpers.mlflow_runs import fibexp_runs, undeclared_and_missing
from helpers.sweeps import compose_train

CONF = Path(schema.CONF_DIR)
SETS = ["drama", "prose"]


def options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF / group).glob("*.yaml"))


@pytest.mark.parametrize("model, attention", list(product(options("model"), options("attention"))))
def test_every_config_composes_and_instantiates(model, attention):
    overrides = [f"model={model}", f"attention={attention}", "paths.root=."]
    if attention == "hypercube":
        overrides.append("model.n_layers=4")
    cfg = compose_train(overrides)
    rules.validate(cfg)
    with torch.device("meta"):
        lm = instantiate(cfg.model)
    assert lm.spec.kind.value == cfg.attention.kind.value
    if model == "paper60m":
        expected = 60_850_688 + (16 if cfg.attention.schedule == "learned" and cfg.attention.kind.value == "sparse" else 0)
        if cfg.attention.kind.value in ("dense", "sparse"):  # attention's own weights (paper A's 60M model)
            assert lm.n_params() == expected


@pytest.mark.parametrize("group", ["data", "trainer", "scale", "hydra/launcher"])
def test_every_other_preset_composes_and_validates(group):
    for option in options(group):
        cfg = compose_train([f"{'+' if group == 'scale' else ''}{group}={option}", "paths.root=."])
        rules.validate(cfg)
        with torch.device("meta"):
            instantiate(cfg.model)


def test_main_sweep_composes_at_the_cpu_scale_and_gives_count_ones_its_own_recipe():
    cfg = compose_train(["paths.root=."], name="main")
    assert (cfg.model.n_layers, cfg.model.seq_len, cfg.model.vocab_size, cfg.attention.window) == (5, 64, 512, 4)
    assert cfg.attention.kind.value == "dense" and cfg.trainer.max_steps == 500 and cfg.trainer.threads == 1
    ones = compose_train(["paths.root=.", "task=count_ones", "attention=hypercube", "model.n_layers=4",
                          "model.seq_len=16"], name="main")
    assert (ones.model.d_model, ones.model.vocab_size, ones.data.batch_size) == (64, 17, 32)  # n + 1 classes
    assert compose_train(["paths.root=.", "scale=smoke"], name="main").model.seq_len == 32


@pytest.mark.slow
def test_end_to_end_writes_the_metric_contract(train_cli):
    train_cli("attention=fib_stagger")
    client, found = fibexp_runs(train_cli.out)
    assert len(found) == 1
    r = found[0]
    assert r.info.status == "FINISHED" and r.info.run_name == "sparse-fib-stagger-W8-s42"
    tags = r.data.tags
    assert tags["fibexp.cell"] == "sparse/fib/stagger/W8" and len(tags["fibexp.corpus"]) == 12
    assert tags["fibexp.task"] == "lm" and "fibexp.diverged" not in tags
    assert tags["fibexp.eval_version"] == identity.EVAL_VERSION and tags["fibexp.git_sha"]
    p = r.data.params
    assert p["model.n_layers"] == "2" and p["attention.schedule"] == "stagger" and p["seed"] == "42"
    assert int(p["model.n_params"]) > 0 and "model.attention" not in p
    m = r.data.metrics
    for name in ["train/loss", "train/lr", "train/tokens_per_s", "alpha/layer_0", "alpha/layer_1"]:
        assert name in m, name
    assert m["alpha/layer_0"] == pytest.approx(0.5) and m["alpha/layer_1"] == pytest.approx(1.5)
    for s in SETS:
        assert m[f"val/ppl/{s}"] == pytest.approx(m[f"extrap/ppl_x1/{s}"])
        assert m[f"val/ppl/{s}"] == pytest.approx(math.exp(m[f"val/loss/{s}"]), rel=1e-5)
        for k in (1, 2, 4):
            assert m[f"extrap/rel_x{k}/{s}"] == pytest.approx(m[f"extrap/ppl_x{k}/{s}"] / m[f"extrap/ppl_x1/{s}"] - 1, abs=1e-5)
    for k in (2, 3, 4):  # the chain evaluations of every LM run (forced choice: 1 of 9, 1 of 2)
        assert 0 <= m[f"eval/ruler_vt/hop{k}"] <= 1 and 0 <= m[f"eval/lego/len{k}"] <= 1
        assert round(m[f"eval/ruler_vt/hop{k}"] * 120, 6).is_integer()  # 120 prompts each
    history = client.get_metric_history(r.info.run_id, "train/loss")
    assert max(h.step for h in history) == 5  # steps 0..5 of max_steps=6
    speed = client.get_metric_history(r.info.run_id, "train/tokens_per_s")
    step_ms = [2 * 32 * 1000 / h.value for h in sorted(speed, key=lambda h: h.step)]  # batch 2 x 32 tokens
    assert m["perf/step_ms"] == pytest.approx(statistics.median(step_ms[1:]), rel=1e-6)  # the first: warm-up
    assert m["perf/tokens_per_s_eval"] > 0
    # claim A9's speed by paper A's protocol (fibexp.evals.latency), the trained model on its device
    assert 0 < m["perf/fwd_tokens_per_s_min"] <= m["perf/fwd_tokens_per_s"] <= m["perf/fwd_tokens_per_s_max"]
    artifacts = {a.path for a in client.list_artifacts(r.info.run_id)}
    assert {"config.yaml", "ppl_vs_length.png"} <= artifacts
    assert undeclared_and_missing(client, r) == (set(), set())  # what the task's config declares (fibexp-plan)


@pytest.mark.slow
def test_resume_after_preemption_continues_the_same_run(train_cli, tmp_path):
    preempt = "+trainer.callbacks=[{_target_:fibexp.training.faults.Preempt,at_step:3}]"
    killed = train_cli("attention=fib_fixed", preempt, check=False)
    assert killed.returncode != 0
    client, found = fibexp_runs(train_cli.out)
    assert len(found) == 1 and found[0].info.status == "RUNNING"  # killed: nothing ended the run
    run_id = found[0].info.run_id
    train_cli("attention=fib_fixed")  # the same command again resumes from last.ckpt
    client, found = fibexp_runs(train_cli.out)
    assert [r.info.run_id for r in found] == [run_id] and found[0].info.status == "FINISHED"
    steps = sorted({h.step for h in client.get_metric_history(run_id, "train/loss")})
    assert steps == list(range(6))  # continues the step count, one history
    resumed = found[0].data.metrics

    straight_out = tmp_path / "uninterrupted"  # the same cell, never interrupted, in a fresh store
    train_cli("attention=fib_fixed", f"paths.output_dir={straight_out}")
    _, (ref,) = fibexp_runs(straight_out)
    for s in SETS:
        assert resumed[f"val/loss/{s}"] == pytest.approx(ref.data.metrics[f"val/loss/{s}"], rel=1e-6)


@pytest.mark.slow
def test_char_runs_log_bits_per_character(train_cli):
    train_cli("data=char", "data.domains=[drama,prose]", "model.vocab_size=256", "eval.aux=false")
    _, (r,) = fibexp_runs(train_cli.out)
    assert not any(k.startswith("eval/") for k in r.data.metrics)  # eval.aux=false: no RULER/LEGO
    for s in SETS:
        bpc = r.data.metrics[f"val/bpc/{s}"]
        assert 0 < bpc < 9 and bpc == pytest.approx(r.data.metrics[f"val/loss/{s}"] / math.log(2), rel=0.05)


BAD = [
    (["model.n_layer=3"], "n_layer"),
    (["attention=sparse", "attention.schedule=sometimes"], "attention.schedule"),
    (["attention=sparse", "attention.base=lucas"], "fib, pow2"),
    (["attention.kind=ring"], "dense, sparse, hypercube"),
    (["attention=sparse", "attention.window=-1"], "attention.window"),
    (["model.n_heads=4", "model.n_kv_heads=3", "model.d_model=48"], "model.n_kv_heads"),
    (["trainer.max_steps=0"], "trainer.max_steps"),
    (["attention=hypercube", "model.seq_len=48"], "model.seq_len"),
    (["logger.tracking_uri=http://127.0.0.1:9"], "logger.tracking_uri"),
    (["optim.lr=3"], "optim.lr"),
]


@pytest.mark.parametrize("overrides, key", BAD)
def test_bad_input_is_refused_before_anything_runs(overrides, key, tmp_path, cache_dir, tiny, monkeypatch, capsys):
    out = tmp_path / "outputs"
    err = refused([*tiny, f"paths.output_dir={out}", f"paths.cache_dir={cache_dir / 'never'}", *overrides],
                  monkeypatch, capsys)
    assert key in err
    assert not (cache_dir / "never").exists()  # no data was read or built
    assert not fibexp_runs(out)[1]  # nothing logged


def test_corrupt_checkpoint_is_refused(tmp_path, cache_dir, tiny, monkeypatch, capsys):
    bad = tmp_path / "broken.ckpt"
    bad.write_bytes(b"\x00not a checkpoint")
    out = tmp_path / "outputs"
    err = refused([*tiny, f"paths.output_dir={out}", f"ckpt_path={bad}", f"paths.cache_dir={cache_dir / 'never'}"],
                  monkeypatch, capsys)
    assert "ckpt_path" in err and "not a readable checkpoint" in err
    assert bad.read_bytes() == b"\x00not a checkpoint"  # left as it was
    assert not fibexp_runs(out)[1]


@pytest.mark.slow  # test-fast stays under 2 minutes (make test runs it)
def test_a_failure_while_the_run_starts_is_recorded_in_it(tmp_path, cache_dir, tiny, monkeypatch):
    """Once the run exists, whatever fails (here: logging its dataset inputs, which raced in a
    sweep) leaves it FAILED with the traceback, never RUNNING."""
    def refused(*_):
        raise RuntimeError("the store refused the dataset inputs")

    monkeypatch.setattr(training_run, "log_data_inputs", refused)
    out = tmp_path / "outputs"
    monkeypatch.setattr(sys, "argv", ["fibexp-train", *tiny, f"paths.output_dir={out}", f"paths.cache_dir={cache_dir}"])
    with pytest.raises(RuntimeError, match="refused the dataset inputs"):
        cli_train.main()
    client, (run,) = fibexp_runs(out)
    assert run.info.status == "FAILED"
    assert run.data.tags["fibexp.failure"] == "RuntimeError: the store refused the dataset inputs"
    text = Path(client.download_artifacts(run.info.run_id, "traceback.txt", str(tmp_path))).read_text()
    assert "log_data_inputs" in text


@pytest.mark.slow
def test_two_configs_that_share_a_name_are_told_apart_by_their_hash(train_cli):
    """The name lists the cell and the seed, not the learning rate: the second config's run carries
    its short config hash, and the first keeps its name. A run opened by a SLURM sweep's job is
    tagged at once with the code the job runs (the job's FIBEXP_CODE)."""
    train_cli("eval.aux=false", "trainer.max_steps=3", env={"FIBEXP_CODE": "abc123+d1ff"})
    train_cli("eval.aux=false", "trainer.max_steps=3", "optim.lr=0.002")
    _, runs = fibexp_runs(train_cli.out)
    (second,) = [r for r in runs if r.data.params["optim.lr"] == "0.002"]
    (first,) = [r for r in runs if r is not second]
    assert first.info.run_name == "dense-s42"
    assert first.data.tags["fibexp.code"] == "abc123+d1ff" and "fibexp.code" not in second.data.tags
    assert second.info.run_name == f"dense-s42-{second.data.tags['fibexp.config_hash'][:6]}"
