"""`fibexp-bench model`: the whole model's training step and inference, every mixer side by side.

The training step (forward, backward, gradient clipping, AdamW) and inference forward of the
whole model for dense, static fib stagger W8 (attention.impl=auto), learned, hypercube rot,
hybrid and the no-mixer bound, tiny preset at T = 64 and 256, paper width at 1,024 and 4,096,
with torch.compile of dense and static, and the gather/mask crossover that attention.impl=auto
takes its switch length from (fibexp.model.mixers.CPU_MASK_BELOW). See MODEL_METHOD.
JSON: outputs/bench/model-*.json.
"""
from __future__ import annotations

import statistics
import time
from pathlib import Path

import torch
from torch import nn

from fibexp.bench import harness
from fibexp.bench.cases import COMPILE_MAX_T, COMPILE_PATHS, CROSSOVER_TOKENS, MODEL_PRESETS
from fibexp.bench.crossover import CROSSOVER_LENGTHS, QUICK_CROSSOVER_LENGTHS, print_crossover, scan_crossovers
from fibexp.model import mixers
from fibexp.model.lm import LM, nll, param_groups
from fibexp.model.spec import AttentionSpec

MODEL_VOCAB = 2048  # the CPU tokenizer's vocabulary (tiny preset) for both: the tied head is cost every path shares
MODEL_CASES = (("tiny", 64, 16), ("tiny", 256, 8), ("paper-width", 1024, 2), ("paper-width", 4096, 1))
QUICK_MODEL_CASES = (("tiny", 32, 2), ("tiny", 64, 2))
MODEL_ROUNDS = {64: 7, 256: 7, 1024: 5, 4096: 3}  # timed rounds per T (--repeats overrides); short steps are noisier
STATIC = dict(kind="sparse", base="fib", schedule="stagger", window=8)
MODEL_PATHS = {
    "dense": dict(kind="dense"),
    "static": STATIC,  # fib stagger W8, attention.impl as configured (auto)
    "learned": dict(kind="sparse", base="fib", schedule="learned", window=8, alpha_init="stagger"),
    "hypercube-rot": dict(kind="hypercube", schedule="rot"),
    "hybrid": dict(kind="hypercube", schedule="hybrid"),
    "no-mixer": STATIC,  # the bound: the static model with attention that costs nothing (NoMixing)
}
MODEL_TARGETS = [  # (name, ratio, preset, T or None for every case, comparison, limit)
    ("static train step / dense", "static_vs_dense", "tiny", 64, ">=", 1.0),
    ("static train step / dense", "static_vs_dense", "tiny", 256, ">=", 1.0),
    ("static train step / dense", "static_vs_dense", "paper-width", 1024, ">=", 1.15),
    ("static train step / dense", "static_vs_dense", "paper-width", 4096, ">=", 1.8),
    ("static step time / no-mixer step time", "static_over_bound", "paper-width", 4096, "<=", 1.25),
    ("learned step time / static step time", "learned_over_static", None, None, "<=", 1.2),
    ("static inference / dense", "static_infer_vs_dense", None, None, ">=", 1.0),
]

MODEL_METHOD = {
    "step": "training step = forward, token cross-entropy of fp32 logits (as fibexp.model.lm.nll), backward, "
            "clip_grad_norm_(1.0), AdamW (lr 1e-3, betas 0.9/0.95, weight decay 0.1 on matrices only, as "
            "fibexp.training.lit.LitLM), zero_grad(set_to_none); inference = model(ids) under torch.inference_mode",
    "interleaving": "one process per (preset, T) holds every path's model; each round times one step of "
                    "every path, the starting path rotating per round, so load changes hit all paths alike",
    "ratios": "x dense = median over rounds of dense_ms / path_ms of the same round (paired); "
              "/ bound = median of path_ms / no-mixer_ms; learned / static likewise",
    "no-mixer": "the static model with its attention kernel replaced by y_i = q_i + k_i + v_i per KV "
                "group: projections, RoPE and their gradients run, no token is mixed (the attention-"
                "costs-nothing bound)",
    "memory": "peak of one training step (and one inference forward): CPU VmHWM - VmRSS before, after "
              "gc + malloc_trim, with /proc/self/clear_refs resetting the mark; CUDA max_memory_allocated",
    "compile": "torch.compile(model) of the dense and static paths up to T=%d, inductor caches off (cold, "
               "as a first run): compile_s = first compiled step minus an eager step; then timed rounds of "
               "eager and compiled interleaved; break_even_steps = compile_s / time saved per step" % COMPILE_MAX_T,
    "crossover": "one static attention layer (projections included), gather vs mask path, forward+backward "
                 "and inference forward, interleaved rounds at each scanned T, batch = %d // T; the "
                 "crossover is the shortest T from which the gather wins at every longer scanned T"
                 % CROSSOVER_TOKENS,
}


class NoMixing(nn.Module):
    """Attention that costs nothing: each position's output is q + k + v of its own KV group."""

    def forward(self, q, k, v):
        b, t, h, d = q.shape
        return (q.view(b, t, k.shape[2], h // k.shape[2], d) + (k + v)[:, :, :, None]).reshape(b, t, h, d)


def build_model(path: str, preset: str, t: int, vocab: int = MODEL_VOCAB, seed: int = 0):
    torch.manual_seed(seed)
    model = LM(**MODEL_PRESETS[preset], vocab_size=vocab, seq_len=t, attention=AttentionSpec(**MODEL_PATHS[path]))
    if path == "no-mixer":
        for block in model.blocks:
            block.mixer.pattern = NoMixing()
    return model


def adamw(model):
    """fibexp.training.lit.LitLM.configure_optimizers' AdamW (weight decay on matrices only)."""
    return torch.optim.AdamW(param_groups(model), lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1)


def training_loss(model, x, y):
    """The LM task's training loss (fibexp.model.lm.nll, averaged)."""
    return nll(model, x, y).mean()


def _resolved_impl(model, t: int, device) -> str | None:
    spec = model.spec
    if spec.kind is not mixers.Kind.sparse:
        return None
    return mixers.resolve_impl(spec.impl, device, t, spec.schedule == "learned").value


# ---------------------------------------------------------------------------- child processes

def model_case(preset: str, t: int, batch: int, repeats: int, threads: int, device: str, compile_: bool) -> dict:
    """Every path of one (preset, T) in this process, measured interleaved (MODEL_METHOD)."""
    torch.set_num_threads(threads)
    device = torch.device(device)
    clock = harness.Clock(device)
    gen = torch.Generator().manual_seed(1)
    x = torch.randint(0, MODEL_VOCAB, (batch, t), generator=gen).to(device)
    y = torch.randint(0, MODEL_VOCAB, (batch, t), generator=gen).to(device)
    autocast = (torch.autocast("cuda", dtype=torch.bfloat16) if device.type == "cuda"
                else torch.autocast("cpu", enabled=False))
    models, train, infer, res = {}, {}, {}, {}
    for name in MODEL_PATHS:
        model = build_model(name, preset, t).to(device).train()
        models[name] = model
        train[name], infer[name] = _step_and_forward(model, adamw(model), x, y, autocast)
        res[name] = {"n_params": model.n_params(), "impl": _resolved_impl(model, t, device)}
    for name in MODEL_PATHS:  # warm-up (first-call allocations, thread pools), then the memory steps
        train[name]()
        res[name]["peak_train_mib"], method = harness.peak_mib(train[name], device)
    timed = harness.rounds(train, repeats, clock)
    for m in models.values():
        m.eval()
    for name in MODEL_PATHS:
        infer[name]()
        res[name]["peak_infer_mib"], _ = harness.peak_mib(infer[name], device)
    timed_infer = harness.rounds(infer, repeats, clock)
    for name in MODEL_PATHS:
        res[name].update(train_ms=timed[name]["wall"], train_cpu_ms=timed[name]["cpu"],
                         infer_ms=timed_infer[name]["wall"], infer_cpu_ms=timed_infer[name]["cpu"])
    compiled = {}
    if compile_:
        for name in COMPILE_PATHS:
            compiled[name] = _compiled(models[name], train[name], infer[name], name, preset, t, batch, x, y,
                                       autocast, repeats, clock, device)
    return {"preset": preset, "T": t, "batch": batch, "tokens": batch * t, "device": str(device),
            "threads": torch.get_num_threads(), "memory_method": method, "paths": res, "compile": compiled}


def _step_and_forward(model, opt, x, y, autocast):
    """One training step as fibexp-train runs it (loss, backward, clipping, AdamW) and one
    inference forward, of an eager or a compiled model (a compiled one shares its parameters)."""
    def step():
        with autocast:
            loss = training_loss(model, x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)

    def forward():
        with torch.inference_mode(), autocast:
            model(x)

    return step, forward


def _compiled(model, eager_step, eager_forward, name, preset, t, batch, x, y, autocast, repeats, clock,
              device) -> dict:
    """torch.compile of one path: compile time (first call minus an eager call) and steady state."""
    try:
        torch._dynamo.reset()
        cmodel = build_model(name, preset, t).to(device).train()
        cmodel.load_state_dict(model.state_dict())
        step, forward = _step_and_forward(torch.compile(cmodel), adamw(cmodel), x, y, autocast)
        first, _ = clock(step)
        eager, _ = clock(eager_step)
        both = harness.rounds({"eager": eager_step, "compiled": step}, repeats, clock)
        cmodel.eval()
        model.eval()
        first_infer, _ = clock(forward)
        eager_infer, _ = clock(eager_forward)
        both_infer = harness.rounds({"eager": eager_forward, "compiled": forward}, repeats, clock)
        model.train()
        return {"status": "ok", "compile_train_s": (first - eager) / 1e3, "compile_infer_s": (first_infer - eager_infer) / 1e3,
                "train_ms": both["compiled"]["wall"], "eager_train_ms": both["eager"]["wall"],
                "infer_ms": both_infer["compiled"]["wall"], "eager_infer_ms": both_infer["eager"]["wall"]}
    except Exception as e:  # a path that does not compile is a finding, not a crash of the bench
        return {"status": "failed", "reason": f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"}


# ---------------------------------------------------------------------------- parent

def summarize_case(case: dict) -> dict:
    """Medians, spreads, tokens/s and the paired ratios of one (preset, T)."""
    paired = harness.paired
    paths, tokens = case["paths"], case["tokens"]
    dense, bound, static = paths.get("dense"), paths.get("no-mixer"), paths.get("static")
    for r in paths.values():
        for key in ("train_ms", "infer_ms", "train_cpu_ms", "infer_cpu_ms"):
            r[f"{key}_median"] = harness.median(r[key])
        r["train_ms_p25"], r["train_ms_p75"] = harness.quartiles(r["train_ms"])
        r["infer_ms_p25"], r["infer_ms_p75"] = harness.quartiles(r["infer_ms"])
        r["train_tokens_per_s"] = tokens / r["train_ms_median"] * 1e3
        r["infer_tokens_per_s"] = tokens / r["infer_ms_median"] * 1e3
        r["train_vs_dense"] = paired(dense["train_ms"], r["train_ms"]) if dense else None
        r["infer_vs_dense"] = paired(dense["infer_ms"], r["infer_ms"]) if dense else None
        r["train_cpu_vs_dense"] = paired(dense["train_cpu_ms"], r["train_cpu_ms"]) if dense else None
        r["train_over_bound"] = paired(r["train_ms"], bound["train_ms"]) if bound else None
    case["ratios"] = {
        "static_vs_dense": static and static["train_vs_dense"],
        "static_infer_vs_dense": static and static["infer_vs_dense"],
        "static_over_bound": static and static["train_over_bound"],
        "bound_vs_dense": bound and bound["train_vs_dense"],
        "learned_over_static": (paired(paths["learned"]["train_ms"], static["train_ms"])
                                if static and "learned" in paths else None),
    }
    for c in case.get("compile", {}).values():
        if c.get("status") == "ok":
            c["speedup_train"] = paired(c["eager_train_ms"], c["train_ms"])
            c["speedup_infer"] = paired(c["eager_infer_ms"], c["infer_ms"])
            med = statistics.median(c["eager_train_ms"]) - statistics.median(c["train_ms"])
            c["break_even_steps"] = c["compile_train_s"] * 1e3 / med if med > 0 else None
    return case


def model_targets(cases: list[dict]) -> list[dict]:
    out = []
    for name, ratio, preset, t, cmp, limit in MODEL_TARGETS:
        sel = [c for c in cases if c.get("status") == "ok" and (preset is None or c["preset"] == preset)
               and (t is None or c["T"] == t)]
        for c in (sel if t is None else sel[:1]) or [None]:
            v = c["ratios"][ratio] if c else None
            where = f"{preset or (c and c['preset'])} T={t or (c and c['T'])}"
            passed = None if v is None else (v >= limit if cmp == ">=" else v <= limit)
            out.append({**harness.check(f"{name} at {where}", v, f"{cmp} {limit}", passed),
                        "full_case": c is not None and (c["preset"], c["T"], c["batch"]) in MODEL_CASES})
    return out


def model_table(cases: list[dict]) -> str:
    fmt = harness.fmt
    lines = []
    for c in cases:
        head = (f"{c['preset']} T={c['T']} x{c['batch']} ({c['tokens']:,} tokens/step), {c.get('device', '?')}, "
                f"{c.get('threads', '?')} threads, load {c.get('load_start', {}).get('load1', float('nan')):.2f}")
        if c.get("status") != "ok":
            lines += [head, f"  failed: {c.get('reason')}", ""]
            continue
        lines.append(head)
        cols = (f"  {'path':<14} {'impl':<7} {'train ms [p25-p75]':>24} {'tok/s':>9} {'x dense':>8} "
                f"{'/ bound':>8} {'infer ms [p25-p75]':>24} {'tok/s':>9} {'x dense':>8} {'peak MiB':>9}")
        lines += [cols, "  " + "-" * (len(cols) - 2)]
        for name, r in c["paths"].items():
            lines.append(
                f"  {name:<14} {r['impl'] or '-':<7} "
                f"{r['train_ms_median']:>9.1f} [{r['train_ms_p25']:.1f}-{r['train_ms_p75']:.1f}]".ljust(49)
                + f" {r['train_tokens_per_s']:>9,.0f} {fmt(r['train_vs_dense'], '7.2f')}x "
                f"{fmt(r['train_over_bound'], '7.2f')}x "
                + f"{r['infer_ms_median']:>9.1f} [{r['infer_ms_p25']:.1f}-{r['infer_ms_p75']:.1f}]".rjust(24)
                + f" {r['infer_tokens_per_s']:>9,.0f} {fmt(r['infer_vs_dense'], '7.2f')}x "
                f"{fmt(r['peak_train_mib'], '9.1f')}")
        for name, k in c.get("compile", {}).items():
            if k.get("status") != "ok":
                lines.append(f"  compile {name}: failed: {k.get('reason')}")
                continue
            be = k["break_even_steps"]
            lines.append(f"  compile {name}: {k['compile_train_s']:.1f} s (+{k['compile_infer_s']:.1f} s inference); "
                         f"train x{k['speedup_train']:.2f}, inference x{k['speedup_infer']:.2f} vs eager; "
                         + (f"pays off after {be:,.0f} steps" if be else "never pays off (not faster)"))
        lines.append("")
    lines.append("x dense = dense step time / path step time (paired per round, median); / bound = path step "
                 "time / no-mixer step time; peak = one training step")
    return "\n".join(lines)


def run(args) -> Path:
    """The crossover scans, then one process per (preset, T), the table, targets and the JSON report."""
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    threads = args.threads or harness.n_threads()
    cases = list(QUICK_MODEL_CASES if args.quick else MODEL_CASES)
    if args.lengths:
        cases = [c for c in cases if c[1] in args.lengths] or [(("tiny" if t <= 256 else "paper-width"), t,
                                                                  max(1, 2048 // t)) for t in args.lengths]
    repeats = args.repeats or (2 if args.quick else max(MODEL_ROUNDS.values()))
    scan = list(QUICK_CROSSOVER_LENGTHS if args.quick else CROSSOVER_LENGTHS)
    tokens = 256 if args.quick else CROSSOVER_TOKENS
    compile_ = args.compile if args.compile is not None else not args.quick
    load_start, code_start = harness.load(), harness.code()
    started = time.time()
    print(f"model bench: {device}, {threads} threads, cases {', '.join(f'{p} T={t} x{b}' for p, t, b in cases)}; "
          f"load {load_start['load1']:.2f}", flush=True)

    crossover = scan_crossovers(["tiny"] if args.quick else list(MODEL_PRESETS), scan, tokens, repeats, threads,
                                 device, args.timeout)
    rounds = {t: args.repeats or (2 if args.quick else MODEL_ROUNDS.get(t, 5)) for _, t, _ in cases}
    results = []
    for preset, t, batch in cases:
        t0, load = time.time(), harness.load()
        cmd = ["_model_case", "--preset", preset, "--length", str(t), "--batch", str(batch), "--repeats",
               str(rounds[t]), "--threads", str(threads), "--device", device]
        env = None
        if compile_ and t <= COMPILE_MAX_T:
            cmd.append("--compile")
            env = {"TORCHINDUCTOR_FORCE_DISABLE_CACHES": "1"}  # cold compile times, as a fresh clone's first run
        r = harness.run_json_child(cmd, args.timeout, env)
        if r["status"] != "ok":
            r.update(preset=preset, T=t, batch=batch, tokens=t * batch)
        r.update(load_start=load, load_end=harness.load(), elapsed_s=time.time() - t0)
        if r["status"] == "ok":
            summarize_case(r)
        results.append(r)
        print(f"  {preset} T={t} x{batch}: {r['status']} ({r['elapsed_s']:.0f} s)", flush=True)
    checks = model_targets(results)
    load_end, code_end = harness.load(), harness.code()
    changed = harness.code_changed(code_start, code_end)

    print()
    print(model_table(results))
    print()
    print_crossover(crossover, device, args.quick)
    if max(load_start["load1"], load_end["load1"]) > threads:
        print(f"WARNING: load average above {threads} (the threads used): other processes shared the cores, so "
              "the timings (2-thread ones most) are unreliable; rerun on an idle machine")
    print()
    harness.print_checks(checks, changed)
    report = {
        "benchmark": "model", "timestamp": harness.timestamp(), "quick": bool(args.quick), "device": device,
        "config": {"presets": MODEL_PRESETS, "vocab": MODEL_VOCAB, "cases": [list(c) for c in cases],
                   "paths": MODEL_PATHS, "repeats": repeats, "threads": threads, "compile": compile_,
                   "rounds": {str(t): n for t, n in rounds.items()},
                   "crossover_lengths": scan, "crossover_tokens": tokens},
        "method": MODEL_METHOD, "machine": harness.machine(),
        "load_start": load_start, "load_end": load_end,
        "code": {"start": code_start, "end": code_end, "changed_during_run": changed},
        "elapsed_s": time.time() - started,
        "crossover": crossover, "auto_cpu_mask_below": mixers.CPU_MASK_BELOW,
        "results": results, "targets": checks,
    }
    print(f"\nload average: start {load_start['load1']:.2f}, end {load_end['load1']:.2f} (1 min); "
          f"{time.time() - started:.0f} s")
    return harness.write_report(args.out, "model", report)
