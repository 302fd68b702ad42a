"""A basic-sweeper multirun launched again over cells that ran leaves each one's saved config
(.hydra/) byte for byte and modification time as it was, though Hydra's run_job saves .hydra/
before any callback of the job."""
from __future__ import annotations

import os
import subprocess
import sys


def _saved(out) -> dict:
    return {p.relative_to(out): (p.read_bytes(), p.stat().st_mtime_ns) for p in sorted(out.glob("runs/*/.hydra/*"))}


def _sweep(tiny, out, cache_dir, *overrides: str) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "fibexp.cli.train", "-m", "hydra/sweeper=basic", *tiny,
                           f"paths.output_dir={out}", f"paths.cache_dir={cache_dir}", *overrides],
                          capture_output=True, text=True, env={**os.environ}, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc


def test_a_relaunched_basic_sweep_leaves_the_saved_configs_of_its_cells(tiny, tmp_path, cache_dir, local_store):
    out = tmp_path / "outputs"
    _sweep(tiny, out, cache_dir, "seed=1,2")
    before = _saved(out)
    assert len(before) == 6  # config.yaml, hydra.yaml, overrides.yaml of each cell
    # another value of a key outside the identity: the same two cells, a config that would differ
    proc = _sweep(tiny, out, cache_dir, "seed=1,2", "logger.outage_wait_s=8")
    assert _saved(out) == before
    said = proc.stdout + proc.stderr
    assert said.count("already FINISHED") == 2, said[-3000:]


def test_the_override_resolves_per_cell_in_the_job(tmp_path):
    """What the relaunch adds to the sweep's hydra overrides, as run_job resolves it: the subdir for a
    run dir with no saved config (Hydra saves it), None for one that holds one (nothing written)."""
    from omegaconf import OmegaConf

    from fibexp.config.schema import SAVED_SUBDIR, register

    register()
    node = OmegaConf.create({"hydra": {"runtime": {"output_dir": str(tmp_path)},
                                       "output_subdir": f'${{{SAVED_SUBDIR}:".hydra"}}'}})
    assert node.hydra.output_subdir == ".hydra"
    (tmp_path / ".hydra").mkdir()
    (tmp_path / ".hydra" / "config.yaml").write_text("seed: 1\n")
    assert node.hydra.output_subdir is None
