"""A detached SLURM sweep's closing job (fibexp.sweep.detach.close), without SLURM: from the sweep's
record it writes and prints the summary the waiting runner prints, tags and closes the parent run,
and a cancelled sweep's summary says how to resume it as its user launched it."""
from __future__ import annotations

import signal

from helpers.mlflow_runs import new_experiment, sqlite_store

from fibexp.sweep import detach, interrupt, state


def _sweep(tmp_path, tmp_path_factory, name: str):
    """A sweep's home and store as the submitting process leaves them: a parent run, cell 0 FINISHED
    (its outcome recorded), cell 1 launched but never started (no run, no job)."""
    client = sqlite_store(tmp_path_factory, name)
    exp = new_experiment(client)
    parent = client.create_run(exp, run_name="seed=1,2 [s1]",
                               tags={"fibexp.sweep": "s1", "fibexp.sweep_parent": "true"}).info.run_id
    done = client.create_run(exp, run_name="dense-s1", tags={"mlflow.parentRunId": parent}).info.run_id
    client.set_terminated(done, "FINISHED")
    home = tmp_path / "home"
    state.write(home, {"uri": client.tracking_uri, "experiment_id": exp, "parent": parent, "id": "s1",
                       "argv": ["-m", "seed=1,2"], "cells": [
                           {"name": "dense-s1", "run_dir": str(tmp_path / "r1"), "hash": "h1",
                            "outcome": ["finished", done]},
                           {"name": "dense-s2", "run_dir": str(tmp_path / "r2"), "hash": "h2"}]})
    return client, home, parent, done


def test_the_closing_job_of_a_finished_sweep_summarises_and_closes_its_parent(tmp_path, tmp_path_factory, capsys):
    client, home, parent, done = _sweep(tmp_path, tmp_path_factory, "detach-finished")
    record = state.read(home)
    record["cells"] = record["cells"][:1]
    state.write(home, record)
    counts = detach.close(str(home))
    assert counts["finished"] == 1 and sum(counts.values()) == 1
    written = (home / "summary.txt").read_text()
    assert capsys.readouterr().out == written
    assert "Sweep s1: 1 finished, 0 skipped, 0 failed" in written
    assert "  finished  dense-s1" in written and done in written
    run = client.get_run(parent)
    assert run.info.status == "FINISHED"
    assert (run.data.tags["fibexp.finished"], run.data.tags["fibexp.runs"]) == ("1", done)
    assert (home / "report.md").is_file()


def test_the_closing_job_of_a_cancelled_sweep_says_how_to_resume_it(tmp_path, tmp_path_factory, capsys):
    client, home, parent, _ = _sweep(tmp_path, tmp_path_factory, "detach-cancelled")
    stopped = interrupt.Signals()
    stopped.count, stopped.signum = 1, signal.SIGTERM
    assert detach.close(str(home), stopped) == {}  # the summary exits 143: nothing to count on
    written = (home / "summary.txt").read_text()
    assert capsys.readouterr().out == written
    assert "Sweep s1: 1 finished, 0 skipped, 0 failed, 1 pending" in written
    assert written.rstrip().splitlines()[-1] == ("fibexp-train: sweep s1 stopped by SIGTERM: 1 cell(s) finished, "
                                                 "1 to go; resume with: fibexp-train -m seed=1,2")
    assert client.get_run(parent).info.status == "KILLED"
