"""`fibexp-report`: comparison tables straight from MLflow (search_runs), one row per cell.

Measurement discipline (SPEC): only runs with the same corpus fingerprint, step budget and
evaluation version are tabulated together; the others are named and left out."""
from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path

from mlflow.tracking import MlflowClient

from fibexp import tracking


def comparable_runs(client: MlflowClient, experiment: str, sweep: str | None = None):
    """Newest FINISHED run per (cell, seed), restricted to the newest run's corpus/steps/eval."""
    exp = client.get_experiment_by_name(experiment)
    if exp is None:
        return [], []
    query = "attributes.status = 'FINISHED'" + (f" and tags.`fibexp.sweep` = '{sweep}'" if sweep else "")
    runs = [r for r in client.search_runs([exp.experiment_id], query, order_by=["attributes.start_time DESC"],
                                          max_results=5000) if "fibexp.cell" in r.data.tags]
    if not runs:
        return [], []
    key = lambda r: (r.data.tags.get("fibexp.corpus"), r.data.params.get("trainer.max_steps"),
                     r.data.tags.get("fibexp.eval_version"), r.data.params.get("model.seq_len"))
    ref = key(runs[0])
    picked, seen, left_out = [], set(), []
    for r in runs:
        cell = (r.data.tags["fibexp.cell"], r.data.params.get("seed"))
        if key(r) != ref:
            left_out.append(r)
        elif cell not in seen:
            seen.add(cell)
            picked.append(r)
    return sorted(picked, key=lambda r: (r.data.tags["fibexp.cell"], r.data.params.get("seed"))), left_out


def table(runs, sets: list[str], cell_fn) -> str:
    rows = [[r.data.tags["fibexp.cell"], str(r.data.params.get("seed", ""))] + [cell_fn(r, s) for s in sets]
            for r in runs]
    header = ["cell", "seed"] + sets
    widths = [max(len(row[i]) for row in rows + [header]) for i in range(len(header))]
    fmt = lambda row: "  ".join(v.ljust(w) if i == 0 else v.rjust(w) for i, (v, w) in enumerate(zip(row, widths)))
    return "\n".join(fmt(row) for row in [header] + rows)


def render(runs, left_out, factor: int = 4) -> str:
    if not runs:
        return "No finished fibexp runs found."
    m = lambda r, name: r.data.metrics.get(name)
    sets = sorted({k.split("/", 2)[2] for r in runs for k in r.data.metrics if k.startswith("val/ppl/")})
    r0 = runs[0]
    seq_len = int(r0.data.params.get("model.seq_len", 0))
    head = (f"{len(runs)} runs, {r0.data.params.get('trainer.max_steps')} steps each (equal budget), "
            f"corpus {r0.data.tags.get('fibexp.corpus')}, eval v{r0.data.tags.get('fibexp.eval_version')}")
    fmt = lambda v, spec: "-" if v is None else format(v, spec)
    out = [head, "", f"Held-out perplexity at the training length ({seq_len} tokens):",
           table(runs, sets, lambda r, s: fmt(m(r, f"val/ppl/{s}"), ".2f")), "",
           f"Perplexity at {factor}x the training length ({factor * seq_len} tokens) and its change vs 1x:",
           table(runs, sets, lambda r, s: "-" if m(r, f"extrap/ppl_x{factor}/{s}") is None else
                 f"{m(r, f'extrap/ppl_x{factor}/{s}'):.2f} ({m(r, f'extrap/rel_x{factor}/{s}'):+.1%})")]
    if any(f"val/bpc/{s}" in r.data.metrics for r in runs for s in sets):
        out += ["", "Bits per character (training length):",
                table(runs, sets, lambda r, s: fmt(m(r, f"val/bpc/{s}"), ".3f"))]
    if left_out:
        why = defaultdict(int)
        for r in left_out:
            why[r.data.tags.get("fibexp.cell")] += 1
        out += ["", f"Left out {len(left_out)} older runs with another corpus, step budget, length or eval version "
                    f"(not comparable): " + ", ".join(f"{c} x{n}" for c, n in sorted(why.items()))]
    return "\n".join(out)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="fibexp-report", description=__doc__.splitlines()[0])
    p.add_argument("--tracking-uri", default=None, help="default: $MLFLOW_TRACKING_URI or outputs/mlflow.db")
    p.add_argument("--experiment", default="fibexp")
    p.add_argument("--sweep", default=None, help="only the runs of this sweep id (tag fibexp.sweep)")
    p.add_argument("--factor", type=int, default=4, help="extrapolation factor to tabulate")
    a = p.parse_args(argv)
    uri = tracking.resolve_uri(a.tracking_uri, Path("outputs"))
    try:
        tracking.check_reachable(uri)
    except tracking.TrackingError as e:
        print(f"fibexp-report: error: {e}", file=sys.stderr)
        return 2
    runs, left_out = comparable_runs(MlflowClient(uri), a.experiment, a.sweep)
    print(render(runs, left_out, a.factor))
    print(f"\nCompare runs in the MLflow UI: `make ui`, then open http://127.0.0.1:5000 (store: {uri})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
