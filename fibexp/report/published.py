"""Every number the report takes from the two papers, and every bar a claim is judged by, each with
its source: a reviewer checks the verdicts against the papers here, in one place.

A bar (`Bar`) is the paper's own figure where its statement gives one. Where a statement gives
only a word ("a few %", "barely moves", "flat"), the bar is a stated reading of that word with the
paper's figure beside it. Where fibexp keeps a bar weaker than the paper's statement, `Bar.weaker`
says how, and every verdict judged by it carries those words beside the verdict. The band of a
"level with" claim is the paper's own seed spread for that comparison (`seed_band`), so a tie is
never read off an overlap alone. `SCALES` names the claims the papers measured at one window or
on one device or model only: elsewhere they are `not at this scale`."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Sequence


def seed_band(*cells: Sequence[float]) -> float:
    """The widest seed range (max - min) of the cells, relative to that cell's mean: the paper's
    own spread for a comparison, in a unit our smaller models share (ppl and bpc differ in level)."""
    return max((max(c) - min(c)) / (sum(c) / len(c)) for c in cells)


@dataclass(frozen=True)
class Bar:
    """One threshold: its value, the paper's words and figures it comes from, and (non-empty) how
    it is weaker than the paper's statement, which the verdict line then says."""

    value: float
    source: str
    weaker: str = ""


@dataclass(frozen=True)
class Scale:
    """Where a claim was measured, when it holds only there: the training window (model.seq_len),
    the device that timed it (trainer.accelerator) or the pretrained model grafted (task.model)."""

    why: str
    window: int | None = None
    device: str | None = None
    model: str | None = None


# =============================== paper A: Fibonacci-spaced offsets ===============================
# Table 1: held-out ppl (FineWeb-Edu, Wikipedia), 60M model, 13,000 steps, seed 42.
A_WINDOWS = (6, 8, 10, 12)
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
TABLE1_GAP = 0.26  # the text: the best sparse model "roughly 26%" above dense at the training length
SEEDS_W12: dict[str, tuple[float, ...]] = {  # FineWeb-Edu ppl, seeds 42/43/44 (learned: two seeds)
    "fib stagger": (42.02, 41.96, 42.26), "fib coprime": (42.09, 42.03, 42.43),
    "pow2 stagger": (42.69, 42.77, 43.08), "fib learned": (42.85, 42.85), "fib fixed": (43.12, 43.16, 43.27)}
A4_MEANS = (42.84, 43.18, 42.85)  # §4.2: W12 3-seed means of pow2 stagger, fib fixed, fib learned (Table 5)
EXTRAP_FIB = (0.0, 0.028)  # the change at 4x of the fib cells, lowest to highest, as published ("+0% to +2.8%")
EXTRAP: dict[str, tuple[int | None, dict[int, float], float | None]] = {
    # family: (W, FineWeb-Edu ppl per factor, the change at 4x as published; 41.45 / 42.02 is rounded)
    "dense": (None, {1: 33.37, 2: 49.15, 4: 100.36}, 2.01),
    "fib stagger": (12, {1: 42.02, 4: 41.45}, -0.013),
    "pow2 fixed": (8, {1: 44.78, 2: 44.98, 4: 49.86}, 0.113),
    "pow2 stagger": (12, {1: 42.69, 2: 42.40, 4: 42.62}, None)}
POS_BINS: dict[tuple[str, int], tuple[float, ...]] = {  # FineWeb-Edu loss in 8 position bins
    ("fib fixed", 8): (3.883, 3.808, 3.767, 3.770, 3.742, 3.780, 3.776, 3.763),
    ("fib stagger", 8): (3.861, 3.769, 3.733, 3.731, 3.709, 3.737, 3.739, 3.726)}
# Latency (the authors' database; one RTX 3090, forward pass only, random tokens, batch 8 x 1,024,
# bf16, 2 warm-up and 5 timed runs): tokens/s ranges over the cells of each path.
LATENCY = {"learned": (34_700, 41_200), "integer": (173_700, 194_600), "dense": (201_000, 205_000)}
SLOWDOWN = (4.3, 5.0)  # the text: learned 4.3-5.0x slower than the integer paths
LATENCY_TEXT = {"learned": (39_000, 41_000), "integer": (178_000, 195_000)}  # the text's rounded tokens/s


def _pos_gain() -> list[float]:
    return [f - s for f, s in zip(POS_BINS[("fib fixed", 8)], POS_BINS[("fib stagger", 8)])]


def _far_share(gain: Sequence[float]) -> float:
    return sum(gain[len(gain) // 2:]) / sum(gain)


# =============================== paper B: hypercube wiring ===============================
MIN_SEEDS = 3  # paper B: 3 seeds per compared cell, ranked only where the seed ranges do not overlap
LR_GRID = (0.004, 0.003, 0.002, 0.001, 0.0005, 0.00025, 0.000125)
LR_TABLE: dict[str, tuple[float | None, ...]] = {  # §5.1, enwik8 bpc per lr (None: failed to train, †)
    "attn": (None, None, None, 1.778, 1.787, 1.881, 2.112),
    "hybrid": (1.801, 1.752, 1.718, 1.718, 1.786, 1.924, 2.204),
    "rot": (1.821, 1.764, 1.721, 1.722, 1.784, 1.925, 2.202),
    "warp": (1.923, 1.912, 1.795, 1.760, 1.803, 1.977, 2.371)}
BEST_LR: dict[str, dict] = {  # §5.1 Table 2: 3 seeds at the best lr
    "attn": dict(lr=1e-3, bpc=1.778, sd=0.0090, seeds=(1.772, 1.771, 1.791), links=526_336, weights=34_998_473),
    "hybrid": dict(lr=2e-3, bpc=1.718, sd=0.0159, seeds=(1.703, 1.712, 1.740), links=72_184, weights=20_318_409),
    "rot": dict(lr=2e-3, bpc=1.721, sd=0.0139, seeds=(1.702, 1.729, 1.733), links=74_470, weights=20_318_409),
    "warp": dict(lr=1e-3, bpc=1.760, sd=0.0219, seeds=(1.743, 1.791, 1.746))}
SECOND_CORPUS = {  # §5.2, best-lr bpc seeds on the authors' mixed corpus
    "hybrid": (2.221, 2.262, 2.200), "warp": (2.259, 2.243, 2.241)}
COUNT_ONES: dict[tuple[int, int, str, str], float] = {  # §4 (n, layers, cell, order): held-out accuracy
    (64, 6, "hypercube/fixed", "rot"): 0.102, (64, 6, "hypercube/rot", "rot"): 0.987,
    (64, 6, "hypercube/dense", "rot"): 1.0,
    (64, 5, "hypercube/rot", "rot"): 0.142, (64, 12, "hypercube/rot", "rot"): 0.998,
    (64, 16, "hypercube/rot", "rot"): 1.0,
    (256, 8, "hypercube/rot", "rot"): 0.280, (256, 16, "hypercube/rot", "rot"): 0.521,
    (64, 16, "hypercube/rot", "random"): 0.990, (64, 16, "hypercube/rot", "gray"): 0.144}
DEPTH_6 = 0.988  # §4's depth paragraph: 6 layers 98.8% at n = 64 (its first table: rot 98.7%)
COUNT_ONES_CHANCE = {64: 0.099}  # majority guess
WALL_TIME = {"attn": 447, "hybrid": 182, "rot": 312}  # §5.1 Table 2: s/run on one RTX 5070; "2.4x less wall time"
ATTN_USABLE = (0.000125, 0.001)  # §5.1: attention's usable lr window (fails at >= 0.002, 3 of 7 grid points)


def count_bound(n: int, reached: int) -> float:
    """The best accuracy any model reaches at count ones when only `reached` of the n bits reach the
    output: it knows their count and must guess the others' (Binomial(n - reached, 1/2)) by its mode,
    C(m, m // 2) / 2^m for m = n - reached (14.0% at n = 64 with 32 bits, the paper's 14.2%)."""
    m = n - reached
    return math.comb(m, m // 2) / 2 ** m
W64 = {  # §5.3, window 64, 12 layers, width 128, lr 0.002, 3 seeds: bpc, sd, links, weights
    "attn": dict(bpc=2.800, sd=0.0029, links=24_960, weights=2_866_849, seeds=(2.797, 2.804, 2.800)),
    "local": dict(bpc=2.980, sd=0.0031, links=1_524, weights=2_080_417),
    "rot": dict(bpc=3.757, sd=0.0013, links=1_152, weights=2_080_417),
    "hybrid": dict(bpc=2.796, sd=0.0042, links=5_306, weights=2_211_489, seeds=(2.793, 2.793, 2.802)),
    "mixa": dict(bpc=2.943, sd=0.0027, links=1_338, weights=2_080_417),
    "dense": dict(bpc=2.910, sd=0.0055, links=24_960, weights=2_080_417)}
HIERARCHY = {  # §6, grouped associative recall, 6 seeds per arm, accuracy %: (with, without)
    500: (98.9, 68.5), 1000: (99.7, 97.3), 2500: (99.9, 99.4),
    "spread_500": (1.0, 42.8), "p": 0.0011, "asymptote": (99.3, 99.9)}
DYN_LR_GRID = (0.008, 0.004, 0.002, 0.001, 0.0005)  # §7: the dynamics variants' lr grid
DYN_MIN_LRS = 3  # a best lr, and where it moves, read off at least three lrs
DYNAMICS = {  # §7, enwik8: the change of best-lr bpc from T = 1 to 8 (second: window 256, authors' corpus)
    "dyn": +0.102, "fld": (-0.035, -0.045), "ph": (-0.024, -0.046),
    "partners": {"dyn": 1.26, "fld": 60.0}, "ph_minus_fld_T8": 0.011, "spreads_T8": (0.001, 0.002),
    "fld_T8": 1.835}
GRAFT = {  # §8, Qwen3-0.6B, 2,000 steps: k -> (Eq. (1) bpc, attention control bpc)
    2: (3.7041, 3.6665), 4: (3.6912, 3.5551), 6: (3.7008, 3.4751), 8: (3.7315, 3.3059), 12: (3.8444, 3.1000)}
GRAFT_UNMODIFIED = 3.7505
GRAFT_MODEL = "Qwen3-0.6B"
INT8 = {"degradation_ratio": 1.32, "size_ratio": 3.2, "seeds": 3,  # §8: the modified model vs the unmodified
        "size_tolerance": 0.1}  # one unit of the figure's last digit: the paper does not say at which k
QWEN3_06B = dict(linear=440_401_920, vocab=151_936, width=1_024, norms=65_536, layers=28,
                attention=6_291_456)  # Linear weights (q/k/v/o of a layer: attention), tied embedding, norm weights


def int8_size_ratio(k: int = 0, head: str = "copy") -> float:
    """fp32 bytes over int8 bytes of Qwen3-0.6B with k attention layers grafted (Eq. (1): two width^2
    maps in place of q/k/v/o), by its weight count: Linear weights 1 byte, the embedding's rows 1 byte
    plus a 4-byte scale each, norms 4 bytes; head "copy": the tied head its own int8 copy, "shared":
    reading the int8 rows, "float": the embedding (and head) left fp32."""
    q, w = QWEN3_06B, QWEN3_06B["vocab"] * QWEN3_06B["width"]
    linear = q["linear"] - k * (q["attention"] - 2 * q["width"] ** 2)
    fp32 = 4 * (linear + w + q["norms"])
    emb = {"copy": 2 * w + 4 * q["vocab"], "shared": w + 4 * q["vocab"], "float": 4 * w}[head]
    return fp32 / (linear + emb + 4 * q["norms"])


def _graft_flat() -> float:
    """The Eq. (1) arm's spread of bpc over k as a share of the control's fall (the paper's 27%)."""
    sparse = [s for s, _ in GRAFT.values()]
    ks = sorted(GRAFT)
    return (max(sparse) - min(sparse)) / (GRAFT[ks[0]][1] - GRAFT[ks[-1]][1])


# =============================== the paper's effects, for power ===============================
def _effect(a: Sequence[float], b: Sequence[float], source: str) -> tuple[float, float, str]:
    """(mean(a) / mean(b) - 1, the pooled per-seed sd over mean(b), the comparison in words)."""
    from fibexp.report.stats import pooled_sd

    mb = sum(b) / len(b)
    return sum(a) / len(a) / mb - 1, pooled_sd(a, b) / mb, source


# Per ranking claim, its smallest published effect with the seed spread the paper measured it at
# (relative, so our smaller models share it): what `fibexp-plan` computes the power of a grid for.
EFFECTS: dict[str, tuple[float, float, str]] = {
    "A1": _effect(SEEDS_W12["fib stagger"], SEEDS_W12["fib fixed"], "fib stagger vs fib fixed, W12 3 seeds"),
    "A3": _effect(SEEDS_W12["fib learned"], SEEDS_W12["fib fixed"], "fib learned vs fib fixed, W12 2 and 3 seeds"),
    "A4": _effect(SEEDS_W12["pow2 stagger"], SEEDS_W12["fib fixed"], "pow2 stagger vs fib fixed, W12 3 seeds"),
    "A5": _effect(SEEDS_W12["fib stagger"], SEEDS_W12["pow2 stagger"], "fib stagger vs pow2 stagger, W12 3 seeds"),
    "A7": _effect(SEEDS_W12["fib stagger"], (TABLE1_DENSE[0],), "fib stagger W12 vs dense (its seeds' spread)"),
    "B4": _effect(BEST_LR["rot"]["seeds"], BEST_LR["attn"]["seeds"], "rot vs attn at window 256, 3 seeds"),
    "B8": (W64["mixa"]["bpc"] / W64["dense"]["bpc"] - 1,
           ((W64["mixa"]["sd"] ** 2 + W64["dense"]["sd"] ** 2) / 2 * 1.5) ** 0.5 / W64["dense"]["bpc"],
           "mixa vs dense mixing at window 64, 3 seeds (population sd x sqrt(3/2))"),
    "B11": (DYNAMICS["ph"][0] / 1.870, max(DYNAMICS["spreads_T8"]) / DYNAMICS["fld_T8"],
            "ph T 1 -> 8 on enwik8 (-0.024 of 1.870), the wider T = 8 seed spread .002 as the sd"),
}


# =============================== the bars ===============================
_SOLVES = Bar(0.98, "paper B §4: rot 'reaches' count-ones at log2 n layers, >= 98% (98.7% at n = 64, 6 layers; "
                    "6 layers 98.8%, random order 99.0%, dense 100%)")
_AT_CHANCE = Bar(0.05, "paper B §4: fixed stays at chance, 10.2% against the majority guess 9.9% (+0.3 points); "
                       "at chance read as within 5 points of the majority guess")
_FAILS = Bar(0.01, "paper B §4: a cell that fails is no better than the bits reaching the output allow: it knows "
                   "their count and guesses the others' by its mode, C(m, m/2) / 2^m for the m bits that do not reach "
                   f"(5 layers at n = 64: 32 of 64 reach, bound {count_bound(64, 32):.1%}, paper 14.2%; Gray order "
                   f"14.4%); the paper's failing cells lie up to {0.144 - count_bound(64, 32):.1%} above their bound "
                   "(a finite held-out set): fails = at most the bound + 1 point, the bound computed for the run's n "
                   "and depth")

BARS: dict[str, dict[str, Bar]] = {
    "A2": {"band": Bar(seed_band(SEEDS_W12["fib coprime"], SEEDS_W12["fib stagger"]),
                       "paper A, W = 12 seeds 42-44 (FineWeb-Edu ppl): coprime 42.09/42.03/42.43, stagger "
                       "42.02/41.96/42.26; 'ties within the seed spread': the wider range, coprime's 0.40 ppl, is "
                       "0.95% of its mean")},
    "A3": {"max_alpha_shift": Bar(0.1, "paper A: learned alpha 'barely moves' from its init (no figure given); read "
                                       "as within 0.1 of it, a tenth of alpha's range [0.5, 1.5]")},
    "A4": {"band": Bar(seed_band(SEEDS_W12["pow2 stagger"], SEEDS_W12["fib learned"]),
                       "paper A, W = 12 seeds (FineWeb-Edu ppl): pow2 stagger 42.69/42.77/43.08 'ties' fib learned "
                       "42.85/42.85; the wider range, pow2 stagger's 0.39 ppl, is 0.91% of its mean")},
    "A6": {"sparse_max_rise": Bar(EXTRAP_FIB[1], "paper A, extrapolation to 4x: the fib cells range "
                                                f"{EXTRAP_FIB[0]:+.0%} to {EXTRAP_FIB[1]:+.1%} ('within a few %'; fib "
                                                "stagger W12 -1.3%; pow2 fixed, not a fib cell, +11.3%): at most the "
                                                "paper's own highest fib cell"),
           "dense_min_rise": Bar(EXTRAP_FIB[1], "paper A, extrapolation to 4x: dense 33.37 -> 100.36 ppl (+201%); "
                                                f"judged as a direction: dense rises beyond the {EXTRAP_FIB[1]:+.1%} the "
                                                "fib cells may move", weaker="direction only; paper +201%")},
    "A7": {"min_gap": Bar(0.0, f"paper A: the best sparse model 'roughly {TABLE1_GAP:.0%}' above dense at the training "
                               f"length (fib stagger W12 {TABLE1[('fib stagger', 12)][0]} vs {TABLE1_DENSE[0]}, "
                               f"{TABLE1[('fib stagger', 12)][0] / TABLE1_DENSE[0] - 1:+.1%}); judged as a direction: "
                               "above dense beyond every seed", weaker=f"direction only; paper +{TABLE1_GAP:.0%}")},
    "A8": {"late_share_min": Bar(0.3, "paper A, position bins: the gain is 'spread evenly over the 8 bins, not "
                                      f"concentrated at long range' (W8: {_far_share(_pos_gain()):.0%} of it in the "
                                      "far half, every bin positive); evenly read as 30-70% in the far half"),
           "late_share_max": Bar(0.7, "the upper end of the same reading (an even split is 50%)")},
    "A9": {"min_slowdown": Bar(SLOWDOWN[0], "paper A, latency: the learned path 4.3-5.0x slower than the integer paths "
                                            "(39-41k vs 178-195k tokens/s, one RTX 3090; forward pass only, batch 8 x "
                                            "T, bf16, 2 warm-up and 5 timed runs); the bar is the low end")},
    "B1": {"min_acc": _SOLVES, "at_chance": _AT_CHANCE},
    "B2": {"min_acc": _SOLVES, "fails": _FAILS,
           "saturated": Bar(0.995, "paper B §4: about 2 log2 n layers 'saturate' (12 layers 99.8%, 16 layers 100% "
                                   "at n = 64); read as >= 99.5%, the 99.8% to the half point below")},
    "B3": {"min_acc": _SOLVES, "fails": _FAILS},
    "B5": {"within": Bar(0.05, "paper B §5.1 lr table: hybrid's 8x range (4e-3 .. 5e-4) reaches +4.8% of its best "
                               "(1.801 vs 1.718), its next lr +12.0% (1.924): 'trains' = within 5% of the best"),
           "hybrid_min_range": Bar(8.0, "paper B §5.1: the hybrid 'trains over an 8x lr range'"),
           "attn_fail_lr": Bar(0.002, "paper B §5.1: attention 'fails to train at lr >= 2e-3' († at 4e-3, 3e-3, "
                                      "2e-3)")},
    "B6": {"max_links_ratio": Bar(1 / 7, "paper B §5.1: hybrid 72,184 vs attention 526,336 links, '1/7'"),
           "max_weights_ratio": Bar(1.0, "paper B §5.1: 20,318,409 vs 34,998,473 weights, '42% fewer' (0.58x); fibexp's "
                                         "Eq. (1) layer holds two W x W maps the paper's counts leave out (docs/papers.md,"
                                         " 'How paper B counts links'), so only the direction is judged",
                                    weaker="weights direction only; paper 0.58x")},
    "B7": {"band": Bar(seed_band(W64["hybrid"]["seeds"], W64["attn"]["seeds"]),
                       "paper B §5.3, window 64 seeds: hybrid 2.793/2.793/2.802 'level with' attention "
                       "2.797/2.804/2.800; the wider range, hybrid's 0.009 bpc, is 0.32% of its mean"),
           "max_links_ratio": Bar(W64["hybrid"]["links"] / W64["attn"]["links"],
                                  "paper B §5.3: 5,306 vs 24,960 links, '1/4.7'"),
           "max_weights_ratio": Bar(1.0, "paper B §5.3: 2,211,489 vs 2,866,849 weights, '23% fewer' (0.77x); as B6, "
                                         "only the direction is judged",
                                    weaker="weights direction only; paper 0.77x")},
    "B9": {"band": Bar(seed_band(BEST_LR["warp"]["seeds"], BEST_LR["hybrid"]["seeds"]),
                       "paper B §5.1/§9: warp (learned coordinates) 'no advantage' over the hybrid (1.760 vs 1.718); "
                       "warp's seeds 1.743/1.791/1.746, the hybrid's 1.703/1.712/1.740: the wider range, warp's 0.048 "
                       "bpc, is 2.7% of its mean")},
    "B10": {"max_p": Bar(0.05, "paper B §6: the hierarchy ahead at 500 steps, permutation test p = 0.0011 (6 seeds "
                               "a side, fully separated); judged at the usual 5% level, which 3 seeds a side reach "
                               "only fully separated (p = 1/20)", weaker="p <= 0.05; paper p = 0.0011 over 6 seeds"),
            "min_spread_ratio": Bar(1.0, "paper B §6: seed spread 1.0 vs 42.8 points at 500 steps (43x narrower); "
                                         "judged as a direction: narrower",
                                    weaker="spread direction only; paper 43x narrower"),
            "band": Bar(0.006, "paper B §6: the asymptote 'unchanged', 99.3-99.9% with and without: a band of 0.6 "
                               "points")},
    "B11": {"min_lrs": Bar(DYN_MIN_LRS, "paper B §7: each form at its best lr of the grid "
                                        f"{', '.join(f'{x:g}' for x in DYN_LR_GRID)}; dyn's best moves down 4-8x "
                                        "(enwik8 0.004 -> 0.001, the authors' corpus 0.004 -> 0.0005): where the best "
                                        "lies, and where it moves, is read off >= 3 lrs per cell"),
            "max_dyn_partners": Bar(2.0, "paper B §7: the saturated kernel's effective partners 'near 1' (1.26 after "
                                         "training); near 1 read as <= 2"),
            "min_scaled_partners": Bar(10.0, "paper B §7: the scaled kernels' partners 'tens' (fld about 60); tens "
                                             "read as >= 10")},
    "B12": {"band": Bar(max(DYNAMICS["spreads_T8"]) / DYNAMICS["fld_T8"],
                        "paper B §7, enwik8 T = 8: ph 0.011 worse than fld, seed spreads .001 / .002 bpc; the wider, "
                        "0.002, is 0.11% of fld's 1.835")},
    "B13": {"min_ks": Bar(3, "paper B §8 ran k = 2, 4, 6, 8, 12; a trend in k needs >= 3 of them"),
            "flat_share": Bar(0.5, "paper B §8: Eq. (1) 'flat in k' while the control keeps improving (its spread "
                                   f"over k, 0.153 bpc, is {_graft_flat():.0%} of the control's fall); flat read as at "
                                   "most half the control's fall",
                              weaker=f"flat = at most half the control's fall; paper {_graft_flat():.0%}")},
    "B14": {"min_degradation_ratio": Bar(1.0, "paper B §8: the modified model degrades 1.32x as much as the "
                                              "unmodified one at int8 (3 seeds, no overlap); the paper does not name "
                                              "its quantizer, so only the direction is judged (seed ranges disjoint)",
                                         weaker="degradation direction only; paper 1.32x"),
             "size_ratio": Bar(INT8["size_ratio"], "paper B §8: the int8 model '3.2x smaller' than its float "
                                                   "state: the arithmetic of fp32 -> int8 with the tied embedding "
                                                   "quantized per row and the head its own int8 copy (Qwen3-0.6B: "
                                                   f"{int8_size_ratio():.2f}x; one shared int8 matrix would be "
                                                   f"{int8_size_ratio(head='shared'):.1f}x, the embedding left fp32 "
                                                   f"{int8_size_ratio(head='float'):.1f}x). The paper names no k, and "
                                                   f"the ratio falls with k ({int8_size_ratio(2):.2f}x at k = 2, "
                                                   f"{int8_size_ratio(12):.2f}x at k = 12): every k within "
                                                   f"\u00b1{INT8['size_tolerance']} of it",
                               weaker=f"size within \u00b1{INT8['size_tolerance']} of 3.2x at every k; the paper "
                                      "names no k")},
}

_W256 = ("paper B measured it at window 256 (§5.1, enwik8, 16 layers), and at window 64 (§5.3) its own ranking "
         "differs: there rot is far behind attention (3.757 vs 2.800) and the hybrid only level with it")
SCALES: dict[str, Scale] = {
    "B4": Scale(_W256, window=256),
    "B5": Scale("paper B's lr grid is at window 256 (§5.1); window 64 (§5.3) ran one lr", window=256),
    "B6": Scale("paper B states 1/7 for window 256 (§5.1); at window 64 its ratio is B7's 1/4.7", window=256),
    "B7": Scale("paper B §5.3 states it for window 64; at window 256 (§5.1) the hybrid is ahead of attention",
                window=64),
    "B8": Scale("paper B §5.3 states it for window 64 (12 layers, width 128)", window=64),
    "B9": Scale("paper B compared warp with the hybrid at window 256 (§5.1 lr grid, §9)", window=256),
    "B13": Scale(f"paper B §8 grafts into pretrained {GRAFT_MODEL}; any other model (fibexp.cli.tiny_qwen's is random) "
                 "says nothing about it", model=GRAFT_MODEL),
    "B14": Scale(f"paper B §8 quantizes the graft of pretrained {GRAFT_MODEL}; any other model (fibexp.cli.tiny_qwen's "
                 "is random) says nothing about it", model=GRAFT_MODEL),
}


# =============================== the paper's numbers beside ours ===============================
def _a_every_w(a: str, b: str) -> str:
    return ", ".join(f"W{w} {TABLE1[(a, w)][0] / TABLE1[(b, w)][0] - 1:+.1%}" for w in A_WINDOWS
                     if (a, w) in TABLE1 and (b, w) in TABLE1)


PAPER: Mapping[str, str] = {
    "A1": f"fib stagger vs fib fixed, FineWeb-Edu ppl: {_a_every_w('fib stagger', 'fib fixed')}",
    "A2": "W12 seeds: coprime 42.03..42.43 vs stagger 41.96..42.26 (band 0.95%)",
    "A3": ("learned between stagger and fixed at every W: "
           + ", ".join(f"W{w} {TABLE1[('fib stagger', w)][0]:.2f} < {TABLE1[('fib learned', w)][0]:.2f} < "
                       f"{TABLE1[('fib fixed', w)][0]:.2f}" for w in A_WINDOWS) + "; alpha barely moves"),
    "A4": (f"W8 pow2 stagger {TABLE1[('pow2 stagger', 8)][0]:.2f} vs pow2 fixed {TABLE1[('pow2 fixed', 8)][0]:.2f}; "
           f"W12 3 seeds beats fib fixed ({A4_MEANS[0]} vs {A4_MEANS[1]}) and ties fib learned ({A4_MEANS[0]} vs "
           f"{A4_MEANS[2]}, band 0.91%)"),
    "A5": f"fib stagger vs pow2 stagger: {_a_every_w('fib stagger', 'pow2 stagger')}",
    "A6": "dense +201% vs fib stagger W12 -1.3%; pow2 fixed +11.3%",
    "A7": (f"best sparse (fib stagger W12) {TABLE1[('fib stagger', 12)][0] / TABLE1_DENSE[0] - 1:+.1%}, "
           f"{TABLE1[('fib stagger', 12)][0]} vs {TABLE1_DENSE[0]}"),
    "A8": (f"W8 gain {min(_pos_gain()):.3f}..{max(_pos_gain()):.3f} nats in every bin, "
           f"{_far_share(_pos_gain()):.0%} in the far half"),
    "A9": (f"{SLOWDOWN[0]}-{SLOWDOWN[1]}x slower: learned {LATENCY['learned'][0] / 1e3:.1f}-"
           f"{LATENCY['learned'][1] / 1e3:.1f}k vs integer {LATENCY['integer'][0] / 1e3:.1f}-"
           f"{LATENCY['integer'][1] / 1e3:.1f}k tokens/s, one RTX 3090, bf16"),
    "B1": "n=64, 6 layers: rot 98.7%, fixed 10.2%, dense 100%; chance 9.9%",
    "B2": (f"n=64: 5 layers 14.2% (bound {count_bound(64, 32):.1%}), 6 98.8%, 12 99.8%, 16 100%; n=256: 8 28.0%, "
           "16 52.1%"),
    "B3": f"n=64, 16 layers: random 99.0%, gray 14.4% (bound {count_bound(64, 32):.1%}: gray never visits dimension 5)",
    "B4": "hybrid 1.718, rot 1.721 (lr 2e-3) vs attn 1.778 (lr 1e-3), 3 seeds, window 256",
    "B5": (f"hybrid 8x (0.004..0.0005), attn usable {ATTN_USABLE[0]:g}..{ATTN_USABLE[1]:g}, fails (\u2020) at "
           ">= 2e-3 (3 of 7 lrs)"),
    "B6": (f"{BEST_LR['hybrid']['links']:,} vs {BEST_LR['attn']['links']:,} links (1/7.3); 0.58x weights; "
           f"{WALL_TIME['hybrid']} vs {WALL_TIME['attn']} s/run (2.4x less wall time)"),
    "B7": (f"hybrid {W64['hybrid']['bpc']:.3f} vs attn {W64['attn']['bpc']:.3f}, seeds overlap (band 0.32%); links 1/4.7 "
           f"({W64['hybrid']['links']:,} vs {W64['attn']['links']:,}), weights 0.77x"),
    "B8": (f"local {W64['local']['bpc']:.3f}, mixa {W64['mixa']['bpc']:.3f}, rot {W64['rot']['bpc']:.3f} vs dense "
           f"{W64['dense']['bpc']:.3f}, beyond any seed spread"),
    "B9": ("warp 1.760 (1.743/1.791/1.746, lr 1e-3) vs hybrid 1.718 (lr 2e-3), 3 seeds; second corpus 2.248 vs 2.228 "
           "(band 2.7%)"),
    "B10": ("500 steps: with 98.9% vs without 68.5%, spread 1.0 vs 42.8 points, p = 0.0011; 1,000: 99.7 vs 97.3; "
            "2,500: 99.9 vs 99.4"),
    "B11": ("enwik8 T 1 -> 8: dyn +0.102, fld -0.035, ph -0.024 (window 256: fld -0.045, ph -0.046); "
            "partners dyn 1.26, fld about 60"),
    "B12": "enwik8: ph 0.011 worse than fld at T=8, spreads .001/.002 (band 0.11%); never better at either T",
    "B13": ("k=" + ",".join(map(str, GRAFT)) + ": sparse " + " ".join(f"{s:.3f}" for s, _ in GRAFT.values())
            + ", attention control " + " ".join(f"{c:.3f}" for _, c in GRAFT.values())
            + f", penalty {GRAFT[2][0] - GRAFT[2][1]:+.3f} -> {GRAFT[12][0] - GRAFT[12][1]:+.3f}; unmodified "
            f"{GRAFT_UNMODIFIED}"),
    "B14": (f"{GRAFT_MODEL} graft degrades {INT8['degradation_ratio']}x as much as the unmodified model, "
            f"{INT8['seeds']} seeds, no overlap; {INT8['size_ratio']}x smaller"),
}
