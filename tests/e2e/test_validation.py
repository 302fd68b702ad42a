"""Every bad input is refused by the one validation pass: one line on stderr
`fibexp-train: error: <key>: <value>; allowed: ...`, exit code 2, before Hydra creates the run dir,
any data is read or any MLflow run exists: the folder the run would write to is byte for byte what
it was before (no run dir, no `.hydra/`, no mlflow.db, no cache). That includes what needs the
outside world (the tracking store, the checkpoint to resume, data and tokenizer files): the pass
sees the config before Hydra creates anything, and computes the run dir from it.

The table's cases are given against the outputs of a FINISHED run of the table's own config (a
case that leaves the identity alone, a tracking URI or a hydra.* path, names that very run's
folder): its folder, cache and store must keep every byte and every modification time.

The table runs in-process through the same entry point as the console script (`cli_train.main`
with sys.argv patched); a few cases run the real commands as subprocesses, to show the
in-process path is the CLI's and that no refusal imports torch, Lightning or MLflow."""
from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir

from fibexp.bench import commands as bench_commands
from fibexp.checks import callback, preflight
from fibexp.cli import prepare as cli_prepare
from fibexp.cli import train as cli_train
from fibexp.config import schema

CONF = Path(schema.CONF_DIR)
NO_GPU = pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")


def _inputs(root: Path) -> None:
    """The files the table's file cases name ({in}/...)."""
    d = root / "in"
    d.mkdir()
    (d / "empty.jsonl").write_bytes(b"")
    (d / "binary.jsonl").write_bytes(b"PK\x03\x04\x00\x00\x08\x00" + bytes(range(256)))  # a zip named .jsonl
    (d / "latin1.txt").write_bytes("caf\u00e9 au lait\n".encode("latin-1"))
    (d / "late.jsonl").write_bytes(b'{"text": "fine"}\n' * 2000 + b'{"text": "caf\xe9"}\n')  # bad byte at 34,000
    (d / "words.jsonl").write_text("just some words, no JSON\n", encoding="utf-8")
    (d / "empty.json").write_bytes(b"")
    (d / "notjson.json").write_text("not a tokenizer\n", encoding="utf-8")
    (d / "nomodel.json").write_text('{"version": "1.0"}', encoding="utf-8")
    (d / "empty.ckpt").write_bytes(b"")
    (d / "text.ckpt").write_text("a checkpoint, honestly\n", encoding="utf-8")
    (d / "afile").write_text("a file where a folder should be\n", encoding="utf-8")
    out = root / "outputs"
    out.mkdir()
    (out / "mlflow.db").write_bytes(b"this is no sqlite file, and fibexp must leave it so\n")


DEEP_MB = 70  # a data file larger than any head-and-tail shortcut would read whole


def _deep(path: Path) -> None:
    """{deep}: JSON Lines of DEEP_MB MB with one bad byte at its middle."""
    line = b'{"text": "' + b"fine words " * 9 + b'"}\n'
    half = line * (DEEP_MB * 2**19 // len(line))
    path.write_bytes(half + b'{"text": "caf\xe9"}\n' + half)


HF = ["data=hf"]
BAD_STORE = "{out}/mlflow.db is garbage"  # marker: the case runs against outputs/ holding a garbage mlflow.db
FRESH = "no finished run"  # marker: the case runs against an empty outputs/ (the finished run would let it pass)
CPU = "trainer.accelerator=cpu"  # a memory case is about host memory (a GPU's is torch's to tell)
LONG = "x" * 100_000

# (overrides, the key the line names[, BAD_STORE | FRESH | {environment variable: value}])
BAD = [
    # model
    (["model.vocab_size=70000"], "model.vocab_size"),
    (["model.n_layers=0"], "model.n_layers"),
    (["model.n_heads=3"], "model.n_heads"),
    (["model.rope_theta=0"], "model.rope_theta"),
    (["model.n_layer=3"], "model.n_layer"),  # unknown key
    (["model.d_model=wide"], "model.d_model"),  # wrong type
    (["model.n_heads=four"], "model.n_heads"),
    (["model=huge"], "model"),  # unknown group option
    (["model=???"], "model"),  # missing value
    (["model=model_schema"], "model"),  # the schema is no option
    (["model.rope_theta=inf"], "model.rope_theta"),
    (["model.norm_eps=nan"], "model.norm_eps"),
    (["model._target_=builtins.dict"], "model._target_"),  # never called
    (["model._target_=fibexp.model.spec.AttentionSpec"], "model._target_"),
    (["data=char", "model.vocab_size=20"], "model.vocab_size"),  # the char vocabulary needs 89 ids here
    # attention
    (["attention.window=-3"], "attention.window"),
    (["attention=fib_fixed", "attention.impl=flex"], "attention.impl"),  # needs CUDA
    (["attention.kind=ring"], "attention.kind"),
    (["attention=fib_fixed", "attention.schedule=sometimes"], "attention.schedule"),
    (["attention=fib_fixed", "attention.causal=false"], "attention.causal"),
    (["attention.causal=sometimes"], "attention.causal"),
    (["attention=hypercube", "model.seq_len=48"], "model.seq_len"),
    (["attention=dense", "attention.hierarchy=true"], "attention.hierarchy"),  # paper B's hierarchy: cube models only
    (["attention=hypercube", "attention.schedule=dense", "attention.hierarchy=true"], "attention.hierarchy"),
    (["attention=dynamics", "attention.steps=0"], "attention.steps"),
    (["attention=dynamics", "attention.form=wave"], "attention.form"),
    (["attention=dynamics", "attention.tau=inf"], "attention.tau"),
    (["attention.hybrid_layers=[a]"], "attention.hybrid_layers[0]"),
    (["attention=foo"], "attention"),
    (["attention=attention_schema"], "attention"),  # it trained dense, silently
    (["attention._target_=os.system"], "attention._target_"),
    # data
    (["data.mixture={drama:-1}"], "data.mixture"),
    (["data.mixture={drama:0,prose:0}"], "data.mixture"),
    (["data.mixture={code:1}"], "data.mixture"),  # not one of data.domains
    (["data.mixture={drama:inf}"], "data.mixture.drama"),
    (["data.mixture={drama:nan,prose:1}"], "data.mixture.drama"),
    (["data.mixture={drama:1,_target_:os.system}"], "data.mixture._target_"),
    (["data.eval_tokens=-5"], "data.eval_tokens"),
    (["data.eval_tokens=100"], "data.eval_tokens"),  # no window at 4 x seq_len 32
    (["data.batch_size=0"], "data.batch_size"),
    (["data.batch_size=big"], "data.batch_size"),
    (["data.domains=[poetry]"], "data.domains"),
    (["data.tokenizer=sentencepiece"], "data.tokenizer"),
    (["data=embedded_schema"], "data"),
    # data files and tokenizer files (data=hf reads local files through the json/text builders)
    ([*HF, "data.sources.0.data_files={in}/empty.jsonl"], "data.sources[0].data_files"),
    ([*HF, "data.sources.0.data_files={in}/binary.jsonl"], "data.sources[0].data_files"),
    ([*HF, "data.sources.0.data_files={in}/late.jsonl"], "data.sources[0].data_files"),  # invalid UTF-8, deep in
    ([*HF, "data.sources.0.data_files={in}/words.jsonl"], "data.sources[0].data_files"),
    ([*HF, "data.sources.0.path=text", "data.sources.0.data_files={in}/latin1.txt"], "data.sources[0].data_files"),
    ([*HF, "data.sources.0.path=text", "data.sources.0.data_files={in}/latin1.txt",
      "+data.sources.0.config_kwargs.encoding=klingon"], "data.sources[0].config_kwargs.encoding"),
    ([*HF, "data.sources.0.data_files={in}/nofile.jsonl"], "data.sources[0].data_files"),
    ([*HF, "data.sources.0.data_files={in}/*.parquet"], "data.sources[0].data_files"),  # the glob matches nothing
    ([*HF, "data.sources.0.data_files={in}/words.jsonl", "data.sources.0.weight=inf"], "data.sources[0].weight"),
    ([*HF, "data.sources.0.data_files={in}/words.jsonl", "data.sources.0.weight=heavy"], "data.sources[0].weight"),
    (["data.tokenizer=hf:{in}/empty.json"], "data.tokenizer"),
    (["data.tokenizer=hf:{in}/binary.jsonl"], "data.tokenizer"),
    (["data.tokenizer=hf:{in}/notjson.json"], "data.tokenizer"),
    (["data.tokenizer=hf:{in}/nomodel.json"], "data.tokenizer"),
    # optim
    (["optim.lr=2"], "optim.lr"),
    (["optim.lr=nan"], "optim.lr"),
    (["optim.lr=fast"], "optim.lr"),
    (["optim.betas=[0.9,1.0]"], "optim.betas"),
    (["optim.betas=[0.9,nan]"], "optim.betas[1]"),
    (["optim.weight_decay=-0.1"], "optim.weight_decay"),
    (["optim.weight_decay=inf"], "optim.weight_decay"),
    (["optim.min_lr_ratio=1.5"], "optim.min_lr_ratio"),
    (["optim.warmup_steps=-1"], "optim.warmup_steps"),
    (["optim.grad_clip=inf"], "optim.grad_clip"),
    # trainer
    (["trainer.max_steps=abc"], "trainer.max_steps"),
    (["trainer.precision=fp7"], "trainer.precision"),
    (["trainer.accelerator=tpux"], "trainer.accelerator"),
    pytest.param((["trainer.accelerator=gpu"], "trainer.accelerator"), marks=NO_GPU),
    (["trainer.devices=0"], "trainer.devices"),
    (["trainer.devices=two"], "trainer.devices"),  # was `invalid literal for int()`, naming no key
    (["trainer.accelerator=cpu", "trainer.devices=[0,1]"], "trainer.devices"),  # indices are for GPUs
    (["trainer.strategy=nonsense"], "trainer.strategy"),
    (["trainer.devices=2", "trainer.strategy=ddp_spawn"], "trainer.strategy"),
    (["trainer.threads=-1"], "trainer.threads"),
    (["trainer.threads=many"], "trainer.threads"),
    (["trainer.val_every_n_steps=-1"], "trainer.val_every_n_steps"),
    (["trainer.compile=maybe"], "trainer.compile"),
    (["trainer.collective_timeout_s=0"], "trainer.collective_timeout_s"),
    (["trainer.collective_timeout_s=inf"], "trainer.collective_timeout_s"),
    (["trainer=cpu_schema"], "trainer"),
    # trainer.callbacks: Lightning's and fibexp's classes, nothing else is ever called
    (["+trainer.callbacks=[{_target_:os.remove,path:/tmp/x}]"], "trainer.callbacks[0]._target_"),  # Hydra blocks it
    (["+trainer.callbacks=[{_target_:builtins.print}]"], "trainer.callbacks[0]._target_"),
    (["+trainer.callbacks=[{_target_:lightning.pytorch.callbacks.LambdaCallback}]"], "trainer.callbacks[0]._target_"),
    (["+trainer.callbacks=[{_target_:fibexp.training.faults.Nope}]"], "trainer.callbacks[0]._target_"),
    (["+trainer.callbacks=[{_target_:fibexp.training.faults.Sleep,seconds:{_target_:time.sleep,secs:9}}]"],
     "trainer.callbacks[0].seconds._target_"),
    (["+trainer.callbacks=[{at_step:3}]"], "trainer.callbacks"),
    # eval
    (["eval.extrapolation=[0]"], "eval.extrapolation"),
    (["eval.extrapolation=[a]"], "eval.extrapolation[0]"),
    (["eval.batch_tokens=0"], "eval.batch_tokens"),
    (["eval.int8=perhaps"], "eval.int8"),
    # task
    (["task=count_ones", "attention=fib_fixed"], "attention.kind"),
    (["task=count_ones", "task.heldout_examples=10"], "task.heldout_examples"),
    (["task=kv_retrieval", "task.distractors=0"], "task.distractors"),
    (["task=count_ones", "task.heldout_seed=-3"], "task.heldout_seed"),
    (["task=nope"], "task"),
    (["task=task_lm_schema"], "task"),
    # seed, names and paths a run derives folders from
    (["seed=-1"], "seed"),
    (["seed=4294967296"], "seed"),
    (["seed=abc"], "seed"),
    (["logger.run_name=../../../escaped"], "logger.run_name"),  # made its run folder three levels above outputs/
    (["logger.run_name=a/b"], "logger.run_name"),
    (["logger.run_name=.."], "logger.run_name"),
    (["hydra.run.dir={in}/../elsewhere"], "hydra.run.dir"),  # a run dir outside paths.output_dir
    (["hydra.run.dir={out}/../elsewhere"], "hydra.run.dir"),
    # a multirun's folders: the basic sweeper put its cells at hydra.sweep.dir/../../runs, wherever that is
    (["-m", "seed=1", "hydra/sweeper=basic", "hydra.sweep.dir={in}/../elsewhere"], "hydra.sweep.dir"),
    (["-m", "seed=1", "hydra/sweeper=basic", "hydra.sweep.dir={out}/mine"], "hydra.sweep.subdir"),
    (["-m", "seed=1", "hydra/sweeper=basic", "hydra.sweep.subdir=../../../x"], "hydra.sweep.subdir"),
    (["-m", "seed=1", "hydra.sweep.dir={in}/../elsewhere"], "hydra.sweep.dir"),
    (["-m", "seed=1", "hydra.sweep.subdir=../../../x"], "hydra.sweep.subdir"),
    (["-m", "seed=42,-1"], "seed"),  # a cell that differs from a checked one only in its seed
    (["-m", "seed=range(0)"], "hydra.sweeper.grids"),  # a grid without a cell
    (["-m", "seed=range(0)", "hydra/sweeper=basic"], "hydra.sweeper.grids"),  # exited 0 having run nothing
    (["logger.experiment=../x"], "logger.experiment"),
    (["logger.outage_wait_s=nan"], "logger.outage_wait_s"),
    (["paths.output_dir={in}/afile/outputs"], "paths.output_dir"),
    (["paths.cache_dir={in}/afile/cache"], "paths.cache_dir"),
    # the tracking store: a server that does not answer, a sqlite file that is not one (left untouched)
    (["logger.tracking_uri=http://127.0.0.1:9"], "logger.tracking_uri"),
    ([], "paths.output_dir", BAD_STORE),
    (["logger.tracking_uri=sqlite:///{out}/mlflow.db"], "logger.tracking_uri", BAD_STORE),
    # ckpt_path: its spelling, and the file (refused before the run dir exists, not inside the job)
    (["ckpt_path=model.pt"], "ckpt_path"),
    (["ckpt_path={in}/missing.ckpt"], "ckpt_path"),
    (["ckpt_path={in}/empty.ckpt"], "ckpt_path"),
    (["ckpt_path={in}/text.ckpt"], "ckpt_path"),
    (["ckpt_path=last"], "ckpt_path", FRESH),  # no checkpoint to resume in the run dir
    # tracking URIs MLflow does not serve: a plain word or path and file: are its file store (MLflow 3
    # refuses it at the first call), ftp: no store at all; each used to rewrite the finished run's .hydra/
    (["logger.tracking_uri=banana"], "logger.tracking_uri"),
    (["logger.tracking_uri=ftp://example.invalid/x"], "logger.tracking_uri"),
    (["logger.tracking_uri=file://{out}/mlruns"], "logger.tracking_uri"),
    (["logger.tracking_uri=file:{out}/mlruns"], "logger.tracking_uri"),
    (["logger.tracking_uri={out}/mlruns"], "logger.tracking_uri"),
    (["logger.tracking_uri=./mlruns"], "logger.tracking_uri"),
    (["logger.tracking_uri=sqlite://"], "logger.tracking_uri"),  # in memory: the record is gone at exit
    (["logger.tracking_uri=sqlite:mlflow.db"], "logger.tracking_uri"),
    (["logger.tracking_uri=http://"], "logger.tracking_uri"),
    (["logger.tracking_uri=s3://bucket/x"], "logger.tracking_uri"),
    (["-m", "seed=1,2", "logger.tracking_uri=banana"], "logger.tracking_uri"),
    ([], "MLFLOW_TRACKING_URI", {"MLFLOW_TRACKING_URI": "banana"}),  # the shell's store, as bad
    ([], "MLFLOW_TRACKING_URI", {"MLFLOW_TRACKING_URI": "file:///tmp/mlruns"}),
    (["-m", "seed=1,2"], "MLFLOW_TRACKING_URI", {"MLFLOW_TRACKING_URI": "ftp://example.invalid/x"}),
    # every path Hydra writes stays in the run's tree
    (["hydra.output_subdir=../../../../x"], "hydra.output_subdir"),
    (["hydra.output_subdir=.."], "hydra.output_subdir"),
    (["hydra.output_subdir={in}/../saved"], "hydra.output_subdir"),
    (["hydra.job.name=../../log"], "hydra.job.name"),
    (["hydra.job.name={in}/../log"], "hydra.job.name"),
    (["hydra.job.name=.hidden"], "hydra.job.name"),
    (["hydra.job_logging.handlers.file.filename={in}/../job.log"], "hydra.job_logging.handlers.file.filename"),
    (["-m", "seed=1", "hydra/sweeper=basic", "hydra.output_subdir=../../../../x"], "hydra.output_subdir"),
    (["-m", "seed=1", "hydra.output_subdir=../../../../x"], "hydra.output_subdir"),
    (["-m", "seed=1", "hydra.job.name=../../log"], "hydra.job.name"),
    (["-m", "seed=1", "hydra/launcher=slurm", "hydra.launcher.submitit_folder={in}/../submitit/%j"],
     "hydra.launcher.submitit_folder"),
    # sizes this machine (or the SLURM job's mem_gb) cannot hold: refused from the estimated step, by key
    (["data.batch_size=1000000000", CPU], "data.batch_size"),
    (["data.batch_size=10000000", CPU], "data.batch_size"),
    (["model.seq_len=100000000", "data.eval_tokens=0", CPU], "model.seq_len"),
    (["model.d_model=1000000", CPU], "model.d_model"),
    (["model.n_layers=1000000000", CPU], "model.n_layers"),
    (["trainer.memory_limit_gb=0.000001", CPU], "model.n_layers"),  # the run's own limit, below its estimate
    (["model.d_model=4096", "trainer.memory_limit_gb=0.5", CPU], "model.d_model"),
    (["trainer.memory_limit_gb=0"], "trainer.memory_limit_gb"),
    (["trainer.memory_limit_gb=-4"], "trainer.memory_limit_gb"),
    (["trainer.memory_limit_gb=lots"], "trainer.memory_limit_gb"),
    (["+trainer.callbacks=[{_target_:fibexp.training.memory_guard.Nope}]"], "trainer.callbacks[0]._target_"),
    (["-m", "seed=1,2", "data.batch_size=1000000000", CPU], "data.batch_size"),
    (["-m", "seed=1", "hydra/launcher=slurm", "hydra.launcher.mem_gb=1", "data.batch_size=100000", CPU],
     "data.batch_size"),
    # accelerators torch cannot use here
    pytest.param((["trainer.accelerator=tpu"], "trainer.accelerator"), marks=pytest.mark.skipif(
        importlib.util.find_spec("torch_xla") is not None, reason="torch_xla is installed")),
    pytest.param((["trainer.accelerator=mps"], "trainer.accelerator"), marks=pytest.mark.skipif(
        sys.platform == "darwin", reason="macOS has MPS")),
    # output folders on kernel filesystems (root writes there, and the run fails later)
    (["paths.output_dir=/proc/fibexp"], "paths.output_dir"),
    (["paths.output_dir=/sys/fibexp"], "paths.output_dir"),
    (["paths.cache_dir=/proc/fibexp-cache"], "paths.cache_dir"),
    (["paths.output_dir=/proc/self/fibexp"], "paths.output_dir"),
    # integers beyond 64 bits
    (["trainer.max_steps=99999999999999999999999"], "trainer.max_steps"),
    (["data.batch_size=-99999999999999999999"], "data.batch_size"),
    (["model.n_layers=9223372036854775808"], "model.n_layers"),
    (["attention=fib_fixed", "attention.window=99999999999999999999"], "attention.window"),
    (["seed=18446744073709551616"], "seed"),
    (["trainer.checkpoint_every_n_steps=1e30"], "trainer.checkpoint_every_n_steps"),
    # keys the chosen attention kind does not read (they changed nothing but the config hash)
    (["attention=dense", "attention.base=pow2", "attention.schedule=stagger"], "attention.base"),
    (["attention=dense", "attention.window=4"], "attention.window"),
    (["attention=dense", "attention.order=gray"], "attention.order"),
    (["attention=dense", "attention.alpha_init=stagger"], "attention.alpha_init"),
    (["attention=fib_fixed", "attention.order=gray"], "attention.order"),
    (["attention=fib_fixed", "attention.form=fld"], "attention.form"),
    (["attention=fib_fixed", "attention.hybrid_layers=[1]"], "attention.hybrid_layers"),
    (["attention=hypercube", "attention.base=pow2"], "attention.base"),
    (["attention=hypercube", "attention.window=4"], "attention.window"),
    (["attention=dynamics", "attention.schedule=rot"], "attention.schedule"),
    (["attention=dynamics", "attention.window=3"], "attention.window"),
    # a warmup past training, a sequence too short to hold a target or the window
    (["optim.warmup_steps=100"], "optim.warmup_steps"),
    (["optim.warmup_steps=7"], "optim.warmup_steps"),
    (["trainer.max_steps=1"], "optim.warmup_steps"),
    (["model.seq_len=1"], "model.seq_len"),
    (["model.seq_len=0"], "model.seq_len"),
    (["attention=fib_fixed", "attention.window=32"], "model.seq_len"),
    (["attention=fib_fixed", "attention.window=100"], "model.seq_len"),
    # grids larger than sweep.max_cells: one line before a cell is listed or validated
    (["-m", "seed=range(0,100000)"], "sweep.max_cells"),
    (["-m", "seed=range(0,100000)", "hydra/sweeper=basic"], "sweep.max_cells"),
    (["-m", "seed=range(0,200)", "sweep.max_cells=100"], "sweep.max_cells"),
    (["-m", "attention=dense,fib_fixed", "seed=range(0,6000)"], "sweep.max_cells"),
    (["-m", "seed=range(0,10**12)"], "seed"),  # Hydra's grammar has no expressions
    (["-m", "seed=range(0,1000000000000)"], "sweep.max_cells"),
    (["-m", "seed=1", "sweep.max_cells=0"], "sweep.max_cells"),
    # data files, checked whole and as files before any cache exists
    ([*HF, "data.sources.0.data_files={deep}"], "data.sources[0].data_files"),  # a bad byte at 35 MB of 70
    ([*HF, "data.sources.0.data_files={in}"], "data.sources[0].data_files"),  # a folder
    ([*HF, "data.sources.0.data_files={in}/"], "data.sources[0].data_files"),
    # names: control characters, over-long, outside what MLflow and a filesystem take (said in one line)
    (["logger.run_name=résumé"], "logger.run_name"),
    (["logger.run_name=a\nb"], "logger.run_name"),
    (["logger.run_name=a\tb"], "logger.run_name"),
    (["logger.run_name=a\x1bb"], "logger.run_name"),
    (["logger.run_name=" + "x" * 201], "logger.run_name"),
    (["logger.run_name=" + LONG], "logger.run_name"),
    (["logger.run_name=a b"], "logger.run_name"),
    (["logger.run_name=a:b"], "logger.run_name"),
    (["logger.run_name=-a"], "logger.run_name"),
    (["logger.run_name=."], "logger.run_name"),
    (["logger.experiment=" + LONG], "logger.experiment"),
    (["logger.experiment=café"], "logger.experiment"),
    (["logger.experiment=a\nb"], "logger.experiment"),
    (["logger.experiment=a/b"], "logger.experiment"),
    (["logger.experiment="], "logger.experiment"),
    # Hydra's composition errors
    (["+scale=huge"], "scale"),
    (["scale=huge"], "scale"),  # a group that is not in the defaults list
    (["model.n_layers=["], "model.n_layers"),  # does not parse
    (["attention=dense,fib_fixed"], "attention"),  # a sweep without -m
    (["+foo=1"], "foo"),
]


def _tree(root: Path) -> dict[str, tuple | None]:
    """Every path under root, with each file's digest and modification time: what a refusal must
    leave as it was (a rewrite with the same bytes changes the time)."""
    return {str(p.relative_to(root)): ((hashlib.sha1(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns)
                                       if p.is_file() else None) for p in sorted(root.rglob("*"))}


def _one_line(err: str, prog: str, key: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"{prog}: error: {key}: "), lines[0]
    assert "; allowed: " in lines[0], lines[0]
    return lines[0]


pytestmark = pytest.mark.usefixtures("local_store")  # every run would go to tmp/outputs/mlflow.db


def _cli(entry, argv, monkeypatch, capsys) -> tuple[int, str]:
    monkeypatch.setattr(sys, "argv", argv)
    with pytest.raises(SystemExit) as exit_:
        entry()
    return exit_.value.code, capsys.readouterr().err


def test_the_table_is_large():
    assert len(BAD) >= 150


BASE = ["eval.aux=false"]  # the table's config, with TINY: that of the finished run


_FINISHED: dict[str, Path] = {}


@pytest.fixture
def finished(tiny, tmp_path_factory) -> Path:
    """A FINISHED run of the table's config (its folder, cache and store under the returned root),
    trained once per test process as a user would, by the real command (not module-scoped: that
    would put the whole table on one xdist worker)."""
    if "root" not in _FINISHED:
        root = tmp_path_factory.mktemp("finished")
        env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "HYDRA_"))}
        proc = subprocess.run([sys.executable, "-m", "fibexp.cli.train", *tiny, *BASE,
                               f"paths.output_dir={root / 'outputs'}", f"paths.cache_dir={root / 'cache'}"],
                              capture_output=True, text=True, env=env, timeout=600)
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert len(list((root / "outputs" / "runs").glob("*/.hydra/config.yaml"))) == 1
        _FINISHED["root"] = root
    return _FINISHED["root"]


def _id(case) -> str | None:
    if not isinstance(case, tuple):
        return None
    env = " ".join(f"{k}={v}" for e in case[2:] if isinstance(e, dict) for k, v in e.items())
    return " ".join([env, *case[0]]).strip()[:80] or "garbage mlflow.db"


@pytest.mark.parametrize("case", BAD, ids=_id)
def test_bad_input_is_one_line_naming_the_key_before_anything_exists(case, tmp_path, tiny, finished, monkeypatch, capsys):
    overrides, key, *setup = case
    _inputs(tmp_path)
    out, cache = finished / "outputs", finished / "cache"
    if BAD_STORE in setup or FRESH in setup:
        out, cache = tmp_path / "outputs", tmp_path / "cache"
        if BAD_STORE not in setup:
            shutil.rmtree(out)
    for env in (e for e in setup if isinstance(e, dict)):
        for name, value in env.items():
            monkeypatch.setenv(name, value)
    if any("{deep}" in o for o in overrides):
        _deep(tmp_path / "in" / "deep.jsonl")
    before, record = _tree(tmp_path), _tree(finished)
    overrides = [o.replace("{in}", str(tmp_path / "in")).replace("{out}", str(out))
                 .replace("{deep}", str(tmp_path / "in" / "deep.jsonl")) for o in overrides]
    multirun = ["-m"] if "-m" in overrides else []  # a flag before the overrides, as typed
    code, err = _cli(cli_train.main, ["fibexp-train", *multirun, *tiny, *BASE, f"paths.output_dir={out}",
                                      f"paths.cache_dir={cache}", *(o for o in overrides if o != "-m")],
                     monkeypatch, capsys)
    assert code == 2, err
    _one_line(err, "fibexp-train", key)
    assert len(err) < 1500, err  # a long value is shown by its head and its length
    assert _tree(tmp_path) == before  # no run dir, .hydra/, log, store, cache; the garbage mlflow.db untouched
    assert _tree(finished) == record  # the finished run's folder, cache and store rows: every byte, every time


def test_a_rerun_of_an_existing_run_leaves_its_saved_config_as_it_was(finished, tiny):
    """Hydra saves .hydra/ into the run dir before the job starts: for a run dir that already holds
    one (a finished or killed run of this config), the pass turns that off, so no later launch,
    whatever it carries (another tracking store, other threads), rewrites a run's record."""
    with initialize_config_dir(str(CONF), version_base="1.3"):
        cfg = compose("train", overrides=[*tiny, *BASE, f"paths.output_dir={finished / 'outputs'}",
                                          f"paths.cache_dir={finished / 'cache'}", "trainer.threads=2"],
                      return_hydra_config=True)
        fresh = compose("train", overrides=[*tiny, *BASE, f"paths.output_dir={finished / 'outputs'}",
                                            f"paths.cache_dir={finished / 'cache'}", "seed=7"], return_hydra_config=True)
    callback.Preflight(machine=False).on_run_start(cfg)
    assert cfg.hydra.output_subdir is None
    assert len(list((finished / "outputs" / "runs").glob("*/.hydra/config.yaml"))) == 1
    callback.Preflight(machine=False).on_run_start(fresh)  # a new run dir: Hydra saves its config as usual
    assert fresh.hydra.output_subdir == ".hydra"


def test_messages_name_the_allowed_values(tmp_path, tiny, monkeypatch, capsys):
    """What the user reads: the options of a group, an enum's members, the type, the schema's keys."""
    out = tmp_path / "outputs"
    expect = {
        "attention=foo": "attention: foo; allowed: dense, dynamics, fib_coprime, fib_fixed, fib_learned, fib_stagger, "
                         "hypercube, pow2_fixed, pow2_stagger, sparse",
        "attention=attention_schema": "attention: attention_schema; allowed: dense, dynamics, fib_coprime, fib_fixed, "
                                      "fib_learned, fib_stagger, hypercube, pow2_fixed, pow2_stagger, sparse",
        "attention.kind=ring": "attention.kind: 'ring'; allowed: dense, sparse, hypercube, dynamics",
        "attention.window=-3": "attention.window: -3; allowed: an integer >= 0",
        "trainer.max_steps=abc": "trainer.max_steps: 'abc'; allowed: an integer",
        "trainer.devices=two": "trainer.devices: two; allowed: auto, -1 (all), a count >= 1, or device indices",
        "model.n_layer=3": "model.n_layer: 3; allowed: the keys of model: n_layers, d_model, n_heads, n_kv_heads, "
                           "vocab_size, seq_len, ffn_hidden, rope_theta, norm_eps, attention",
        "+scale=huge": "scale: huge; allowed: cpu, paper, smoke",
        "seed=-1": "seed: -1; allowed: 0 <= seed < 2**32",
        "data.mixture={drama:-1}": "data.mixture: {'drama': -1}; allowed: null, or {domain: weight} over "
                                   "data.domains=['drama', 'prose'], weights >= 0 with a positive sum",
        "data.mixture={drama:inf}": "data.mixture.drama: inf; allowed: a finite number",
        "model.vocab_size=70000": "model.vocab_size: 70000; allowed: <= 65536",
        "model._target_=builtins.dict": "model._target_: builtins.dict; allowed: fibexp.model.lm.LM (fibexp's own class)",
        "logger.run_name=../../../escaped": "logger.run_name: ../../../escaped; allowed: null (named after the cell), or "
                                           "a name of letters, digits and _ . + = -",
        "paths.cache_dir=${oc.env:FIBEXP_NO_SUCH_VAR}": "paths.cache_dir: ${oc.env:FIBEXP_NO_SUCH_VAR}; allowed: a valid "
                                                       "value (KeyError raised while resolving interpolation: "
                                                       "\"Environment variable 'FIBEXP_NO_SUCH_VAR' not found\")",
    }
    for override, message in expect.items():
        code, err = _cli(cli_train.main, ["fibexp-train", *tiny, f"paths.output_dir={out}", override], monkeypatch, capsys)
        assert code == 2 and err.strip().startswith(f"fibexp-train: error: {message}"), err
    code, err = _cli(cli_train.main, ["fibexp-train", *tiny, f"paths.output_dir={out}", "data=char",
                                      "model.vocab_size=20"], monkeypatch, capsys)
    assert err.strip() == ("fibexp-train: error: model.vocab_size: 20; allowed: >= 89 with data.tokenizer=char on "
                           "data.domains=['drama', 'prose'] (the separator, the unknown character and each character "
                           "of their training text)")
    assert not out.exists()


def test_a_good_config_passes_and_a_mixture_can_be_set_on_the_command_line(tiny):
    """The pass must not refuse what is valid: the default, every task's recipe, a mixture
    override (OmegaConf could not merge it into the old Optional[dict] None node), the char
    vocabulary at its exact size, window 0 (the token itself plus the rungs) and fibexp's and
    Lightning's callbacks."""
    with initialize_config_dir(str(CONF), version_base="1.3"):
        for extra in ([*tiny], [*tiny, "data.mixture={drama:2,prose:1}"], [*tiny, "attention=fib_stagger"],
                      [*tiny, "data=char", "model.vocab_size=89"], [*tiny, "attention=fib_fixed", "attention.window=0"],
                      [*tiny, "+trainer.callbacks=[{_target_:fibexp.training.faults.Sleep,seconds:1},"
                              "{_target_:lightning.pytorch.callbacks.LearningRateMonitor}]"],
                      ["+scale=smoke"], ["+scale=cpu"], ["+scale=paper"],
                      ["task=count_ones", "attention=hypercube", "model.seq_len=16", "model.n_layers=4"],
                      ["task=shift_copy", "attention=fib_learned"], ["task=kv_retrieval"]):
            cfg = compose("train", overrides=["paths.root=.", *extra], return_hydra_config=True)
            preflight.preflight(cfg, machine=False)
        assert dict(cfg.data.mixture or {}) == {} and dict(compose(
            "train", overrides=["paths.root=.", "data.mixture={drama:2,prose:1}"]).data.mixture) == {"drama": 2, "prose": 1}


def test_the_char_rule_is_the_tokenizer_s_own_count(tmp_path, tiny):
    """model.vocab_size's char rule (from data/embedded/CHARS.json) says exactly what the char
    tokenizer built from the corpus needs: 88 is refused, 89 trains the vocabulary of 89 ids."""
    from fibexp.data.corpus import EmbeddedCorpus
    from fibexp.data.spec import char_vocab
    from fibexp.data.tokenizer import load_tokenizer

    tok = load_tokenizer("char", EmbeddedCorpus(domains=("drama", "prose")), 89, tmp_path)
    assert tok.n_vocab == char_vocab(["drama", "prose"]) == 89
    with pytest.raises(ValueError, match="model.vocab_size: 88; allowed: >= 89"):
        load_tokenizer("char", EmbeddedCorpus(domains=("drama", "prose")), 88, tmp_path)


def test_a_bad_cell_stops_a_multirun_before_its_first_job(tmp_path, tiny, monkeypatch, capsys):
    out, cache = tmp_path / "outputs", tmp_path / "cache"
    code, err = _cli(cli_train.main, ["fibexp-train", "-m", *tiny, f"paths.output_dir={out}", f"paths.cache_dir={cache}",
                                      "attention=fib_fixed", "attention.window=4,-1"], monkeypatch, capsys)
    assert code == 2
    line = _one_line(err, "fibexp-train", "attention.window")
    assert "[cell: " in line and line.endswith(" attention=fib_fixed attention.window=-1]")  # the bad one of two
    assert not tmp_path.joinpath("outputs").exists() and not cache.exists()


def test_a_multirun_refuses_an_unreachable_store_before_preparing_data(tmp_path, tiny, monkeypatch, capsys):
    out, cache = tmp_path / "outputs", tmp_path / "cache"
    code, err = _cli(cli_train.main, ["fibexp-train", "-m", *tiny, f"paths.output_dir={out}", f"paths.cache_dir={cache}",
                                      "hydra/sweeper=fibexp", "attention=dense,fib_fixed",
                                      "logger.tracking_uri=http://127.0.0.1:9"], monkeypatch, capsys)
    assert code == 2
    assert "unreachable" in _one_line(err, "fibexp-train", "logger.tracking_uri")
    assert not out.exists() and not cache.exists()


def test_prepare_runs_the_same_pass(tmp_path, tiny, monkeypatch, capsys):
    out, cache = tmp_path / "outputs", tmp_path / "cache"
    for bad, key in (("data.eval_tokens=-5", "data.eval_tokens"), ("optim.lr=inf", "optim.lr"),
                     ("attention=attention_schema", "attention")):
        code, err = _cli(cli_prepare.main, ["fibexp-prepare", *tiny, f"paths.output_dir={out}",
                                            f"paths.cache_dir={cache}", bad], monkeypatch, capsys)
        assert code == 2
        _one_line(err, "fibexp-prepare", key)
    assert not cache.exists() and not out.exists()


@pytest.mark.skipif(shutil.which("setpriv") is None and os.geteuid() == 0, reason="root, and no setpriv to drop it")
def test_a_read_only_outputs_folder_is_refused(tiny):
    """As a user who cannot write there (root writes anywhere: as root the command runs as nobody)."""
    root = Path(tempfile.mkdtemp(prefix="fibexp-ro-"))  # under /tmp, which nobody can traverse
    try:
        root.chmod(0o755)
        out = root / "outputs"
        out.mkdir()
        out.chmod(0o555)
        cmd = [sys.executable, "-m", "fibexp.cli.train", *tiny, f"paths.output_dir={out}",
               f"paths.cache_dir={out / 'cache'}"]
        if os.geteuid() == 0:
            cmd = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *cmd]
        env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "HYDRA_"))}
        proc = subprocess.run(cmd, capture_output=True, text=True, env={**env, "PYTHONDONTWRITEBYTECODE": "1"},
                              cwd="/", timeout=300)
        assert proc.returncode == 2, proc.stderr
        line = _one_line(proc.stderr, "fibexp-train", "paths.output_dir")
        assert f"({out} is not writable)" in line
        assert list(out.iterdir()) == []
    finally:
        shutil.rmtree(root, ignore_errors=True)


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
        assert not out.exists()


# (module, arguments, env, expected exit code) of answers that must come before any heavy import
FAST = [
    ("fibexp.cli.train", ["--help"], {}, 0),
    ("fibexp.cli.train", ["-sc", "query=bash"], {"COMP_LINE": "fibexp-train attention="}, 0),
    ("fibexp.cli.train", ["model.n_layer=3"], {}, 2),
    ("fibexp.cli.train", ["data.mixture={drama:inf}"], {}, 2),
    ("fibexp.cli.train", ["+trainer.callbacks=[{_target_:os.remove,path:/tmp/x}]"], {}, 2),
    ("fibexp.cli.train", ["ckpt_path={in}/empty.ckpt"], {}, 2),
    ("fibexp.cli.train", ["data=hf", "data.sources.0.data_files={in}/binary.jsonl"], {}, 2),
    ("fibexp.cli.train", [], {}, 2),  # the garbage mlflow.db
    ("fibexp.cli.prepare", ["--help"], {}, 0),
    ("fibexp.cli.prepare", ["trainer.max_steps=abc"], {}, 2),
    ("fibexp.cli.generate", ["--help"], {}, 0),
    ("fibexp.cli.generate", ["{in}"], {}, 2),  # no --prompt
    ("fibexp.cli.generate", ["nosuchrun", "--prompt", "a"], {}, 2),
    ("fibexp.cli.eval", ["--help"], {}, 0),
    ("fibexp.cli.eval", ["{run}", "--tasks", "nosuch"], {}, 2),
    ("fibexp.cli.export", ["--help"], {}, 0),
    ("fibexp.cli.export", ["nosuchrun"], {}, 2),
    ("fibexp.cli.report", ["--help"], {}, 0),
    ("fibexp.cli.upload", ["--help"], {}, 0),
    ("fibexp.cli.plan", ["--help"], {}, 0),
    ("fibexp.cli.plan", ["--gpu", "tpu"], {}, 2),
    ("fibexp.cli.bench", ["--help"], {}, 0),
    ("fibexp.cli.bench", ["latency", "--window", "0"], {}, 2),
]


def test_help_completion_and_refusals_import_no_torch_lightning_or_mlflow(tmp_path, tiny):
    """Each command as a fresh process, watched (fibexp.bench.commands.imported): its answer comes
    without torch, Lightning, MLflow, datasets, lm-eval or transformers in sys.modules."""
    _inputs(tmp_path)
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "checkpoints" / "last.ckpt").write_bytes(b"")
    (run / "mlflow_run.json").write_text(f'{{"run_id": "x", "tracking_uri": "sqlite:///{tmp_path}/none.db"}}')
    out, fresh = tmp_path / "outputs", tmp_path / "fresh"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "HYDRA_"))}
    env["MLFLOW_TRACKING_URI"] = f"sqlite:///{tmp_path}/none.db"  # run ids are looked up there
    for module, args, extra, rc in FAST:
        args = [a.replace("{in}", str(tmp_path / "in")).replace("{run}", str(run)) for a in args]
        if module.endswith(("train", "prepare")) and "--help" not in args and "-sc" not in args:
            target = out if not args else fresh  # no override: the run would write to the garbage mlflow.db
            args = [*tiny, f"paths.output_dir={target}", f"paths.cache_dir={tmp_path / 'cache'}", *args]
            extra = {**extra, "MLFLOW_TRACKING_URI": ""}
        heavy, proc = bench_commands.imported(module, args, {**env, **extra})
        what = f"{module} {' '.join(args)}"
        assert heavy == [], what
        if rc == 2:
            assert "error: " in proc.stderr, (what, proc.stderr)
        else:
            assert proc.stdout.strip(), (what, proc.stderr)
    assert (out / "mlflow.db").read_bytes().startswith(b"this is no sqlite file")
    assert sorted(p.name for p in out.iterdir()) == ["mlflow.db"]
    assert not fresh.exists() and not (tmp_path / "cache").exists() and not (tmp_path / "none.db").exists()
