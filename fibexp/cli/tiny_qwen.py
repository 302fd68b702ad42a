"""Write a tiny RANDOM Qwen3 (fibexp.tasks.graft.tiny_qwen) to graft into offline: what task=graft's
tests and `make reproduce SCALE=smoke` use, since Qwen3-0.6B's weights cannot be downloaded here.

    .venv/bin/python -m fibexp.cli.tiny_qwen outputs/tiny-qwen3"""
from __future__ import annotations

import argparse


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fibexp.cli.tiny_qwen", description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?", default="outputs/tiny-qwen3", help="the folder to write (default: %(default)s)")
    args = parser.parse_args(argv)
    from fibexp.tasks.graft.tiny_qwen import save_tiny_qwen3

    print(save_tiny_qwen3(args.out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
