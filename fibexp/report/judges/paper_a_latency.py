"""Paper A's latency (A9): learned offsets (an interpolated gather) are slower at inference than
integer offsets, 4.3-5.0x in the paper. Read from `perf/fwd_tokens_per_s`, which every LM run
measures by the authors' protocol (forward pass only, random tokens, batch 8 x T, 2 warm-up and 5
timed runs, the median; bf16 autocast on GPU): each integer-offset fib cell over fib learned at
the same W, per seed (a threshold claim: >= 3 seeds, every seed's ratio >= the bar). The paper
timed a GPU; runs timed elsewhere (fp32 on CPU) are judged all the same, and the verdict says where
they were timed: the ratio of two paths on one device is what the claim is about."""
from __future__ import annotations

from fibexp.report.cell_runs import cell_runs, label, present, windows
from fibexp.report.claims import NOT_REPRODUCED, REPRODUCED, Absent, Missing, Result, span_str
from fibexp.report.published import MIN_SEEDS

METRIC = "perf/fwd_tokens_per_s"
INTEGER = ("fib fixed", "fib stagger", "fib coprime")
GPU = {"gpu", "cuda"}


def _by_seed(runs) -> dict[int, float]:
    return {r.seed: v for r in runs if (v := r.metric(METRIC)) is not None}


def judge_a9(c, g):
    present(g, "fib learned")
    ints = [f for f in INTEGER if any(r.family == f for r in g.runs)]
    if not ints:
        raise Absent("needs an integer-offset fib cell (fixed, stagger or coprime) beside fib learned")
    pairs = sorted({(f, w) for f in ints for w in windows(g, "fib learned", f)}, key=lambda fw: (fw[1], fw[0]))
    if not pairs:
        raise Missing("needs fib learned and an integer-offset fib cell at the same W")
    ratios, ours, short = [], [], []
    for f, w in pairs:
        tl, ti = _by_seed(cell_runs(g, "fib learned", w)), _by_seed(cell_runs(g, f, w))
        if lacking := [n for n, t in ((label("fib learned", w), tl), (label(f, w), ti)) if not t]:
            raise Missing(f"{' and '.join(lacking)} {'have' if len(lacking) > 1 else 'has'} no {METRIC} "
                          "(every LM run logs it, timed by the authors' protocol)")
        seeds = sorted(set(tl) & set(ti))
        if len(seeds) < MIN_SEEDS:
            short.append((len(seeds), f"fib learned and {label(f, w)} share seeds {','.join(map(str, seeds)) or 'none'} "
                                      f"with {METRIC}, needs >= {MIN_SEEDS}"))
            continue
        rs = [ti[s] / tl[s] for s in seeds]
        ratios += rs
        ours.append(f"{label(f, w)} {min(ti[s] for s in seeds) / 1e3:.1f}-{max(ti[s] for s in seeds) / 1e3:.1f}k vs "
                    f"learned {min(tl[s] for s in seeds) / 1e3:.1f}-{max(tl[s] for s in seeds) / 1e3:.1f}k: "
                    f"{span_str(rs, lambda x: f'{x:.2f}x')} slower")
    if short:
        raise Missing("; ".join(s for _, s in short), seeds=min(n for n, _ in short))
    ok = min(ratios) >= c.thresholds["min_slowdown"]
    timed = sorted({r.params.get("trainer.accelerator", "unknown") for f, w in pairs
                    for r in cell_runs(g, f, w) + cell_runs(g, "fib learned", w)} - GPU)
    return Result(REPRODUCED if ok else NOT_REPRODUCED,
                  "forward tokens/s per seed (authors' protocol): " + "; ".join(ours)
                  + (" (learned is faster)" if max(ratios) < 1 else ""),
                  notes=(f"timed with trainer.accelerator={','.join(timed)}; paper: bf16 on one GPU",) if timed else ())
