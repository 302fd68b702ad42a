"""lm-eval's loader for fibexp_lastword (`custom_dataset` in fibexp_lastword.yaml): the jsonl beside
this file as an in-memory test split, so nothing is downloaded or cached."""
from __future__ import annotations

import json
from pathlib import Path


def load(**_metadata):
    import datasets

    path = Path(__file__).with_name("fibexp_lastword.jsonl")
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return {"test": datasets.Dataset.from_list(rows)}
