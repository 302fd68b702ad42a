"""The claims report as a whole: verdicts read through MLflow as `fibexp-report --claims` reads them,
the ledger (every claim's bars with their sources, the papers' numbers, the seed bands derived from
the papers' own seeds), how several groups combine into one verdict, and that which runs exist,
never their values, decides `insufficient` and `not at this scale`."""
from __future__ import annotations

import random

import pytest

from fibexp.report.claims import (INSUFFICIENT, Missing, JUDGED, NOT_AT_SCALE, NOT_REPRODUCED, REPRODUCED, UNDECIDED, VERDICTS,
                                  lines)
from fibexp.report.cell_runs import link_count
from fibexp.report.ledger import CLAIMS, judge
from fibexp.report.published import BARS, BEST_LR, PAPER, SCALES, SEEDS_W12, W64, seed_band
from fibexp.report.runs import RunView, comparable, load_runs
from fibexp.report.seeds import Seeds, level, no_advantage, pstdev, rank, ranking
from helpers import claim_runs as hand
from helpers.mlflow_runs import FIXED_BINS, STAGGER_BINS, count, lm_metrics, log_hypercube_lr_grid, new_experiment
from helpers.mlflow_runs import log_run as _log_run


def log_run(*args, layers=8, **kw):
    return _log_run(*args, layers=layers, **kw)


def verdicts(client, exp):
    views, _ = load_runs(client, [exp])
    groups, _ = comparable(views)
    return {v.claim.id: v for v in judge(groups)}


# ---- through MLflow ----
def test_make_runs_single_seed_judges_nothing_and_names_what_each_claim_needs(store):
    """`make run`'s cells at one seed: threshold claims, like rankings, need >= 3 seeds."""
    exp = new_experiment(store)
    log_run(store, exp, "dense", metrics=lm_metrics(50.0, 0.112, FIXED_BINS))
    log_run(store, exp, "sparse/fib/fixed/W8", metrics=lm_metrics(52.0, -0.004, FIXED_BINS))
    log_run(store, exp, "sparse/fib/stagger/W8", metrics=lm_metrics(51.0, -0.019, STAGGER_BINS))
    for cell, acc in (("hypercube/rot", 0.997), ("hypercube/fixed", 0.21)):
        log_run(store, exp, cell, task="count_ones", layers=4, length=16, steps=600, metrics=count(acc))
    v = verdicts(store, exp)
    assert list(v) == [c.id for c in CLAIMS] and len(v) == 23
    assert {x.verdict for x in v.values()} == {INSUFFICIENT}
    assert v["A6"].line().startswith("A6  insufficient (1 seed) dense has seeds 42 with extrap/rel_x4/<set>, needs "
                                     ">= 3; fib fixed W8 has seeds 42")
    assert v["A8"].line() == ("A8  insufficient (1 seed) W8: fib fixed and fib stagger share seeds 42 with "
                              "val/pos_loss/<set>/bin<j>, needs >= 3 (the gain is paired by seed)")
    assert v["B1"].line() == "B1  insufficient (1 seed) rot at n=16, 4 layers has seeds 42 with task/acc, needs >= 3"
    assert v["B2"].detail == "rot at n=16, 4 layers has seeds 42 with task/acc, needs >= 3"
    assert v["B4"].detail == "needs attn (dense) and hybrid (hypercube/hybrid) and rot (hypercube/rot) (no run)"
    assert v["B13"].detail == "no finished task=graft runs"


def test_three_seeds_through_mlflow(store):
    exp = new_experiment(store)
    for i, seed in enumerate((42, 43, 44)):
        log_run(store, exp, "sparse/fib/fixed/W8", seed=seed, metrics=lm_metrics(52.0 + 0.2 * i))
        log_run(store, exp, "sparse/fib/stagger/W8", seed=seed, metrics=lm_metrics(51.0 + 0.1 * i))
        for cell, acc in (("hypercube/rot", 0.997), ("hypercube/fixed", 0.21)):
            log_run(store, exp, cell, task="count_ones", seed=seed, layers=4, length=16, metrics=count(acc))
    v = verdicts(store, exp)
    assert v["A1"].line().startswith("A1  reproduced (at W8 only; paper: every W of 6-12; paper's rule: ranges "
                                     "disjoint; p = 0.10, weak) fib stagger vs fib fixed, "
                                     "held-out ppl: W8 -2.1%: 51.10 ± 0.08 (seeds 42,43,44) vs 52.20 ± 0.16")
    assert v["B1"].verdict == REPRODUCED and "rot 99.7%, fixed 21.0% (chance 19.6%), every seed (3 seeds)" in v["B1"].detail


CENSUS = {"dense": (526_336, 35_000_000), "hypercube/hybrid": (72_184, 20_300_000),
          "hypercube/rot": (74_470, 20_300_000)}


def test_hypercube_lm_claims_read_best_lr_divergence_and_census(store):
    """B4 at each schedule's best lr, B5 every seed over the lr grid (a diverged lr counts as †), B6 cost."""
    exp = new_experiment(store)
    log_hypercube_lr_grid(store, exp, seeds=(42, 43, 44), census=CENSUS)
    v = verdicts(store, exp)
    assert v["B4"].verdict == REPRODUCED and v["B4"].qualifier == "best of 4 lrs; paper: 7; paper's rule: ranges disjoint; p = 0.10, weak"
    assert ("hybrid 1.721 ± 0.001 (seeds 42,43,44) (lr 0.002), rot 1.741 ± 0.001 (seeds 42,43,44) (lr 0.002), attn "
            "1.801 ± 0.001") in v["B4"].detail
    assert v["B5"].verdict == REPRODUCED and "seed 44 8x (0.004..0.0005)" in v["B5"].detail
    assert "44@0.002 †, 44@0.004 †" in v["B5"].detail and "(† seed 42 lr 0.002, seed 43 lr 0.002" in v["B5"].detail
    assert v["B6"].line().startswith("B6  reproduced (wall time not judged: paper 2.4x less, one GPU; weights "
                                     "direction only; paper 0.58x) hybrid links 1/7.3 of "
                                     "attn's (72,184 vs 526,336), weights 0.58x")


def test_groups_never_evict_each_other(store):
    """BPE runs and char runs, and a stray newer run of another budget: each group judged, none dropped."""
    exp = new_experiment(store)
    log_hypercube_lr_grid(store, exp, seeds=(42, 43, 44), census=CENSUS)
    for i in range(3):
        log_run(store, exp, "sparse/fib/fixed/W8", seed=42 + i, metrics=lm_metrics(52.0 + 0.1 * i))
        log_run(store, exp, "sparse/fib/stagger/W8", seed=42 + i, metrics=lm_metrics(51.0 + 0.1 * i))
    log_run(store, exp, "dense", steps=10, metrics=lm_metrics(90.0))  # newest, another step budget
    log_run(store, exp, "sparse/fib/fixed/W8", params={"model.vocab_size": 2048}, metrics=lm_metrics(40.0))
    views, _ = load_runs(store, [exp])
    groups, left = comparable(views)
    assert len([g for g in groups if g.task == "lm"]) == 4 and left == []
    v = {x.claim.id: x for x in judge(groups)}
    assert v["A1"].verdict == REPRODUCED and v["B4"].verdict == REPRODUCED and v["B5"].verdict == REPRODUCED
    assert v["A1"].others == ()  # the other vocabulary's fib fixed alone holds no A1 cell pair: not named


# ---- how a claim's groups combine ----
def _w(length, bpcs):
    return [r for cell, vals in bpcs.items() for r in hand.seeds(cell, vals, make=hand.bpc, layers=12, length=length,
                                                                 lr=0.002, params={"data.tokenizer": "char"})]


B8_CELLS = {"hypercube/dense": (2.905, 2.910, 2.915), "hypercube/local": (2.98, 2.97, 2.99),
            "hypercube/rot": (3.75, 3.76, 3.76), "hypercube/mixa": (2.94, 2.945, 2.943)}


def test_a_judged_group_names_the_groups_at_another_scale():
    v = hand.verdicts(_w(64, B8_CELLS) + _w(256, B8_CELLS))["B8"]
    assert v.verdict == REPRODUCED
    assert v.others == ("not at this scale in 1 other group(s): window 256 runs (model.seq_len); paper B §5.3 states "
                        "it for window 64 (12 layers, width 128)",)


def test_insufficient_where_the_cells_exist_at_the_claims_scale_wins_over_not_at_this_scale():
    two = {c: vs[:2] for c, vs in B8_CELLS.items()}
    v = hand.verdicts(_w(64, two) + _w(256, B8_CELLS))["B8"]
    assert v.verdict == INSUFFICIENT and v.qualifier == "2 seeds"
    assert v.line().startswith("B8  insufficient (2 seeds) dense (hypercube/dense) at window 64 has seeds 42,43")
    assert v.line().endswith("; not at this scale in 1 other group(s): window 256 runs (model.seq_len); paper B §5.3 "
                             "states it for window 64 (12 layers, width 128)")
    v = hand.verdicts(_w(256, B8_CELLS))["B8"]
    assert v.verdict == NOT_AT_SCALE and v.qualifier == "" and "(paper:" not in v.line()


# ---- the rule for band claims: the 95% interval of the difference against the paper's band ----
S = lambda *vals: Seeds("x", tuple(range(len(vals))), vals)
U = lambda *vals: Seeds("x", tuple(range(10, 10 + len(vals))), vals)  # other seeds: unpaired (Welch)


@pytest.mark.parametrize("a, b, want, words", [
    # paired differences -0.005, 0, +0.005: mean 0 +- t(2) 4.303 x 0.005 / sqrt 3 = 0.0124 (0.12%)
    (S(10.0, 10.01, 10.02), S(10.005, 10.01, 10.015), REPRODUCED,
     "difference +0.00% (95% CI -0.12%..+0.12%), band ±1.00%: equivalent, the interval inside the band (TOST p = 0.00042)"),
    # unpaired (Welch): equal means, sds 0.2 and 0.1: se 0.129, t(2.9 df) 3.2: +-4.16%, across a 1% band
    (U(9.8, 10.0, 10.2), S(9.9, 10.0, 10.1), UNDECIDED,
     "difference +0.00% (95% CI -4.16%..+4.16%), band ±1.00%: equivalence not shown, the interval crosses the band "
     "(TOST p = 0.25)"),
    # the point estimate 1.03% against a 1% band, paired differences 0.1, 0.11, 0.1: the interval straddles it
    (S(10.1, 10.12, 10.2), S(10.0, 10.01, 10.1), UNDECIDED,
     "difference +1.03% (95% CI +0.89%..+1.17%), band ±1.00%: equivalence not shown"),
    (S(11.0, 11.01, 11.02), S(10.0, 10.01, 10.02), NOT_REPRODUCED,
     "difference +9.99% (95% CI +9.99%..+9.99%), band ±1.00%: not level, the interval beyond the band"),
])
def test_level_passes_only_when_the_interval_of_the_difference_lies_inside_the_band(a, b, want, words):
    got, detail = level(a, b, 0.01)
    assert (got, words in detail) == (want, True), detail


def test_level_wording_for_an_absolute_band_in_points():
    got, detail = level(S(0.95, 0.96, 0.97), S(0.951, 0.958, 0.972), 0.01, relative=False)
    assert got == REPRODUCED and detail.startswith("difference -0.03 points (95% CI -0.55 points..+0.48 points), "
                                                   "band ±1.00 points: equivalent")


def test_no_advantage_is_one_sided_on_the_interval_of_the_lead():
    base = S(10.0, 10.01, 10.02)
    assert no_advantage(S(11.0, 11.1, 11.2), base, 0.01)[0] == REPRODUCED  # behind: the lead's interval below 0
    assert no_advantage(S(9.96, 9.97, 9.98), base, 0.01)[0] == REPRODUCED  # ahead by 0.4%, its interval below 1%
    assert no_advantage(S(9.0, 9.1, 9.2), base, 0.01)[0] == NOT_REPRODUCED  # ahead by 9%, the interval above 1%
    got, detail = no_advantage(S(9.5, 10.0, 10.5), base, 0.01)  # a lead of 0.1% whose interval reaches +12%
    assert got == UNDECIDED and "(95% CI -12.06%..+12.26%), band 1.00%: not shown, the interval crosses" in detail


# ---- the ledger and the papers' numbers ----
def test_every_bar_states_its_source_and_the_verdict_says_when_it_is_weaker():
    ids = [c.id for c in CLAIMS]
    assert ids == [f"A{i}" for i in range(1, 10)] + [f"B{i}" for i in range(1, 15)]
    for c in CLAIMS:
        assert c.comparison and c.paper_numbers == PAPER[c.id] and c.needs.cells and c.metric
        for name, bar in c.bars.items():
            assert bar.source and ("paper" in bar.source or name.endswith("_max")), (c.id, name)
            assert name in c.comparison or name == "min_ks", (c.id, name)
    weaker = {c.id: c.weaker() for c in CLAIMS if c.weaker()}
    assert weaker == {"A6": ["direction only; paper +201%"], "A7": ["direction only; paper +26%"],
                      "B13": ["flat = at most half the control's fall; paper 27%"], "B6": ["weights direction only; paper 0.58x"],
                      "B7": ["weights direction only; paper 0.77x"],
                      "B10": ["p <= 0.05; paper p = 0.0011 over 6 seeds", "spread direction only; paper 43x narrower"],
                      "B14": ["degradation direction only; paper 1.32x",
                              "size within ±0.1 of 3.2x at every k; the paper names no k"]}
    t = {c.id: c.thresholds for c in CLAIMS}
    assert t["A9"]["min_slowdown"] == 4.3 and t["B1"]["min_acc"] == t["B3"]["min_acc"] == 0.98
    assert t["B6"]["max_links_ratio"] == pytest.approx(1 / 7) and t["B14"]["size_ratio"] == 3.2
    assert t["B7"]["max_links_ratio"] == pytest.approx(5_306 / 24_960)
    assert {i for i, s in SCALES.items() if s.window == 256} == {"B4", "B5", "B6", "B9"}
    assert {i for i, s in SCALES.items() if s.window == 64} == {"B7", "B8"}


def test_the_null_bands_are_the_papers_own_seed_spreads():
    assert BARS["A2"]["band"].value == pytest.approx(0.40 / 42.1833, rel=1e-3)
    assert BARS["A4"]["band"].value == pytest.approx(0.39 / 42.8467, rel=1e-3)
    assert BARS["B7"]["band"].value == pytest.approx(0.009 / 2.796, rel=1e-3)
    assert BARS["B9"]["band"].value == pytest.approx(0.048 / 1.76, rel=1e-3)  # warp's seeds, §5.1
    assert BARS["B12"]["band"].value == pytest.approx(0.002 / 1.835, rel=1e-3)
    assert BARS["B10"]["band"].value == pytest.approx(0.999 - 0.993)
    assert seed_band(W64["hybrid"]["seeds"], W64["attn"]["seeds"]) == BARS["B7"]["band"].value


def test_verbose_lines_carry_each_bar_and_its_source():
    v = {x.claim.id: x for x in judge([])}
    out = "\n".join(lines([v["A6"], v["B4"]], verbose=True))
    assert "    dense_min_rise = 0.028: paper A, extrapolation to 4x: dense 33.37 -> 100.36 ppl (+201%)" in out
    assert "    scale: paper B measured it at window 256" in out
    assert set(VERDICTS) == {"reproduced", "not reproduced", "tie", "undecided", "insufficient", "not at this scale",
                             "degenerate"} and set(JUDGED) < set(VERDICTS)


def test_paper_seed_spread_and_ranking():
    sd = {f: round(pstdev(v), 2) for f, v in SEEDS_W12.items()}
    assert sd == {"fib stagger": 0.13, "fib coprime": 0.18, "pow2 stagger": 0.17, "fib learned": 0.0, "fib fixed": 0.06}
    assert ranking(SEEDS_W12) == "fib stagger ~ fib coprime < pow2 stagger ~ fib learned < fib fixed"
    assert rank([1.0, 1.1], [1.2, 1.3]) == "<" and rank([1.4], [1.2, 1.3]) == ">" and rank([1.0, 1.25], [1.2]) == "~"


def test_paper_attention_links_follow_from_the_wiring():
    attn = RunView("x", "dense", {"model.n_layers": "16", "model.seq_len": "256", "attention.causal": "True"})
    assert link_count(attn) == BEST_LR["attn"]["links"] == 16 * 256 * 257 // 2


# ---- which runs exist decides insufficient and not at this scale, never their values ----
def _sweep(rng: random.Random) -> list[RunView]:
    """scale=cpu's cells, any values: paper A at W12, count-ones at one seed, characters at window 64
    over 2 lrs, B6's window-256 stack, the dynamics at window 64, a graft of a tiny model at int8."""
    x = lambda lo, hi: rng.uniform(lo, hi)
    lm = lambda: hand.ppl(x(40, 60), x(-0.05, 0.3), [x(3, 5) for _ in range(8)]) | {"perf/fwd_tokens_per_s": x(1e4, 2e5)}
    char = {"data.tokenizer": "char"}
    runs = []
    for f in ("dense", "fib/fixed", "fib/stagger", "fib/coprime", "fib/learned", "pow2/fixed", "pow2/stagger"):
        cell = "dense" if f == "dense" else f"sparse/{f}/W12"
        for s in hand.SEEDS:
            m = lm() | ({f"alpha/layer_{i}": x(0.9, 1.1) for i in range(5)} if "learned" in f else {})
            runs.append(hand.run(cell, seed=s, layers=5, metrics=m))
    for cell, layers in (("hypercube/rot", 3), ("hypercube/rot", 4), ("hypercube/rot", 8), ("hypercube/fixed", 4)):
        runs.append(hand.run(cell, task="count_ones", layers=layers, length=16,
                             metrics={"task/acc": x(0, 1), "task/chance": 0.2}))
    for cell in ("dense", "hypercube/hybrid", "hypercube/rot", "hypercube/warp", "hypercube/local", "hypercube/mixa",
                 "hypercube/dense"):
        for lr in (0.004, 0.0005):
            for s in hand.SEEDS:
                m = hand.bpc(x(2, 4)) | {"model/links": 5000.0, "model/weights": 2e6}
                if cell in ("dense", "hypercube/hybrid"):
                    m |= {"int8/degradation": x(0, 0.05), "int8/size_ratio": 1.5}
                runs.append(hand.run(cell, seed=s, lr=lr, layers=12, length=64, params=char, metrics=m))
    for cell in ("dense", "hypercube/hybrid"):
        runs.append(hand.run(cell, layers=16, length=256, steps=50, params=char,
                             metrics=hand.bpc(x(2, 4)) | {"model/links": x(1e4, 6e5), "model/weights": x(1e6, 4e7)}))
    for form in ("dyn", "fld", "ph"):
        for t in (1, 8):
            runs += [hand.run(f"dynamics/{form}/T{t}", seed=s, lr=0.002, layers=4, length=64, steps=300, params=char,
                              metrics=hand.bpc(x(2, 4)) | {"attn/effective_partners": x(1, 60)}) for s in hand.SEEDS]
    for k in (0, 2, 4, 6):
        for s in (hand.SEEDS if k else (42,)):
            cell = "graft/none" if not k else f"graft/eq1/k{k}"
            runs.append(hand.run(cell, task="graft", seed=s, length=512, steps=8,
                                 params={"task.model": "outputs/tiny-qwen3", "task.k": k},
                                 metrics=hand.bpc(x(3, 5)) | {"int8/degradation": x(0, 0.1), "int8/size_ratio": 2.0}))
    return runs


def test_insufficient_and_not_at_this_scale_depend_on_which_runs_exist_never_on_values():
    outcome = lambda runs: {i: (v.verdict, v.detail, v.qualifier) for i, v in hand.verdicts(runs).items()
                            if v.verdict in (INSUFFICIENT, NOT_AT_SCALE)}
    first = outcome(_sweep(random.Random(0)))
    for seed in range(1, 8):
        assert outcome(_sweep(random.Random(seed))) == first
    assert {i for i, (v, _, _) in first.items() if v == NOT_AT_SCALE} == {"B4", "B9", "B13", "B14"}
    # B5's window-256 cells exist (B6's stack), at one lr: insufficient there, not "not at this scale"
    assert first["B5"][:2] == (INSUFFICIENT, "attn was run at 1 lr; each compared cell needs an lr sweep (>= 2 lrs; "
                                             "paper B's grid: 7)")
    assert first["B1"] == (INSUFFICIENT, "rot at n=16, 4 layers has seeds 42 with task/acc, needs >= 3", "1 seed")
    judged = {i for i, v in hand.verdicts(_sweep(random.Random(0))).items() if v.verdict in JUDGED + ("degenerate",)}
    assert judged == {"A1", "A2", "A3", "A4", "A5", "A6", "A7", "A8", "A9", "B6", "B7", "B8", "B11", "B12"}


def test_a_band_claim_with_one_seed_on_a_side_has_no_interval_and_is_never_passed():
    """Where a side has a single value no interval of the difference exists: the claim is
    insufficient, named, however close the means (a single-value cell must never pass a band)."""
    with pytest.raises(Missing, match=r"x vs x: 1 seed on a side, no interval to test the 1.00% band with; "
                                      r"needs >= 2 a side") as e:
        level(S(10.0), S(10.0, 10.01, 10.02), 0.01)
    assert e.value.seeds == 1
    with pytest.raises(Missing, match="1 seed on a side"):
        no_advantage(S(10.0, 10.0), S(10.0), 0.01)
