"""task=graft end to end (paper B §8, B13) on a tiny random Qwen3 built here (Qwen3-0.6B's weights
cannot be downloaded offline): fibexp-train fine-tunes the grafted layers through Lightning and
logs val/bpc/<set> (and with eval.int8 the int8/... metrics of claim B14, as fibexp-export --int8
measures them) to MLflow, the frozen weights stay as they were, k=0 evaluates the unmodified
model; bad task keys are refused in one line, exit 2, before anything exists."""
from __future__ import annotations

import math
import sys

import pytest
import torch
from safetensors.torch import load_file

from hydra.core.hydra_config import HydraConfig

from fibexp import sweep
from fibexp.cli import export as cli_export
from fibexp.cli import train as cli_train
from fibexp.config import identity
from fibexp.cli.tiny_qwen import save_tiny_qwen3
from helpers.cli import refused
from helpers.mlflow_runs import fibexp_runs
from helpers.sweeps import expand, value

SMOKE = ["task=graft", "+scale=smoke", "trainer.max_steps=4", "trainer.threads=1"]


pytestmark = pytest.mark.usefixtures("local_store")


def _train(monkeypatch, *argv: str) -> None:
    monkeypatch.setattr(sys, "argv", ["fibexp-train", *argv])
    cli_train.main()


@pytest.mark.slow
def test_graft_trains_the_chosen_layers_and_logs_bpc_and_int8(tiny_qwen3, tmp_path, monkeypatch, capsys):
    out = tmp_path / "outputs"
    common = [*SMOKE, f"task.model={tiny_qwen3}", f"paths.output_dir={out}", f"paths.cache_dir={tmp_path / 'cache'}",
              "eval.int8=true"]
    _train(monkeypatch, *common, "task.k=2", "task.replace=eq1")
    _train(monkeypatch, *common, "task.k=0")
    _, runs = fibexp_runs(out)
    by_cell = {r.data.tags["fibexp.cell"]: r for r in runs}
    assert set(by_cell) == {"graft/eq1/k2", "graft/none"}
    eq1, none = by_cell["graft/eq1/k2"], by_cell["graft/none"]
    for r in (eq1, none):
        assert r.info.status == "FINISHED" and r.data.tags["fibexp.task"] == "graft"
        bpc = {k: v for k, v in r.data.metrics.items() if k.startswith("val/bpc/")}
        assert set(bpc) == {"val/bpc/drama", "val/bpc/prose"} and all(0 < v < 12 for v in bpc.values())
    assert (eq1.data.params["task.k"], eq1.data.params["task.replace"], none.data.params["task.k"]) == ("2", "eq1", "0")
    assert eq1.data.metrics["graft/trainable"] == 2 * 2 * 32 * 32 and none.data.metrics["graft/trainable"] == 0
    assert "train/loss" in eq1.data.metrics and "train/loss" not in none.data.metrics  # k=0: evaluated, not trained
    # bpc = nats per token / ln 2 / characters per token, at the same tokens for both runs
    ratio = {r: r.data.metrics["val/bpc/drama"] / r.data.metrics["val/loss/drama"] for r in (eq1, none)}
    assert math.isclose(ratio[eq1], ratio[none], rel_tol=1e-6)  # metrics pass through float32
    # frozen means frozen: every weight outside layers 1 and 3's mixers is the pretrained one
    ckpt = out / "runs" / eq1.data.tags["fibexp.run_dir"].rsplit("/", 1)[-1] / "checkpoints" / "last.ckpt"
    state = torch.load(ckpt, weights_only=True)["state_dict"]
    pretrained = load_file(str(tiny_qwen3 / "model.safetensors"))
    kept = {k[len("model.hf."):]: v for k, v in state.items() if ".mixer." not in k}
    assert set(pretrained) - {"lm_head.weight"} <= set(kept) | {f"model.layers.{i}.self_attn.{w}" for i in (1, 3)
                                                                   for w in ("q_proj.weight", "k_proj.weight",
                                                                             "v_proj.weight", "o_proj.weight",
                                                                             "q_norm.weight", "k_norm.weight")}
    assert all(torch.equal(v, pretrained[k]) for k, v in kept.items() if k in pretrained)
    assert {k.split(".mixer.")[0] for k in state if ".mixer." in k} == {"model.hf.model.layers.1.self_attn",
                                                                        "model.hf.model.layers.3.self_attn"}
    # claim B14 (paper B §8): both runs measured against their int8 copy, as LM runs are (tests/e2e/test_int8.py)
    for r in (eq1, none):
        m = r.data.metrics
        for s in ("drama", "prose"):
            assert m[f"int8/bpc_float/{s}"] == pytest.approx(m[f"val/bpc/{s}"], rel=1e-6)  # the run's own evaluation
            assert m[f"int8/bpc/{s}"] != m[f"int8/bpc_float/{s}"] and 0 < m[f"int8/bpc/{s}"] < 12
        mean = lambda key: (m[f"{key}/drama"] + m[f"{key}/prose"]) / 2
        assert m["int8/degradation"] == pytest.approx(mean("int8/bpc") / mean("int8/bpc_float") - 1, rel=1e-9)
        assert m["int8/size_ratio"] == pytest.approx(m["int8/bytes_float"] / m["int8/bytes_int8"]) and m["int8/size_ratio"] > 1
    # the Eq. (1) maps are quantized too: the grafted model's int8 state differs from the unmodified one's
    assert eq1.data.metrics["int8/bytes_int8"] != none.data.metrics["int8/bytes_int8"]
    # fibexp-export RUN --int8 on a graft run measures what eval.int8=true measured at the end of training
    capsys.readouterr()
    assert cli_export.main([str(ckpt.parent.parent), "--int8"]) == 0, capsys.readouterr().err
    _, runs = fibexp_runs(out)
    exported = next(r for r in runs if r.info.run_id == eq1.info.run_id).data.metrics
    assert {k: v for k, v in exported.items() if k.startswith("int8/")} == pytest.approx(
        {k: v for k, v in eq1.data.metrics.items() if k.startswith("int8/")}, rel=1e-6)


@pytest.mark.parametrize("override, line", [
    ("task.k=5", "task.k: 5; allowed: an integer in [0, 4] ({folder} has 4 attention layers)"),
    ("task.model={tmp}/missing", "task.model: {tmp}/missing (cannot be loaded offline"),
    ("task.model=nobody/no-such-model", "task.model: nobody/no-such-model (cannot be loaded offline"),
    ("task.replace=mlp", "task.replace: 'mlp'; allowed: eq1, attention"),
])
def test_bad_graft_input_is_refused_in_one_line_before_anything_exists(tiny_qwen3, tmp_path, monkeypatch, capsys,
                                                                       override, line):
    out = tmp_path / "outputs"
    override = override.replace("{tmp}", str(tmp_path))
    err = refused([*SMOKE, f"task.model={tiny_qwen3}", f"paths.output_dir={out}", f"paths.cache_dir={tmp_path / 'cache'}",
                   override], monkeypatch, capsys)
    assert err.startswith("fibexp-train: error: " + line.format(folder=tiny_qwen3, tmp=tmp_path)), err
    assert not out.exists() and not (tmp_path / "cache").exists()


@pytest.mark.slow  # composes 31 cells and builds a 12-layer model: about 30 s per scale
@pytest.mark.parametrize("scale, seq_len, steps", [("smoke", 32, 8), ("paper", 512, 2000)])
def test_the_graft_sweep_is_k_by_sparse_and_control_over_3_seeds_plus_the_unmodified_model(tmp_path, scale, seq_len,
                                                                                           steps):
    """31 cells (k = 2, 4, 6, 8, 12 x eq1 / attention x seeds 42-44, and k = 0), each passing the
    sweeper's own check, at each scale's recipe; a 12-layer model has room for k = 12."""
    model = save_tiny_qwen3(tmp_path / "tiny12", n_layers=12)
    cells, composed = expand("graft", [f"scale={scale}", f"task.model={model}", "paths.root=."])
    assert len(cells) == 31 and len({identity.config_hash(c) for c in composed}) == 31
    got = {(value(c, "task.replace"), value(c, "task.k"), value(c, "seed")) for c in cells}
    assert got == {(r, str(k), str(s)) for r in ("eq1", "attention") for k in (2, 4, 6, 8, 12) for s in (42, 43, 44)} \
        | {(None, "0", None)}
    assert {identity.cell(c) for c in composed} == {f"graft/{r}/k{k}" for r in ("eq1", "attention")
                                                    for k in (2, 4, 6, 8, 12)} | {"graft/none"}
    other = expand("graft", [f"scale={scale}", f"task.model={model}", "paths.root=.", "task.layers=[0,11]",
                             "task.schedule=local", "task.k=2"], compose_cells=True)[1]
    assert {identity.cell(c) for c in other} == {"graft/eq1/k2/L0-11/local", "graft/attention/k2/L0-11"}
    for cell, cfg in zip(cells, composed):
        assert (cfg.model.seq_len, cfg.trainer.max_steps, cfg.model.vocab_size) == (seq_len, steps, 257)
        assert cfg.data.tokenizer == f"hf:{model}" and cfg.data.source == "embedded"
    check = sweep._Checks()
    for cell, cfg in list(zip(cells, composed))[::15]:  # eq1, the control and k=0
        HydraConfig.instance().set_config(cfg)
        check(cell, cfg)
