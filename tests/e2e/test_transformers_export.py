"""Trained runs as `transformers` models: `fibexp-export --format hf` writes a save_pretrained
folder that AutoModelForCausalLM / AutoTokenizer load offline, with fibexp's logits, and
`.generate()` continues text as fibexp's own decoder does."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

pytest.importorskip("transformers")

from fibexp.deploy import decode  # noqa: E402
from fibexp.deploy.transformers import save_model  # noqa: E402
from fibexp.model.lm import LM  # noqa: E402

OFFLINE = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
CELLS = [dict(kind="dense"), dict(kind="sparse", schedule="stagger", window=2),
         dict(kind="sparse", schedule="learned", window=2), dict(kind="sparse", base="pow2", schedule="coprime", window=1),
         dict(kind="hypercube", schedule="rot"), dict(kind="hypercube", schedule="hybrid"),
         dict(kind="hypercube", schedule="dense"), dict(kind="hypercube", schedule="warp")]


def _load(folder):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(str(folder), trust_remote_code=True).eval()


@pytest.mark.slow  # test-fast stays under 2 minutes (make test runs it)
def test_every_mixer_round_trips_with_equal_logits(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    ids = torch.randint(0, 61, (2, 40), generator=torch.Generator().manual_seed(0))
    for i, attention in enumerate(CELLS):
        node = dict(n_layers=5, d_model=32, n_heads=4, n_kv_heads=2, vocab_size=61, seq_len=16, attention=attention)
        torch.manual_seed(i)
        model = LM(**node).eval()
        folder = save_model(node, model, tmp_path / f"m{i}", eos_id=None)  # no early stop
        loaded = _load(folder)
        with torch.no_grad():
            assert torch.equal(loaded(ids).logits, model(ids)), attention
        out = loaded.generate(ids[:1, :4], max_new_tokens=12, do_sample=False)
        assert torch.equal(out, decode.generate(model, ids[:1, :4], 12)), attention


@pytest.mark.slow
def test_fibexp_export_hf_of_a_trained_run(train_cli, tmp_path):
    train_cli("attention=hypercube", "attention.schedule=hybrid", "eval.aux=false")
    run_dir = next((train_cli.out / "runs").iterdir())
    folder = tmp_path / "hf"
    cli = [sys.executable, "-m", "fibexp.cli.export", str(run_dir), "--format", "hf", "--out", str(folder)]
    proc = subprocess.run(cli, capture_output=True, text=True, env=OFFLINE, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "max abs deviation 0.00e+00" in proc.stdout
    assert {"config.json", "model.safetensors", "modeling_fibexp.py", "tokenizer.json",
            "tokenizer_config.json"} <= {p.name for p in folder.iterdir()}
    assert json.loads((folder / "config.json").read_text())["auto_map"]["AutoModelForCausalLM"] == \
        "modeling_fibexp.FibexpForCausalLM"
    # a fresh process, offline, as a user would load it; stdin closed (AutoTokenizer asks about
    # the config's code when it can)
    script = f"""
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from fibexp.deploy.restore import load_run, run_tokenizer
tok = AutoTokenizer.from_pretrained({str(folder)!r})
model = AutoModelForCausalLM.from_pretrained({str(folder)!r}, trust_remote_code=True).eval()
cfg, ours = load_run({str(run_dir)!r})
text = "The king said to his daughter"
ids = tok(text, return_tensors="pt").input_ids
assert ids[0].tolist() == run_tokenizer(cfg).encode(text)
with torch.no_grad():
    assert torch.equal(model(ids).logits, ours(ids))
out = model.generate(ids, max_new_tokens=8, min_new_tokens=8, do_sample=False)
print("OK", out.shape[1] - ids.shape[1], repr(tok.decode(out[0])))
"""
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=OFFLINE,
                          stdin=subprocess.DEVNULL, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "OK 8 'The king said to his daughter" in proc.stdout


@pytest.mark.slow  # test-fast stays under 2 minutes (make test runs it)
def test_export_hf_refuses_a_run_dir_without_checkpoint(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "mlflow_run.json").write_text(json.dumps({"run_id": "x", "tracking_uri": "sqlite:///none.db"}))
    proc = subprocess.run([sys.executable, "-m", "fibexp.cli.export", str(run_dir), "--format", "hf"],
                          capture_output=True, text=True, env=OFFLINE, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"fibexp-export: error: run: {run_dir} (no checkpoint at {run_dir}/checkpoints/last.ckpt); "
        "allowed: a run that has reached its first checkpoint"]
