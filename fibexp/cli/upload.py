"""fibexp-upload: send the tracking calls that runs kept while their tracking server was away.

  fibexp-upload outputs/runs/dense-s42-0123456789 [more run dirs] [--tracking-uri http://host:5000]

A run whose server went away keeps its metrics, params and end in its run dir
(tracking-journal.jsonl, fibexp.tracking.journal); this sends them, in order, once the server is
back. Exit code 75 (EX_TEMPFAIL) while the server is still away."""
from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path



def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="fibexp-upload", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dirs", nargs="+", type=Path, help="run dirs holding a tracking-journal.jsonl")
    parser.add_argument("--tracking-uri", help="where to send them (default: the URI the run recorded)")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for the server per run dir")
    args = parser.parse_args(argv)
    from fibexp.tracking import journal  # after the arguments: --help does not wait for MLflow

    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    for run_dir in args.run_dirs:
        try:
            n = journal.upload(run_dir, args.tracking_uri, args.timeout)
        except ValueError as e:
            print(f"fibexp-upload: error: {e}", file=sys.stderr)
            sys.exit(2)
        except journal.TrackingUnavailable as e:
            print(e, file=sys.stderr)
            sys.exit(journal.EX_TEMPFAIL)
        print(f"{run_dir}: {n} tracking calls sent" if n else f"{run_dir}: nothing to send")


if __name__ == "__main__":
    main()
