"""The papers' published numbers, as data: what every table and claim puts beside ours."""
from __future__ import annotations




# ---- published numbers (paper A: FineWeb-Edu / Wikipedia ppl, 60M model, 13,000 steps, seed 42) ----
TABLE1: dict[tuple[str, int], tuple[float, float]] = {
    ("fib fixed", 6): (44.35, 40.24), ("fib fixed", 8): (44.08, 40.02),
    ("fib fixed", 10): (43.48, 39.33), ("fib fixed", 12): (43.12, 39.05),
    ("fib learned", 6): (43.86, 39.62), ("fib learned", 8): (43.70, 39.43),
    ("fib learned", 10): (42.99, 38.80), ("fib learned", 12): (42.85, 38.60),
    ("fib stagger", 6): (42.93, 38.59), ("fib stagger", 8): (42.53, 38.07),
    ("fib stagger", 10): (42.21, 37.88), ("fib stagger", 12): (42.02, 37.59),
    ("fib coprime", 6): (43.10, 38.70), ("fib coprime", 8): (42.58, 38.27),
    ("fib coprime", 10): (42.28, 38.00), ("fib coprime", 12): (42.09, 37.75),
    ("pow2 stagger", 6): (44.11, 39.89), ("pow2 stagger", 8): (43.60, 39.56),
    ("pow2 stagger", 10): (43.17, 39.05), ("pow2 stagger", 12): (42.69, 38.51),
    ("pow2 fixed", 8): (44.78, 40.89),
}
TABLE1_DENSE = (33.37, 27.28)
SEEDS_W12: dict[str, tuple[float, ...]] = {  # FineWeb-Edu ppl, seeds 42/43/44 (learned: two seeds)
    "fib stagger": (42.02, 41.96, 42.26), "fib coprime": (42.09, 42.03, 42.43),
    "pow2 stagger": (42.69, 42.77, 43.08), "fib learned": (42.85, 42.85), "fib fixed": (43.12, 43.16, 43.27)}
EXTRAP: dict[str, tuple[int | None, dict[int, float], float | None]] = {
    # family: (W, FineWeb-Edu ppl per factor, the change at 4x as published; 41.45 / 42.02 is rounded)
    "dense": (None, {1: 33.37, 2: 49.15, 4: 100.36}, 2.01),
    "fib stagger": (12, {1: 42.02, 4: 41.45}, -0.013),
    "pow2 fixed": (8, {1: 44.78, 2: 44.98, 4: 49.86}, 0.113),
    "pow2 stagger": (12, {1: 42.69, 2: 42.40, 4: 42.62}, None)}
POS_BINS: dict[tuple[str, int], tuple[float, ...]] = {  # FineWeb-Edu loss in 8 position bins
    ("fib fixed", 8): (3.883, 3.808, 3.767, 3.770, 3.742, 3.780, 3.776, 3.763),
    ("fib stagger", 8): (3.861, 3.769, 3.733, 3.731, 3.709, 3.737, 3.739, 3.726)}

# ---- paper B ----
LR_GRID = (0.004, 0.003, 0.002, 0.001, 0.0005, 0.00025, 0.000125)
LR_TABLE: dict[str, tuple[float | None, ...]] = {  # enwik8 bpc per lr (None: failed to train)
    "attn": (None, None, None, 1.778, 1.787, 1.881, 2.112),
    "hybrid": (1.801, 1.752, 1.718, 1.718, 1.786, 1.924, 2.204),
    "rot": (1.821, 1.764, 1.721, 1.722, 1.784, 1.925, 2.202),
    "warp": (1.923, 1.912, 1.795, 1.760, 1.803, 1.977, 2.371)}
BEST_LR: dict[str, dict] = {  # 3 seeds at the best lr (paper B's Table 2)
    "attn": dict(lr=1e-3, bpc=1.778, sd=0.0090, seeds=(1.772, 1.771, 1.791), links=526_336, weights=34_998_473),
    "hybrid": dict(lr=2e-3, bpc=1.718, sd=0.0159, seeds=(1.703, 1.712, 1.740), links=72_184, weights=20_318_409),
    "rot": dict(lr=2e-3, bpc=1.721, sd=0.0139, seeds=(1.702, 1.729, 1.733), links=74_470, weights=20_318_409),
    "warp": dict(lr=1e-3, bpc=1.760, sd=0.0219)}
COUNT_ONES: dict[tuple[int, int, str, str], float] = {  # (n, layers, cell, order): held-out accuracy
    (64, 6, "hypercube/fixed", "rot"): 0.102, (64, 6, "hypercube/rot", "rot"): 0.987,
    (64, 6, "hypercube/dense", "rot"): 1.0,
    (64, 5, "hypercube/rot", "rot"): 0.142, (64, 12, "hypercube/rot", "rot"): 0.998,
    (64, 16, "hypercube/rot", "rot"): 1.0,
    (256, 8, "hypercube/rot", "rot"): 0.280, (256, 16, "hypercube/rot", "rot"): 0.521,
    (64, 16, "hypercube/rot", "random"): 0.990, (64, 16, "hypercube/rot", "gray"): 0.144}
COUNT_ONES_CHANCE = {64: 0.099}  # majority guess
