"""fibexp-prepare: open, check and tokenize a run's data once, with the same config as fibexp-train.

  fibexp-prepare +scale=paper
  fibexp-prepare data=hf data.sources.0.data_files=/path/to/texts/*.jsonl

Why a separate step: on a cluster the Hub is read once from a node with internet, and the
jobs of a sweep then only read (and verify) the prepared shards under paths.cache_dir instead
of all tokenizing the same corpus at once."""
from __future__ import annotations

import sys

import hydra
from omegaconf import DictConfig

from fibexp.cli.app import run_cli, with_overrides
from fibexp.config.schema import CONF_DIR, register
from fibexp.errors import RefusalExit, first_line


@hydra.main(version_base="1.3", config_path=CONF_DIR, config_name="train")
def _main(cfg: DictConfig) -> None:
    from fibexp.data.prepare import prepare  # after the validation pass: --help and refusals do not pay for it

    try:  # the config passed the validation pass (fibexp.checks.preflight) before this job started
        counts = prepare(cfg)
    except ValueError as e:  # a source that cannot be read: one line, exit 2
        raise RefusalExit(first_line(e)) from None
    width = max(len(name) for name, _ in counts)
    for (name, split), n in counts.items():
        print(f"{name:<{width}}  {split:<7}  {n:>14,} tokens")


def main() -> None:
    """Hydra logs go under outputs/prepare/, not into a training run's directory. The config
    passes fibexp-train's validation pass first (fibexp.checks.preflight), the machine unchecked:
    data for GPU jobs is prepared on a node with internet, often without a GPU."""
    register()
    if not any(a.startswith("hydra.run.dir=") for a in sys.argv[1:]):
        sys.argv[1:] = with_overrides(sys.argv[1:], ["hydra.run.dir=${paths.output_dir}/prepare"])
    run_cli("fibexp-prepare", _main, CONF_DIR, machine=False, inputs=False, description=__doc__)


if __name__ == "__main__":
    main()
