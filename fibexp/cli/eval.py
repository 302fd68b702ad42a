"""`fibexp-eval RUN --tasks NAMES [--include-path DIR] [--limit N]`: score a trained run with
lm-evaluation-harness (exported as `fibexp-export --format hf` does, offline: local tasks, or
lm-eval's own where the datasets cache holds their data), the
results logged into the run's MLflow run as lm_eval/<task>/<metric> (fibexp.hf.eval)."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from fibexp.training import logs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="fibexp-eval", description=__doc__.splitlines()[0])
    parser.add_argument("run", help="a run dir (outputs/runs/<name>-<hash>), a .ckpt file in one, or an MLflow run id")
    parser.add_argument("--tasks", default="fibexp_lastword",
                        help="comma-separated lm-eval task names: local ones, or lm-eval's own whose data is cached "
                             "(default: fibexp_lastword, shipped with fibexp)")
    parser.add_argument("--include-path", type=Path, action="append", default=[],
                        help="another dir of lm-eval task YAMLs (repeatable; fibexp's own tasks are always included)")
    parser.add_argument("--limit", type=int, default=None, help="at most N examples per task")
    parser.add_argument("--tracking-uri", help="MLflow store of a run id (default: $MLFLOW_TRACKING_URI or outputs/)")
    args = parser.parse_args(argv)

    logs.quiet()
    try:
        from fibexp.hf import eval as hf_eval
        from fibexp.hf.export import requirements

        requirements()
        names = [t.strip() for t in args.tasks.split(",") if t.strip()]
        metrics, run_id = hf_eval.run_eval(args.run, names, args.include_path, args.limit, args.tracking_uri)
    except ValueError as e:
        print(f"fibexp-eval: error: {e}", file=sys.stderr)
        return 2
    for k in sorted(metrics):
        print(f"{k:<44} {metrics[k]:.4f}")
    print(f"logged {len(metrics)} lm_eval/... metrics into run {run_id}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
