"""A typed grid on the process launchers (submitit pickles the launcher into every job): the cells
finish, the progress lines and the summary show them, and the sweep's home links to their runs."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("launcher", ["cores", "submitit_local"])
def test_a_typed_grid_finishes_on_a_process_launcher(tmp_path, launcher):
    out = tmp_path / "outputs"
    proc = subprocess.run([sys.executable, "-m", "fibexp.cli.train", "-m", "attention=fib_fixed",
                           "attention.window=4,8", "+scale=smoke", f"hydra/launcher={launcher}",
                           f"paths.output_dir={out}"], cwd=ROOT, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "pickle" not in proc.stdout + proc.stderr
    assert "2 finished, 0 skipped, 0 failed" in proc.stdout
    assert len(re.findall(r"^\[\d/2\] start ", proc.stdout, re.M)) == 2
    assert len(re.findall(r"^\[\d/2\] done  \S+  \d+ s  val ppl \d", proc.stdout, re.M)) == 2
    assert len(re.findall(r"^  finished  \S+ +[0-9a-f]{32}  val ppl \d", proc.stdout, re.M)) == 2
    (home,) = (out / "sweeps").glob("????-??-??-*")
    assert (home / "multirun.yaml").is_file() and (home / "report.md").is_file()
    links = sorted((home / "cells").iterdir())
    assert [l.name for l in links] == ["sparse-fib-fixed-W4-s42", "sparse-fib-fixed-W8-s42"]
    assert all(l.is_symlink() and l.resolve().parent == out / "runs" for l in links)


def test_fibexp_sweep_answers_an_unknown_sweep_in_one_line_before_torch(tmp_path):
    """`fibexp-sweep status|wait|cancel` of a sweep that is not there: one line naming it and the
    sweeps there are, exit 2, in a fresh interpreter that has imported neither torch nor Lightning."""
    out = tmp_path / "outputs"
    (out / "sweeps" / "2026-01-01-grid-0123abcd").mkdir(parents=True)
    (out / "sweeps" / "2026-01-01-grid-0123abcd" / "sweep.json").write_text('{"id": "grid-0123abcd", "cells": []}')
    probe = ("import sys\nfrom fibexp.cli import sweep\ntry:\n    sweep.main(sys.argv[1:])\nexcept SystemExit as e:\n"
             "    print(e.code, sorted(m for m in ('torch', 'lightning') if m in sys.modules))")
    for command in ("status", "wait", "cancel"):
        proc = subprocess.run([sys.executable, "-c", probe, "--output-dir", str(out), command, "nope-12345678"],
                              cwd=ROOT, capture_output=True, text=True, timeout=120,
                              env={**os.environ, "PYTHONPATH": str(ROOT)})
        assert proc.stdout.strip() == "2 []", proc.stdout + proc.stderr
        assert proc.stderr.strip() == (f"fibexp-sweep: error: sweep: nope-12345678; allowed: a sweep id or home folder "
                                       f"under {out / 'sweeps'} (fibexp-sweep list; newest: grid-0123abcd)")
    bad = subprocess.run([sys.executable, "-m", "fibexp.cli.sweep", "stat"], cwd=ROOT, capture_output=True, text=True,
                         timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1 and "invalid choice: 'stat'" in bad.stderr
