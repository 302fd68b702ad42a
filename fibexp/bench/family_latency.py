"""`fibexp-bench latency`: claim A9's measurement, every paper-A attention family side by side.

Each family's model is built as a run builds it (conf/model/<preset> with conf/attention/<family>
at window W, fibexp's own init), all in this process, and timed by paper A's protocol
(fibexp.evals.latency: batch 8 x T random ids, T the preset's training length, inference only,
bf16 autocast on CUDA and fp32 on CPU, 2 warm-up then 5 timed passes). The passes are interleaved:
each round times one pass of every family, the first family rotating, so a change in the machine's
load hits all families alike. Each integer-offset family's speed is compared with the learned-alpha
family's (interpolated gather), the ratio paper A reports. JSON: outputs/bench/latency-*.json.
"""
from __future__ import annotations

import time
from pathlib import Path

import torch

from fibexp.bench import harness
from fibexp.bench.cases import LATENCY_QUICK
from fibexp.config import schema
from fibexp.evals import latency
from fibexp.model import mixers

FAMILIES = ("dense", "fib_fixed", "fib_stagger", "fib_coprime", "fib_learned", "pow2_fixed", "pow2_stagger")
LEARNED = "fib_learned"
INTEGER = tuple(f for f in FAMILIES if f not in ("dense", LEARNED))  # integer offsets round(alpha * rung)

METHOD = {
    "protocol": f"paper A's: batch {latency.BATCH} x T random token ids (T = the preset's training length), "
                "model(ids) under torch.inference_mode, bf16 autocast on CUDA / fp32 on CPU, "
                f"{latency.WARMUP} warm-up then {latency.TIMED} timed passes, CUDA synchronised around each clock",
    "interleaving": "every family's model in one process; warm-up and timed passes go round by round, one pass "
                    "of every family per round, the first family rotating",
    "tokens_per_s": "batch x T / seconds of one pass: median of the timed passes, with the slowest and fastest; "
                    "tokens_per_s_mean = all timed tokens / their summed seconds (the authors' one-clock figure)",
    "x_learned": "learned's pass time / the family's pass time in the same round, median over rounds: how many "
                 "times faster than the learned-alpha (interpolated gather) path",
    "models": "conf/model/<preset> + conf/attention/<family> at attention.window = W, instantiated as fibexp-train "
              "does (torch.manual_seed(0) before each); --impl applies to the integer families (learned alpha "
              "always runs the gather)",
}


def build(preset: str, family: str, window: int, impl: str = "auto", seq_len: int | None = None):
    """(model, its model config) of one family, composed as fibexp-train composes a run."""
    from hydra import compose, initialize_config_dir
    from hydra.utils import instantiate

    schema.register()
    overrides = [f"model={preset}", f"attention={family}", "paths.root=."]
    if family != "dense":
        overrides.append(f"attention.window={window}")
    if family in INTEGER:
        overrides.append(f"attention.impl={impl}")
    if seq_len:
        overrides.append(f"model.seq_len={seq_len}")
    with initialize_config_dir(schema.CONF_DIR, version_base="1.3"):
        cfg = compose("train", overrides=overrides)
    torch.manual_seed(0)
    return instantiate(cfg.model), cfg.model


def measure(preset: str, window: int, impl: str, device: str, threads: int, seq_len: int | None = None,
            families=FAMILIES) -> dict:
    """Every family at one (preset, W), interleaved (METHOD); raw seconds and their summaries."""
    torch.set_num_threads(threads)
    device = torch.device(device)
    passes, res = {}, {}
    for family in families:
        model, conf = build(preset, family, window, impl, seq_len)
        model = model.to(device).eval()
        t = int(conf.seq_len)
        passes[family] = latency.ForwardPass(model, int(conf.vocab_size), t, device)
        spec = model.spec
        res[family] = {"n_params": model.n_params(),
                       "impl": (mixers.resolve_impl(spec.impl, device, t, spec.schedule == "learned").value
                                if spec.kind is mixers.Kind.sparse else None)}
    for _ in range(latency.WARMUP):
        for fwd in passes.values():
            fwd()
    timed = harness.rounds(passes, latency.TIMED, harness.Clock(device))
    fwd = next(iter(passes.values()))
    for family, r in res.items():
        ms = timed[family]["wall"]
        r.update(ms=ms, cpu_ms=timed[family]["cpu"], **latency.summary([x / 1e3 for x in ms], fwd.tokens))
        r["x_learned"] = harness.paired(timed[LEARNED]["wall"], ms) if LEARNED in timed else None
        r["x_dense"] = harness.paired(timed["dense"]["wall"], ms) if "dense" in timed else None
    return {"preset": preset, "T": fwd.ids.shape[1], "batch": fwd.ids.shape[0], "tokens": fwd.tokens,
            "window": window, "device": str(device), "dtype": "bf16 autocast" if device.type == "cuda" else "fp32",
            "threads": torch.get_num_threads(), "families": res}


def integer_over_learned(result: dict) -> tuple[float, float] | None:
    """The range of the integer families' x_learned (paper A's 4.3-5.0x)."""
    xs = [r["x_learned"] for f, r in result["families"].items() if f in INTEGER and r["x_learned"] is not None]
    return (min(xs), max(xs)) if xs else None


def table(result: dict) -> str:
    fmt = harness.fmt
    lines = [f"{'family':<13} {'impl':<7} {'tok/s median':>13} {'[min - max]':>21} {'x learned':>10} {'x dense':>8}"]
    lines.append("-" * len(lines[0]))
    for family, r in result["families"].items():
        lines.append(f"{family:<13} {r['impl'] or '-':<7} {r['tokens_per_s']:>13,.0f} "
                     f"{'[' + format(r['tokens_per_s_min'], ',.0f') + ' - ' + format(r['tokens_per_s_max'], ',.0f') + ']':>21} "
                     f"{fmt(r['x_learned'], '9.2f')}x {fmt(r['x_dense'], '7.2f')}x")
    span = integer_over_learned(result)
    if span:
        lines.append(f"integer-offset families over learned alpha: {span[0]:.2f}-{span[1]:.2f}x faster "
                     "(paper A: 4.3-5.0x on one RTX 3090, bf16, paper60m at T = 1,024)")
    lines.append("x learned / x dense = that path's pass time / this family's, paired per round (median)")
    return "\n".join(lines)


def run(args) -> Path:
    """Measure, print the table (with a warning when the machine was loaded) and write the JSON."""
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    preset = LATENCY_QUICK["preset"] if args.quick else (args.preset or ("paper60m" if device == "cuda" else "cpu"))
    seq_len = LATENCY_QUICK["seq_len"] if args.quick else None
    threads = args.threads or harness.n_threads()
    load_start, code_start = harness.load(), harness.code()
    started = time.time()
    print(f"latency bench: preset {preset}, W={args.window}, impl {args.impl}, {device}, {threads} threads; "
          f"load {load_start['load1']:.2f}", flush=True)
    result = measure(preset, args.window, args.impl, device, threads, seq_len)
    load_end, code_end = harness.load(), harness.code()
    changed = harness.code_changed(code_start, code_end)
    print(f"\n{preset} T={result['T']} x{result['batch']} ({result['tokens']:,} tokens/pass), W={args.window}, "
          f"{device} {result['dtype']}, {result['threads']} threads, load {load_start['load1']:.2f} -> "
          f"{load_end['load1']:.2f}, {time.time() - started:.0f} s")
    print(table(result))
    if device == "cpu" and max(load_start["load1"], load_end["load1"]) > threads:
        print(f"WARNING: load average above {threads} (the threads used): other processes shared the cores, so "
              "the timings are unreliable; rerun on an idle machine")
    if changed:
        print("WARNING: the measured modules changed on disk during the run; figures mix two versions")
    report = {
        "benchmark": "latency", "timestamp": harness.timestamp(), "quick": bool(args.quick), "device": device,
        "config": {"preset": preset, "window": args.window, "impl": args.impl, "threads": threads,
                   "families": list(FAMILIES), "batch": latency.BATCH, "warmup": latency.WARMUP,
                   "timed": latency.TIMED, "seq_len": result["T"]},
        "method": METHOD, "machine": harness.machine(), "load_start": load_start, "load_end": load_end,
        "code": {"start": code_start, "end": code_end, "changed_during_run": changed},
        "elapsed_s": time.time() - started, "result": result,
        "integer_over_learned": integer_over_learned(result),
    }
    return harness.write_report(args.out, "latency", report)
