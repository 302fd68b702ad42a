"""fibexp-eval: score a trained run with lm-evaluation-harness and log the results into its MLflow run.

  fibexp-eval outputs/runs/dense-s42-0123456789 --tasks fibexp_lastword --limit 200
  fibexp-eval <run id> --tasks fibexp_lastword,lambada_openai

The run is exported as `fibexp-export --format hf` does (into a temporary folder) and scored offline,
on local tasks (fibexp's own, fibexp/deploy/lm_eval_tasks, and --include-path dirs) or on lm-eval's own
tasks whose data the datasets cache holds; each number lands in the run as lm_eval/<task>/<metric>
(fibexp.deploy.lm_eval). The run, the task names and the run's status are checked before anything is
imported or exported: a wrong one is refused in one line, exit code 2."""
from __future__ import annotations

import argparse
import importlib.util
import os
import re
import sys
from pathlib import Path

from fibexp.errors import refuse
from fibexp.training import logs

_TASK = re.compile(rb"^\s*(?:task|group|tag)\s*:\s*['\"]?([\w.-]+)", re.M)


def _yaml_files(folder: Path):
    for root, _, names in os.walk(folder):
        for name in names:
            if name.endswith((".yaml", ".yml")):
                yield os.path.join(root, name)


def _local_tasks(include: list[Path]) -> list[str]:
    """Task names of fibexp's task dir and the --include-path dirs (their `task:` lines)."""
    folders = [Path(importlib.util.find_spec("fibexp.deploy").submodule_search_locations[0]) / "lm_eval_tasks", *include]
    return sorted({m.decode() for f in folders for y in _yaml_files(f) for m in _TASK.findall(Path(y).read_bytes())})


def _mentioned_by_lm_eval(names: list[str]) -> set[str]:
    """The names that appear in any of lm-eval's own task YAMLs (a superset of its task, group and
    tag names; read without importing lm-eval, whose index takes ~20 s to build)."""
    spec = importlib.util.find_spec("lm_eval")
    if spec is None:
        return set()
    pending = {n: (n.encode(), re.compile(rb"(?<![\w.-])" + re.escape(n.encode()) + rb"(?![\w.-])")) for n in names}
    found = set()
    for path in _yaml_files(Path(spec.submodule_search_locations[0]) / "tasks"):
        with open(path, "rb", buffering=0) as f:
            text = f.read()
        for n in [n for n, (raw, pat) in pending.items() if raw in text and pat.search(text)]:
            found.add(n)
            del pending[n]
        if not pending:
            break
    return found


def check_task_names(names: list[str], include: list[Path]) -> None:
    """Refuse a name that is neither a local task nor mentioned by lm-eval's task YAMLs, as
    fibexp.deploy.lm_eval.check_tasks would after indexing them all."""
    local = _local_tasks(include)
    if not names:
        refuse("--tasks", "(none)", f"one or more of: {', '.join(local)}, or of lm-eval's own tasks")
    others = [n for n in names if n not in local]
    known = _mentioned_by_lm_eval(others) if others else set()
    for name in others:
        if name not in known:
            refuse("--tasks", name, f"an lm-eval task: the local ones, {', '.join(local)} (fibexp/deploy/lm_eval_tasks "
                                    "and --include-path dirs), or one of lm-eval's own (`lm-eval ls tasks`)")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="fibexp-eval", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", help="a run dir (outputs/runs/<name>-<hash>), a .ckpt file in one, or an MLflow run id")
    parser.add_argument("--tasks", default="fibexp_lastword",
                        help="comma-separated lm-eval task names: local ones, or lm-eval's own whose data is cached "
                             "(default: fibexp_lastword, shipped with fibexp)")
    parser.add_argument("--include-path", type=Path, action="append", default=[],
                        help="another dir of lm-eval task YAMLs (repeatable; fibexp's own tasks are always included)")
    parser.add_argument("--limit", type=int, default=None, help="at most N examples per task")
    parser.add_argument("--tracking-uri", help="MLflow store of a run id (default: $MLFLOW_TRACKING_URI or outputs/)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    names = [t.strip() for t in args.tasks.split(",") if t.strip()]
    try:  # what can be refused without torch, MLflow or lm-eval
        from fibexp.deploy.restore import locate, require_finished

        run_id, uri, _ = locate(args.run, args.tracking_uri)
        if args.limit is not None and args.limit < 1:
            refuse("--limit", args.limit, "an integer >= 1 (examples per task)")
        for folder in args.include_path:
            if not folder.is_dir():
                refuse("--include-path", folder, "a folder of lm-eval task YAMLs")
        check_task_names(names, args.include_path)
        require_finished(run_id, uri, "fibexp-eval")
    except ValueError as e:
        print(f"fibexp-eval: error: {e}", file=sys.stderr)
        return 2
    logs.quiet()
    try:
        from fibexp.deploy.lm_eval import run_eval
        from fibexp.deploy.transformers import requirements

        requirements()
        metrics, run_id = run_eval(args.run, names, args.include_path, args.limit, args.tracking_uri)
    except ValueError as e:
        print(f"fibexp-eval: error: {e}", file=sys.stderr)
        return 2
    for k in sorted(metrics):
        print(f"{k:<44} {metrics[k]:.4f}")
    print(f"logged {len(metrics)} lm_eval/... metrics into run {run_id}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
