"""fibexp-report: paper-style tables, figures and the claims' verdicts, straight from MLflow.

    fibexp-report                      # the tables of the newest comparable runs
    fibexp-report --claims [--tables]  # one verdict line per claim (A1-A9, B1-B14), exit 0
    fibexp-report --claims --json      # the same per claim as JSON (verdict, detail, statistics)
    fibexp-report --judged --tables    # `make run`: the claims its runs can judge, then the tables
    fibexp-report --sweep ID --out DIR # report.md and the figures (PNG) of one sweep

Measurement discipline: only runs with the same task, corpus fingerprint, step budget,
evaluation version, length and model size are tabulated together (task runs: the same task and
n; their depths and orders are rows); the others are named and left out. Each table puts the
papers' published numbers beside ours; our models are tiny, so read directions and ratios.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path



def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="fibexp-report", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tracking-uri", default=None, help="default: $MLFLOW_TRACKING_URI or outputs/mlflow.db")
    p.add_argument("--experiment", default="fibexp")
    p.add_argument("--sweep", default=None, help="only the runs of this sweep id (tag fibexp.sweep)")
    p.add_argument("--factor", type=int, default=4, help="extrapolation factor of the per-set change table")
    p.add_argument("--claims", action="store_true", help="print one verdict line per claim (A1-A9, B1-B14)")
    p.add_argument("--judged", action="store_true", help="like --claims, but only the claims these runs can judge")
    p.add_argument("--tables", action="store_true", help="with --claims or --out: print the tables too")
    p.add_argument("-v", "--verbose", action="store_true", help="with --claims: each claim's criterion")
    p.add_argument("--json", action="store_true",
                   help="with --claims or --judged: one JSON object per claim on stdout (its verdict, qualifier, "
                        "detail, the paper's numbers, and every comparison's difference, 95%% interval, p and "
                        "equivalence test), nothing else")
    p.add_argument("--out", type=Path, default=None, help="write report.md and the figures (PNG) to this folder")
    a = p.parse_args(argv)
    if a.json and not (a.claims or a.judged) or a.json and (a.tables or a.out):
        p.error("--json: needs --claims or --judged, and goes alone (not with --tables or --out)")
    # after the arguments: --help and usage errors do not wait for MLflow
    from fibexp.report.render import claims_json, claims_text, render, write
    from fibexp.report.runs import comparable, load_runs
    from fibexp.tracking import store, waiting

    uri = store.resolve_uri(a.tracking_uri, Path("outputs"))
    try:
        store.check_reachable(uri)
    except store.TrackingError as e:
        print(f"fibexp-report: error: {e}", file=sys.stderr)
        return 2
    client = waiting.Client(uri, prog="fibexp-report")  # a store another process holds locked is waited for
    exp = client.get_experiment_by_name(a.experiment)
    views, unfinished = load_runs(client, [exp.experiment_id], a.sweep) if exp else ([], 0)
    groups, left = comparable(views)
    a.claims = a.claims or a.judged
    if a.json:
        print(claims_json(groups, a.judged, left, unfinished))
        return 0
    if a.claims:
        print(claims_text(groups, a.verbose, a.judged, () if a.tables else left, 0 if a.tables else unfinished))
    if a.tables or not (a.claims or a.out):
        print(("\n" if a.claims else "") + render(groups, left, unfinished, a.factor))
    if a.out:
        title = f"fibexp report: sweep {a.sweep}" if a.sweep else "fibexp report"
        paths = write(a.out, groups, left, unfinished, a.factor, title)
        print(f"wrote {', '.join(str(x) for x in paths)}")
    if a.tables or not (a.claims or a.out):
        where = store.ui_base(uri)
        how = "" if uri.startswith(("http://", "https://")) else "`make ui`, then "
        print(f"\nCompare runs in the MLflow UI: {how}open {where} (store: {uri})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
