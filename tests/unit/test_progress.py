"""A sweep's progress lines: `[ended/total]` counts the cells in the order they end (a parallel
launcher starts several before the first ends), with the running and failed counts."""
from __future__ import annotations

from types import SimpleNamespace

from fibexp.sweep.progress import Progress


class Store:
    """search_runs as MLflow answers it for one config hash: the newest run of that cell."""

    def __init__(self, outcome: dict[str, tuple[str, dict]]):
        self.outcome = outcome

    def search_runs(self, experiment_ids, query, order_by=None):
        h = query.split("'")[1]
        status, metrics = self.outcome[h]
        return [SimpleNamespace(info=SimpleNamespace(status=status), data=SimpleNamespace(metrics=metrics))]


def test_lines_count_cells_in_the_order_they_end(capsys):
    client = Store({"h0": ("FINISHED", {"val/ppl/drama": 30.0}), "h1": ("FAILED", {}),
                    "h2": ("FINISHED", {"task/acc": 0.5})})
    p = Progress(client, "1", ["a", "b", "c"], ["h0", "h1", "h2"])
    p.started(0)
    p.started(1)
    p.started(1)  # a launcher's repeated call prints nothing
    p.ended(1)
    p.started(2)
    p.ended(2)
    p.ended(0)
    p.ended(0)
    assert capsys.readouterr().out.splitlines() == [
        "[0/3] start a  (1 running)",
        "[0/3] start b  (2 running)",
        "[1/3] failed b  0 s  (1 running, 1 failed)",
        "[1/3] start c  (2 running)",
        "[2/3] done  c  0 s  acc 0.500  (1 running, 1 failed)",
        "[3/3] done  a  0 s  val ppl 30.0  (0 running, 1 failed)"]


def test_a_finished_line_has_its_wall_time_and_headline(capsys):
    p = Progress(Store({"h0": ("FINISHED", {"val/ppl/drama": 30.0, "val/ppl/news": 40.0})}), "1", ["a"], ["h0"])
    p.started(0)
    p.ended(0)
    assert capsys.readouterr().out.splitlines()[-1] == "[1/1] done  a  0 s  val ppl 35.0  (0 running, 0 failed)"
