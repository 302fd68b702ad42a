"""`fibexp-report` on hand-made MLflow runs: the paper-style table layouts (golden), what is left
out and why, diverged runs as † in the lr grid, the CLI, and report.md + figures on the parent run."""
from __future__ import annotations

import json
import textwrap

import pytest

from fibexp.cli import report as cli_report
from fibexp.report.render import attach_to_parent, render
from fibexp.report.runs import comparable, load_runs
from fibexp.report.tables import sections, seeds, table1
from helpers.mlflow_runs import (FIXED_BINS, HYPERCUBE_LM, SETS, STAGGER_BINS, count, lm_metrics,
                                 log_hypercube_lr_grid, log_run, new_experiment)

def groups_of(client, exp, sweep=None):
    views, unfinished = load_runs(client, [exp], sweep)
    groups, left = comparable(views)
    return groups, left, unfinished


@pytest.fixture(scope="module")
def main_job(store):
    """`make run`'s case: dense / fib fixed / fib stagger (W8) and count-ones rot/fixed at n=16, 4 layers;
    plus an older run with another step budget (its own group: kept, never evicting or evicted), a failed run
    and an older rerun of dense."""
    exp = new_experiment(store, "main-job")
    log_run(store, exp, "sparse/fib/fixed/W8", steps=150, metrics=lm_metrics(90.0))  # older budget: its own group
    log_run(store, exp, "dense", metrics=lm_metrics(70.0, 0.5))  # superseded by the rerun below
    log_run(store, exp, "sparse/fib/stagger/W8", status="FAILED")
    log_run(store, exp, "dense", metrics=lm_metrics(50.0, 0.112, FIXED_BINS))
    log_run(store, exp, "sparse/fib/fixed/W8", metrics=lm_metrics(52.0, -0.004, FIXED_BINS))
    log_run(store, exp, "sparse/fib/stagger/W8", metrics=lm_metrics(51.0, -0.019, STAGGER_BINS))
    for cell, acc in (("hypercube/rot", 0.997), ("hypercube/fixed", 0.21)):
        log_run(store, exp, cell, task="count_ones", length=16, steps=600, metrics=count(acc))
    return exp


MAIN_JOB_TABLES = """\
LM: 3 runs (3 cells), 1500 steps each (equal budget), length 64, 4 layers, width 64, batch 16, corpus c0ffee, eval v1

Held-out perplexity at the training length (64 tokens) -- paper A's table 1 (paper: 60M model, 13,000 steps, FineWeb-Edu / Wikipedia)
W8            code   docs  drama  encyclopedic  prose   mean  paper FW-Edu  paper Wiki
fib fixed    41.60  46.80  52.00         57.20  62.40  52.00         44.08       40.02
fib stagger  40.80  45.90  51.00         56.10  61.20  51.00         42.53       38.07
dense        40.00  45.00  50.00         55.00  60.00  50.00         33.37       27.28

Length extrapolation: mean held-out ppl at 1x, 2x, 4x the training length (paper A: FineWeb-Edu at 1024/2048/4096)
cell         1x (64)  2x (128)  4x (256)  change 2x  change 4x       paper 1x/2x/4x  paper change 4x
fib fixed      52.00     51.90     51.79      -0.2%      -0.4%                    -                -
fib stagger    51.00     50.52     50.03      -0.9%      -1.9%  42.02/-/41.45 (W12)            -1.3%
dense          50.00     52.80     55.60      +5.6%     +11.2%   33.37/49.15/100.36          +201.0%
change at 4x per held-out set:
cell           code    docs   drama  encyclopedic   prose
fib fixed     -0.4%   -0.4%   -0.4%         -0.4%   -0.4%
fib stagger   -1.9%   -1.9%   -1.9%         -1.9%   -1.9%
dense        +11.2%  +11.2%  +11.2%        +11.2%  +11.2%

Position-resolved held-out loss (nats; 8 equal bins over positions 0..63, mean over sets; paper A: FineWeb-Edu, T 1024)
cell                              bin0    bin1    bin2    bin3    bin4    bin5    bin6    bin7
fib fixed                        4.050   3.950   3.850   3.850   3.850   3.850   3.850   3.840
fib stagger                      4.020   3.920   3.820   3.820   3.820   3.810   3.820   3.810
dense                            4.050   3.950   3.850   3.850   3.850   3.850   3.850   3.840
stagger gain (fixed - stagger)  +0.030  +0.030  +0.030  +0.030  +0.030  +0.040  +0.030  +0.030
paper fib fixed W8               3.883   3.808   3.767   3.770   3.742   3.780   3.776   3.763
paper fib stagger W8             3.861   3.769   3.733   3.731   3.709   3.737   3.739   3.726
paper stagger gain W8           +0.022  +0.039  +0.034  +0.039  +0.033  +0.043  +0.037  +0.037

LM: 1 runs (1 cells), 150 steps each (equal budget), length 64, 4 layers, width 64, batch 16, corpus c0ffee, eval v1

Held-out perplexity at the training length (64 tokens) -- paper A's table 1 (paper: 60M model, 13,000 steps, FineWeb-Edu / Wikipedia)
W8          code   docs  drama  encyclopedic   prose   mean  paper FW-Edu  paper Wiki
fib fixed  72.00  81.00  90.00         99.00  108.00  90.00         44.08       40.02

Length extrapolation: mean held-out ppl at 1x, 2x, 4x the training length (paper A: FineWeb-Edu at 1024/2048/4096)
cell       1x (64)  2x (128)  4x (256)  change 2x  change 4x  paper 1x/2x/4x  paper change 4x
fib fixed    90.00     90.00     90.00      +0.0%      +0.0%               -                -
change at 4x per held-out set:
cell        code   docs  drama  encyclopedic  prose
fib fixed  +0.0%  +0.0%  +0.0%         +0.0%  +0.0%

count_ones n=16: 2 runs (2 cells), 600 steps each (equal budget), depths as listed, width 64, batch 16, corpus gen-v1, eval v1

Count-ones (paper B): held-out accuracy at n=16 (log2 n = 4); paper: n=64, chance 9.9%
schedule  order  layers  layers/log2 n    acc  seed range  chance  runs                   paper
rot         rot       4           1.00  99.7%           -   19.6%     1  98.7% (n=64, 6 layers)
fixed         -       4           1.00  21.0%           -   19.6%     1  10.2% (n=64, 6 layers)

Kept apart from the 3-run lm group (never mixed, judged on its own): 1 runs with another step budget (sparse/fib/fixed/W8 x1)
1 older reruns of runs shown were superseded by the newest.
1 runs not FINISHED (failed, killed or running) are not shown."""


def test_main_job_tables_golden(store, main_job):
    assert render(*groups_of(store, main_job)) == MAIN_JOB_TABLES


def test_lm_and_task_runs_are_grouped_apart(store, main_job):
    groups, left, unfinished = groups_of(store, main_job)
    assert [(g.task, g.n, len(g.runs)) for g in groups] == [("lm", 64, 3), ("lm", 64, 1), ("count_ones", 16, 2)]
    assert [why for _, why in left] == ["an older rerun of a run shown"]
    assert unfinished == 1


@pytest.fixture(scope="module")
def hypercube_sweep(store):
    """Paper B's char LM over an lr grid: attention diverges at the two largest lrs."""
    exp = new_experiment(store)
    log_hypercube_lr_grid(store, exp)
    for seed, b in ((43, 1.73), (44, 1.74)):
        log_run(store, exp, "hypercube/hybrid", seed=seed, lr=0.002, metrics={f"val/bpc/{s}": b for s in SETS},
                params=HYPERCUBE_LM)
    return exp


LR_GRID = """\
Paper B's learning-rate grid: held-out bpc (mean over sets) per lr, window 256 (paper: enwik8, window 256, 16 layers, width 512, 3,000 steps)
schedule  0.004  0.002  0.001  0.0005
attn          †      †  1.800   1.820
  paper       †      †  1.778   1.787
hybrid    1.790  1.730  1.730   1.780
  paper   1.801  1.718  1.718   1.786
rot       1.800  1.740  1.750   1.790
  paper   1.821  1.721  1.722   1.784
†: the run's training loss became NaN/inf (stopped early; tag fibexp.diverged)
best lr per schedule (lowest mean held-out bpc), its seeds, links (fibexp.science.wiring.links) and weights (model.n_params):
schedule     lr    bpc      sd              seeds    links  weights  paper lr  paper bpc  paper sd  paper links  paper weights
attn      0.001  1.800       -              1.800  526,336  123,456     0.001      1.778    0.0090      526,336     34,998,473
hybrid    0.002  1.730  0.0082  1.720/1.730/1.740   72,184  123,456     0.002      1.718    0.0159       72,184     20,318,409
rot       0.002  1.740       -              1.740    6,144  123,456     0.002      1.721    0.0139       74,470     20,318,409"""


def test_lr_grid_golden_with_diverged_runs(store, hypercube_sweep):
    (g,), _, _ = groups_of(store, hypercube_sweep)
    (section,) = [s for s in sections(g) if s.title.startswith("Paper B's learning-rate grid")]
    assert section.text() == LR_GRID
    assert "| attn | † | † | 1.800 | 1.820 |" in section.markdown()


def test_diverged_runs_are_kept_and_not_counted_as_failed(store, hypercube_sweep):
    groups, left, unfinished = groups_of(store, hypercube_sweep)
    diverged = [r for r in groups[0].runs if r.diverged]
    assert len(diverged) == 2 and unfinished == 0 and not left
    assert all(r.metrics == {"train/diverged_step": 40.0} for r in diverged)


def test_table1_blocks_per_window_and_degenerate_note(store):
    exp = new_experiment(store)
    for w, (fixed, stagger) in {6: (60.0, 58.0), 12: (55.0, 54.0)}.items():
        log_run(store, exp, f"sparse/fib/fixed/W{w}", metrics=lm_metrics(fixed))
        log_run(store, exp, f"sparse/fib/stagger/W{w}", metrics=lm_metrics(stagger))
        log_run(store, exp, f"sparse/fib/coprime/W{w}", metrics=lm_metrics(stagger))
    log_run(store, exp, "dense", metrics=lm_metrics(50.0))
    (g,), _, _ = groups_of(store, exp)
    assert table1(g).text() == textwrap.dedent("""\
        Held-out perplexity at the training length (64 tokens) -- paper A's table 1 (paper: 60M model, 13,000 steps, FineWeb-Edu / Wikipedia)
        W6            code   docs  drama  encyclopedic  prose   mean  paper FW-Edu  paper Wiki
        fib fixed    48.00  54.00  60.00         66.00  72.00  60.00         44.35       40.24
        fib stagger  46.40  52.20  58.00         63.80  69.60  58.00         42.93       38.59
        fib coprime  46.40  52.20  58.00         63.80  69.60  58.00         43.10       38.70
        dense        40.00  45.00  50.00         55.00  60.00  50.00         33.37       27.28
        W12           code   docs  drama  encyclopedic  prose   mean  paper FW-Edu  paper Wiki
        fib fixed    44.00  49.50  55.00         60.50  66.00  55.00         43.12       39.05
        fib stagger  43.20  48.60  54.00         59.40  64.80  54.00         42.02       37.59
        fib coprime  43.20  48.60  54.00         59.40  64.80  54.00         42.09       37.75
        dense        40.00  45.00  50.00         55.00  60.00  50.00         33.37       27.28
        note: fib coprime W6 attends exactly the per-layer offsets of fib stagger W6 (4 layers): the two rows measure one model twice
        note: fib coprime W12 attends exactly the per-layer offsets of fib stagger W12 (4 layers): the two rows measure one model twice""")


def test_seeds_ranking_only_where_ranges_do_not_overlap(store):
    exp = new_experiment(store)
    per_seed = {"fib stagger": (42.02, 41.96, 42.26), "fib coprime": (42.09, 42.03, 42.43),
                "fib fixed": (43.12, 43.16, 43.27)}  # paper A's W12 seeds, read back through MLflow
    for family, vals in per_seed.items():
        for seed, v in zip((42, 43, 44), vals):
            log_run(store, exp, f"sparse/{family.replace(' ', '/')}/W12", seed=seed, layers=8,
                    metrics={f"val/ppl/{s}": v for s in SETS})
    (g,), _, _ = groups_of(store, exp)
    assert seeds(g).text() == textwrap.dedent("""\
        Seeds: mean held-out ppl (mean over sets), population sd and range per cell (paper A: W12, FineWeb-Edu ppl, seeds 42/43/44)
        cell            seeds   mean     sd         range  paper mean  paper sd        paper seeds
        fib fixed    42,43,44  43.18  0.063  43.12..43.27       43.18      0.06  43.12/43.16/43.27
        fib stagger  42,43,44  42.08  0.130  41.96..42.26       42.08      0.13  42.02/41.96/42.26
        fib coprime  42,43,44  42.18  0.176  42.03..42.43       42.18      0.18  42.09/42.03/42.43
        ranking ('<' only where seed ranges do not overlap, '~' a tie): fib stagger ~ fib coprime < fib fixed
        paper's ranking at W12: fib stagger ~ fib coprime < pow2 stagger ~ fib learned < fib fixed""")


def test_cli_claims_lines_and_exit_zero(store, main_job, capsys):
    rc = cli_report.main(["--tracking-uri", store.tracking_uri, "--experiment", "main-job", "--claims"])
    out = capsys.readouterr().out.splitlines()
    assert rc == 0
    ids = [f"A{i}" for i in range(1, 10)] + [f"B{i}" for i in range(1, 15)]
    lines = [line for line in out if line.split()[:1] and line.split()[0] in ids]
    assert [line.split()[0] for line in lines] == ids
    # one seed: threshold claims too need >= 3 seeds, every one of which clears the bar
    assert next(line for line in lines if line.startswith("A6")).startswith(
        "A6  insufficient (1 seed) dense has seeds 42 with extrap/rel_x4/<set>, needs >= 3")
    assert next(line for line in lines if line.startswith("B1")).startswith(
        "B1  insufficient (1 seed) rot at n=16, 4 layers has seeds 42 with task/acc, needs >= 3")
    assert "Held-out perplexity" not in "\n".join(out)  # --claims alone: no tables
    # --claims alone still says what it left out and why, and which groups it kept apart
    assert "Kept apart from the 3-run lm group (never mixed, judged on its own): 1 runs with another step budget" \
        in "\n".join(out)
    assert "1 older reruns of runs shown were superseded by the newest." in out
    assert "1 runs not FINISHED (failed, killed or running) are not shown." in out


@pytest.fixture(scope="module")
def seeded_job(store):
    """`make run`'s cells over seeds 42, 43, 44 (what `seed=42,43,44` gives it)."""
    exp = new_experiment(store, "seeded-job")
    for i, seed in enumerate((42, 43, 44)):
        log_run(store, exp, "dense", seed=seed, metrics=lm_metrics(50.0 + 0.1 * i, 0.11 + 0.01 * i, FIXED_BINS))
        log_run(store, exp, "sparse/fib/fixed/W8", seed=seed, metrics=lm_metrics(52.0 + 0.1 * i, -0.004, FIXED_BINS))
        log_run(store, exp, "sparse/fib/stagger/W8", seed=seed, metrics=lm_metrics(51.0 + 0.1 * i, -0.019, STAGGER_BINS))
        for cell, acc in (("hypercube/rot", 0.997 - 0.001 * i), ("hypercube/fixed", 0.21)):
            log_run(store, exp, cell, task="count_ones", seed=seed, length=16, steps=600, metrics=count(acc))
    return exp


def test_cli_out_writes_report_and_figures(store, main_job, tmp_path, capsys):
    rc = cli_report.main(["--tracking-uri", store.tracking_uri, "--experiment", "main-job", "--sweep", "sw-1",
                      "--out", str(tmp_path)])
    assert rc == 0
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["count_ones_n16.png", "extrapolation.png", "position_bins.png", "report.md"]
    assert all((tmp_path / n).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for n in names if n.endswith(".png"))
    md = (tmp_path / "report.md").read_text()
    assert md.startswith("# fibexp report: sweep sw-1\n")
    assert "| A6 | insufficient (1 seed) | dense has seeds 42 with extrap/rel_x4/<set>, needs >= 3;" in md
    assert "![position_bins.png](position_bins.png)" in md


def test_attach_to_parent_logs_report_and_figures(store, hypercube_sweep):
    parent = store.create_run(hypercube_sweep, tags={"fibexp.sweep": "sw-1", "fibexp.sweep_parent": "true"})
    names = attach_to_parent(store, hypercube_sweep, "sw-1", parent.info.run_id)
    assert names == ["report.md", "lr_grid.png"]
    logged = {a.path for a in store.list_artifacts(parent.info.run_id)}
    assert logged == set(names)
    md = store.download_artifacts(parent.info.run_id, "report.md")
    text = open(md).read()
    assert "| attn | † | † |" in text
    # a sweep's report lists the claims its runs judge, and names the rest in one line (B5 needs
    # every seed over the hybrid's whole lr grid: the hybrid ran seeds 43 and 44 at its best lr only)
    assert "| B5 |" not in text and "| claim | verdict |" not in text
    (rest,) = [line for line in text.splitlines() if line.startswith("Not judged by these runs")]
    assert rest.split(": ", 1)[1].split() == [f"A{i}" for i in range(1, 10)] + [f"B{i}" for i in range(1, 15)]


def test_cli_judged_prints_only_judged_claims_then_the_tables(store, main_job, seeded_job, capsys):
    assert cli_report.main(["--tracking-uri", store.tracking_uri, "--experiment", "main-job", "--judged"]) == 0
    out = capsys.readouterr().out
    assert not [line for line in out.splitlines() if line[:1] in "AB" and line[1:2].isdigit()]  # one seed each
    assert "not judged here (runs or seeds missing): A1 A2 A3 A4 A5 A6 A7 A8 A9 B1 B2" in out
    assert cli_report.main(["--tracking-uri", store.tracking_uri, "--experiment", "seeded-job", "--judged",
                            "--tables"]) == 0
    out = capsys.readouterr().out
    ids = [line.split()[0] for line in out.splitlines() if line[:1] in "AB" and line[1:2].isdigit()]
    assert ids == ["A1", "A6", "A7", "A8", "B1"]
    assert ("A1  reproduced (at W8 only; paper: every W of 6-12; paper's rule: ranges disjoint; p = 0.10, weak) "
            "fib stagger vs fib fixed") in out
    assert "; stats: fib stagger W8 - fib fixed W8 " in out and "(paired), p = 0.10" in out
    assert "A6  reproduced (direction only; paper +201%) dense +11.0%..+13.0% vs" in out
    assert ("A7  reproduced (direction only; paper +26%; paper's rule: ranges disjoint; p = 0.10, weak) best sparse "
            "(fib stagger W8) +2.0% ppl vs dense") in out
    assert "not judged here (runs or seeds missing): A2 A3 A4 A5 A9 B2 B3 B4 B5 B6 B7 B8 B9 B10 B11 B12 B13 B14;" in out
    assert out.index("B1  reproduced") < out.index("Held-out perplexity at the training length")


def test_cli_claims_json_gives_each_verdict_with_its_statistics(store, seeded_job, capsys):
    assert cli_report.main(["--tracking-uri", store.tracking_uri, "--experiment", "seeded-job", "--judged",
                            "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    claims = {c["id"]: c for c in got["claims"]}
    assert list(claims) == ["A1", "A6", "A7", "A8", "B1"]
    a1 = claims["A1"]
    assert a1["verdict"] == "reproduced" and a1["qualifier"].endswith("paper's rule: ranges disjoint; p = 0.10, weak")
    (s,) = a1["stats"]
    assert (s["a"], s["b"], s["kind"], s["paired"], s["seeds"]) == ("fib stagger W8", "fib fixed W8", "rank", True, [3, 3])
    assert s["lo"] <= s["d"] <= s["hi"] < 0 and s["p"] == pytest.approx(0.1) and a1["unit"] == "ppl"
    assert claims["A6"]["stats"] == []  # a threshold claim compares no two cells
    for bad in (["--json"], ["--claims", "--json", "--tables"]):
        with pytest.raises(SystemExit) as e:
            cli_report.main(["--tracking-uri", store.tracking_uri] + bad)
        assert e.value.code == 2
    assert "--json: needs --claims or --judged" in capsys.readouterr().err


def test_report_md_gives_each_verdict_its_statistics(store, seeded_job, tmp_path):
    assert cli_report.main(["--tracking-uri", store.tracking_uri, "--experiment", "seeded-job", "--out",
                            str(tmp_path)]) == 0
    md = (tmp_path / "report.md").read_text()
    assert "| claim | verdict | ours | paper | statistics | criterion |" in md
    row = next(line for line in md.splitlines() if line.startswith("| A1 |"))
    assert "| fib stagger W8 - fib fixed W8 " in row and "(paired), p = 0.10 |" in row


def test_synthetic_task_generator_is_the_runs_dataset_input(store):
    """A synthetic task's run carries its generator as an MLflow dataset input: name, version, seeds."""
    from types import SimpleNamespace

    from fibexp.tracking.datasets import log_task_input
    exp = new_experiment(store)
    run_id = log_run(store, exp, "hypercube/rot", task="count_ones", metrics=count(0.99))
    task = SimpleNamespace(name="count_ones", version=1, conf=SimpleNamespace(heldout_seed=7, heldout_examples=2048),
                           data_fingerprint=lambda corpus: "synthetic/count_ones/v1")
    log_task_input(store, run_id, task, 43)
    log_task_input(store, run_id, task, 43)  # idempotent (a resumed run logs it again)
    (d,) = store.get_run(run_id).inputs.dataset_inputs
    assert (d.dataset.name, d.dataset.digest, d.dataset.source_type) == ("count_ones", "synthetic/count_ones/v1", "code")
    assert '"seed": "43"' in d.dataset.source and '"version": "1"' in d.dataset.source
    assert '"heldout_seed": 7' in d.dataset.profile
