"""ONNX export (the `export` extra): every static schedule round-trips through onnxruntime with
standard operators, learned alpha is refused by name, and `fibexp-export` exports a trained run
that `fibexp.load_run` reads back with the checkpoint's weights."""
from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
import torch

pytest.importorskip("onnxruntime", reason="the `export` extra is not installed (pip install -e '.[export]')")
pytest.importorskip("onnxscript", reason="the `export` extra is not installed (pip install -e '.[export]')")
import onnx  # noqa: E402

from fibexp import load_run
from fibexp.deploy import onnx as export
from fibexp.errors import Refusal  # noqa: E402
from fibexp.tracking import store  # noqa: E402
from fibexp.model.lm import LM  # noqa: E402
from fibexp.model.spec import AttentionSpec  # noqa: E402

STATIC = ([dict(kind="hypercube", schedule=s, causal=c) for s in ("local", "fixed", "rot", "mixa", "dense")
           for c in (True, False)]
          + [dict(kind="sparse", schedule="stagger")]  # fixed and coprime: the same gather, other offsets
          + [dict(kind="hypercube", schedule="hybrid"), dict(kind="dense")])


def tiny_lm(**spec) -> LM:
    torch.manual_seed(0)
    return LM(n_layers=2, d_model=16, n_heads=2, n_kv_heads=1, vocab_size=64, seq_len=16,
              attention=AttentionSpec(**spec))


@pytest.mark.slow
@pytest.mark.parametrize("spec", STATIC, ids=lambda s: "-".join(str(v) for v in s.values()))
def test_static_schedules_round_trip_with_standard_operators(spec, tmp_path):
    model = tiny_lm(**spec)
    path = export.export_model(model, tmp_path / "m.onnx", seq_len=16)
    deviation, ops = export.verify(model, path, seq_len=16, vocab_size=64)
    print(f"{spec}: max abs deviation {deviation:.2e}")
    assert deviation < export.TOLERANCE
    graph = onnx.load(str(path)).graph
    assert {n.domain for n in graph.node} <= {"", "ai.onnx"}  # the standard operator set only
    if spec["kind"] == "hypercube" and spec["schedule"] != "hybrid":
        # paper B: two linear maps and a shift (a slice or an XOR gather), no attention at all
        assert not {"Softmax", "ReduceLogSumExp"} & set(ops), ops


def test_learned_alpha_is_refused_by_name(tmp_path):
    with pytest.raises(Refusal, match="^attention.schedule: learned; allowed: fixed, stagger, coprime for ONNX export"):
        export.export_model(tiny_lm(kind="sparse", schedule="learned"), tmp_path / "m.onnx", seq_len=16)
    assert not (tmp_path / "m.onnx").exists()


OVERRIDES = ["model.n_layers=2", "model.d_model=32", "model.n_heads=2", "model.n_kv_heads=1", "model.seq_len=32",
             "model.vocab_size=512", "data.domains=[drama,prose]", "data.batch_size=2", "data.eval_tokens=1024",
             "trainer.max_steps=4", "trainer.checkpoint_every_n_steps=2", "optim.warmup_steps=2",
             "trainer.threads=1", "attention=hypercube", "attention.schedule=rot"]


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory, cache_dir):
    """A tiny hypercube/rot run trained by `fibexp-train`: (run dir, tracking URI)."""
    out = tmp_path_factory.mktemp("export") / "outputs"
    cmd = [sys.executable, "-m", "fibexp.cli.train", *OVERRIDES, f"paths.output_dir={out}", f"paths.cache_dir={cache_dir}"]
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (run_dir,) = (out / "runs").iterdir()
    return run_dir, f"sqlite:///{out}/mlflow.db"


@pytest.mark.slow
def test_fibexp_export_cli_exports_a_trained_run(trained_run, tmp_path):
    run_dir, _ = trained_run
    out = tmp_path / "rot.onnx"
    proc = subprocess.run([sys.executable, "-m", "fibexp.cli.export", str(run_dir), "--out", str(out)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    print(proc.stdout)
    deviation = float(re.search(r"max abs deviation (\S+)", proc.stdout).group(1))
    assert deviation < export.TOLERANCE
    assert "ids [batch, 32] -> logits [batch, 32, 512]" in proc.stdout
    assert out.stat().st_size > 0 and "Softmax" not in proc.stdout
    assert "LeafSpec" not in proc.stderr and "torchvision" not in proc.stderr  # quiet


@pytest.mark.slow
def test_load_run_returns_the_config_and_the_checkpoint_weights(trained_run, monkeypatch):
    run_dir, uri = trained_run
    ckpt = run_dir / "checkpoints" / "last.ckpt"
    state = torch.load(ckpt, map_location="cpu", weights_only=True)["state_dict"]
    cfg, model = load_run(run_dir)
    assert cfg.attention.schedule == "rot" and cfg.model.seq_len == 32 and not model.training
    for name, tensor in model.state_dict().items():
        assert torch.equal(tensor, state[f"model.{name}"]), name
    run_id = store.MlflowClient(uri).search_runs([store.MlflowClient(uri).get_experiment_by_name(
        "fibexp").experiment_id])[0].info.run_id
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    for other in (ckpt, run_id):  # a checkpoint file, or an MLflow run id in the store
        _, again = load_run(other)
        ids = torch.randint(0, 512, (1, 32))
        with torch.no_grad():
            assert torch.equal(again(ids), model(ids))
    with pytest.raises(ValueError, match="run: 'no-such-run'; allowed: a run dir"):
        load_run("no-such-run")


DECODE = [dict(kind="hypercube", schedule="rot"), dict(kind="hypercube", schedule="mixa"),
          dict(kind="sparse", schedule="stagger", window=2), dict(kind="sparse", base="pow2", schedule="fixed", window=2)]


@pytest.mark.slow
@pytest.mark.parametrize("spec", DECODE, ids=lambda s: "-".join(str(v) for v in s.values()))
def test_decode_graph_reproduces_a_64_token_rollout(spec, tmp_path):
    model = tiny_lm(**spec).eval()
    path, names = export.export_decode(model, tmp_path / "step.onnx", max_len=64)
    deviation, ops = export.verify_decode(model, path, names, vocab_size=64, max_len=64, steps=64)
    print(f"{spec}: 64-token rollout, max abs deviation {deviation:.2e}; operators {', '.join(ops)}")
    assert deviation < export.TOLERANCE
    assert {n.domain for n in onnx.load(str(path)).graph.node} <= {"", "ai.onnx"}
    if spec["kind"] == "hypercube":  # Eq. (1): two maps and a shift register, no attention
        assert not {"Softmax", "ReduceLogSumExp"} & set(ops), ops
    # the caches come back with the shapes they went in with: constant size
    import onnxruntime as ort
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    ins = {i.name: i.shape for i in session.get_inputs()}
    outs = {o.name: o.shape for o in session.get_outputs()}
    assert all(ins[n][1:] == outs[n + "_out"][1:] for n in names)


@pytest.mark.slow
def test_a_decode_graph_for_longer_sequences_verifies_on_a_shorter_rollout(tmp_path):
    """fibexp-export --decode's default: a graph for 16x the training length (a Fibonacci layer's
    caches reach offset 377 below 512), checked on a 16-token rollout fed caches of its own size."""
    model = tiny_lm(kind="sparse", schedule="fixed", window=4).eval()
    path, names = export.export_decode(model, tmp_path / "step.onnx", max_len=512)
    deviation, _ = export.verify_decode(model, path, names, vocab_size=64, max_len=512, steps=16)
    assert deviation < export.TOLERANCE


def test_decode_graph_refuses_growing_caches_by_layer(tmp_path):
    with pytest.raises(Refusal, match=r"^--decode: layer 1: dense attention \(its KV cache grows\); allowed: layers"):
        export.export_decode(tiny_lm(kind="hypercube", schedule="hybrid"), tmp_path / "s.onnx", max_len=32)
    with pytest.raises(Refusal, match=r"^--decode: layer 0: LearnedOffsets"):
        export.export_decode(tiny_lm(kind="sparse", schedule="learned"), tmp_path / "s.onnx", max_len=32)


@pytest.mark.slow
def test_fibexp_export_decode_of_a_trained_run(trained_run, tmp_path):
    run_dir, _ = trained_run
    out = tmp_path / "step.onnx"
    proc = subprocess.run([sys.executable, "-m", "fibexp.cli.export", str(run_dir), "--decode", "--out", str(out)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    print(proc.stdout)
    assert float(re.search(r"64-token rollout: max abs deviation (\S+)", proc.stdout).group(1)) < export.TOLERANCE
    assert "caches in and out (constant size)" in proc.stdout and "ONNX operators: " in proc.stdout
