"""fibexp-export: a trained run's model as ONNX, as a transformers folder, or quantized to int8.

  fibexp-export outputs/runs/dense-s42-0123456789                  # <run dir>/model.onnx
  fibexp-export <run id> --decode                                   # the one-token step with its caches
  fibexp-export <run dir> --format hf                               # AutoModelForCausalLM folder
  fibexp-export <run dir> --int8                                    # int8 state, ppl/bpc before and after

ONNX is checked against PyTorch in onnxruntime, the transformers folder by loading it back and
comparing logits; --int8 logs its held-out ppl and bpc before and after and the size ratio into the
run's MLflow run. The run is found (and for --int8 checked FINISHED) before torch is imported: a
wrong one is refused in one line, exit code 2."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from fibexp.errors import Refusal
from fibexp.training import logs


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="fibexp-export", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", help="a run dir (outputs/runs/<name>-<hash>), a .ckpt file in one, or an MLflow run id")
    parser.add_argument("--out", type=Path, help="ONNX file, hf folder or int8 state to write (default: <run dir>/model.onnx, <run dir>/hf, "
                             "<run dir>/model.int8.pt)")
    parser.add_argument("--format", choices=("onnx", "hf"), default="onnx",
                        help="onnx (default) or hf: a transformers save_pretrained folder (needs the hf extra)")
    parser.add_argument("--decode", action="store_true",
                        help="export the one-token step with its caches as inputs and outputs (constant-cache models)")
    parser.add_argument("--max-len", type=int, default=None,
                        help="--decode: the longest sequence the graph decodes (default: 16x the training length)")
    parser.add_argument("--int8", action="store_true",
                        help="quantize the Linear layers to int8 (torch dynamic quantization), write the int8 state, "
                             "measure held-out ppl/bpc before and after and the size ratio, log them as int8/...")
    parser.add_argument("--tracking-uri", help="MLflow store of a run id (default: $MLFLOW_TRACKING_URI or outputs/)")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.int8 and (args.decode or args.format != "onnx"):
        parser.error(str(Refusal("--int8", f"with {'--decode' if args.decode else '--format ' + args.format}",
                                 "--int8 alone (it writes the int8 state, not a graph or a folder)")))
    if args.max_len is not None and args.max_len < 1:
        parser.error(str(Refusal("--max-len", args.max_len, "an integer >= 1")))
    try:  # the run, without torch or MLflow
        from fibexp.deploy.restore import locate, require_finished

        run_id, uri, _ = locate(args.run, args.tracking_uri)
        if args.int8:
            require_finished(run_id, uri, "fibexp-export --int8")
    except ValueError as e:
        print(f"fibexp-export: error: {e}", file=sys.stderr)
        return 2
    logs.quiet()
    if args.int8:
        return _int8(args)
    if args.format == "hf":
        return _hf(args)
    from fibexp.deploy import onnx
    from fibexp.deploy.restore import load_run, locate

    try:
        onnx.requirements()
        cfg, model = load_run(args.run, args.tracking_uri)
        onnx.check_exportable(model)
        seq_len, vocab = int(cfg.model.seq_len), int(cfg.model.vocab_size)
        if args.decode:
            return _decode(args, cfg, model, seq_len, vocab)
        out = args.out or locate(args.run, args.tracking_uri)[2].parent.parent / "model.onnx"
        onnx.export_model(model, out, seq_len)
        deviation, ops = onnx.verify(model, out, seq_len, vocab)
    except ValueError as e:
        print(f"fibexp-export: error: {e}", file=sys.stderr)
        return 2
    print(f"wrote {out} ({out.stat().st_size / 1e6:.1f} MB): ids [batch, {seq_len}] -> logits [batch, {seq_len}, {vocab}]")
    return _checked(ops, "on random ids", deviation)


def _checked(ops: list[str], inputs: str, deviation: float) -> int:
    """Print the graph's operators and its deviation from PyTorch; exit code 1 past the tolerance."""
    from fibexp.deploy.onnx import TOLERANCE

    print(f"ONNX operators: {', '.join(ops)}")
    print(f"onnxruntime vs PyTorch {inputs}: max abs deviation {deviation:.2e}")
    if deviation > TOLERANCE:
        print(f"fibexp-export: error: deviation {deviation:.2e} exceeds {TOLERANCE:.0e}", file=sys.stderr)
        return 1
    return 0


def _decode(args, cfg, model, seq_len: int, vocab: int) -> int:
    from fibexp.deploy import onnx
    from fibexp.deploy.restore import locate

    out = args.out or locate(args.run, args.tracking_uri)[2].parent.parent / "decode.onnx"
    max_len = args.max_len or 16 * seq_len
    out, names = onnx.export_decode(model, out, max_len)
    deviation, ops = onnx.verify_decode(model, out, names, vocab, max_len, steps=min(64, max_len))
    print(f"wrote {out} ({out.stat().st_size / 1e6:.1f} MB): one-token step, ids [1, 1], pos, "
          f"{len(names)} caches in and out (constant size), up to {max_len} tokens")
    return _checked(ops, f"over a {min(64, max_len)}-token rollout", deviation)


def _hf(args) -> int:
    from fibexp.deploy.onnx import TOLERANCE

    try:
        from fibexp.deploy.transformers import export_run

        _, _, out, deviation = export_run(args.run, args.out, args.tracking_uri)
    except ValueError as e:
        print(f"fibexp-export: error: {e}", file=sys.stderr)
        return 2
    print(f"wrote {out}: {', '.join(sorted(p.name for p in out.iterdir()))}")
    print("load it with AutoModelForCausalLM.from_pretrained(DIR, trust_remote_code=True) and "
          "AutoTokenizer.from_pretrained(DIR)")
    print(f"transformers vs fibexp on random ids: max abs deviation {deviation:.2e}")
    if deviation > TOLERANCE:
        print(f"fibexp-export: error: deviation {deviation:.2e} exceeds {TOLERANCE:.0e}", file=sys.stderr)
        return 1
    return 0


def _int8(args) -> int:
    try:
        from fibexp.deploy import int8_export
        from fibexp.deploy.restore import load_run, locate
        from fibexp.model import quantize

        run_id, uri, ckpt = locate(args.run, args.tracking_uri)
        cfg, model = load_run(args.run, args.tracking_uri)
        qmodel, metrics = int8_export.quantized(cfg, model)
    except ValueError as e:
        print(f"fibexp-export: error: {e}", file=sys.stderr)
        return 2
    out = args.out or ckpt.parent.parent / "model.int8.pt"
    out.parent.mkdir(parents=True, exist_ok=True)
    quantize.save(qmodel, out)
    int8_export.log(run_id, uri, metrics)
    print(f"wrote {out} ({out.stat().st_size / 1e3:,.1f} kB): int8 Linear layers (torch dynamic quantization), "
          "read back with fibexp.model.quantize.load(model, path)")
    print("\n".join(int8_export.lines(metrics)))
    print(f"logged {len(metrics)} int8/... metrics into run {run_id}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
