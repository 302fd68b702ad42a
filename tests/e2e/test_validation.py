"""Every bad input is refused by the one validation pass: one line on stderr
`fibexp-train: error: <key>: <value>; allowed: ...`, exit code 2, before any data is read or any
MLflow run exists. Refusals of the config itself (values, ranges, Hydra's own composition errors)
come before Hydra creates the run dir at all; those that need the run dir or the outside world
(the checkpoint to resume, the tracking store) come from inside the job, where Hydra has already
written `.hydra/` and the job log, and nothing else.

The table runs in-process through the same entry point as the console script (`cli_train.main` with
sys.argv patched: importing fibexp.train costs ~7 s per process); three cases run the real
commands as subprocesses, in parallel, to show the in-process path is the CLI's."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir
from mlflow import MlflowClient

from fibexp.cli import prepare as cli_prepare
from fibexp.cli import train as cli_train
from fibexp.config import schema
from fibexp.training import preflight

CONF = Path(schema.CONF_DIR)
IN_JOB = "in_job"  # refused inside the job: the run dir exists, with Hydra's .hydra/ and log only

# (overrides, the key the message starts with[, IN_JOB])
BAD = [
    # model
    (["model.vocab_size=70000"], "model.vocab_size"),
    (["model.n_layers=0"], "model.n_layers"),
    (["model.n_heads=3"], "model.n_heads"),
    (["model.rope_theta=0"], "model.rope_theta"),
    (["model.n_layer=3"], "model.n_layer"),  # unknown key
    (["model.d_model=wide"], "model.d_model"),  # wrong type
    (["model=huge"], "model"),  # unknown group option
    (["model=???"], "model"),  # missing value
    # attention
    (["attention.window=0"], "attention.window"),
    (["attention=fib_fixed", "attention.impl=flex"], "attention.impl"),  # needs CUDA
    (["attention.kind=ring"], "attention.kind"),
    (["attention=fib_fixed", "attention.schedule=sometimes"], "attention.schedule"),
    (["attention=fib_fixed", "attention.causal=false"], "attention.causal"),
    (["attention=hypercube", "model.seq_len=48"], "model.seq_len"),
    (["attention=dense", "attention.hierarchy=true"], "attention.hierarchy"),  # paper B's hierarchy: cube models only
    (["attention=hypercube", "attention.schedule=dense", "attention.hierarchy=true"], "attention.hierarchy"),
    (["attention=dynamics", "attention.steps=0"], "attention.steps"),
    (["attention=dynamics", "attention.form=wave"], "attention.form"),
    (["attention=foo"], "attention"),
    # data
    (["data.mixture={drama:-1}"], "data.mixture"),
    (["data.mixture={drama:0,prose:0}"], "data.mixture"),
    (["data.mixture={code:1}"], "data.mixture"),  # not one of data.domains
    (["data.eval_tokens=-5"], "data.eval_tokens"),
    (["data.eval_tokens=100"], "data.eval_tokens"),  # no window at 4 x seq_len 32
    (["data.batch_size=0"], "data.batch_size"),
    (["data.domains=[poetry]"], "data.domains"),
    (["data.tokenizer=sentencepiece"], "data.tokenizer"),
    # optim
    (["optim.lr=2"], "optim.lr"),
    (["optim.betas=[0.9,1.0]"], "optim.betas"),
    (["optim.weight_decay=-0.1"], "optim.weight_decay"),
    (["optim.min_lr_ratio=1.5"], "optim.min_lr_ratio"),
    (["optim.warmup_steps=-1"], "optim.warmup_steps"),
    # trainer
    (["trainer.max_steps=abc"], "trainer.max_steps"),
    (["trainer.precision=fp7"], "trainer.precision"),
    (["trainer.accelerator=tpux"], "trainer.accelerator"),
    pytest.param((["trainer.accelerator=gpu"], "trainer.accelerator"),
                 marks=pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")),
    (["trainer.devices=0"], "trainer.devices"),
    (["trainer.threads=-1"], "trainer.threads"),
    (["trainer.val_every_n_steps=-1"], "trainer.val_every_n_steps"),
    (["trainer.compile=maybe"], "trainer.compile"),
    (["trainer.collective_timeout_s=0"], "trainer.collective_timeout_s"),
    # eval
    (["eval.extrapolation=[0]"], "eval.extrapolation"),
    (["eval.extrapolation=[a]"], "eval.extrapolation[0]"),
    (["eval.batch_tokens=0"], "eval.batch_tokens"),
    # task
    (["task=count_ones", "attention=fib_fixed"], "attention.kind"),
    (["task=count_ones", "task.heldout_examples=10"], "task.heldout_examples"),
    (["task=kv_retrieval", "task.distractors=0"], "task.distractors"),
    (["task=count_ones", "task.heldout_seed=-3"], "task.heldout_seed"),
    (["task=nope"], "task"),
    # seed
    (["seed=-1"], "seed"),
    (["seed=4294967296"], "seed"),
    # ckpt_path: its spelling is a config value; the file is checked in the job (it needs the run dir)
    (["ckpt_path=model.pt"], "ckpt_path"),
    (["ckpt_path={tmp}/missing.ckpt"], "ckpt_path", IN_JOB),
    # Hydra's composition errors
    (["+scale=huge"], "scale"),
    (["scale=huge"], "scale"),  # a group that is not in the defaults list
    (["model.n_layers=["], "model.n_layers"),  # does not parse
    (["attention=dense,fib_fixed"], "attention"),  # a sweep without -m
    (["+foo=1"], "foo"),
]


def _runs(out: Path) -> list:
    db = out / "mlflow.db"
    if not db.exists():
        return []
    client = MlflowClient(f"sqlite:///{db}")
    return client.search_runs([e.experiment_id for e in client.search_experiments()])


def _assert_nothing_created(out: Path, cache: Path, in_job: bool) -> None:
    assert not cache.exists()  # no data read, tokenized or cached
    assert _runs(out) == []  # no MLflow run
    runs_dir = out / "runs"
    if not in_job:
        assert not runs_dir.exists()  # Hydra never made a run dir
        return
    for run_dir in runs_dir.iterdir():
        assert {p.name for p in run_dir.iterdir()} <= {".hydra", "train.log"}, list(run_dir.iterdir())


def _one_line(err: str, prog: str, key: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"{prog}: error: {key}: "), lines[0]
    assert "allowed" in lines[0], lines[0]
    return lines[0]


@pytest.fixture(autouse=True)
def local_store(monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)  # every run would go to tmp/outputs/mlflow.db


def _cli(entry, argv, monkeypatch, capsys) -> tuple[int, str]:
    monkeypatch.setattr(sys, "argv", argv)
    with pytest.raises(SystemExit) as exit_:
        entry()
    return exit_.value.code, capsys.readouterr().err


@pytest.mark.parametrize("case", BAD, ids=lambda c: " ".join(c[0]) if isinstance(c, tuple) else None)
def test_bad_input_is_one_line_naming_the_key_before_anything_exists(case, tmp_path, tiny, monkeypatch, capsys):
    overrides, key, *where = case
    out, cache = tmp_path / "outputs", tmp_path / "cache"
    overrides = [o.replace("{tmp}", str(tmp_path)) for o in overrides]
    code, err = _cli(cli_train.main, ["fibexp-train", *tiny, f"paths.output_dir={out}", f"paths.cache_dir={cache}",
                                  *overrides], monkeypatch, capsys)
    assert code == 2, err
    _one_line(err, "fibexp-train", key)
    _assert_nothing_created(out, cache, in_job=IN_JOB in where)


def test_messages_name_the_allowed_values(tmp_path, tiny, monkeypatch, capsys):
    """What the user reads: the options of a group, an enum's members, the type, the schema's keys."""
    out = tmp_path / "outputs"
    expect = {
        "attention=foo": "attention: foo; allowed: dense, dynamics, fib_coprime, fib_fixed, fib_learned, fib_stagger, "
                         "hypercube, pow2_fixed, pow2_stagger, sparse",
        "attention.kind=ring": "attention.kind: 'ring'; allowed: dense, sparse, hypercube, dynamics",
        "trainer.max_steps=abc": "trainer.max_steps: 'abc'; allowed: an integer",
        "model.n_layer=3": "model.n_layer: 3; allowed: the keys of model: n_layers, d_model, n_heads, n_kv_heads, "
                           "vocab_size, seq_len, ffn_hidden, rope_theta, norm_eps, attention",
        "+scale=huge": "scale: huge; allowed: cpu, paper, smoke",
        "seed=-1": "seed: -1; allowed: 0 <= seed < 2**32",
        "data.mixture={drama:-1}": "data.mixture: {'drama': -1}; allowed: null, or {domain: weight} over "
                                   "data.domains=['drama', 'prose'], weights >= 0 with a positive sum",
        "model.vocab_size=70000": "model.vocab_size: 70000; allowed: <= 65536",
        "paths.cache_dir=${oc.env:FIBEXP_NO_SUCH_VAR}": "paths.cache_dir: ${oc.env:FIBEXP_NO_SUCH_VAR}; allowed: a valid "
                                                       "value (KeyError raised while resolving interpolation: "
                                                       "\"Environment variable 'FIBEXP_NO_SUCH_VAR' not found\")",
    }
    for override, message in expect.items():
        code, err = _cli(cli_train.main, ["fibexp-train", *tiny, f"paths.output_dir={out}", override], monkeypatch, capsys)
        assert code == 2 and err.strip().startswith(f"fibexp-train: error: {message}"), err


def test_a_good_config_passes_and_a_mixture_can_be_set_on_the_command_line(tiny):
    """The pass must not refuse what is valid: the default, every task's recipe, and a mixture
    override (OmegaConf could not merge it into the old Optional[dict] None node)."""
    with initialize_config_dir(str(CONF), version_base="1.3"):
        for extra in ([*tiny], [*tiny, "data.mixture={drama:2,prose:1}"], [*tiny, "attention=fib_stagger"],
                      ["+scale=smoke"], ["+scale=cpu"], ["+scale=paper"],
                      ["task=count_ones", "attention=hypercube", "model.seq_len=16", "model.n_layers=4"],
                      ["task=shift_copy", "attention=fib_learned"], ["task=kv_retrieval"]):
            cfg = compose("train", overrides=["paths.root=.", *extra], return_hydra_config=True)
            preflight.preflight(cfg, machine=False)
        assert dict(cfg.data.mixture or {}) == {} and dict(compose(
            "train", overrides=["paths.root=.", "data.mixture={drama:2,prose:1}"]).data.mixture) == {"drama": 2, "prose": 1}


def test_a_bad_cell_stops_a_multirun_before_its_first_job(tmp_path, tiny, monkeypatch, capsys):
    out, cache = tmp_path / "outputs", tmp_path / "cache"
    code, err = _cli(cli_train.main, ["fibexp-train", "-m", *tiny, f"paths.output_dir={out}", f"paths.cache_dir={cache}",
                                  "attention=fib_fixed", "attention.window=4,0"], monkeypatch, capsys)
    assert code == 2
    line = _one_line(err, "fibexp-train", "attention.window")
    assert "[cell: " in line and line.endswith(" attention=fib_fixed attention.window=0]")  # the bad one of two
    _assert_nothing_created(out, cache, in_job=False)


def test_a_multirun_refuses_an_unreachable_store_before_preparing_data(tmp_path, tiny, monkeypatch, capsys):
    out, cache = tmp_path / "outputs", tmp_path / "cache"
    code, err = _cli(cli_train.main, ["fibexp-train", "-m", *tiny, f"paths.output_dir={out}", f"paths.cache_dir={cache}",
                                  "hydra/sweeper=fibexp", "attention=dense,fib_fixed",
                                  "logger.tracking_uri=http://127.0.0.1:9"], monkeypatch, capsys)
    assert code == 2
    assert "unreachable" in _one_line(err, "fibexp-train", "logger.tracking_uri")
    _assert_nothing_created(out, cache, in_job=False)


def test_prepare_runs_the_same_pass(tmp_path, tiny, monkeypatch, capsys):
    out, cache = tmp_path / "outputs", tmp_path / "cache"
    code, err = _cli(cli_prepare.main, ["fibexp-prepare", *tiny, f"paths.output_dir={out}", f"paths.cache_dir={cache}",
                                    "data.eval_tokens=-5"], monkeypatch, capsys)
    assert code == 2
    _one_line(err, "fibexp-prepare", "data.eval_tokens")
    assert not cache.exists() and not (out / "prepare").exists()


@pytest.mark.slow  # test-fast stays under 2 minutes (make test runs it)
def test_the_real_commands_refuse_the_same_way(tmp_path, tiny):
    """`python -m fibexp.cli.train`, the console script and `python -m fibexp.cli.prepare`, in parallel."""
    script = Path(sys.executable).parent / "fibexp-train"
    commands = {
        ("fibexp-train", "model.n_layer"): [sys.executable, "-m", "fibexp.cli.train", "model.n_layer=3"],
        ("fibexp-train", "data.mixture"): [str(script) if script.exists() else sys.executable, *(
            [] if script.exists() else ["-m", "fibexp.cli.train"]), "data.mixture={drama:-1}"],
        ("fibexp-prepare", "trainer.max_steps"): [sys.executable, "-m", "fibexp.cli.prepare", "trainer.max_steps=abc"],
    }
    procs = {}
    for (prog, key), cmd in commands.items():
        out = tmp_path / key
        procs[prog, key, out] = subprocess.Popen(
            [*cmd, *tiny, f"paths.output_dir={out}", f"paths.cache_dir={out / 'cache'}"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env={k: v for k, v in os.environ.items() if k not in ("MLFLOW_TRACKING_URI", "HYDRA_FULL_ERROR")})
    for (prog, key, out), proc in procs.items():
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 2, err
        _one_line(err, prog, key)
        _assert_nothing_created(out, out / "cache", in_job=False)
