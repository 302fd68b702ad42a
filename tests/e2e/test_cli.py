"""What every command shows before it works: whole help texts, TAB completion and `--help` that
offer only real options (no `*_schema` nodes), and the commands that take a run answering about
that run before importing torch (fibexp-generate on a sweep's parent run names its cells)."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from fibexp.cli import app
from fibexp.cli import eval as cli_eval
from fibexp.cli import export as cli_export
from fibexp.cli import generate as cli_generate
from fibexp.cli import report as cli_report
from fibexp.cli import upload as cli_upload

ENV = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "HYDRA_"))}


def _run(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, env={**ENV, **(env or {})},
                          timeout=300, stdin=subprocess.DEVNULL)


@pytest.mark.parametrize("main, prog", [(cli_eval.main, "fibexp-eval"), (cli_generate.main, "fibexp-generate"),
                                        (cli_export.main, "fibexp-export"), (cli_report.main, "fibexp-report"),
                                        (cli_upload.main, "fibexp-upload")])
def test_argparse_help_is_the_whole_description(main, prog, capsys):
    """The description is the module's docstring, whole: it used to be its first line, cut mid-sentence."""
    with pytest.raises(SystemExit) as e:
        main(["--help"])
    assert e.value.code == 0
    text = capsys.readouterr().out
    module = sys.modules[main.__module__]
    assert text.startswith(f"usage: {prog} ")
    assert " ".join(module.__doc__.split()) in " ".join(text.split())  # every line of it, in order
    assert module.__doc__.strip().endswith(".")  # a whole sentence at the end
    assert f"{prog}:" in module.__doc__.splitlines()[0]


@pytest.mark.parametrize("module, prog", [("fibexp.cli.train", "fibexp-train"), ("fibexp.cli.prepare", "fibexp-prepare")])
def test_hydra_help_is_the_command_s_and_offers_no_schema(module, prog):
    proc = _run("-m", module, "--help")
    assert proc.returncode == 0, proc.stderr
    doc = sys.modules.get(module) or __import__(module, fromlist=["x"])
    assert proc.stdout.startswith(doc.__doc__.strip().splitlines()[0])
    assert "is powered by Hydra" not in proc.stdout
    assert "_schema" not in proc.stdout
    assert "attention: dense, dynamics, fib_coprime, fib_fixed, fib_learned, fib_stagger, hypercube, pow2_fixed, " \
           "pow2_stagger, sparse" in proc.stdout
    assert f"{prog}: error: <key>: <value>; allowed: ..." in proc.stdout


@pytest.mark.parametrize("module", ["fibexp.cli.train", "fibexp.cli.prepare"])
@pytest.mark.parametrize("argv", [["trainer.max_steps=3", "--cfg", "job"], ["--cfg", "job", "trainer.max_steps=3"],
                                  ["-c", "job", "trainer.max_steps=3", "--resolve"]])
def test_cfg_job_prints_the_config_wherever_the_flag_stands(module, argv):
    """Hydra's flags before or after the overrides: fibexp's own overrides join the user's run of
    them (appended after `--cfg job`, they were refused as unrecognized arguments)."""
    proc = _run("-m", module, *argv)
    assert proc.returncode == 0, proc.stderr
    assert "  max_steps: 3\n" in proc.stdout and not proc.stdout.startswith("hydra:") and "\nhydra:" not in proc.stdout


@pytest.mark.parametrize("argv, expected", [
    (["a=1", "--cfg", "job"], ["a=1", "O", "--cfg", "job"]),
    (["--cfg", "job", "a=1"], ["--cfg", "job", "a=1", "O"]),
    (["-m", "a=1,2", "~b", "--cfg", "job"], ["-m", "a=1,2", "~b", "O", "--cfg", "job"]),
    (["--cfg", "job"], ["--cfg", "job", "O"]),
    (["-sc", "install=bash"], ["-sc", "install=bash", "O"]),
    (["--config-name=train", "a=1"], ["--config-name=train", "a=1", "O"]),
])
def test_fibexp_overrides_join_the_user_s_run_of_overrides(argv, expected):
    assert app.with_overrides(argv, ["O"]) == expected


@pytest.mark.parametrize("line", ["fibexp-train attention=", "fibexp-train model=", "fibexp-train data=",
                                  "fibexp-train trainer=", "fibexp-train task=", "fibexp-train +scale=",
                                  "fibexp-train "])
def test_tab_completion_offers_no_schema(line):
    proc = _run("-m", "fibexp.cli.train", "-sc", "query=bash", env={"COMP_LINE": line})
    assert proc.returncode == 0, proc.stderr
    offered = proc.stdout.split()
    assert offered, proc.stderr
    assert not [o for o in offered if "schema" in o], offered
    if line.endswith("attention="):
        assert "attention=fib_stagger" in offered and "attention=dense" in offered


def test_generate_on_a_sweep_s_parent_names_its_cells(tmp_path_factory, capsys):
    from helpers.mlflow_runs import new_experiment, sqlite_store

    client = sqlite_store(tmp_path_factory, "generate_parent")
    exp = new_experiment(client)
    parent = client.create_run(exp, run_name="sweep-main-ab12", tags={"fibexp.sweep_parent": "true",
                                                                     "fibexp.sweep": "main-ab12"}).info.run_id
    cell = client.create_run(exp, run_name="dense-s42", tags={"mlflow.parentRunId": parent}).info.run_id
    capsys.readouterr()
    assert cli_generate.main([parent, "--prompt", "Once", "--tracking-uri", client.tracking_uri]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (f"fibexp-generate: error: run: {parent} (a sweep's parent run, tag fibexp.sweep_parent); "
                   f"allowed: a cell's run id or its run dir; its cells: {cell} (dense-s42)")


def test_generate_refuses_a_task_run_and_usage_errors_at_once(tmp_path_factory, tmp_path, capsys):
    from helpers.mlflow_runs import new_experiment, run_dir_of, sqlite_store

    client = sqlite_store(tmp_path_factory, "generate_task")
    run_id = client.create_run(new_experiment(client), tags={"fibexp.task": "count_ones"}).info.run_id
    run_dir = run_dir_of(tmp_path, run_id, client.tracking_uri)
    capsys.readouterr()
    assert cli_generate.main([str(run_dir), "--prompt", "x"]) == 2
    assert capsys.readouterr().err.strip() == "fibexp-generate: error: task: count_ones; allowed: lm (a language " \
                                              "model's run)"
    for argv, said in (([str(run_dir)], "the following arguments are required: --prompt"),
                       ([str(run_dir), "--prompt", "x", "--temperature", "nan"], "--temperature: nan; allowed: a "
                                                                               "finite number >= 0 (0: greedy)")):
        with pytest.raises(SystemExit) as e:
            cli_generate.main(argv)
        assert e.value.code == 2 and said in capsys.readouterr().err


@pytest.mark.slow  # the reference import alone takes 5-10 s
def test_the_cli_benchmark_times_whole_processes_beside_the_reference(tmp_path):
    import json

    proc = _run("-m", "fibexp.cli.bench", "cli", "--repeats", "2", "--only", "fibexp-eval", "--out", str(tmp_path))
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads((tmp_path / "cli-latest.json").read_text())
    assert [c["name"] for c in report["cases"]] == ["fibexp-eval --help", "fibexp-eval RUN --tasks nosuch"]
    for case in report["cases"]:
        assert len(case["walls_s"]) == 2 and case["exit_codes"] == [case["expected_exit"]]
        assert case["heavy_imports"] == [] and case["result"] == "PASS"
        assert case["median_s"] < report["reference"]["median_s"]  # the point: no torch to import
    assert report["reference"]["name"].startswith("reference: python -c \"import torch, lightning\"")
    assert report["created"] == [] and {"load1", "time"} <= set(report["load_start"])
    assert "PASS fibexp-eval RUN --tasks nosuch" in proc.stdout
