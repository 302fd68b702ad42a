"""fibexp-generate: sample text from a trained language model run, streamed token by token.

  fibexp-generate outputs/runs/dense-s42-0123456789 --prompt "Once upon a time"
  fibexp-generate <run id> --prompt "def main(" --temperature 0 --max-new-tokens 128

Decoding keeps a cache per layer (fibexp.deploy.decode; --no-cache recomputes the whole prefix) and
the text is decoded with the run's own tokenizer. The run is found and checked (it must be a
language model's run with a checkpoint) before torch is imported: a wrong one is refused in one
line, exit code 2."""
from __future__ import annotations

import argparse
import math
import sys
import time

from fibexp.errors import Refusal
from fibexp.training import logs


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="fibexp-generate", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", help="a run dir (outputs/runs/<name>-<hash>), a .ckpt file in one, or an MLflow run id")
    parser.add_argument("--prompt", required=True, help="text to continue")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--temperature", type=float, default=0.8, help="0: greedy")
    parser.add_argument("--top-k", type=int, default=None, help="sample among the k likeliest tokens")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-cache", action="store_true", help="recompute the whole prefix at every token")
    parser.add_argument("--tracking-uri", help="MLflow store of a run id (default: $MLFLOW_TRACKING_URI or outputs/)")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.max_new_tokens < 1:
        parser.error(str(Refusal("--max-new-tokens", args.max_new_tokens, "an integer >= 1")))
    if args.top_k is not None and args.top_k < 1:
        parser.error(str(Refusal("--top-k", args.top_k, "an integer >= 1")))
    if not (math.isfinite(args.temperature) and args.temperature >= 0):
        parser.error(str(Refusal("--temperature", args.temperature, "a finite number >= 0 (0: greedy)")))
    if not args.prompt:
        parser.error(str(Refusal("--prompt", "empty", "some text")))
    try:  # the run, without torch or MLflow
        from fibexp.deploy.restore import find_run, locate

        run_id, uri, _ = locate(args.run, args.tracking_uri)
        task = ((find_run(uri, run_id) or {}).get("tags") or {}).get("fibexp.task", "lm")
        if task != "lm":
            raise Refusal("task", task, "lm (a language model's run)")
    except ValueError as e:
        print(f"fibexp-generate: error: {e}", file=sys.stderr)
        return 2
    return _generate(args)


def _generate(args) -> int:
    import torch

    from fibexp.deploy import decode
    from fibexp.deploy.restore import load_run, run_tokenizer

    logs.quiet()
    try:
        cfg, model = load_run(args.run, args.tracking_uri)
        if cfg.get("task", {}).get("name", "lm") not in ("lm", None):
            raise Refusal("task", cfg.task.name, "lm (a language model's run)")
        tok = run_tokenizer(cfg)
        ids = tok.encode(args.prompt)
        if not ids:
            raise Refusal("--prompt", "empty after tokenization", "some text")
        prompt = torch.tensor([ids])
        step = decode.StepModel(model, len(ids) + args.max_new_tokens)
    except ValueError as e:
        print(f"fibexp-generate: error: {e}", file=sys.stderr)
        return 2
    torch.set_num_threads(max(1, torch.get_num_threads()))
    sys.stdout.write(args.prompt)
    sys.stdout.flush()
    out: list[int] = []
    shown = ""

    def on_token(i: int):
        nonlocal shown
        out.append(i)
        text = tok.decode(out)
        if not text.endswith("\ufffd"):  # wait for the rest of a multi-byte character
            sys.stdout.write(text[len(shown):])
            sys.stdout.flush()
            shown = text

    start = time.perf_counter()
    decode.generate(model, prompt, args.max_new_tokens, args.temperature, args.top_k, args.seed, on_token,
                    cached=not args.no_cache)
    took = time.perf_counter() - start
    sys.stdout.write(tok.decode(out)[len(shown):] + "\n")
    how = ("recomputing the prefix (--no-cache)" if args.no_cache
           else "recomputing the prefix (" + "; ".join(step.length_dependent) + ")" if step.length_dependent
           else "cached" + (f", recomputed: {', '.join(step.fallbacks)}" if step.fallbacks else ""))
    print(f"[{len(out)} tokens in {took:.2f} s, {len(out) / took:.1f} tokens/s; {how}]", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
