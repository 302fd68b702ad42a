"""The report as text and markdown with its figures, and attached to a sweep's parent run."""
from __future__ import annotations

import tempfile
import json
from collections import Counter
from pathlib import Path
from typing import Sequence

from mlflow.tracking import MlflowClient

from fibexp import plots
from fibexp.report import groups as seed_groups
from fibexp.report.claims import INSUFFICIENT, NOT_AT_SCALE, lines, unit_of
from fibexp.report.ledger import judge
from fibexp.report.runs import Group, RunView, comparable, group_differs, load_runs
from fibexp.report.tables import Table, describe, sections


def left_out_note(left: Sequence[tuple[RunView, str]], unfinished: int = 0) -> list[str]:
    out = []
    reasons = Counter(why for _, why in left if not why.startswith("an older"))
    if reasons:
        by = {why: Counter(r.cell for r, w in left if w == why) for why in reasons}
        out.append(f"Left out {sum(reasons.values())} runs not comparable with the runs above (never mixed): "
                   + "; ".join(f"{n} with {why} ({', '.join(f'{c} x{k}' for c, k in sorted(by[why].items()))})"
                               for why, n in reasons.items()))
    if older := sum(1 for _, why in left if why.startswith("an older")):
        out.append(f"{older} older reruns of runs shown were superseded by the newest.")
    if unfinished:
        out.append(f"{unfinished} runs not FINISHED (failed, killed or running) are not shown.")
    return out


def groups_note(groups: Sequence[Group]) -> list[str]:
    """The comparison groups a task's runs fall into beyond its largest: each judged and shown on
    its own, never mixed with the others and never evicting them."""
    out, first = [], {}
    for g in groups:
        ref = first.setdefault((g.task, g.n if g.task != "lm" else 0), g)
        if ref is not g:
            cells = Counter(r.cell for r in g.runs)
            out.append(f"Kept apart from the {len(ref.runs)}-run {g.task} group (never mixed, judged on its own): "
                       f"{len(g.runs)} runs with {group_differs(g, ref)} "
                       f"({', '.join(f'{c} x{k}' for c, k in sorted(cells.items()))})")
    return out


def render(groups: Sequence[Group], left=(), unfinished: int = 0, factor: int = 4) -> str:
    """The tables as plain text, group by group (what `fibexp-report` prints)."""
    if not groups:
        return "\n".join(["No finished fibexp runs found."] + left_out_note(left, unfinished))
    out = []
    for g in groups:
        out += [describe(g), ""]
        for s in sections(g, factor):
            out += [s.text(), ""]
    return "\n".join(out + groups_note(groups) + left_out_note(left, unfinished)).rstrip()


def claims_text(groups: Sequence[Group], verbose: bool = False, judged_only: bool = False, left=(),
                unfinished: int = 0) -> str:
    """One line per claim; judged_only: only those the runs can judge, the others named in one line
    each (insufficient; not at this scale); then what was left out and why, and the groups kept
    apart (every report mode says so)."""
    head = ("Claims (A: Fibonacci offsets, B: hypercube wiring). Our models are tiny: verdicts test the papers' "
            "bars on directions and ratios, never their absolute numbers; a bar weaker than the paper's is said "
            "beside the verdict" + ("" if verbose else "; criteria and sources: fibexp-report --claims -v"))
    verdicts = judge(groups)
    shown = [v for v in verdicts if not judged_only or v.verdict not in (INSUFFICIENT, NOT_AT_SCALE)]
    out = [head] + lines(shown, verbose)
    if rest := [v.claim.id for v in verdicts if v not in shown and v.verdict == INSUFFICIENT]:
        out.append(f"not judged here (runs or seeds missing): {' '.join(rest)}; `fibexp-report --claims` names what "
                   "each needs")
    if rest := [v.claim.id for v in verdicts if v not in shown and v.verdict == NOT_AT_SCALE]:
        out.append(f"not at this scale (the papers state them for another window, device or model): {' '.join(rest)}")
    return "\n".join(out + groups_note(groups) + left_out_note(left, unfinished))


def claims_json(groups: Sequence[Group], judged_only: bool = False, left=(), unfinished: int = 0) -> str:
    """`fibexp-report --claims --json`: {"claims": [one object per claim (Verdict.as_dict)], "notes":
    what was left out and kept apart}, the same verdicts as the lines."""
    verdicts = [v for v in judge(groups) if not judged_only or v.verdict not in (INSUFFICIENT, NOT_AT_SCALE)]
    notes = groups_note(groups) + left_out_note(left, unfinished)
    return json.dumps({"claims": [v.as_dict() for v in verdicts], "notes": notes}, indent=1, allow_nan=False)


def _stats(v) -> str:
    scale, unit = unit_of(v.claim.metric)
    return "; ".join(c.text(scale, unit) for c in v.stats)


def markdown(groups: Sequence[Group], left=(), unfinished: int = 0, factor: int = 4,
             title: str = "fibexp report", judged_only: bool = False) -> str:
    verdicts = judge(groups)
    shown = [v for v in verdicts if not judged_only or v.verdict not in (INSUFFICIENT, NOT_AT_SCALE)]
    out = [f"# {title}", "", "## Claims", "",
           "Our models are tiny: each verdict tests the papers' bars on a direction or a ratio (criterion column), "
           "never their absolute numbers; a bar weaker than the paper's is said beside the verdict.", "",
           Table(["claim", "verdict", "ours", "paper", "statistics", "criterion"],
                 [[v.claim.id, v.label, "; ".join((v.detail,) + v.others), v.paper, _stats(v), v.claim.criterion()]
                  for v in shown]).markdown() if shown else "No claim can be judged by these runs.",
           ""]
    if rest := [v.claim.id for v in verdicts if v not in shown]:
        out[-1:] = [f"Not judged by these runs (cells, seeds or scale missing; `fibexp-plan` names what each needs): "
                    f"{' '.join(rest)}", ""]
    out += _seed_groups([r for g in groups for r in g.runs])
    for g in groups:
        out += [f"## {describe(g)}", ""]
        for s in sections(g, factor):
            out += [s.markdown().replace("## ", "### ", 1)]
    out += groups_note(groups) + left_out_note(left, unfinished)
    return "\n".join(out).rstrip() + "\n"


def _seed_groups(runs: Sequence[RunView]) -> list[str]:
    """The cells run at several seeds: each headline metric's mean and 95% interval, the numbers the
    MLflow UI's seed groups show (fibexp.report.groups)."""
    several = [g for g in seed_groups.seed_groups(runs) if len(g.seeds) > 1 and g.stats]
    if not several:
        return []
    rows = [[g.label, ",".join(map(str, g.seeds)), m, f"{seed_groups.sig4(a)} [{seed_groups.sig4(lo)}, {seed_groups.sig4(hi)}]"]
            for g in several for m, (a, lo, hi) in g.stats.items()]
    return ["## Seed groups", "", "Mean and 95% interval (Student t) over each cell's seeds, as the MLflow UI's seed "
            "groups show them.", "", Table(["cell", "seeds", "metric", "mean [95% interval]"], rows).markdown(), ""]


def write(out_dir: Path, groups: Sequence[Group], left=(), unfinished: int = 0, factor: int = 4,
          title: str = "fibexp report", judged_only: bool = False) -> list[Path]:
    """report.md and its figures (PNG) into out_dir; returns the files written."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / "report.md"]
    paths[0].write_text(markdown(groups, left, unfinished, factor, title, judged_only))
    for g in groups:
        for s in sections(g, factor):
            for name, make in s.figures:
                fig = make()
                fig.savefig(out_dir / name, dpi=110)
                plots.close(fig)
                paths.append(out_dir / name)
    return paths


def attach_to_parent(client: MlflowClient, experiment_id: str, sweep_id: str, parent_run_id: str,
                     run_ids: Sequence[str] | None = None, factor: int = 4) -> list[str]:
    """Called by the sweeper when a sweep ends: report.md and the figures of the sweep's runs
    (tag fibexp.sweep, plus `run_ids`: cells skipped because another sweep already ran them)
    become artifacts of the sweep's parent run, its claims those the runs can judge and one line
    naming the rest. Returns the artifact names."""
    views, unfinished = load_runs(client, [experiment_id], sweep_id, run_ids)
    groups, left = comparable(views)
    with tempfile.TemporaryDirectory() as d:
        paths = write(Path(d), groups, left, unfinished, factor, title=f"fibexp report: sweep {sweep_id}",
                      judged_only=True)
        client.log_artifacts(parent_run_id, d)
    return [p.name for p in paths]
