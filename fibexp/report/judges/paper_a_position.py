"""Paper A's position-resolved loss (A8): the stagger gain over fixed alpha is spread evenly over
the 8 position bins, not concentrated at long range. A threshold claim held for every seed: each
seed's gain (fixed - stagger, paired by seed: the same seed draws the same batches) positive in
every bin, its far half holding a share of the total inside the bars; >= 3 such seeds."""
from __future__ import annotations

from fibexp.report.cell_runs import cell_runs, degenerate, label, present, windows
from fibexp.report.claims import DEGENERATE, NOT_REPRODUCED, REPRODUCED, Missing, Result
from fibexp.report.runs import bins
from fibexp.report.published import MIN_SEEDS

METRIC = "val/pos_loss/<set>/bin<j>"


def _far_share(gain: list[float]) -> float | None:
    total = sum(gain)
    return sum(gain[len(gain) // 2:]) / total if total > 0 else None


def judge_a8(c, g):
    present(g, "fib fixed", "fib stagger")
    ws = windows(g, "fib fixed", "fib stagger")
    if not ws:
        raise Missing(f"needs fib fixed and fib stagger at the same W with {METRIC}")
    w = 8 if 8 in ws else ws[0]
    rf, rs = cell_runs(g, "fib fixed", w), cell_runs(g, "fib stagger", w)
    if d := degenerate(rs, rf, label("fib stagger", w), label("fib fixed", w)):
        return Result(DEGENERATE, d)
    by_seed = lambda runs: {r.seed: b for r in runs if (b := bins(r)) is not None}
    bf, bs = by_seed(rf), by_seed(rs)
    if lacking := [label(f, w) for f, b in (("fib fixed", bf), ("fib stagger", bs)) if not b]:
        raise Missing(f"{' and '.join(lacking)} {'have' if len(lacking) > 1 else 'has'} no {METRIC}")
    seeds = sorted(set(bf) & set(bs))
    if len(seeds) < MIN_SEEDS:
        raise Missing(f"W{w}: fib fixed and fib stagger share seeds {','.join(map(str, seeds)) or 'none'} with "
                      f"{METRIC}, needs >= {MIN_SEEDS} (the gain is paired by seed)", seeds=len(seeds))
    gains = {s: [f - t for f, t in zip(bf[s], bs[s])] for s in seeds}
    lo, hi = c.thresholds["late_share_min"], c.thresholds["late_share_max"]
    shares = {s: _far_share(gn) for s, gn in gains.items()}
    ok = all(min(gn) > 0 and shares[s] is not None and lo <= shares[s] <= hi for s, gn in gains.items())
    per = "; ".join(f"seed {s} {min(gn):+.3f}..{max(gn):+.3f}, "
                    + (f"{shares[s]:.0%} far" if shares[s] is not None else "no gain") for s, gn in gains.items())
    return Result(REPRODUCED if ok else NOT_REPRODUCED,
                  f"W{w} stagger gain per bin (nats) and its far-half share, every seed: {per}")

