"""One rank (1..N-1) of a DDP run that rank 0 started on this machine (fibexp.training.ddp.Ranks):

  python -m fibexp.cli.rank RUN_DIR RANK

It trains with the job's resolved config that rank 0 left in RUN_DIR/.ddp/, so the command line
is never parsed again; an exception is written where rank 0's watcher reads it."""
from __future__ import annotations

import sys
from pathlib import Path

from fibexp.training import ddp, logs
from fibexp.training.run import run


def main(run_dir: str, r: int) -> int:
    cfg, ckpt = ddp.job(Path(run_dir))
    logs.quiet()
    try:
        run(cfg, run_dir=Path(run_dir), resume=ckpt)
    except BaseException as e:
        ddp.record_failure(Path(run_dir), r, e)
        raise
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], int(sys.argv[2])))
