"""`fibexp-eval RUN --tasks NAMES`: a trained run scored by lm-evaluation-harness. The run is
exported to a temporary `transformers` folder by `fibexp-export --format hf`'s own code
(fibexp.deploy.transformers.export_run), `lm_eval.simple_evaluate` runs it as model "hf" with
trust_remote_code, offline, on local tasks or lm-eval's own tasks whose data the `datasets` cache
holds (checked before the export), and every numeric result lands in the run's own
MLflow run as `lm_eval/<task>/<metric>` (`lm_eval/<task>/<metric>/<filter>` for a filter other
than lm-eval's "none").

The shipped task, `fibexp_lastword` (fibexp/deploy/lm_eval_tasks/): last-word prediction on sentences
of the embedded corpus's held-out prose (text no run trained on), LAMBADA's format: the context is
the sentence without its last word, the target that word with its leading space; metrics `acc`
(the word is the greedy continuation) and `perplexity` (of the target). `lastword_examples`
rebuilds its examples from the corpus (the shipped jsonl is that list, one json per line)."""
from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import tempfile
import time
from pathlib import Path
from typing import Sequence

from fibexp.errors import Refusal, first_line, refuse
from fibexp.deploy.onnx import TOLERANCE

TASKS_DIR = Path(__file__).resolve().parent / "lm_eval_tasks"
LASTWORD = TASKS_DIR / "fibexp_lastword.jsonl"
OFFLINE = {"HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def lastword_examples(corpus, n: int = 200) -> list[dict[str, str]]:
    """Sentences of 8-40 words from the held-out prose whose last word has >= 3 letters, n of them
    evenly spaced over all such sentences: {"context", "target" (the word), "domain"}."""
    found = []
    for doc in corpus.documents("prose", "heldout"):
        for s in re.split(r"(?<=[.;:?!])\s+", " ".join(doc.split())):
            s = re.sub(r"^\d+\.\s*", "", s)  # verse numbers
            m = re.fullmatch(r"(.*\S)\s+([A-Za-z]{3,})[.;:?!]", s)
            if m and 8 <= len(s.split()) <= 40:
                found.append({"context": m[1], "target": m[2], "domain": "prose"})
    step = max(1, len(found) // n)
    return found[::step][:n]


def task_manager(names: Sequence[str] = (), include: Sequence[Path] = ()):
    """lm-eval's TaskManager over the shipped tasks and `include`, and over lm-eval's own tasks
    too when a name is none of those (indexing its ~14,000 names takes about 20 s)."""
    from lm_eval.tasks import TaskManager

    paths = [str(TASKS_DIR), *map(str, include)]
    local = TaskManager(include_path=paths, include_defaults=False)
    if all(n in local.all_tasks for n in names):
        return local
    return TaskManager(include_path=paths, include_defaults=True)


def _local(manager) -> list[str]:
    """The names from fibexp's and --include-path task dirs (not lm-eval's own)."""
    import lm_eval.tasks

    builtin = Path(lm_eval.tasks.__file__).resolve().parent
    return [n for n, e in manager.task_index.items() if e.yaml_path and builtin not in Path(e.yaml_path).resolve().parents]


def check_tasks(names: Sequence[str], manager) -> list[str]:
    """The task names, each one lm-eval knows (local task dirs, and its own tasks where the manager
    has them); else a Refusal listing the local ones."""
    local = ", ".join(_local(manager))
    if not names:
        refuse("--tasks", "(none)", f"one or more of: {local}, or of lm-eval's own tasks")
    for name in names:
        if name not in manager.all_tasks:
            refuse("--tasks", name, f"an lm-eval task: the local ones, {local} (fibexp/deploy/lm_eval_tasks and "
                                    "--include-path dirs), or one of lm-eval's own (`lm-eval ls tasks`)")
    return list(names)


def check_cached(names: Sequence[str], manager) -> None:
    """Each task loads its data offline (lm-eval's own tasks read theirs from the Hugging Face Hub,
    so here only from the `datasets` cache) before any export or compute; else a Refusal naming
    the task and what is missing."""
    import datasets

    quiet = logging.getLogger("lm_eval")
    level = quiet.level
    quiet.setLevel(logging.ERROR)  # a check: lm-eval's loading notes belong to the evaluation itself
    try:
        with offline():
            for name in names:
                try:
                    manager.load([name])
                except (OSError, ValueError) as e:
                    refuse("--tasks", name, f"a task whose data is in the datasets cache "
                                            f"({datasets.config.HF_DATASETS_CACHE}): {first_line(e)}; run it once "
                                            "where the Hub is reachable")
    finally:
        quiet.setLevel(level)


@contextlib.contextmanager
def offline():
    """HF_DATASETS_OFFLINE / HF_HUB_OFFLINE / TRANSFORMERS_OFFLINE set while lm-eval runs, and the
    flags `huggingface_hub` and `datasets` read from them at import (so an imported library does not
    spend a minute retrying the Hub)."""
    import datasets.config
    import huggingface_hub.constants

    flags = [(huggingface_hub.constants, "HF_HUB_OFFLINE"), (datasets.config, "HF_HUB_OFFLINE"),
             (datasets.config, "HF_DATASETS_OFFLINE")]
    before = {k: os.environ.get(k) for k in OFFLINE}
    was = [getattr(m, a) for m, a in flags]
    os.environ.update(OFFLINE)
    for m, a in flags:
        setattr(m, a, True)
    try:
        yield
    finally:
        for k, v in before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        for (m, a), v in zip(flags, was):
            setattr(m, a, v)


def evaluate(folder: Path, names: Sequence[str], manager, limit: int | None = None, batch_size: int = 8,
             bootstrap_iters: int = 1000) -> dict:
    """lm_eval.simple_evaluate on the exported folder; its `results` ({task: {"acc,none": ...}})."""
    import lm_eval
    import torch

    model_args = {"pretrained": str(folder), "trust_remote_code": True, "dtype": "float32",
                  "device": "cuda" if torch.cuda.is_available() else "cpu"}
    with offline():
        out = lm_eval.simple_evaluate(model="hf", model_args=model_args, tasks=list(names), task_manager=manager,
                                      limit=limit, batch_size=batch_size, bootstrap_iters=bootstrap_iters,
                                      log_samples=False)
    return out["results"]


def metrics(results: dict) -> dict[str, float]:
    """`lm_eval/<task>/<metric>[/<filter>]` of every finite number in lm-eval's results."""
    out = {}
    for task, row in results.items():
        for key, value in row.items():
            metric, _, flt = key.partition(",")
            if not flt or isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
                continue
            out[f"lm_eval/{task}/{metric}" + ("" if flt == "none" else f"/{flt}")] = float(value)
    return out


def run_eval(run, names: Sequence[str], include: Sequence[Path] = (), limit: int | None = None,
             tracking_uri: str | None = None, log: bool = True) -> tuple[dict[str, float], str]:
    """Checks (the run has a checkpoint, every task is known and its data at hand, the run FINISHED)
    before any export, then exports, evaluates and logs. Returns (the metrics, the run id they were
    logged into)."""
    from mlflow.entities import Metric

    from fibexp.deploy.transformers import export_run
    from fibexp.deploy.restore import locate, require_finished
    from fibexp.tracking import waiting

    run_id, uri, _ = locate(run, tracking_uri)
    if limit is not None and limit < 1:
        refuse("--limit", limit, "an integer >= 1 (examples per task)")
    manager = task_manager(names, include)
    names = check_tasks(names, manager)
    check_cached(names, manager)
    require_finished(run_id, uri, "fibexp-eval")
    with tempfile.TemporaryDirectory(prefix="fibexp-eval-") as tmp:
        _, _, folder, deviation = export_run(run, Path(tmp) / "hf", tracking_uri)
        if deviation > TOLERANCE:
            raise Refusal("export", f"transformers vs fibexp deviate by {deviation:.2e}", f"<= {TOLERANCE:.0e}")
        results = evaluate(folder, names, manager, limit)
    out = metrics(results)
    if log:
        ts = int(time.time() * 1000)
        client = waiting.Client(uri, prog="fibexp-eval")  # a locked store is waited for: the scores are kept
        client.log_batch(run_id, metrics=[Metric(k, v, ts, 0) for k, v in out.items()])
        client.set_tag(run_id, "fibexp.lm_eval", json.dumps({"tasks": list(names), "limit": limit}))
    return out, run_id
