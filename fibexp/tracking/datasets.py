"""A run's data as MLflow dataset inputs: what the UI's Dataset column shows.

One `mlflow.data` dataset per source (a domain of the embedded corpus, or a Hugging Face
source): name = the source's name (the held-out set in val/ppl/<name>), digest = the corpus
fingerprint (the `fibexp.corpus` tag, so runs on different data never look alike), source =
where the text comes from (`load_dataset` arguments, or the shipped file), profile = its
weight and prepared token counts. The counts also go in as params
`data.tokens.<name>.<train|heldout>` for search and comparison.

A synthetic task's generator is its dataset input (`log_task_input`): name = the task, digest =
its fingerprint (`synthetic/<task>/v<version>`), source = the generating code with its version and
seeds, profile = the seeds and the held-out size; so the UI's Dataset column is filled for every run.
"""
from __future__ import annotations

import json

from mlflow.data.code_dataset_source import CodeDatasetSource
from mlflow.data.huggingface_dataset_source import HuggingFaceDatasetSource
from mlflow.data.meta_dataset import MetaDataset
from mlflow.data.sources import LocalArtifactDatasetSource
from mlflow.entities import DatasetInput, InputTag

from fibexp.tracking import store


class SourceDataset(MetaDataset):
    """A metadata-only dataset (the text stays where it is) that carries a profile."""

    def __init__(self, source, name: str, digest: str, profile: dict):
        self._profile = profile
        super().__init__(source=source, name=name, digest=digest)

    @property
    def profile(self) -> dict:
        return self._profile

    def to_dict(self) -> dict[str, str]:
        return {**super().to_dict(), "profile": json.dumps(self._profile)}


def token_counts(datamodule_or_counts) -> dict[tuple[str, str], int]:
    """{(name, split): tokens} from a prepared TokenDataModule, or such a dict itself."""
    streams = getattr(datamodule_or_counts, "streams", None)
    if streams is not None:
        return {key: s.n_tokens for key, s in streams.items()}
    return {tuple(k): int(v) for k, v in dict(datamodule_or_counts).items()}


def data_inputs(corpus, counts: dict[tuple[str, str], int]) -> list[SourceDataset]:
    weights = corpus.weights if hasattr(corpus, "weights") else None
    out = []
    for name in corpus.domains:
        profile = {"train_tokens": counts.get((name, "train")), "heldout_tokens": counts.get((name, "heldout"))}
        if hasattr(corpus, "source"):  # a Hugging Face corpus
            s = corpus.source(name)
            source = HuggingFaceDatasetSource(**s.main.describe())
            profile.update(weight=round(weights[name], 6), heldout=s.heldout_text,
                           extra=[p.describe() for p in s.extra])
        else:
            source = LocalArtifactDatasetSource(str(corpus.root / f"{name}.train.jsonl.xz"))
            profile.update(heldout="every:10 (build_corpus)")
        out.append(SourceDataset(source, name, corpus.fingerprint, profile))
    return out


def log_data_inputs(client, run_id: str, corpus, datamodule_or_counts) -> None:
    """Log the corpus's sources as dataset inputs (context "training") and the token counts
    as params. Idempotent: a resumed run may log the same again."""
    counts = token_counts(datamodule_or_counts)
    store.log_params(client, run_id, {f"data.tokens.{name}.{split}": str(n) for (name, split), n in counts.items()})
    inputs = [DatasetInput(d._to_mlflow_entity(), [InputTag("mlflow.data.context", "training")])
              for d in data_inputs(corpus, counts)]
    store.shared_write(client.log_inputs, run_id, datasets=inputs)  # cells starting at once


def task_input(name: str, fingerprint: str, version: int, seed: int, heldout_seed: int,
               heldout_examples: int) -> SourceDataset:
    """A synthetic task's generator as a metadata-only dataset (name, version, seeds)."""
    tags = {"generator": f"fibexp.tasks.{name}", "version": str(version), "seed": str(seed),
            "heldout_seed": str(heldout_seed)}
    profile = {"version": version, "seed": seed, "heldout_seed": heldout_seed, "heldout_examples": heldout_examples}
    return SourceDataset(CodeDatasetSource(tags), name, fingerprint, profile)


def log_task_input(client, run_id: str, task, seed: int) -> None:
    """Log a synthetic task's generator as the run's dataset input (context "training"). Idempotent."""
    d = task_input(task.name, task.data_fingerprint(None), int(task.version), int(seed),
                   int(task.conf.heldout_seed), int(task.conf.heldout_examples))
    inputs = [DatasetInput(d._to_mlflow_entity(), [InputTag("mlflow.data.context", "training")])]
    store.shared_write(client.log_inputs, run_id, datasets=inputs)  # cells starting at once
