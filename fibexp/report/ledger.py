"""The ledger: every claim of both papers judged so far (A1-A9, B1-B14) as data, with its judge."""
from __future__ import annotations

from typing import Sequence

from fibexp.report.claims import (DEGENERATE, INSUFFICIENT, NOT_REPRODUCED, REPRODUCED, TIE, Claim, Missing, Needs,
                                  Verdict)
from fibexp.report.judges_a import (judge_a1, judge_a2, judge_a3, judge_a4, judge_a5, judge_a6, judge_a7, judge_a8,
                                    judge_a9)
from fibexp.report.judges_b import judge_b1, judge_b2, judge_b3, judge_b4, judge_b5, judge_b6
from fibexp.report.judges_b2 import judge_b7, judge_b8
from fibexp.report.judges_b3 import judge_b9, judge_b10, judge_b11, judge_b12
from fibexp.report.judges_deploy import PAPER as B14_PAPER, judge_b14
from fibexp.report.judges_graft import PAPER as B13_PAPER, judge_b13
from fibexp.report.runs import Group, merged


CLAIMS: tuple[Claim, ...] = (
    Claim("A1", "A", "fib stagger < fib fixed in held-out ppl at every W", Needs("lm", ("fib stagger", "fib fixed")),
          "val/ppl/<set> (mean over sets)",
          "direction: fib stagger's mean held-out ppl below fib fixed's at every W both ran, >= 3 seeds per cell "
          "(fewer: insufficient), seed ranges not overlapping (overlap: tie); identical per-layer offsets: "
          "degenerate", {},
          "1.1-1.6 ppl lower at every W", judge_a1),
    Claim("A2", "A", "fib coprime ties fib stagger (within seed spread)",
          Needs("lm", ("fib coprime", "fib stagger"), min_seeds=3), "val/ppl/<set> (mean over sets)",
          "the seed ranges of fib coprime and fib stagger overlap at every W both ran, >= 3 seeds each", {},
          "W12 coprime 42.03..42.43 vs stagger 41.96..42.26", judge_a2),
    Claim("A3", "A", "fib learned lies between fixed and stagger; learned alpha stays near its init",
          Needs("lm", ("fib learned", "fib fixed", "fib stagger")), "val/ppl/<set>, alpha/layer_<l>",
          "direction: stagger < learned < fixed in mean held-out ppl, >= 3 seeds each (seed overlap: tie) and every "
          "layer's final "
          "alpha within max_alpha_shift of its start", {"max_alpha_shift": 0.1},
          "stagger < learned < fixed at every W; alpha barely moves", judge_a3),
    Claim("A4", "A", "pow2 stagger < pow2 fixed, and pow2 stagger ties fib learned",
          Needs("lm", ("pow2 stagger", "pow2 fixed", "fib learned")), "val/ppl/<set> (mean over sets)",
          "both halves, >= 3 seeds per cell: pow2 stagger below pow2 fixed at every W both ran (seed overlap: tie), "
          "and pow2 stagger's and fib learned's seed ranges overlapping at every W both ran (no such W: "
          "insufficient)", {},
          "W8 43.60 vs 44.78; W12 3-seed 42.84 vs 42.85", judge_a4),
    Claim("A5", "A", "fib > pow2 under matched stagger at every W", Needs("lm", ("fib stagger", "pow2 stagger")),
          "val/ppl/<set> (mean over sets)",
          "direction: fib stagger's mean held-out ppl below pow2 stagger's at every W both ran, >= 3 seeds per cell "
          "(seed overlap: tie)",
          {}, "W6 42.93 vs 44.11 ... W12 42.02 vs 42.69", judge_a5),
    Claim("A6", "A", "dense ppl rises at 4x its training length while every fib cell stays within a few %",
          Needs("lm", ("dense", "fib *"), factor=4), "extrap/rel_x4/<set> (mean over sets)",
          "at factor x the training length, dense's mean relative ppl change >= dense_min_rise and every fib "
          "cell's <= sparse_max_rise, for every seed (pow2 is not judged: the paper's pow2 fixed rose +11.3%)",
          {"dense_min_rise": 0.05, "sparse_max_rise": 0.02},
          "dense +201% vs fib stagger W12 -1.3%; pow2 fixed +11.3%", judge_a6),
    Claim("A7", "A", "at the training length the best sparse model is worse than dense",
          Needs("lm", ("dense", "sparse *")), "val/ppl/<set> (mean over sets)",
          "direction: the sparse cell with the lowest mean held-out ppl is still above dense, >= 3 seeds each, seed "
          "ranges not overlapping (overlap: tie)", {}, "+25.9%, 42.02 vs 33.37", judge_a7),
    Claim("A8", "A", "the stagger gain is spread evenly over the 8 position bins",
          Needs("lm", ("fib fixed", "fib stagger")), "val/pos_loss/<set>/bin<j> (mean over sets)",
          "fixed minus stagger loss positive in every bin, with the far half of the bins holding between "
          "late_share_min and late_share_max of the total gain (W8, else the smallest W)",
          {"late_share_min": 0.3, "late_share_max": 0.7}, "W8 gain 0.022..0.043 nats in every bin, 53% in the far half",
          judge_a8),
    Claim("A9", "A", "latency: learned offsets are slower than integer offsets at inference",
          Needs("lm", ("fib learned", "fib stagger|fixed|coprime")), "perf/tokens_per_s_eval",
          "the suite's own ratio: integer-path eval tokens/s over learned's >= min_slowdown (our learned gather "
          "is a different implementation from the paper's)", {"min_slowdown": 2.0},
          "4.3-5.0x slower, 39-41k vs 178-195k tokens/s on an RTX 3090", judge_a9),
    Claim("B1", "B", "count-ones at depth log2 n: rot reaches, fixed stays at chance, dense 100%",
          Needs("count_ones", ("hypercube/rot", "hypercube/fixed")), "task/acc, task/chance",
          "at depth log2 n, rot's held-out accuracy >= min_acc and fixed's at chance (<= chance + 5 points, "
          "docs/papers.md) for every seed (dense, where run, >= min_acc)", {"min_acc": 0.90},
          "n=64, 6 layers: rot 98.7%, fixed 10.2%, dense 100%; chance 9.9%", judge_b1),
    Claim("B2", "B", "depth: log2 n - 1 layers fail, log2 n succeed, ~2 log2 n saturate",
          Needs("count_ones", ("hypercube/rot",)), "task/acc, task/chance",
          "at n <= 64 (where the paper states it): rot at log2 n - 1 layers at chance (<= chance + 5 points), at "
          "log2 n >= min_acc, at 2 log2 n no more than saturate_tol below log2 n, every seed; at n = 256 only "
          "what the paper shows there: 2 log2 n layers above log2 n for every seed",
          {"min_acc": 0.90, "saturate_tol": 0.01},
          "n=64: 5 layers 14.2%, 6 98.8%, 12 99.8%, 16 100%; n=256: 8 28.0%, 16 52.1%", judge_b2),
    Claim("B3", "B", "order: a random permutation of dimensions succeeds, Gray-code order fails",
          Needs("count_ones", ("hypercube/rot order=random", "hypercube/rot order=gray")), "task/acc, task/chance",
          "at one depth, random order >= min_acc and gray at chance (<= chance + 5 points), every seed; degenerate "
          "where the gray order still visits every dimension (then it is no failing control)",
          {"min_acc": 0.90}, "n=64, 16 layers: random 99.0%, gray 14.4%", judge_b3),
    Claim("B4", "B", "char LM: hybrid and rot below attention in bpc at each one's best lr",
          Needs("lm", ("hypercube/hybrid", "hypercube/rot", "dense"), lr_sweep=True), "val/bpc/<set> (mean over sets)",
          "direction: at each cell's best lr, hybrid and rot below attn in mean held-out bpc, >= 3 seeds each, seed "
          "ranges not overlapping (overlap: tie); each cell swept over >= min_lrs lrs", {"min_lrs": 2},
          "hybrid 1.718, rot 1.721 (lr 2e-3) vs attn 1.778 (lr 1e-3), 3 seeds", judge_b4),
    Claim("B5", "B", "lr robustness: hybrid trains over an 8x lr range, attention fails at lr >= 2e-3",
          Needs("lm", ("hypercube/hybrid", "dense"), lr_sweep=True), "val/bpc/<set>, fibexp.diverged",
          "both halves: hybrid's unbroken run of grid lrs whose bpc is within `within` of its best spans >= "
          "hybrid_min_range with no gap (an unusable lr between usable ones), and attn fails (diverged, or not "
          "within `within` of its best) at every lr >= attn_fail_lr it ran (none run: insufficient)",
          {"within": 0.05, "hybrid_min_range": 8.0, "attn_fail_lr": 0.002, "min_lrs": 2},
          "hybrid 8x (0.004..0.0005), attn 2x, attn fails at >= 2e-3", judge_b5),
    Claim("B6", "B", "cost: hybrid uses 1/7 of attention's links and 42% fewer weights",
          Needs("lm", ("hypercube/hybrid", "dense")), "model/links, model/weights (logged by the runs)",
          "ratios of what the runs logged, at the same size: hybrid links / attn links <= max_links_ratio and hybrid weights / attn "
          "weights < max_weights_ratio (direction only: weights depend on the model's FFN share)",
          {"max_links_ratio": 0.2, "max_weights_ratio": 1.0}, "72,184 vs 526,336 links (1/7.3); 0.58x weights", judge_b6),
    Claim("B7", "B", "window 64: hybrid level with attention at 1/4.7 of its links and fewer weights",
          Needs("lm", ("hypercube/hybrid", "dense")), "val/bpc/<set>, model/links, model/weights",
          "at window 64, >= 3 seeds each: hybrid's and attn's bpc seed ranges overlap (level: a match, not a win), "
          "hybrid links / attn links <= max_links_ratio (the paper's 1/4.7) and hybrid weights / attn weights < "
          "max_weights_ratio (direction only, as B6)", {"max_links_ratio": 1 / 4.7, "max_weights_ratio": 1.0},
          "2.796 vs 2.800, seeds overlap; 5,306 vs 24,960 links; 23% fewer weights", judge_b7),
    Claim("B8", "B", "window 64: every pure sparse schedule behind dense mixing beyond any seed spread",
          Needs("lm", ("hypercube/local", "hypercube/rot", "hypercube/mixa", "hypercube/dense")), "val/bpc/<set>",
          "at window 64, >= 3 seeds each: local's, rot's and mixa's bpc seed ranges all above dense mixing's "
          "(overlap: tie)", {}, "local 2.980, mixa 2.943, rot 3.757 vs dense 2.910", judge_b8),
    Claim("B9", "B", "learned coordinates (warp) bring no advantage over the fixed hybrid",
          Needs("lm", ("hypercube/warp", "hypercube/hybrid"), lr_sweep=True), "val/bpc/<set> (mean over sets)",
          "at each cell's best lr (each swept over >= min_lrs lrs), >= 3 seeds each: warp not below hybrid beyond "
          "every seed (seed ranges overlap, or warp behind); warp's range wholly below hybrid's: not reproduced",
          {"min_lrs": 2}, "warp 1.760 (lr 1e-3) vs hybrid 1.718 (lr 2e-3), 3 seeds; second corpus 2.248 vs 2.228",
          judge_b9),
    Claim("B10", "B", "the hierarchy changes trainability, not capacity",
          Needs("assoc_recall", ("hypercube/* /hier", "hypercube/*"), across="step budget"), "task/acc",
          "each seed's accuracy is its mean over the difficulties run, >= 3 seeds per arm: at the smallest step "
          "budget with the hierarchy ahead (one-sided exact permutation test over seeds, p <= max_p; ahead but "
          "p above: tie) and its seed spread (max - min) narrower; at the largest budget both arms' means within "
          "asymptote_tol (the paper's band, 99.3-99.9%) or their seed ranges overlapping",
          {"max_p": 0.05, "asymptote_tol": 0.006},
          "500 steps: with 98.9% vs without 68.5%, spread 1.0 vs 42.8 points, p = 0.0011; 1,000: 99.7 vs 97.3; "
          "2,500: 99.9 vs 99.4", judge_b10),
    Claim("B11", "B", "T 1 -> 8 hurts the saturated kernel and helps the scaled ones; partners ~1 vs tens",
          Needs("lm", ("dynamics/dyn/T*", "dynamics/fld/T*", "dynamics/ph/T*")),
          "val/bpc/<set>, attn/effective_partners",
          "each form at its best lr, >= 3 seeds per cell: dyn's bpc at the larger T above its smaller-T range, fld's "
          "and ph's below (overlap: tie; a reversed sign: not reproduced), and every dyn run's effective partners "
          "<= max_dyn_partners, every fld and ph run's >= min_scaled_partners",
          {"max_dyn_partners": 2.0, "min_scaled_partners": 10.0},
          "enwik8 T 1 -> 8: dyn +0.102, fld -0.035, ph -0.024 (window 256: fld -0.045, ph -0.046); "
          "partners dyn 1.26, fld about 60", judge_b11),
    Claim("B12", "B", "velocity never helps: ph is never ahead of fld at the same T",
          Needs("lm", ("dynamics/ph/T*", "dynamics/fld/T*")), "val/bpc/<set> (mean over sets)",
          "at every T both ran, each at its best lr, >= 3 seeds each: ph not below fld beyond every seed (overlap, "
          "or ph behind); ph's range wholly below fld's at some T: not reproduced", {},
          "enwik8: ph 0.011 worse than fld at T=8; never better at either T", judge_b12),
    Claim("B13", "B", "grafted into a pretrained model, Eq. (1) is flat in k while the attention control keeps improving",
          Needs("graft", ("graft/eq1/k*", "graft/attention/k*")), "val/bpc/<set> (mean over sets)",
          "over the task.k both arms ran (>= min_ks), each cell at its best lr with >= 3 seeds: the control's "
          "bpc below its previous k's beyond every seed at each step up in k, the penalty (sparse - control, "
          "paired by seed) at the largest k wholly above the one at the smallest, and sparse's spread of means "
          "over k at most flat_share of the control's fall; any part the other way: not reproduced; a seed "
          "overlap and nothing against: tie", {"min_ks": 3, "flat_share": 0.5}, B13_PAPER, judge_b13),
    Claim("B14", "B", "under 8-bit quantization the sparse model degrades more than dense, at a smaller size",
          Needs("lm", ("hypercube/*", "dense")),
          "int8/degradation, int8/size_ratio (fibexp-export RUN --int8, or eval.int8=true when training)",
          "after an int8 measurement, >= 3 seeds each: every measured hypercube cell's degradation (relative held-out "
          "bpc increase, float -> int8) wholly above dense attention's (overlap: tie; wholly below: not reproduced), "
          "and every compared run's int8 state smaller than its float state by more than min_size_ratio (direction "
          "only: the paper's 1.32x and 3.2x are printed beside ours)", {"min_size_ratio": 1.0}, B14_PAPER, judge_b14),
)


def judge(groups: Sequence[Group], claims: Sequence[Claim] = CLAIMS) -> list[Verdict]:
    """One verdict per claim from the groups of its task; several sufficient groups (e.g.
    count-ones at n = 16 and n = 64) are all judged and the worst verdict wins."""
    out = []
    for c in claims:
        mine = [g for g in groups if g.task == c.needs.task and g.runs]
        if c.needs.across:
            mine = merged(mine, c.needs.across)
        results, missing = [], []
        for g in mine:
            try:
                results.append(c.judge(c, g))
            except Missing as e:
                missing.append(str(e))
        if not results:
            why = missing[0] if missing else f"no finished task={c.needs.task} runs"
            out.append(Verdict(c, INSUFFICIENT, why, c.paper_numbers))
            continue
        verdicts = [v for v, _, _ in results]
        verdict = next(v for v in (NOT_REPRODUCED, TIE, REPRODUCED, DEGENERATE) if v in verdicts)
        paper = next((p for _, _, p in results if p), c.paper_numbers)
        # groups a claim could not judge are named, never dropped silently (e.g. count-ones at n = 256)
        named = [m for m in dict.fromkeys(missing) if not m.startswith("needs ")]
        rest = f"; not judged in {len(missing)} other group(s): {'; '.join(named)}" if named else ""
        out.append(Verdict(c, verdict, "; ".join(d for _, d, _ in results) + rest, paper))
    return out
