"""The ledger: every claim of both papers (A1-A9, B1-B14) as data, with its judge, and `judge`, which
turns groups of comparable runs into one verdict per claim. Bars, sources, scales and the papers'
numbers come from fibexp.report.published; the criteria below are words, their values printed
from the bars."""
from __future__ import annotations

from typing import Sequence

from fibexp.report.claims import (DEGENERATE, INSUFFICIENT, JUDGED, NOT_AT_SCALE, NOT_REPRODUCED, REPRODUCED, TIE,
                                  UNDECIDED, Absent, Claim, Missing, Needs, NotAtScale, Result, Verdict, evidence)
from fibexp.report.judges.paper_a_extrapolation import judge_a6
from fibexp.report.judges.paper_a_latency import judge_a9
from fibexp.report.judges.paper_a_position import judge_a8
from fibexp.report.judges.paper_a_table1 import judge_a1, judge_a2, judge_a3, judge_a4, judge_a5, judge_a7
from fibexp.report.judges.paper_b_char_lm import judge_b4, judge_b5, judge_b6
from fibexp.report.judges.paper_b_count_ones import judge_b1, judge_b2, judge_b3
from fibexp.report.judges.paper_b_deploy import judge_b14, substitute
from fibexp.report.judges.paper_b_dynamics import judge_b11, judge_b12
from fibexp.report.judges.paper_b_graft import judge_b13
from fibexp.report.judges.paper_b_hierarchy import judge_b10
from fibexp.report.judges.paper_b_warp import judge_b9
from fibexp.report.judges.paper_b_window64 import judge_b7, judge_b8
from fibexp.report.published import BARS, PAPER, SCALES
from fibexp.report.runs import Group, merged
from fibexp.report.seeds import n_seeds, recording
from fibexp.report.stats import Comparison

_EVERY_W = ("at every W both cells ran with >= 3 seeds each (a W with fewer: insufficient; fewer W than the "
            "paper's 6-12: said beside the verdict)")
_LEVEL = ("the 95% interval of the difference of means inside +-`band` (the paper's own seed spread, relative): "
          "equivalence shown (two one-sided tests then p < 0.025); the interval wholly beyond the band: not "
          "reproduced; across its edge: undecided; a side with one seed has no interval: insufficient")
_NO_ADVANTAGE = ("the 95% interval of the lead (the base's mean minus the challenger's) below `band` (the paper's "
                 "seed spread, relative); wholly above it: not reproduced; across it: undecided")


def _claim(id, statement, needs, metric, comparison, judge, beside=None) -> Claim:
    return Claim(id, id[0], statement, needs, metric, comparison, BARS.get(id, {}), PAPER[id], judge,
                 SCALES.get(id), beside)


CLAIMS: tuple[Claim, ...] = (
    _claim("A1", "fib stagger < fib fixed in held-out ppl at every W", Needs("lm", ("fib stagger", "fib fixed")),
           "val/ppl/<set> (mean over sets)",
           f"ranking: fib stagger's held-out ppl seed range wholly below fib fixed's {_EVERY_W}, on the mean over "
           "held-out sets and on each set (overlap: tie); "
           "identical per-layer offsets: degenerate", judge_a1),
    _claim("A2", "fib coprime ties fib stagger (within seed spread)", Needs("lm", ("fib coprime", "fib stagger")),
           "val/ppl/<set> (mean over sets)", f"level: fib coprime with fib stagger {_EVERY_W}: {_LEVEL}", judge_a2),
    _claim("A3", "fib learned lies between fixed and stagger; learned alpha stays near its init",
           Needs("lm", ("fib learned", "fib fixed", "fib stagger")), "val/ppl/<set>, alpha/layer_<l>",
           f"ranking stagger < learned < fixed {_EVERY_W}, on the mean over held-out sets and on each set (overlap: "
           "tie), and every learned run's final alpha within "
           "max_alpha_shift of its start in every layer", judge_a3),
    _claim("A4", "pow2 stagger < pow2 fixed, and pow2 stagger beats fib fixed and ties fib learned",
           Needs("lm", ("pow2 stagger", "pow2 fixed", "fib learned")), "val/ppl/<set> (mean over sets)",
           f"every half, each {_EVERY_W}: pow2 stagger's seed range wholly below pow2 fixed's and fib fixed's "
           f"(overlap: tie; without fib fixed that half is named not judged), and pow2 stagger level with fib learned: "
           f"{_LEVEL}", judge_a4),
    _claim("A5", "fib > pow2 under matched stagger at every W", Needs("lm", ("fib stagger", "pow2 stagger")),
           "val/ppl/<set> (mean over sets)",
           f"ranking: fib stagger's seed range wholly below pow2 stagger's {_EVERY_W} (overlap: tie)", judge_a5),
    _claim("A6", "dense ppl rises at 4x its training length while every fib cell stays within a few %",
           Needs("lm", ("dense", "fib *"), factor=4), "extrap/rel_x4/<set> (mean over sets)",
           "threshold, every seed of every cell (>= 3 seeds each): dense's relative ppl change at 4x above "
           "dense_min_rise, every fib cell's at most sparse_max_rise (pow2 is not judged: the paper's own pow2 fixed "
           "rose beyond a few %)", judge_a6),
    _claim("A7", "at the training length the best sparse model is worse than dense", Needs("lm", ("dense", "sparse *")),
           "val/ppl/<set> (mean over sets)",
           "ranking: the sparse cell with the lowest mean held-out ppl (among those with >= 3 seeds) wholly above "
           "dense's seed range (overlap: tie), a direction (min_gap)", judge_a7),
    _claim("A8", "the stagger gain is spread evenly over the 8 position bins", Needs("lm", ("fib fixed", "fib stagger")),
           "val/pos_loss/<set>/bin<j> (mean over sets)",
           "threshold, every seed (>= 3, fixed and stagger paired by seed; W8, else the smallest W): the gain fixed - "
           "stagger positive in every bin and the far half of the bins holding between late_share_min and "
           "late_share_max of it", judge_a8),
    _claim("A9", "latency: learned offsets are slower than integer offsets at inference",
           Needs("lm", ("fib learned", "fib stagger|fixed|coprime")), "perf/fwd_tokens_per_s",
           "threshold, every seed (>= 3, paired by seed): each integer-offset fib cell's forward tokens/s over fib "
           "learned's at the same W at least min_slowdown, timed by the authors' protocol (forward pass only, random "
           "tokens, batch 8 x T, 2 warm-up and 5 timed runs, bf16 on a GPU); runs timed off a GPU are judged all the "
           "same, the device named beside the verdict", judge_a9),
    _claim("B1", "count-ones at depth log2 n: rot reaches, fixed stays at chance, dense 100%",
           Needs("count_ones", ("hypercube/rot", "hypercube/fixed")), "task/acc, task/chance",
           "threshold, every seed (>= 3 per cell): at log2 n layers rot's accuracy >= min_acc, fixed's <= chance + "
           "at_chance (dense, where run, >= min_acc)", judge_b1),
    _claim("B2", "depth: log2 n - 1 layers fail, log2 n succeed, ~2 log2 n saturate",
           Needs("count_ones", ("hypercube/rot",)), "task/acc, task/chance",
           "threshold, every seed (>= 3 per cell), at n <= 64 (where the paper states it): rot at log2 n - 1 layers "
           "<= the information bound of the bits that reach the output + fails, at log2 n >= min_acc, at 2 log2 n >= saturated; at n = 256 only what the paper "
           "shows there: 2 log2 n layers' seed range wholly above log2 n's", judge_b2),
    _claim("B3", "order: a random permutation of dimensions succeeds, Gray-code order fails",
           Needs("count_ones", ("hypercube/rot order=random", "hypercube/rot order=gray")), "task/acc, task/chance",
           "threshold, every seed (>= 3 per cell), at one depth: random order >= min_acc, gray <= the information "
           "bound of the bits that reach the output + fails; "
           "degenerate where the gray order still visits every dimension (then it is no failing control)", judge_b3),
    _claim("B4", "char LM: hybrid and rot below attention in bpc at each one's best lr",
           Needs("lm", ("hypercube/hybrid", "hypercube/rot", "dense"), min_lrs=2), "val/bpc/<set> (mean over sets)",
           "ranking at window 256, each cell at its best lr (among its lrs with >= 3 seeds; each cell swept over >= 2 "
           "lrs): hybrid's and rot's seed ranges wholly below attn's (overlap: tie)", judge_b4),
    _claim("B5", "lr robustness: hybrid trains over an 8x lr range, attention fails at lr >= 2e-3",
           Needs("lm", ("hypercube/hybrid", "dense"), min_lrs=2), "val/bpc/<set>, fibexp.diverged",
           "threshold at window 256, every seed (>= 3 that ran every lr of the cell's grid): the hybrid's unbroken "
           "run of lrs within `within` of that seed's best bpc spans >= hybrid_min_range with no gap, and attn fails "
           "(diverged, or not within `within` of its best) at every lr >= attn_fail_lr it ran", judge_b5),
    _claim("B6", "cost: hybrid uses 1/7 of attention's links and 42% fewer weights",
           Needs("lm", ("hypercube/hybrid", "dense")), "model/links, model/weights (logged by the runs)",
           "at window 256, from what the runs logged (a count no seed changes: one run per cell): hybrid links / attn "
           "links <= max_links_ratio and hybrid weights / attn weights < max_weights_ratio", judge_b6),
    _claim("B7", "window 64: hybrid level with attention at 1/4.7 of its links and fewer weights",
           Needs("lm", ("hypercube/hybrid", "dense")), "val/bpc/<set>, model/links, model/weights",
           f"at window 64, >= 3 seeds each: hybrid level with attn: {_LEVEL}; and hybrid links / attn links <= "
           "max_links_ratio, hybrid weights / attn weights < max_weights_ratio", judge_b7),
    _claim("B8", "window 64: every pure sparse schedule behind dense mixing beyond any seed spread",
           Needs("lm", ("hypercube/local", "hypercube/rot", "hypercube/mixa", "hypercube/dense")), "val/bpc/<set>",
           "ranking at window 64, >= 3 seeds each: local's, rot's and mixa's bpc seed ranges all wholly above dense "
           "mixing's (overlap: tie)", judge_b8),
    _claim("B9", "learned coordinates (warp) bring no advantage over the fixed hybrid",
           Needs("lm", ("hypercube/warp", "hypercube/hybrid"), min_lrs=2), "val/bpc/<set> (mean over sets)",
           "no advantage at window 256, each cell at its best lr (swept over >= 2 lrs), >= 3 seeds each, warp against "
           "the hybrid: " + _NO_ADVANTAGE,
           judge_b9),
    _claim("B10", "the hierarchy changes trainability, not capacity",
           Needs("assoc_recall", ("hypercube/* /hier", "hypercube/*"), across="step budget"), "task/acc",
           "each seed's accuracy its mean over the difficulties run, >= 3 seeds per arm: at the smallest step budget "
           "the hierarchy ahead (one-sided exact permutation test over seeds, p <= max_p; ahead but p above: tie) "
           "with a seed spread narrower than without's by more than min_spread_ratio; at the largest budget both arms level: the 95% "
           "interval of their difference inside +-`band` (absolute accuracy; across its edge: undecided)", judge_b10),
    _claim("B11", "T 1 -> 8 hurts the saturated kernel and helps the scaled ones; partners ~1 vs tens",
           Needs("lm", ("dynamics/dyn/T*", "dynamics/fld/T*", "dynamics/ph/T*")),
           "val/bpc/<set>, attn/effective_partners",
           "each form at its best lr, >= 3 seeds per cell: dyn's bpc at the larger T wholly above its smaller-T range, "
           "fld's and ph's wholly below (overlap: tie; a reversed sign: not reproduced), and every dyn run's "
           "effective partners <= max_dyn_partners, every fld and ph run's >= min_scaled_partners; dyn's best lr lower at "
           "the larger T (a direction; where dyn ran < min_lrs lrs per T, named not judged)", judge_b11),
    _claim("B12", "velocity never helps: ph is never ahead of fld at the same T",
           Needs("lm", ("dynamics/ph/T*", "dynamics/fld/T*")), "val/bpc/<set> (mean over sets)",
           "no advantage at every T both ran, each at its best lr, >= 3 seeds each, ph against fld: " + _NO_ADVANTAGE,
           judge_b12),
    _claim("B13", "grafted into a pretrained model, Eq. (1) is flat in k while the attention control keeps improving",
           Needs("graft", ("graft/eq1/k*", "graft/attention/k*")), "val/bpc/<set> (mean over sets)",
           "on grafts of the paper's pretrained model, over the task.k both arms ran (>= min_ks), each cell at its "
           "best lr with >= 3 seeds: the control's bpc below its previous k's beyond every seed at each step up in k, "
           "the penalty (sparse - control, paired by seed) at the largest k wholly above the one at the smallest, and "
           "sparse's spread of means over k at most flat_share of the control's fall; any part the other way: not "
           "reproduced; a seed overlap and nothing against: tie", judge_b13),
    _claim("B14", "under 8-bit quantization the grafted model degrades more than the unmodified one, at a smaller size",
           Needs("graft", ("graft/eq1/k*", "graft/none")),
           "int8/degradation, int8/size_ratio (eval.int8=true on task=graft runs)",
           "on grafts of the paper's pretrained model measured at int8: every measured graft/eq1/k<k> cell's "
           "degradation (relative held-out bpc increase, float -> int8; >= 3 seeds) wholly above the unmodified "
           "model's (graft/none: one run, untrained) (overlap: tie; wholly below: not reproduced), so their ratio "
           "exceeds min_degradation_ratio (a direction); and every measured cell's int8 size ratio within "
           "+-0.1 of size_ratio (embedding int8 per row, a tied head its own int8 copy, as the paper's figure "
           "implies)", judge_b14, beside=substitute),
)

_ORDER = (NOT_REPRODUCED, UNDECIDED, TIE, REPRODUCED, DEGENERATE)  # several groups: the first present wins


def _others(missing: Sequence[Missing], scale: Sequence[str], beside: str | None) -> tuple[str, ...]:
    """What follows the verdict: the groups not judged and why, and a substitute shown beside."""
    out = []
    if missing:
        out.append(f"not judged in {len(missing)} other group(s): {'; '.join(dict.fromkeys(map(str, missing)))}")
    if scale:
        out.append(f"not at this scale in {len(scale)} other group(s): {'; '.join(dict.fromkeys(scale))}")
    return tuple(out + ([beside] if beside else []))


def _one(c: Claim, groups: Sequence[Group], every: Sequence[Group]) -> Verdict:
    judged: list[Result] = []
    stats: list[Comparison] = []
    missing: list[Missing] = []
    absent: list[Missing] = []
    scale: list[str] = []
    for g in groups:
        try:
            with recording() as made:
                judged.append(c.judge(c, g))
            stats += made
        except NotAtScale as e:
            scale.append(str(e))
        except Absent as e:
            absent.append(e)
        except Missing as e:
            missing.append(e)
    beside = c.beside(every) if c.beside else None
    if judged:
        verdict = next(v for v in _ORDER if v in {r.verdict for r in judged})
        notes = list(dict.fromkeys(n for r in judged for n in r.notes))
        qualifier = "; ".join(notes + c.weaker() + evidence(verdict, stats)) if verdict in JUDGED else ""
        paper = next((r.paper for r in judged if r.paper), c.paper_numbers)
        return Verdict(c, verdict, "; ".join(r.detail for r in judged), paper, qualifier,
                       _others(missing, scale, beside), tuple(stats) if verdict in JUDGED else ())
    if missing:
        first = missing[0]
        return Verdict(c, INSUFFICIENT, str(first), c.paper_numbers,
                       n_seeds(first.seeds) if first.seeds is not None else "",
                       _others([m for m in missing[1:] if str(m) != str(first)], scale, beside))
    if scale:
        return Verdict(c, NOT_AT_SCALE, "; ".join(dict.fromkeys(scale)), c.paper_numbers,
                       others=_others((), (), beside))
    why = str(absent[0]) if absent else f"no finished task={c.needs.task} runs"
    return Verdict(c, INSUFFICIENT, why, c.paper_numbers, others=_others((), (), beside))


def judge(groups: Sequence[Group], claims: Sequence[Claim] = CLAIMS) -> list[Verdict]:
    """One verdict per claim from the groups of its task (several judged groups: the worst verdict
    wins, e.g. count-ones at n = 16 and n = 64). Without a judged group: `insufficient` where a group
    holds the claim's cells but misses something (named), else `not at this scale` where its cells
    exist only at another scale, else `insufficient` naming the cells. The groups not judged are
    named after the verdict, never dropped."""
    out = []
    for c in claims:
        mine = [g for g in groups if g.task == c.needs.task and g.runs]
        if c.needs.across:
            mine = merged(mine, c.needs.across)
        out.append(_one(c, mine, groups))
    return out
