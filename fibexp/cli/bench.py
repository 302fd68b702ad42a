"""Benchmarks: one attention layer (`attention`), the whole model (`model`), claim A9's
forward speed of every paper-A attention family (`latency`) and decoding token by token (`decode`).

    fibexp-bench attention [--lengths 1024 4096 16384] [--repeats N] [--out DIR] [--quick]
    fibexp-bench model [--lengths 64 256 1024 4096] [--repeats N] [--no-compile] [--quick]
    fibexp-bench latency [--preset tiny|cpu|paper60m] [--window W] [--device cpu|cuda] [--quick]
    fibexp-bench decode [--out DIR]                  # tokens/s and cache bytes at 1x/4x/16x T
    fibexp-bench cli [--repeats N] [--only TEXT]     # --help, TAB and refusals of every command, timed
    fibexp-bench grid [--repeats N] [--skip TEXT] [--config-name NAME] [OVERRIDE ...]
                                                     # a sweep's command to its first job: compose, check

What they measure and how: fibexp.bench.attention, .whole_model, .family_latency and .decode_speed
(`cli`: .commands, `grid`: .grid_start). The hidden subcommands (`_measure`, `_measure_mem_first`,
`_model_case`, `_crossover`) are the fresh child processes the first two spawn (`python -m
fibexp.cli.bench <subcommand>`), one per measurement; each prints its JSON as its last stdout line.
"""
from __future__ import annotations

import argparse
import json
import sys

from fibexp.bench import cases
from fibexp.errors import Refusal
from fibexp.model.spec import Impl


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="fibexp-bench", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True, metavar="{attention,model,latency,decode,cli,grid}")
    att = sub.add_parser("attention", help="one attention layer: dense vs gather vs mask vs learned")
    att.add_argument("--lengths", type=int, nargs="+", default=None, metavar="T",
                     help=f"sequence lengths (default {' '.join(map(str, cases.FULL_LENGTHS))}; "
                          f"--quick: {' '.join(map(str, cases.QUICK_LENGTHS))})")
    att.add_argument("--repeats", type=int, default=None, help="timed repeats, median reported (default 5; --quick: 1)")
    att.add_argument("--out", default="outputs/bench", help="output folder (default outputs/bench, relative to cwd)")
    att.add_argument("--quick", action="store_true", help="tiny smoke run (T=64 128, 1 repeat)")
    att.add_argument("--mask-limit-gib", type=float, default=8.0,
                     help="skip the quadratic mask path when its estimated peak exceeds this (default 8)")
    att.add_argument("--timeout", type=float, default=1800, help="seconds per (path, T) process")
    mod = sub.add_parser("model", help="the whole model: training step and inference of every mixer, "
                                       "the no-mixer bound, torch.compile, and auto's crossover")
    mod.add_argument("--lengths", type=int, nargs="+", default=None, metavar="T",
                     help="only these of the cases (tiny T=64 x16, 256 x8; paper-width T=1024 x2, 4096 x1)")
    mod.add_argument("--repeats", type=int, default=None,
                     help="timed rounds, median reported (default: 7 at T <= 256, 5 at 1024, 3 at 4096; --quick: 2)")
    mod.add_argument("--threads", type=int, default=None, help="torch threads (default: the CPUs this process may use)")
    mod.add_argument("--device", choices=("cpu", "cuda"), default=None, help="default: cuda when available")
    mod.add_argument("--compile", dest="compile", action="store_true", default=None,
                     help=f"measure torch.compile of {', '.join(cases.COMPILE_PATHS)} (default: on, up to "
                          f"T={cases.COMPILE_MAX_T}; off with --quick)")
    mod.add_argument("--no-compile", dest="compile", action="store_false")
    mod.add_argument("--out", default="outputs/bench", help="output folder (default outputs/bench, relative to cwd)")
    mod.add_argument("--quick", action="store_true", help="smoke run in seconds (tiny preset, T=32 64 x2, 2 rounds)")
    mod.add_argument("--timeout", type=float, default=1800, help="seconds per (preset, T) process")
    lat = sub.add_parser("latency", help="claim A9: forward tokens/s of every paper-A attention family by the "
                                         "paper's protocol (batch 8 x T, 2 warm-up + 5 timed passes), interleaved")
    lat.add_argument("--preset", choices=cases.LATENCY_PRESETS, default=None,
                     help="conf/model preset; T = its training length (default: paper60m on CUDA, cpu on CPU)")
    lat.add_argument("--window", type=int, default=8, help="attention.window W of the sparse families (default 8)")
    lat.add_argument("--impl", choices=[i.value for i in Impl], default="auto",
                     help="attention.impl of the integer-offset families (default auto; paper A ran them as a bool "
                          "mask: --impl mask)")
    lat.add_argument("--device", choices=("cpu", "cuda"), default=None, help="default: cuda when available")
    lat.add_argument("--threads", type=int, default=None, help="torch threads (default: the CPUs this process may use)")
    lat.add_argument("--out", default="outputs/bench", help="output folder (default outputs/bench, relative to cwd)")
    lat.add_argument("--quick", action="store_true", help=f"smoke run in seconds ({cases.LATENCY_QUICK['preset']} preset at "
                                                          f"T={cases.LATENCY_QUICK['seq_len']})")
    dec = sub.add_parser("decode", help="decoding with the per-layer caches: tokens/s and cache bytes at 1x, 4x "
                                        "and 16x the training length, dense vs sparse vs hypercube")
    dec.add_argument("--out", default="outputs/bench", help="output folder (default outputs/bench, relative to cwd)")
    cli = sub.add_parser("cli", help="how fast every command answers --help, TAB completion and bad input "
                                     "(whole processes, beside `import torch, lightning`)")
    cli.add_argument("--repeats", type=int, default=5, help="timed runs per case, median reported (default 5)")
    cli.add_argument("--only", default=None, help="only the cases whose name contains this text")
    cli.add_argument("--out", default="outputs/bench", help="output folder (default outputs/bench, relative to cwd)")
    grid = sub.add_parser("grid", help="how long a sweep takes from its command to its first job: composing and "
                                       "checking every cell (default: the paper grid), fresh processes")
    grid.add_argument("--config-name", default="reproduce", help="a sweep of sweeps/ (default reproduce)")
    grid.add_argument("--skip", default=None, help="leave out the cells one of whose overrides contains this text "
                                                   "(e.g. graft: Qwen3-0.6B is not on an offline machine)")
    grid.add_argument("--repeats", type=int, default=3, help="fresh processes, median reported (default 3)")
    grid.add_argument("--out", default="outputs/bench", help="output folder (default outputs/bench, relative to cwd)")
    grid.add_argument("overrides", nargs="*", default=None, help="the sweep's overrides (default: scale=paper)")
    child = sub.add_parser("_grid")
    child.add_argument("--config-name", required=True)
    child.add_argument("--skip", default=None)
    child.add_argument("overrides", nargs="*")
    for name in ("_measure", "_measure_mem_first"):  # internal: one fresh process per measurement
        m = sub.add_parser(name)
        m.add_argument("--path", choices=cases.PATHS, required=True)
        m.add_argument("--length", type=int, required=True)
        m.add_argument("--repeats", type=int, default=1)
        m.add_argument("--threads", type=int, default=None)
    for name in ("_model_case", "_crossover"):  # internal: one fresh process per (preset, T) / preset
        m = sub.add_parser(name)
        m.add_argument("--preset", choices=tuple(cases.MODEL_PRESETS), required=True)
        m.add_argument("--length", type=int)
        m.add_argument("--lengths", type=int, nargs="+")
        m.add_argument("--batch", type=int)
        m.add_argument("--tokens", type=int, default=cases.CROSSOVER_TOKENS)
        m.add_argument("--repeats", type=int, default=1)
        m.add_argument("--threads", type=int, default=None)
        m.add_argument("--device", default="cpu")
        m.add_argument("--compile", action="store_true")
    return parser


def main(argv=None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.cmd == "cli":
        from fibexp.bench import commands

        if args.repeats < 1:
            parser.error("--repeats: must be >= 1")
        commands.run(args)
        return 0
    if args.cmd in ("grid", "_grid"):
        from fibexp.bench import grid_start

        if args.cmd == "_grid":
            print(json.dumps(grid_start.child(args.config_name, args.overrides, args.skip)))
            return 0
        if args.repeats < 1:
            parser.error("--repeats: must be >= 1")
        args.overrides = args.overrides or ["scale=paper"]
        grid_start.run(args)
        return 0
    if args.cmd in ("attention", "model"):
        if args.repeats is not None and args.repeats < 1:
            parser.error("--repeats: must be >= 1")
        if args.lengths is not None and min(args.lengths) < 1:
            parser.error("--lengths: must be >= 1")
    if args.cmd == "latency" and args.window < 1:
        parser.error(str(Refusal("--window", args.window, "an integer >= 1")))
    import torch  # the benchmarks themselves: not before the command line is read

    from fibexp.bench import attention, crossover, decode_speed, family_latency, harness, whole_model

    if args.cmd.startswith("_") and args.threads is None:
        args.threads = harness.n_threads()
    if args.cmd == "latency":
        if args.device == "cuda" and not torch.cuda.is_available():
            parser.error(str(Refusal("--device", "cuda", "cpu (no CUDA device here)")))
        family_latency.run(args)
    elif args.cmd == "attention":
        attention.run(args)
    elif args.cmd == "model":
        whole_model.run(args)
    elif args.cmd == "decode":
        decode_speed.run(args)
    elif args.cmd == "_measure":
        print(json.dumps(attention.measure_child(args.path, args.length, args.repeats, args.threads)))
    elif args.cmd == "_model_case":
        print(json.dumps(whole_model.model_case(args.preset, args.length, args.batch, args.repeats, args.threads,
                                                args.device, args.compile)))
    elif args.cmd == "_crossover":
        print(json.dumps({"points": crossover.crossover_scan(args.preset, args.lengths, args.tokens, args.repeats,
                                                             args.threads, args.device)}))
    else:
        print(json.dumps(attention.measure_first_step(args.path, args.length, args.threads,
                                                      attention.stagger_alpha())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
