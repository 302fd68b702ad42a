"""The import contracts of docs/architecture.md ("How the code is laid out"): import-linter's
contracts in pyproject.toml hold, a planted upward import breaks them, the config layer imports
without torch at run time too (package __init__ files count there), and no module outgrows 400
lines."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LINT = Path(sys.executable).parent / "lint-imports"


def lint(root: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run([str(LINT), "--config", str(root / "pyproject.toml"), "--no-cache"], cwd=root,
                          capture_output=True, text=True, env=env, timeout=300)


def test_the_layer_contracts_hold():
    proc = lint(ROOT)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "8 kept, 0 broken" in proc.stdout
    assert "ignored" not in proc.stdout  # the layers hold as stated, without exceptions


def test_an_upward_import_breaks_the_layers(tmp_path):
    for part in ("fibexp", "hydra_plugins"):
        shutil.copytree(ROOT / part, tmp_path / part, ignore=shutil.ignore_patterns("__pycache__", "embedded"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    with open(tmp_path / "fibexp" / "config" / "identity.py", "a") as f:
        f.write("\nfrom fibexp.training import run  # noqa: E402\n")
    with open(tmp_path / "fibexp" / "training" / "ddp.py", "a") as f:  # the circle the rank worker once made
        f.write("\nfrom fibexp.training import run  # noqa: E402\n")
    with open(tmp_path / "fibexp" / "checks" / "values.py", "a") as f:  # a check reaching up to the pass that runs it
        f.write("\nfrom fibexp.checks import preflight  # noqa: E402\n")
    with open(tmp_path / "fibexp" / "sweep" / "cells.py", "a") as f:  # down the layers, but a task's torch half
        f.write("\nfrom fibexp.tasks.lm import task  # noqa: E402\n")
    with open(tmp_path / "fibexp" / "sweep" / "detach.py", "a") as f:  # the circle detach once closed, lazily
        f.write("\ndef _summary():\n    from fibexp.sweep import runner\n    return runner\n")
    proc = lint(tmp_path)
    assert proc.returncode == 1, proc.stdout[-3000:]
    said = " ".join(proc.stdout.split())  # a contract's name wraps at 80 columns
    assert "layers follow the data flow BROKEN" in said
    assert "fibexp.config.identity -> fibexp.training.run" in said
    assert "import no torch or Lightning BROKEN" in said
    assert "above their parts (no circle) BROKEN" in said
    assert "fibexp.training.ddp -> fibexp.training.run" in said
    assert "fibexp.sweep.cells -> fibexp.tasks.lm.task" in said
    assert "checks: the Hydra callback above the passes, above what they check, above their parts (no circle) BROKEN" in said
    assert "fibexp.checks.values -> fibexp.checks.preflight" in said
    assert "light record a job reads (no circle) BROKEN" in said
    assert "fibexp.sweep.detach -> fibexp.sweep.runner" in said


def test_the_config_layer_and_the_report_load_without_torch():
    code = ("import sys, fibexp.config.schema, fibexp.checks.rules, fibexp.config.overrides, fibexp.checks.messages, "
            "fibexp.sweep.cells, fibexp.sweep.plan, fibexp.report, hydra_plugins.fibexp_schemas, hydra_plugins.fibexp_launchers; "
            "print(sorted(m for m in ('torch', 'lightning') if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "[]"


def test_no_module_is_over_400_lines():
    sizes = {str(p.relative_to(ROOT)): len(p.read_text().splitlines()) for p in (ROOT / "fibexp").rglob("*.py")}
    sizes.update({str(p.relative_to(ROOT)): len(p.read_text().splitlines()) for p in (ROOT / "hydra_plugins").rglob("*.py")})
    assert len(sizes) > 40
    assert {k: n for k, n in sizes.items() if n > 400} == {}


def test_every_python_m_main_is_in_cli():
    """A module run as `python -m` is an entry point (argument parsing, cli/); the library is only imported."""
    mains = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "fibexp").rglob("*.py")
                   if re.search(r"^if __name__ == .__main__.:", p.read_text(), re.M))
    assert "fibexp/cli/rank.py" in mains and "fibexp/cli/build_corpus.py" in mains
    assert [m for m in mains if not m.startswith("fibexp/cli/")] == []
