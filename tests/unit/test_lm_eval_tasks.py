"""fibexp-eval's local lm-eval task and result naming (fibexp.deploy.lm_eval): the shipped jsonl is what
the held-out prose rebuilds to, lm-eval's TaskManager finds the task and loads its examples offline,
unknown names are refused listing the local ones (lm-eval's own tasks are indexed only when a name
asks for one: tests/e2e/test_lm_eval.py), and lm-eval's keys become MLflow metric names."""
from __future__ import annotations

import json

import pytest

pytest.importorskip("lm_eval")

from fibexp.data.corpus import EmbeddedCorpus  # noqa: E402
from fibexp.errors import Refusal  # noqa: E402
from fibexp.deploy import lm_eval  # noqa: E402


def test_shipped_lastword_jsonl_is_rebuilt_from_the_heldout_prose():
    shipped = [json.loads(line) for line in lm_eval.LASTWORD.read_text(encoding="utf-8").splitlines()]
    assert shipped == lm_eval.lastword_examples(EmbeddedCorpus(domains=("prose",)))
    assert len(shipped) == 200 and len({e["context"] for e in shipped}) == 200
    heldout = " ".join(" ".join(d.split()) for d in EmbeddedCorpus(domains=("prose",)).documents("prose", "heldout"))
    assert all(f"{e['context']} {e['target']}" in heldout and e["target"].isalpha() for e in shipped)


def test_task_manager_loads_the_local_task_offline(monkeypatch):
    for k, v in lm_eval.OFFLINE.items():
        monkeypatch.setenv(k, v)
    manager = lm_eval.task_manager()
    assert manager.all_tasks == ["fibexp_lastword"]  # lm-eval's own (downloading) tasks are left out
    task = manager.load(["fibexp_lastword"])["tasks"]["fibexp_lastword"]
    docs = list(task.test_docs())
    first = json.loads(lm_eval.LASTWORD.read_text(encoding="utf-8").splitlines()[0])
    assert len(docs) == 200 and task.doc_to_text(docs[0]) == first["context"]
    assert task.doc_to_target(docs[0]) == " " + first["target"]
    with pytest.raises(Refusal, match=r"^--tasks: lambada_openai; allowed: an lm-eval task: the local ones, "
                                      r"fibexp_lastword \(fibexp/deploy/lm_eval_tasks and --include-path dirs\), or one of "
                                      r"lm-eval's own"):
        lm_eval.check_tasks(["fibexp_lastword", "lambada_openai"], manager)


def test_results_become_lm_eval_task_metric_names():
    results = {"fibexp_lastword": {"alias": "fibexp_lastword", "acc,none": 0.25, "acc_stderr,none": 0.1,
                                   "perplexity,none": 812.5, "perplexity_stderr,none": "N/A",
                                   "exact_match,strict": 1, "sample_len": 20}}
    assert lm_eval.metrics(results) == {"lm_eval/fibexp_lastword/acc": 0.25, "lm_eval/fibexp_lastword/acc_stderr": 0.1,
                                        "lm_eval/fibexp_lastword/perplexity": 812.5,
                                        "lm_eval/fibexp_lastword/exact_match/strict": 1.0}


def test_include_path_adds_a_users_task_dir(tmp_path, monkeypatch):
    for k, v in lm_eval.OFFLINE.items():
        monkeypatch.setenv(k, v)
    for name in ("lastword.py", "fibexp_lastword.jsonl"):
        (tmp_path / name).write_bytes((lm_eval.TASKS_DIR / name).read_bytes())
    yaml = (lm_eval.TASKS_DIR / "fibexp_lastword.yaml").read_text(encoding="utf-8")
    (tmp_path / "mine.yaml").write_text(yaml.replace("task: fibexp_lastword", "task: my_lastword"), encoding="utf-8")
    manager = lm_eval.task_manager(include=[tmp_path])
    assert manager.all_tasks == ["fibexp_lastword", "my_lastword"]
    assert lm_eval.check_tasks(["my_lastword"], manager) == ["my_lastword"]
    assert len(list(manager.load(["my_lastword"])["tasks"]["my_lastword"].test_docs())) == 200
