"""The two papers' claims (A1-A9, B1-B6) as data, and their verdicts on our runs.

Each claim names the runs it needs, the metric, the comparison and the paper's published numbers;
`judge` turns groups of comparable runs (same corpus, steps, eval version, length: `fibexp.report`
builds them) into one line per claim:

    A6  reproduced      dense +11.2% vs fib stagger -1.9% at 4x (paper: +201% vs -1.3%)

Verdicts: `reproduced`, `not reproduced`, `tie` (the paper ranks two cells whose seed ranges
overlap here: SPEC's rule, rank only where seed ranges do not overlap), `insufficient` (names the
runs or metrics missing) and `degenerate` (two compared cells attend identical per-layer offsets,
e.g. coprime == stagger at 4 layers, where no stride in [2, L/2] is coprime with L: the comparison
would hold vacuously). Our models are tiny and train on another corpus, so no claim compares
absolute perplexities with the papers': each compares a direction or a ratio, with explicit
thresholds (`Claim.thresholds`) and the criterion in words (`Claim.comparison`). Threshold claims
must hold for every seed; ranking claims follow the seed-range rule.
"""
from __future__ import annotations

import ast
import math
from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping, Sequence

from fibexp.science import patterns, wiring

REPRODUCED, NOT_REPRODUCED, TIE, INSUFFICIENT, DEGENERATE = (
    "reproduced", "not reproduced", "tie", "insufficient", "degenerate")
VERDICTS = (REPRODUCED, NOT_REPRODUCED, TIE, INSUFFICIENT, DEGENERATE)

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


# ---- runs as the claims read them ----
@dataclass
class RunView:
    """What a claim or a table reads of one MLflow run (tags, flat params, final metrics)."""

    run_id: str
    cell: str
    params: Mapping[str, str] = field(default_factory=dict)
    metrics: Mapping[str, float] = field(default_factory=dict)
    tags: Mapping[str, str] = field(default_factory=dict)
    start_time: int = 0

    @classmethod
    def of(cls, run) -> "RunView":
        d = run.data
        return cls(run.info.run_id, d.tags["fibexp.cell"], dict(d.params), dict(d.metrics), dict(d.tags),
                   run.info.start_time or 0)

    @property
    def task(self) -> str:
        return self.tags.get("fibexp.task") or self.params.get("task.name") or "lm"

    def _int(self, key: str, default: int = 0) -> int:
        try:
            return int(self.params.get(key, default))
        except ValueError:
            return default

    @property
    def seed(self) -> int:
        return self._int("seed")

    @property
    def lr(self) -> float | None:
        v = self.params.get("optim.lr")
        return float(v) if v not in (None, "None") else None

    @property
    def n_layers(self) -> int:
        return self._int("model.n_layers")

    @property
    def n(self) -> int:
        """Sequence length: the training length of an LM, the task length (count-ones n)."""
        return self._int("model.seq_len")

    @property
    def order(self) -> str:
        return self.params.get("attention.order", "rot")

    @property
    def causal(self) -> bool:
        return self.params.get("attention.causal", "True") != "False"

    @property
    def diverged(self) -> bool:
        return self.tags.get("fibexp.diverged") == "true"

    @property
    def kind(self) -> str:
        return self.cell.split("/")[0]

    @property
    def window(self) -> int | None:
        last = self.cell.rsplit("/", 1)[-1]
        return int(last[1:]) if self.kind == "sparse" and last[1:].isdigit() else None

    @property
    def family(self) -> str:
        """The cell without its window: `fib stagger`, `dense`, `hypercube/rot`."""
        parts = self.cell.split("/")
        return " ".join(parts[1:3]) if parts[0] == "sparse" else self.cell

    @property
    def n_params(self) -> int | None:
        v = self.params.get("model.n_params")
        return int(v) if v and v.isdigit() else None

    def per_set(self, prefix: str) -> dict[str, float]:
        """{set: value} of the metrics `<prefix><set>` (finite values only)."""
        return {k[len(prefix):]: v for k, v in self.metrics.items()
                if k.startswith(prefix) and "/" not in k[len(prefix):] and math.isfinite(v)}

    def set_mean(self, prefix: str) -> float | None:
        """Mean over the held-out sets; None for a diverged run or a missing metric."""
        vals = self.per_set(prefix)
        return None if self.diverged or not vals else sum(vals.values()) / len(vals)

    def metric(self, name: str) -> float | None:
        v = self.metrics.get(name)
        return v if v is not None and math.isfinite(v) and not self.diverged else None


@dataclass
class Group:
    """Runs that may be compared: same task, corpus, steps, eval version, length, model size."""

    task: str
    key: tuple
    runs: list[RunView]

    @property
    def n(self) -> int:
        return self.runs[0].n if self.runs else 0


# ---- metrics ----
def ppl(r: RunView) -> float | None:
    return r.set_mean("val/ppl/")


def bpc(r: RunView) -> float | None:
    return r.set_mean("val/bpc/")


def rel(r: RunView, factor: int) -> float | None:
    return r.set_mean(f"extrap/rel_x{factor}/")


def acc(r: RunView) -> float | None:
    return r.metric("task/acc")


def bins(r: RunView) -> list[float] | None:
    """Loss per position bin (SPEC's 8 bins), mean over the held-out sets."""
    per_bin: dict[int, list[float]] = {}
    for k, v in r.metrics.items():
        if k.startswith("val/pos_loss/") and k.rsplit("/", 1)[-1].startswith("bin") and math.isfinite(v):
            per_bin.setdefault(int(k.rsplit("bin", 1)[-1]), []).append(v)
    if r.diverged or not per_bin:
        return None
    return [sum(per_bin[j]) / len(per_bin[j]) for j in sorted(per_bin)]


def mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs)


def pstdev(xs: Sequence[float]) -> float:
    """Population standard deviation (the papers' seed spread)."""
    m = mean(xs)
    return math.sqrt(sum((x - m) ** 2 for x in xs) / len(xs))


def rank(a: Sequence[float], b: Sequence[float]) -> str:
    """'<' or '>' when the seed ranges of a and b do not overlap, else '~' (a tie)."""
    if max(a) < min(b):
        return "<"
    if min(a) > max(b):
        return ">"
    return "~"


def ranking(cells: Mapping[str, Sequence[float]]) -> str:
    """Cells by mean, lowest first; '<' only between neighbours whose seed ranges do not overlap."""
    items = sorted(cells.items(), key=lambda kv: mean(kv[1]))
    out = items[0][0]
    for (_, a), (name, b) in zip(items, items[1:]):
        out += f" {'<' if max(a) < min(b) else '~'} {name}"
    return out


# ---- which runs a claim reads ----
class Missing(Exception):
    """What a claim needs and the runs do not have (its `insufficient` message)."""


def label(family: str, window: int | None = None) -> str:
    """`fib stagger W8`, `rot` (hypercube cells without their prefix)."""
    return family.replace("hypercube/", "") + (f" W{window}" if window is not None else "")


def cell_runs(group: Group, family: str, window: int | None = None, n_layers: int | None = None,
              order: str | None = None, score: Callable[[RunView], float | None] = ppl,
              higher_is_better: bool = False) -> list[RunView]:
    """The runs (seeds) of one cell, at that cell's best lr when it was run at several
    (SPEC: each configuration at its own best lr)."""
    rs = [r for r in group.runs if r.family == family and (window is None or r.window == window)
          and (n_layers is None or r.n_layers == n_layers) and (order is None or r.order == order)]
    by_lr: dict[float | None, list[float]] = {}
    for r in rs:
        v = score(r)
        if v is not None:
            by_lr.setdefault(r.lr, []).append(-v if higher_is_better else v)
    if len({r.lr for r in rs}) > 1 and by_lr:
        best = min(by_lr, key=lambda lr: mean(by_lr[lr]))
        rs = [r for r in rs if r.lr == best]
    return rs


def values(runs: Iterable[RunView], fn: Callable[[RunView], float | None], what: str, metric: str,
           min_seeds: int = 1) -> list[float]:
    runs = list(runs)
    if not runs:
        raise Missing(f"needs {what} (no run)")
    vals = [v for r in runs if (v := fn(r)) is not None]
    if not vals:
        why = "diverged" if all(r.diverged for r in runs) else f"has no {metric}"
        raise Missing(f"{what} {why}")
    if len(vals) < min_seeds:
        raise Missing(f"{what}: {len(vals)} seed(s), needs >= {min_seeds}")
    return vals


def offsets(r: RunView):
    """Per-layer attended offsets fixed by the config (None: dense or learned, which train them,
    or a run whose params do not say)."""
    p = r.params
    try:
        if r.kind == "sparse" and r.cell.split("/")[2] != "learned":
            base, schedule = r.cell.split("/")[1:3]
            return tuple(tuple(patterns.attended_distances(r.window, base, a, r.n))
                         for a in patterns.layer_alphas(schedule, r.n_layers))
        if r.kind == "hypercube":
            hybrid = p.get("attention.hybrid_layers", "None")
            hybrid = None if hybrid in ("None", "") else ast.literal_eval(hybrid)
            plan = wiring.layer_plan(r.cell.split("/")[1], r.n_layers, r.n, hybrid, r.order)
            return ("hypercube", r.causal, tuple(plan))
    except (ValueError, IndexError, SyntaxError):
        return None
    return None


def degenerate(a: Sequence[RunView], b: Sequence[RunView], la: str, lb: str) -> str | None:
    """Why comparing a and b proves nothing, when their layers attend exactly the same offsets."""
    if not a or not b:
        return None
    oa, ob = offsets(a[0]), offsets(b[0])
    if oa is None or oa != ob:
        return None
    r = a[0]
    why = f"{la} and {lb} attend identical per-layer offsets at {r.n_layers} layers"
    if "coprime" in (la + lb) and patterns.coprime_stride(r.n_layers) == 1:
        why += f" (no stride S in [2, L/2] is coprime with L = {r.n_layers}; needs L >= 5, L != 6)"
    return why


def link_count(r: RunView) -> int | None:
    """Links of a run's wiring (paper B's cost): standard attention = every causal pair per layer."""
    if r.kind == "hypercube":
        o = offsets(r)
        return None if o is None else wiring.links(o[2], r.n, r.causal)
    return wiring.links(["attn"] * r.n_layers, r.n, r.causal) if r.n_layers and r.n else None


def cube_dims(g: Group) -> int:
    """log2 n of a count-ones group (Missing when n is no power of two)."""
    try:
        return wiring.cube_dims(g.n)
    except ValueError:
        raise Missing(f"count-ones n={g.n} is no power of two") from None


# ---- formatting ----
def pct(x: float) -> str:
    return f"{x:+.1%}"


def span_str(vals: Sequence[float], fmt: Callable[[float], str]) -> str:
    return fmt(vals[0]) if len(vals) == 1 else f"{fmt(min(vals))}..{fmt(max(vals))}"


def seeds_note(*vals: Sequence[float]) -> str:
    """' (3 seeds)': how many seeds the compared values hold."""
    ns = sorted({len(v) for v in vals})
    count = str(ns[0]) if len(ns) == 1 else f"{ns[0]}-{ns[-1]}"
    return f" ({count} seed{'s' if ns[-1] > 1 else ''})"


# ---- the claims ----
@dataclass(frozen=True)
class Needs:
    """The runs a claim reads: task, cells (families; W from the runs), extrapolation factor,
    minimum seeds per cell, and whether each compared cell needs an lr sweep."""

    task: str
    cells: tuple[str, ...]
    factor: int | None = None
    min_seeds: int = 1
    lr_sweep: bool = False


@dataclass(frozen=True)
class Claim:
    id: str
    paper: str  # "A" (Fibonacci offsets) or "B" (hypercube wiring)
    statement: str
    needs: Needs
    metric: str
    comparison: str  # the criterion, in words (printed by `fibexp-report --claims -v` and in report.md)
    thresholds: Mapping[str, float]
    paper_numbers: str
    judge: Callable[["Claim", Group], tuple[str, str, str | None]]  # -> (verdict, ours, paper or None)

    def criterion(self) -> str:
        """The comparison in words with its thresholds' values."""
        values = ", ".join(f"{k}={x:g}" for k, x in self.thresholds.items())
        return self.comparison + (f" [{values}]" if values else "")


@dataclass(frozen=True)
class Verdict:
    claim: Claim
    verdict: str
    detail: str
    paper: str

    def line(self) -> str:
        """`A6  reproduced      <ours> (paper: <theirs>)`; an insufficient claim names what is missing."""
        paper = "" if self.verdict == INSUFFICIENT else f" (paper: {self.paper})"
        return f"{self.claim.id:<3} {self.verdict:<15} {self.detail}{paper}"


def _fw(family: str, w: int) -> float | None:
    v = TABLE1.get((family, w))
    return v[0] if v else None


def _ranked_pair(c: Claim, g: Group, a: str, b: str) -> tuple[str, str, str | None]:
    """a below b (mean held-out ppl) at every W where both ran."""
    ws = sorted({r.window for r in g.runs if r.family == a} & {r.window for r in g.runs if r.family == b})
    if not ws:
        have = sorted({label(r.family, r.window) for r in g.runs if r.kind == "sparse"})
        raise Missing(f"needs {a} and {b} at the same W (have: {', '.join(have) or 'no sparse cells'})")
    ours, paper, signs, why, seen = [], [], [], [], []
    for w in ws:
        ra, rb = cell_runs(g, a, w), cell_runs(g, b, w)
        if d := degenerate(ra, rb, label(a, w), label(b, w)):
            why.append(d)
            continue
        va = values(ra, ppl, label(a, w), "val/ppl/<set>", c.needs.min_seeds)
        vb = values(rb, ppl, label(b, w), "val/ppl/<set>", c.needs.min_seeds)
        seen += [va, vb]
        s = rank(va, vb)
        signs.append(s)
        note = {"<": "", "~": " (seed ranges overlap)", ">": " (above)"}[s]
        ours.append(f"W{w} {pct(mean(va) / mean(vb) - 1)}{note}")
        if _fw(a, w) and _fw(b, w):
            paper.append(f"W{w} {pct(_fw(a, w) / _fw(b, w) - 1)}")
    if not signs:
        return DEGENERATE, "; ".join(why), None
    verdict = NOT_REPRODUCED if ">" in signs else TIE if "~" in signs else REPRODUCED
    return verdict, f"{a} vs {b}, held-out ppl: {', '.join(ours)}{seeds_note(*seen)}", (", ".join(paper) or None)


def _a1(c, g):
    return _ranked_pair(c, g, "fib stagger", "fib fixed")


def _a5(c, g):
    return _ranked_pair(c, g, "fib stagger", "pow2 stagger")


def _a2(c, g):
    ws = sorted({r.window for r in g.runs if r.family == "fib coprime"}
                & {r.window for r in g.runs if r.family == "fib stagger"})
    if not ws:
        raise Missing("needs fib coprime and fib stagger at the same W, >= 2 seeds each")
    ours, ties, why = [], [], []
    for w in ws:
        ra, rb = cell_runs(g, "fib coprime", w), cell_runs(g, "fib stagger", w)
        if d := degenerate(ra, rb, label("fib coprime", w), label("fib stagger", w)):
            why.append(d)
            continue
        va = values(ra, ppl, label("fib coprime", w), "val/ppl/<set>", c.needs.min_seeds)
        vb = values(rb, ppl, label("fib stagger", w), "val/ppl/<set>", c.needs.min_seeds)
        s = rank(va, vb)
        ties.append(s == "~")
        f = lambda x: f"{x:.2f}"
        ours.append(f"W{w} coprime {span_str(va, f)} vs stagger {span_str(vb, f)} ppl "
                    f"({'overlap' if s == '~' else 'disjoint'}, {len(va)}/{len(vb)} seeds)")
    if not ties:
        return DEGENERATE, "; ".join(why), None
    return (REPRODUCED if all(ties) else NOT_REPRODUCED), "; ".join(ours), None


def _a3(c, g):
    ws = sorted({r.window for r in g.runs if r.family == "fib learned"})
    if not ws:
        raise Missing("needs fib learned with fib fixed and fib stagger at the same W")
    ours, paper, verdicts = [], [], []
    for w in ws:
        rl, rf, rs = (cell_runs(g, f, w) for f in ("fib learned", "fib fixed", "fib stagger"))
        if not rf or not rs:
            continue
        vl = values(rl, ppl, label("fib learned", w), "val/ppl/<set>")
        vf = values(rf, ppl, label("fib fixed", w), "val/ppl/<set>")
        vs = values(rs, ppl, label("fib stagger", w), "val/ppl/<set>")
        shifts = []
        for r in (r for r in rl if r.n_layers >= 1):
            start = patterns.layer_alphas("stagger" if r.params.get("attention.alpha_init") == "stagger"
                                          else "learned", r.n_layers)
            for layer, a0 in enumerate(start):
                if (a := r.metric(f"alpha/layer_{layer}")) is not None:
                    shifts.append(abs(a - a0))
        if not shifts:
            raise Missing(f"fib learned W{w} has no alpha/layer_<l>")
        moved = max(shifts)
        s1, s2 = rank(vs, vl), rank(vl, vf)
        if ">" in (s1, s2) or moved > c.thresholds["max_alpha_shift"]:
            verdicts.append(NOT_REPRODUCED)
        else:
            verdicts.append(TIE if "~" in (s1, s2) else REPRODUCED)
        ours.append(f"W{w} stagger {pct(mean(vs) / mean(vf) - 1)} {s1} learned {pct(mean(vl) / mean(vf) - 1)} "
                    f"{s2} fixed, learned alpha moved <= {moved:.3f}")
        if _fw("fib learned", w):
            paper.append(f"W{w} {pct(_fw('fib stagger', w) / _fw('fib fixed', w) - 1)} < "
                         f"{pct(_fw('fib learned', w) / _fw('fib fixed', w) - 1)} < fixed")
    if not verdicts:
        raise Missing("needs fib learned with fib fixed and fib stagger at the same W")
    v = NOT_REPRODUCED if NOT_REPRODUCED in verdicts else TIE if TIE in verdicts else REPRODUCED
    return v, "; ".join(ours), ", ".join(paper) + "; alpha barely moves" if paper else None


def _a4(c, g):
    verdict, ours, paper = _ranked_pair(c, g, "pow2 stagger", "pow2 fixed")
    ws = sorted({r.window for r in g.runs if r.family == "pow2 stagger"}
                & {r.window for r in g.runs if r.family == "fib learned"})
    tied = None
    for w in ws:
        try:
            va = values(cell_runs(g, "pow2 stagger", w), ppl, "pow2 stagger", "val/ppl/<set>", 2)
            vb = values(cell_runs(g, "fib learned", w), ppl, "fib learned", "val/ppl/<set>", 2)
        except Missing:
            continue
        tied = rank(va, vb) == "~"
        ours += f"; ties fib learned at W{w}: {'yes' if tied else 'no'} ({mean(va):.2f} vs {mean(vb):.2f})"
        break
    if tied is None:
        ours += "; tie with fib learned not judged (needs both at one W, >= 2 seeds)"
    elif not tied and verdict in (REPRODUCED, TIE):
        verdict = NOT_REPRODUCED
    return verdict, ours, (paper or "W8 -2.6%") + "; ties fib learned at W12 (42.84 vs 42.85)"


def _a6(c, g):
    k, t = c.needs.factor, c.thresholds
    metric = f"extrap/rel_x{k}/<set>"
    vd = values(cell_runs(g, "dense"), lambda r: rel(r, k), "dense", metric)
    fib = sorted({(r.family, r.window) for r in g.runs if r.kind == "sparse" and r.family.startswith("fib")},
                 key=lambda fw: (fw[1], fw[0]))
    if not fib:
        raise Missing("needs at least one fib sparse cell beside dense")
    one_w = len({w for _, w in fib}) == 1
    sparse = {label(f, None if one_w else w): values(cell_runs(g, f, w), lambda r: rel(r, k), label(f, w), metric)
              for f, w in fib}
    ok = min(vd) >= t["dense_min_rise"] and all(max(v) <= t["sparse_max_rise"] for v in sparse.values())
    if len(sparse) <= 3:
        rest = ", ".join(f"{name} {span_str(v, pct)}" for name, v in sparse.items())
    else:
        worst = max(sparse, key=lambda n: max(sparse[n]))
        rest = (f"{len(sparse)} fib cells {pct(min(map(min, sparse.values())))}.."
                f"{pct(max(map(max, sparse.values())))} (highest: {worst})")
    return (REPRODUCED if ok else NOT_REPRODUCED), f"dense {span_str(vd, pct)} vs {rest} at {k}x{seeds_note(vd)}", None


def _a7(c, g):
    vd = values(cell_runs(g, "dense"), ppl, "dense", "val/ppl/<set>")
    cells = {}
    for f, w in {(r.family, r.window) for r in g.runs if r.kind == "sparse"}:
        try:
            cells[(f, w)] = values(cell_runs(g, f, w), ppl, label(f, w), "val/ppl/<set>")
        except Missing:
            pass
    if not cells:
        raise Missing("needs dense and at least one sparse cell with val/ppl/<set>")
    (f, w), vb = min(cells.items(), key=lambda kv: mean(kv[1]))
    s = rank(vb, vd)
    verdict = REPRODUCED if s == ">" else TIE if s == "~" else NOT_REPRODUCED
    one_w = len({w for _, w in cells}) == 1
    return verdict, (f"best sparse ({label(f, None if one_w else w)}) {pct(mean(vb) / mean(vd) - 1)} ppl vs dense "
                     f"at the training length{seeds_note(vb, vd)}"), None


def _a8(c, g):
    ws = sorted({r.window for r in g.runs if r.family == "fib stagger"}
                & {r.window for r in g.runs if r.family == "fib fixed"})
    if not ws:
        raise Missing("needs fib fixed and fib stagger at the same W with val/pos_loss/<set>/bin<j>")
    w = 8 if 8 in ws else ws[0]
    rf, rs = cell_runs(g, "fib fixed", w), cell_runs(g, "fib stagger", w)
    if d := degenerate(rs, rf, label("fib stagger", w), label("fib fixed", w)):
        return DEGENERATE, d, None
    bf = values(rf, bins, label("fib fixed", w), "val/pos_loss/<set>/bin<j>")
    bs = values(rs, bins, label("fib stagger", w), "val/pos_loss/<set>/bin<j>")
    gain = [mean([b[j] for b in bf]) - mean([b[j] for b in bs]) for j in range(len(bf[0]))]
    paper_gain = [x - y for x, y in zip(POS_BINS[("fib fixed", 8)], POS_BINS[("fib stagger", 8)])]
    late = lambda gs: sum(gs[len(gs) // 2:]) / sum(gs)
    lo, hi = c.thresholds["late_share_min"], c.thresholds["late_share_max"]
    paper = (f"W8 gain {min(paper_gain):.3f}..{max(paper_gain):.3f} nats in every bin, "
             f"{late(paper_gain):.0%} in the far half")
    if sum(gain) <= 0:
        return NOT_REPRODUCED, f"W{w}: no stagger gain to spread (total {sum(gain):+.3f} nats over the bins)", paper
    ok = min(gain) > 0 and lo <= late(gain) <= hi
    return ((REPRODUCED if ok else NOT_REPRODUCED),
            f"W{w} gain {min(gain):+.3f}..{max(gain):+.3f} nats per bin, {late(gain):.0%} in the far half", paper)


def _a9(c, g):
    learned = sorted({r.window for r in g.runs if r.family == "fib learned"})
    if not learned:
        raise Missing("needs fib learned and an integer-offset fib cell (fixed/stagger/coprime) "
                      "with perf/tokens_per_s_eval")
    for w in learned:
        tl = [v for r in cell_runs(g, "fib learned", w) if (v := r.metric("perf/tokens_per_s_eval")) is not None]
        for other in ("fib stagger", "fib fixed", "fib coprime"):
            ti = [v for r in cell_runs(g, other, w) if (v := r.metric("perf/tokens_per_s_eval")) is not None]
            if tl and ti:
                ratio = mean(ti) / mean(tl)
                ok = ratio >= c.thresholds["min_slowdown"]
                return ((REPRODUCED if ok else NOT_REPRODUCED),
                        f"learned {ratio:.2f}x slower than {other} W{w} in eval tokens/s "
                        f"({mean(tl) / 1e3:.1f}k vs {mean(ti) / 1e3:.1f}k)", None)
    raise Missing("needs perf/tokens_per_s_eval of fib learned and of an integer-offset fib cell at the same W")


def _count_cell(g: Group, family: str, depth: int, order: str | None = None) -> list[RunView]:
    return cell_runs(g, family, n_layers=depth, order=order, score=acc, higher_is_better=True)


def _chance(runs: Sequence[RunView]) -> float:
    ch = [v for r in runs if (v := r.metric("task/chance")) is not None]
    if not ch:
        raise Missing("count-ones runs have no task/chance")
    return mean(ch)


def _b1(c, g):
    b = cube_dims(g)
    rot, fixed = _count_cell(g, "hypercube/rot", b, "rot"), _count_cell(g, "hypercube/fixed", b)
    if d := degenerate(rot, fixed, "rot", "fixed"):
        return DEGENERATE, d, None
    vr = values(rot, acc, f"rot at n={g.n}, {b} layers", "task/acc")
    vf = values(fixed, acc, f"fixed at n={g.n}, {b} layers", "task/acc")
    chance = _chance(rot + fixed)
    t = c.thresholds
    ok = min(vr) >= t["min_acc"] and max(vf) <= chance + t["max_above_chance"]
    dense = [v for r in _count_cell(g, "hypercube/dense", b) + _count_cell(g, "dense", b) if (v := acc(r)) is not None]
    if dense:
        ok = ok and min(dense) >= t["min_acc"]
    extra = f", dense {span_str(dense, lambda x: f'{x:.1%}')}" if dense else ""
    return ((REPRODUCED if ok else NOT_REPRODUCED),
            f"n={g.n}, {b} layers: rot {span_str(vr, lambda x: f'{x:.1%}')}, fixed {span_str(vf, lambda x: f'{x:.1%}')}"
            f"{extra} (chance {chance:.1%}){seeds_note(vr, vf)}", None)


def _b2(c, g):
    b = cube_dims(g)
    t, f = c.thresholds, lambda x: f"{x:.1%}"
    short = values(_count_cell(g, "hypercube/rot", b - 1, "rot"), acc, f"rot at n={g.n}, {b - 1} layers", "task/acc")
    base = values(_count_cell(g, "hypercube/rot", b, "rot"), acc, f"rot at n={g.n}, {b} layers", "task/acc")
    chance = _chance(_count_cell(g, "hypercube/rot", b, "rot"))
    ok = max(short) <= chance + t["fail_max_above_chance"] and min(base) >= t["min_acc"]
    ours = f"n={g.n} rot: {b - 1} layers {span_str(short, f)}, {b} layers {span_str(base, f)}"
    deep = sorted({r.n_layers for r in g.runs if r.family == "hypercube/rot" and r.order == "rot"
                   and r.n_layers >= 2 * b})
    if deep:
        vd = values(_count_cell(g, "hypercube/rot", deep[0], "rot"), acc, f"rot at {deep[0]} layers", "task/acc")
        ok = ok and min(vd) >= mean(base) - t["saturate_tol"]
        ours += f", {deep[0]} layers {span_str(vd, f)}"
    return (REPRODUCED if ok else NOT_REPRODUCED), ours + f" (chance {chance:.1%})", None


def _b3(c, g):
    t, f = c.thresholds, lambda x: f"{x:.1%}"
    depths = sorted({r.n_layers for r in g.runs if r.family == "hypercube/rot" and r.order == "gray"}
                    & {r.n_layers for r in g.runs if r.family == "hypercube/rot" and r.order == "random"})
    if not depths:
        raise Missing(f"needs rot with attention.order=random and =gray at the same depth (n={g.n})")
    depth = depths[-1]
    rr, rg = _count_cell(g, "hypercube/rot", depth, "random"), _count_cell(g, "hypercube/rot", depth, "gray")
    if d := degenerate(rr, rg, "random order", "gray order"):
        return DEGENERATE, d, None
    plan = offsets(rg[0])[2]
    if wiring.reach(plan, g.n, rg[0].causal) == set(range(g.n)):
        return DEGENERATE, (f"gray order visits every cube dimension in {depth} layers at n={g.n}: it reaches every "
                            "position, so it is no failing control (the paper's 16 layers at n=64 never visit "
                            "dimension 5)"), None
    vr = values(rr, acc, "random order", "task/acc")
    vg = values(rg, acc, "gray order", "task/acc")
    chance = _chance(rr + rg)
    ok = min(vr) >= t["min_acc"] and max(vg) <= chance + t["fail_max_above_chance"]
    return ((REPRODUCED if ok else NOT_REPRODUCED),
            f"n={g.n}, {depth} layers: random {span_str(vr, f)}, gray {span_str(vg, f)} (chance {chance:.1%})", None)


_B_CELLS = {"attn": "dense", "hybrid": "hypercube/hybrid", "rot": "hypercube/rot"}


def _bpc_cells(c, g, names):
    """The compared schedules' runs; each must exist, be swept over the lr and log bpc."""
    cells = {name: [r for r in g.runs if r.family == _B_CELLS[name]] for name in names}
    if absent := [f"{n} ({_B_CELLS[n]})" for n, rs in cells.items() if not rs]:
        raise Missing(f"needs char-level runs (val/bpc/<set>) of {', '.join(absent)}")
    for name, rs in cells.items():
        lrs = {r.lr for r in rs}
        if c.needs.lr_sweep and len(lrs) < c.thresholds["min_lrs"]:
            raise Missing(f"{name} was run at {len(lrs)} lr; SPEC: sweep the lr of every compared cell "
                          f"(>= {c.thresholds['min_lrs']:.0f})")
        if not any(bpc(r) is not None for r in rs) and not all(r.diverged for r in rs):
            raise Missing(f"{name} has no val/bpc/<set> (char-level runs: data=char)")
    return cells


def _b4(c, g):
    cells = _bpc_cells(c, g, ("attn", "hybrid", "rot"))
    best = {}
    for name, rs in cells.items():
        picked = cell_runs(g, _B_CELLS[name], score=bpc)
        best[name] = (picked[0].lr, values(picked, bpc, name, "val/bpc/<set>", c.needs.min_seeds))
    signs = [rank(best[n][1], best["attn"][1]) for n in ("hybrid", "rot")]
    verdict = NOT_REPRODUCED if ">" in signs else TIE if "~" in signs else REPRODUCED
    f = lambda x: f"{x:.3f}"
    ours = ", ".join(f"{n} {span_str(best[n][1], f)} (lr {best[n][0]:g})" for n in ("hybrid", "rot", "attn"))
    return verdict, f"bpc at each one's best lr: {ours}{seeds_note(*(v for _, v in best.values()))}", None


def _usable(rs: Sequence[RunView], within: float) -> tuple[list[float], list[float]]:
    """(lrs whose mean bpc is within `within` of the best, lrs that diverged at every seed)."""
    by: dict[float, list[float]] = {}
    for r in rs:
        by.setdefault(r.lr, [])
        if (v := bpc(r)) is not None:
            by[r.lr].append(v)
    means = {lr: mean(v) for lr, v in by.items() if v}
    if not means:
        return [], sorted(by)
    best = min(means.values())
    usable = sorted(lr for lr, m in means.items() if m <= best * (1 + within))
    return usable, sorted(lr for lr, v in by.items() if not v)


def _b5(c, g):
    cells = _bpc_cells(c, g, ("attn", "hybrid"))
    grid = sorted({r.lr for r in cells["hybrid"]})
    if grid[-1] / grid[0] < c.thresholds["hybrid_min_range"]:
        raise Missing(f"hybrid's lr grid spans {grid[-1] / grid[0]:g}x; needs >= {c.thresholds['hybrid_min_range']:g}x")
    within = c.thresholds["within"]
    hu, hd = _usable(cells["hybrid"], within)
    au, ad = _usable(cells["attn"], within)
    span = lambda u: u[-1] / u[0] if u else 0.0
    ok = span(hu) >= c.thresholds["hybrid_min_range"] and span(hu) > span(au)
    fmt = lambda u, d: (f"{span(u):g}x ({u[-1]:g}..{u[0]:g})" if u else "no lr") + (
        f", diverged at {', '.join(f'{x:g}' for x in reversed(d))}" if d else "")
    return ((REPRODUCED if ok else NOT_REPRODUCED),
            f"within {within:.0%} of its best bpc: hybrid over {fmt(hu, hd)}; attn over {fmt(au, ad)}", None)


def _b6(c, g):
    attn = [r for r in g.runs if r.family == "dense"]
    hybrid = [r for r in g.runs if r.family == "hypercube/hybrid"]
    if not attn or not hybrid:
        raise Missing("needs attn (attention=dense) and hybrid runs of the same size")
    a, h = attn[0], hybrid[0]
    if a.n_params is None or h.n_params is None or not link_count(a) or link_count(h) is None:
        raise Missing("runs have no model.n_params, model.n_layers or model.seq_len")
    links = link_count(h) / link_count(a)
    weights = h.n_params / a.n_params
    t = c.thresholds
    ok = links <= t["max_links_ratio"] and weights < t["max_weights_ratio"]
    return ((REPRODUCED if ok else NOT_REPRODUCED),
            f"hybrid links 1/{1 / links:.1f} of attn's ({link_count(h):,} vs {link_count(a):,}), weights "
            f"{weights:.2f}x ({h.n_params:,} vs {a.n_params:,}) at {h.n_layers} layers, window {h.n}", None)


CLAIMS: tuple[Claim, ...] = (
    Claim("A1", "A", "fib stagger < fib fixed in held-out ppl at every W", Needs("lm", ("fib stagger", "fib fixed")),
          "val/ppl/<set> (mean over sets)",
          "direction: fib stagger's mean held-out ppl below fib fixed's at every W both ran, seed ranges not "
          "overlapping (overlap: tie); identical per-layer offsets: degenerate", {},
          "1.1-1.6 ppl lower at every W", _a1),
    Claim("A2", "A", "fib coprime ties fib stagger (within seed spread)",
          Needs("lm", ("fib coprime", "fib stagger"), min_seeds=2), "val/ppl/<set> (mean over sets)",
          "the seed ranges of fib coprime and fib stagger overlap at every W both ran with >= 2 seeds", {},
          "W12 coprime 42.03..42.43 vs stagger 41.96..42.26", _a2),
    Claim("A3", "A", "fib learned lies between fixed and stagger; learned alpha stays near its init",
          Needs("lm", ("fib learned", "fib fixed", "fib stagger")), "val/ppl/<set>, alpha/layer_<l>",
          "direction: stagger < learned < fixed in mean held-out ppl (seed overlap: tie) and every layer's final "
          "alpha within max_alpha_shift of its start", {"max_alpha_shift": 0.1},
          "stagger < learned < fixed at every W; alpha barely moves", _a3),
    Claim("A4", "A", "pow2 stagger < pow2 fixed, and pow2 stagger ties fib learned",
          Needs("lm", ("pow2 stagger", "pow2 fixed", "fib learned")), "val/ppl/<set> (mean over sets)",
          "direction: pow2 stagger below pow2 fixed at every W both ran (seed overlap: tie); where pow2 stagger and "
          "fib learned both have >= 2 seeds at one W, their ranges must overlap", {},
          "W8 43.60 vs 44.78; W12 3-seed 42.84 vs 42.85", _a4),
    Claim("A5", "A", "fib > pow2 under matched stagger at every W", Needs("lm", ("fib stagger", "pow2 stagger")),
          "val/ppl/<set> (mean over sets)",
          "direction: fib stagger's mean held-out ppl below pow2 stagger's at every W both ran (seed overlap: tie)",
          {}, "W6 42.93 vs 44.11 ... W12 42.02 vs 42.69", _a5),
    Claim("A6", "A", "dense ppl rises at 4x its training length while every fib cell stays within a few %",
          Needs("lm", ("dense", "fib *"), factor=4), "extrap/rel_x4/<set> (mean over sets)",
          "at factor x the training length, dense's mean relative ppl change >= dense_min_rise and every fib "
          "cell's <= sparse_max_rise, for every seed (pow2 is not judged: the paper's pow2 fixed rose +11.3%)",
          {"dense_min_rise": 0.05, "sparse_max_rise": 0.02},
          "dense +201% vs fib stagger W12 -1.3%; pow2 fixed +11.3%", _a6),
    Claim("A7", "A", "at the training length the best sparse model is worse than dense",
          Needs("lm", ("dense", "sparse *")), "val/ppl/<set> (mean over sets)",
          "direction: the sparse cell with the lowest mean held-out ppl is still above dense, seed ranges not "
          "overlapping (overlap: tie)", {}, "+25.9%, 42.02 vs 33.37", _a7),
    Claim("A8", "A", "the stagger gain is spread evenly over the 8 position bins",
          Needs("lm", ("fib fixed", "fib stagger")), "val/pos_loss/<set>/bin<j> (mean over sets)",
          "fixed minus stagger loss positive in every bin, with the far half of the bins holding between "
          "late_share_min and late_share_max of the total gain (W8, else the smallest W)",
          {"late_share_min": 0.3, "late_share_max": 0.7}, "W8 gain 0.022..0.043 nats in every bin, 53% in the far half",
          _a8),
    Claim("A9", "A", "latency: learned offsets are slower than integer offsets at inference",
          Needs("lm", ("fib learned", "fib stagger|fixed|coprime")), "perf/tokens_per_s_eval",
          "the suite's own ratio: integer-path eval tokens/s over learned's >= min_slowdown (our learned gather "
          "is a different implementation from the paper's)", {"min_slowdown": 2.0},
          "4.3-5.0x slower, 39-41k vs 178-195k tokens/s on an RTX 3090", _a9),
    Claim("B1", "B", "count-ones at depth log2 n: rot reaches, fixed stays at chance, dense 100%",
          Needs("count_ones", ("hypercube/rot", "hypercube/fixed")), "task/acc, task/chance",
          "at depth log2 n, rot's held-out accuracy >= min_acc and fixed's <= chance + max_above_chance for every "
          "seed (dense, where run, >= min_acc)", {"min_acc": 0.90, "max_above_chance": 0.05},
          "n=64, 6 layers: rot 98.7%, fixed 10.2%, dense 100%; chance 9.9%", _b1),
    Claim("B2", "B", "depth: log2 n - 1 layers fail, log2 n succeed, ~2 log2 n saturate",
          Needs("count_ones", ("hypercube/rot",)), "task/acc, task/chance",
          "rot at log2 n - 1 layers <= chance + fail_max_above_chance, at log2 n >= min_acc, and (where run) at "
          ">= 2 log2 n no more than saturate_tol below log2 n",
          {"fail_max_above_chance": 0.10, "min_acc": 0.90, "saturate_tol": 0.01},
          "n=64: 5 layers 14.2%, 6 98.8%, 12 99.8%, 16 100%; n=256: 8 28.0%, 16 52.1%", _b2),
    Claim("B3", "B", "order: a random permutation of dimensions succeeds, Gray-code order fails",
          Needs("count_ones", ("hypercube/rot order=random", "hypercube/rot order=gray")), "task/acc, task/chance",
          "at one depth, random order >= min_acc and gray <= chance + fail_max_above_chance; degenerate where the "
          "gray order still visits every dimension (then it is no failing control)",
          {"min_acc": 0.90, "fail_max_above_chance": 0.10}, "n=64, 16 layers: random 99.0%, gray 14.4%", _b3),
    Claim("B4", "B", "char LM: hybrid and rot below attention in bpc at each one's best lr",
          Needs("lm", ("hypercube/hybrid", "hypercube/rot", "dense"), lr_sweep=True), "val/bpc/<set> (mean over sets)",
          "direction: at each cell's best lr, hybrid and rot below attn in mean held-out bpc, seed ranges not "
          "overlapping (overlap: tie); each cell swept over >= min_lrs lrs", {"min_lrs": 2},
          "hybrid 1.718, rot 1.721 (lr 2e-3) vs attn 1.778 (lr 1e-3), 3 seeds", _b4),
    Claim("B5", "B", "lr robustness: hybrid trains over an 8x lr range, attention fails at lr >= 2e-3",
          Needs("lm", ("hypercube/hybrid", "dense"), lr_sweep=True), "val/bpc/<set>, fibexp.diverged",
          "the lrs whose bpc is within `within` of the cell's best span >= hybrid_min_range for hybrid and less "
          "for attn (diverged lrs never count)", {"within": 0.05, "hybrid_min_range": 8.0, "min_lrs": 2},
          "hybrid 8x (0.004..0.0005), attn 2x, attn fails at >= 2e-3", _b5),
    Claim("B6", "B", "cost: hybrid uses 1/7 of attention's links and 42% fewer weights",
          Needs("lm", ("hypercube/hybrid", "dense")), "fibexp.science.wiring.links, model.n_params",
          "ratios at the same size: hybrid links / attn links <= max_links_ratio and hybrid weights / attn "
          "weights < max_weights_ratio (direction only: weights depend on the model's FFN share)",
          {"max_links_ratio": 0.2, "max_weights_ratio": 1.0}, "72,184 vs 526,336 links (1/7.3); 0.58x weights", _b6),
)


def judge(groups: Sequence[Group], claims: Sequence[Claim] = CLAIMS) -> list[Verdict]:
    """One verdict per claim from the groups of its task; several sufficient groups (e.g.
    count-ones at n = 16 and n = 64) are all judged and the worst verdict wins."""
    out = []
    for c in claims:
        mine = [g for g in groups if g.task == c.needs.task and g.runs]
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
        out.append(Verdict(c, verdict, "; ".join(d for _, d, _ in results), paper))
    return out


def lines(verdicts: Sequence[Verdict], verbose: bool = False) -> list[str]:
    out = []
    for v in verdicts:
        out.append(v.line())
        if verbose:
            out.append(f"    criterion: {v.claim.criterion()}")
    return out
