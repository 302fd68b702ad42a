"""The paper-style tables of a group of comparable runs, ours beside the papers' numbers."""
from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, Sequence

from fibexp import plots
from fibexp.report.cell_runs import cell_runs, label, link_count, offsets
from fibexp.report.published import (BEST_LR, COUNT_ONES, COUNT_ONES_CHANCE, EXTRAP, LR_GRID, LR_TABLE, POS_BINS,
                                     SEEDS_W12, TABLE1, TABLE1_DENSE)
from fibexp.report.runs import Group, RunView, acc, bins, bpc, ppl, rel
from fibexp.report.seeds import mean, pstdev, ranking
from fibexp.science import wiring


DIVERGED = "†"  # a run whose training loss became NaN/inf (tag fibexp.diverged=true)
FAMILY_ORDER = ("fib fixed", "fib learned", "fib stagger", "fib coprime", "pow2 stagger", "pow2 fixed",
                "pow2 learned", "pow2 coprime", "dense")
B_NAMES = {"dense": "attn", "hypercube/hybrid": "hybrid", "hypercube/rot": "rot", "hypercube/mixa": "mixa",
           "hypercube/local": "local", "hypercube/fixed": "fixed", "hypercube/dense": "dense (all-to-all)"}
COUNT_ORDER = ("hypercube/rot", "hypercube/fixed", "hypercube/dense", "dense", "hypercube/mixa", "hypercube/local",
               "hypercube/hybrid")


@dataclass
class Table:
    header: list[str]
    rows: list[list[str]]

    def text(self) -> str:
        widths = [max(len(row[i]) for row in [self.header] + self.rows) for i in range(len(self.header))]
        fmt = lambda row: "  ".join(v.ljust(w) if i == 0 else v.rjust(w) for i, (v, w) in enumerate(zip(row, widths)))
        return "\n".join(fmt(row).rstrip() for row in [self.header] + self.rows)

    def markdown(self) -> str:
        """A pipe table; columns of numbers (or -, †) right-aligned, text left."""
        esc = lambda v: v.replace("|", "\\|")
        numeric = lambda i: all(re.match(r"^([-+]?[\d.,]+[%x]?|-|†)( \(.*\))?$", row[i]) for row in self.rows)
        align = ["---:" if i and numeric(i) else "---" for i in range(len(self.header))]
        return "\n".join(["| " + " | ".join(esc(h) for h in self.header) + " |", "|" + "|".join(align) + "|"]
                         + ["| " + " | ".join(esc(v) for v in row) + " |" for row in self.rows])


@dataclass
class Section:
    title: str
    blocks: list = field(default_factory=list)  # Table or str (a note)
    figures: list[tuple[str, Callable]] = field(default_factory=list)  # (file name, () -> matplotlib figure)

    def text(self) -> str:
        return "\n".join([self.title] + [b.text() if isinstance(b, Table) else b for b in self.blocks])

    def markdown(self) -> str:
        out = [f"## {self.title}", ""]
        for b in self.blocks:
            out += [b.markdown() if isinstance(b, Table) else b, ""]
        out += [f"![{name}]({name})\n" for name, _ in self.figures]
        return "\n".join(out)


def _num(v: float | None, spec: str = ".2f") -> str:
    return "-" if v is None else format(v, spec)


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v:+.1%}"


def _agg(runs: Sequence[RunView], fn: Callable[[RunView], float | None], fmt: Callable[[float], str]) -> str:
    """Mean over the cell's seeds; † when every run of the cell diverged; - when missing."""
    vals = [v for r in runs if (v := fn(r)) is not None]
    if vals:
        return fmt(mean(vals))
    return DIVERGED if runs and all(r.diverged for r in runs) else "-"


def _cells(g: Group, kinds: Sequence[str] = ("sparse", "dense")) -> list[tuple[str, int | None]]:
    keys = {(r.family, r.window) for r in g.runs if r.kind in kinds}
    rank = lambda f: FAMILY_ORDER.index(f) if f in FAMILY_ORDER else len(FAMILY_ORDER)
    return sorted(keys, key=lambda k: (rank(k[0]), k[0], k[1] or 0))


def _metric(g: Group) -> tuple[Callable[[RunView], float | None], str]:
    """The group's headline metric: bpc for character-level runs, else ppl."""
    if any(bpc(r) is not None for r in g.runs):
        return bpc, "bpc"
    return ppl, "ppl"


def _runs(g: Group, family: str, window: int | None = None) -> list[RunView]:
    """A cell's seeds at its best lr (by the group's metric) when it was run at several."""
    return cell_runs(g, family, window, score=_metric(g)[0])


def _sets(g: Group, prefix: str = "val/ppl/") -> list[str]:
    return sorted({s for r in g.runs for s in r.per_set(prefix)})


def _label(g: Group, family: str, window: int | None) -> str:
    """The cell's name; W only when the group has several windows."""
    several = len({r.window for r in g.runs if r.window is not None}) > 1
    return label(family, window if several else None)


def _seed_note(g: Group, cells) -> str | None:
    n = Counter()
    for f, w in cells:
        n[len({r.seed for r in _runs(g, f, w)})] += 1
    return None if set(n) <= {1} else "values are means over each cell's seeds (see Seeds)"


def table1(g: Group) -> Section | None:
    """Paper A's table 1: per W, our held-out ppl per set and their mean, the paper's two sets beside."""
    cells = _cells(g)
    sets = _sets(g)
    if not cells or not sets or (not any(r.kind == "sparse" for r in g.runs)
                                 and any(r.kind == "hypercube" for r in g.runs)):
        return None
    windows = sorted({w for _, w in cells if w is not None}) or [None]
    dense = [c for c in cells if c[1] is None]
    sec = Section(f"Held-out perplexity at the training length ({g.n} tokens) -- paper A's table 1 "
                  "(paper: 60M model, 13,000 steps, FineWeb-Edu / Wikipedia)")
    for w in windows:
        rows = []
        for f, cw in [c for c in cells if c[1] == w and c[1] is not None] + dense:
            runs = _runs(g, f, cw)
            paper = TABLE1_DENSE if f == "dense" else TABLE1.get((f, cw))
            rows.append([label(f), *(_agg(runs, lambda r, s=s: r.per_set("val/ppl/").get(s) if not r.diverged
                                            else None, _num) for s in sets),
                         _agg(runs, ppl, _num), _num(paper[0] if paper else None), _num(paper[1] if paper else None)])
        first = f"W{w}" if w is not None else "cell"
        sec.blocks.append(Table([first, *sets, "mean", "paper FW-Edu", "paper Wiki"], rows))
    if note := _seed_note(g, cells):
        sec.blocks.append(note)
    sec.blocks += _degenerate_notes(g, cells)
    return sec


def _degenerate_notes(g: Group, cells) -> list[str]:
    """Cells of the group whose layers attend exactly the offsets of another cell."""
    out, firsts = [], {}
    for f, w in cells:
        runs = _runs(g, f, w)
        if runs and (o := offsets(runs[0])) is not None:
            if o in firsts:
                out.append(f"note: {label(f, w)} attends exactly the per-layer offsets of {firsts[o]} "
                           f"({runs[0].n_layers} layers): the two rows measure one model twice")
            else:
                firsts[o] = label(f, w)
    return out


def seeds(g: Group) -> Section | None:
    """Mean and population sd per cell over seeds; ranking only where seed ranges do not overlap."""
    fn, metric = _metric(g)
    multi = {}
    for f, w in _cells(g, ("sparse", "dense", "hypercube")):
        runs = sorted((r for r in _runs(g, f, w) if fn(r) is not None), key=lambda r: r.seed)
        if len(runs) >= 2:
            multi[(f, w)] = runs
    if not multi:
        return None
    spec = ".3f" if metric == "bpc" else ".2f"
    rows = []
    for (f, w), runs in multi.items():
        vals = [fn(r) for r in runs]
        paper = SEEDS_W12.get(f) if w == 12 and metric == "ppl" else None
        rows.append([_label(g, f, w), ",".join(str(r.seed) for r in runs), _num(mean(vals), spec),
                     _num(pstdev(vals), ".3f" if metric == "ppl" else ".4f"),
                     f"{min(vals):{spec}}..{max(vals):{spec}}", _num(mean(paper) if paper else None),
                     _num(pstdev(paper) if paper else None), "/".join(f"{x:.2f}" for x in paper) if paper else "-"])
    header = ["cell", "seeds", "mean", "sd", "range", "paper mean", "paper sd", "paper seeds"]
    with_paper = any(row[-1] != "-" for row in rows)
    if not with_paper:
        header, rows = header[:5], [row[:5] for row in rows]
    sec = Section(f"Seeds: mean held-out {metric} (mean over sets), population sd and range per cell"
                  + (" (paper A: W12, FineWeb-Edu ppl, seeds 42/43/44)" if with_paper else ""), [Table(header, rows)])
    if len(multi) > 1:
        sec.blocks.append("ranking ('<' only where seed ranges do not overlap, '~' a tie): "
                          + ranking({_label(g, f, w): [fn(r) for r in runs] for (f, w), runs in multi.items()}))
    if with_paper:
        sec.blocks.append("paper's ranking at W12: " + ranking(SEEDS_W12))
    return sec


def extrapolation(g: Group, factor: int = 4) -> Section | None:
    """ppl at 1x/2x/4x the training length (mean over sets) and the change vs 1x, per cell."""
    factors = sorted({int(k.split("_x")[1].split("/")[0]) for r in g.runs for k in r.metrics
                      if k.startswith("extrap/ppl_x")})
    if not factors:
        return None
    cells = _cells(g, ("sparse", "dense", "hypercube"))
    later = [k for k in factors if k > 1]
    rows, ours_fig, paper_fig = [], {}, {}
    for f, w in cells:
        runs = _runs(g, f, w)
        row = [_label(g, f, w)]
        row += [_agg(runs, lambda r, k=k: r.set_mean(f"extrap/ppl_x{k}/"), _num) for k in factors]
        row += [_agg(runs, lambda r, k=k: rel(r, k), lambda v: f"{v:+.1%}") for k in later]
        paper = EXTRAP.get(f)
        if paper:
            pw, ppl, published = paper
            at = "" if pw is None or pw == w else f" (W{pw})"
            row += ["/".join(_num(ppl.get(k)) for k in (1, 2, 4)) + at,
                    _pct(published if published is not None else ppl[4] / ppl[1] - 1)]
            paper_fig[label(f, pw)] = {k: v / ppl[1] - 1 for k, v in ppl.items()}
        else:
            row += ["-", "-"]
        rows.append(row)
        pts = {k: mean(v) for k in factors if (v := [x for r in runs if (x := rel(r, k)) is not None])}
        if pts:
            ours_fig[_label(g, f, w)] = pts
    header = ["cell", *(f"{k}x ({k * g.n})" for k in factors), *(f"change {k}x" for k in later),
              "paper 1x/2x/4x", "paper change 4x"]
    sec = Section(f"Length extrapolation: mean held-out ppl at {', '.join(f'{k}x' for k in factors)} the training "
                  f"length (paper A: FineWeb-Edu at 1024/2048/4096)", [Table(header, rows)])
    k = factor if factor in factors else factors[-1]
    sets = _sets(g, f"extrap/rel_x{k}/")
    if k > 1 and sets:
        def change(r: RunView, s: str) -> float | None:
            return None if r.diverged else r.per_set(f"extrap/rel_x{k}/").get(s)

        rows = [[_label(g, f, w), *(_agg(_runs(g, f, w), lambda r, s=s: change(r, s), _pct) for s in sets)]
                for f, w in cells]
        sec.blocks += [f"change at {k}x per held-out set:", Table(["cell", *sets], rows)]
    sec.figures.append(("extrapolation.png", lambda: plots.extrapolation(ours_fig, paper_fig)))
    return sec


def position_bins(g: Group) -> Section | None:
    """Loss per position bin per cell (mean over sets), the stagger gain, and the paper's W8 rows."""
    cells = [(f, w, b) for f, w in _cells(g, ("sparse", "dense", "hypercube"))
             if (b := [x for r in _runs(g, f, w) if (x := bins(r)) is not None])]
    if not cells:
        return None
    mean_bins = {(f, w): [mean([b[j] for b in bs]) for j in range(len(bs[0]))] for f, w, bs in cells}
    nb = max(len(v) for v in mean_bins.values())
    fmt = lambda v: f"{v:.3f}"
    rows = [[_label(g, f, w), *(fmt(x) for x in v)] for (f, w), v in mean_bins.items()]
    for w in sorted({w for f, w in mean_bins if f == "fib stagger"}):
        if ("fib fixed", w) in mean_bins:
            gain = [a - b for a, b in zip(mean_bins[("fib fixed", w)], mean_bins[("fib stagger", w)])]
            at = _label(g, "", w)  # " W8" when the group has several windows
            rows.append([f"stagger gain{at} (fixed - stagger)",
                         *(f"{x:+.3f}" for x in gain)])
    pf, ps = POS_BINS[("fib fixed", 8)], POS_BINS[("fib stagger", 8)]
    rows += [["paper fib fixed W8", *map(fmt, pf)], ["paper fib stagger W8", *map(fmt, ps)],
             ["paper stagger gain W8", *(f"{a - b:+.3f}" for a, b in zip(pf, ps))]]
    sec = Section(f"Position-resolved held-out loss (nats; {nb} equal bins over positions 0..{g.n - 1}, mean over "
                  "sets; paper A: FineWeb-Edu, T 1024)", [Table(["cell", *(f"bin{j}" for j in range(nb))], rows)])
    ours = {_label(g, f, w): v for (f, w), v in mean_bins.items()}
    sec.figures.append(("position_bins.png", lambda: plots.position_bins(
        ours, {"fib fixed W8": list(pf), "fib stagger W8": list(ps)}, g.n)))
    return sec


def hypercube(g: Group) -> Section | None:
    """Paper B's Table 2 layout: the metric over the lr grid (†: diverged), each schedule's best
    lr, and the seeds at the best lr with links and weights, the paper's rows beside ours."""
    if g.task != "lm" or not any(r.kind == "hypercube" for r in g.runs):
        return None
    fn, metric = _metric(g)
    fams = [f for f in B_NAMES if any(r.family == f for r in g.runs)]
    fams += sorted({r.family for r in g.runs if r.kind == "hypercube"} - set(fams))
    lrs = sorted({r.lr for r in g.runs if r.family in fams and r.lr is not None}, reverse=True)
    rows, fig = [], {}
    for f in fams:
        name = B_NAMES.get(f, f)
        runs = [r for r in g.runs if r.family == f]
        cells, pts = [], {}
        for lr in lrs:
            at = [r for r in runs if r.lr == lr]
            cells.append(_agg(at, fn, lambda v: f"{v:.3f}"))
            if at:
                vals = [v for r in at if (v := fn(r)) is not None]
                pts[lr] = mean(vals) if vals else None
        rows.append([name, *cells])
        fig[name] = pts
        paper = LR_TABLE.get(name)
        if paper and metric == "bpc":
            grid = dict(zip(LR_GRID, paper))
            rows.append(["  paper", *(("-" if lr not in grid else DIVERGED if grid[lr] is None else f"{grid[lr]:.3f}")
                                      for lr in lrs)])
    blocks = [Table(["schedule", *(f"{lr:g}" for lr in lrs)], rows),
              f"{DIVERGED}: the run's training loss became NaN/inf (stopped early; tag fibexp.diverged)"]
    best_rows = []
    for f in fams:
        runs = sorted(_runs(g, f), key=lambda r: r.seed)
        vals = [v for r in runs if (v := fn(r)) is not None]
        name = B_NAMES.get(f, f)
        p = BEST_LR.get(name) if metric == "bpc" else None
        missing = DIVERGED if runs and all(r.diverged for r in runs) else "-"
        seeds_txt = "/".join(f"{v:.3f}" for v in vals) if vals else missing
        best_rows.append([name, f"{runs[0].lr:g}" if runs and runs[0].lr else "-",
                          _num(mean(vals), ".3f") if vals else missing,
                          _num(pstdev(vals), ".4f") if len(vals) > 1 else "-", seeds_txt,
                          f"{links:,}" if runs and (links := link_count(runs[0])) else "-",
                          f"{runs[0].n_params:,}" if runs and runs[0].n_params else "-",
                          *_paper_best(p)])
    blocks += ["best lr per schedule (lowest mean held-out " + metric + "), its seeds, links (fibexp.science.wiring.links) "
               "and weights (model.n_params):",
               Table(["schedule", "lr", metric, "sd", "seeds", "links", "weights",
                      "paper lr", "paper bpc", "paper sd", "paper links", "paper weights"], best_rows)]
    return Section(f"Paper B's learning-rate grid: held-out {metric} (mean over sets) per lr, window {g.n} "
                   f"(paper: enwik8, window 256, 16 layers, width 512, 3,000 steps)", blocks,
                   [("lr_grid.png", lambda: plots.lr_grid(fig, f"held-out {metric}"))])


def _paper_best(p: dict | None) -> list[str]:
    """Paper B's columns of the best-lr table (lr, bpc, sd, links, weights)."""
    if not p:
        return ["-"] * 5
    return [f"{p['lr']:g}", f"{p['bpc']:.3f}", f"{p['sd']:.4f}", f"{p['links']:,}" if "links" in p else "-",
            f"{p['weights']:,}" if "weights" in p else "-"]


def count_ones(g: Group) -> Section | None:
    """Accuracy per schedule, depth and order, with paper B's number at the same n and depth
    (else at the same depth relative to log2 n, from its n = 64 runs)."""
    if g.task != "count_ones":
        return None
    b = wiring.cube_dims(g.n) if g.n >= 2 and not g.n & (g.n - 1) else None  # else: not a cube length
    keys = sorted({(r.n_layers, r.family, r.order if r.family == "hypercube/rot" else "-") for r in g.runs},
                  key=lambda k: (k[0], COUNT_ORDER.index(k[1]) if k[1] in COUNT_ORDER else 99, k[1], k[2]))
    rows, fig, chances = [], [], []
    for depth, f, order in keys:
        runs = cell_runs(g, f, n_layers=depth, order=None if order == "-" else order, score=acc,
                           higher_is_better=True)
        vals = [v for r in runs if (v := acc(r)) is not None]
        chance = [v for r in runs if (v := r.metric("task/chance")) is not None]
        chances += chance
        paper, where = COUNT_ONES.get((g.n, depth, f, "rot" if order == "-" else order)), ""
        if paper is None and b:
            rel = {b - 1: 5, b: 6, 2 * b: 12}.get(depth)
            if rel is not None:
                paper = COUNT_ONES.get((64, rel, f, "rot" if order == "-" else order))
                where = f" (n=64, {rel} layers)"
        name = "attn" if f == "dense" else B_NAMES.get(f, f)
        rows.append([name, order, str(depth), f"{depth / b:.2f}" if b else "-",
                     _agg(runs, acc, lambda v: f"{v:.1%}"),
                     f"{min(vals):.1%}..{max(vals):.1%}" if len(vals) > 1 else "-",
                     _num(mean(chance), ".1%") if chance else "-", str(len(runs)),
                     (f"{paper:.1%}" + where) if paper is not None else "-"])
        if vals:
            fig.append((f"{name}{'' if order in ('-', 'rot') else ' ' + order} L{depth}", mean(vals), paper))
    chance = mean(chances) if chances else None
    return Section(f"Count-ones (paper B): held-out accuracy at n={g.n} (log2 n = {b}); "
                   f"paper: n=64, chance {COUNT_ONES_CHANCE[64]:.1%}",
                   [Table(["schedule", "order", "layers", "layers/log2 n", "acc", "seed range", "chance", "runs",
                           "paper"], rows)],
                   [(f"count_ones_n{g.n}.png", lambda: plots.count_ones(fig, chance))])


def task_table(g: Group) -> Section | None:
    """Other synthetic tasks (shift-copy, key-value retrieval): every task/ metric per cell."""
    if g.task in ("lm", "count_ones"):
        return None
    names = sorted({k for r in g.runs for k in r.metrics if k.startswith("task/")})
    keys = sorted({(r.family, r.window, r.n_layers, r.params.get("attention.alpha_init", "-")) for r in g.runs},
                  key=lambda k: (k[2], k[0], k[3]))
    rows = []
    for f, w, depth, init in keys:
        runs = [r for r in g.runs if (r.family, r.window, r.n_layers, r.params.get("attention.alpha_init", "-"))
                == (f, w, depth, init)]
        rows.append([label(f, w), str(depth), init, *(_agg(runs, lambda r, n=n: r.metric(n), lambda v: f"{v:.3f}")
                                                        for n in names)])
    return Section(f"{g.task} (n={g.n}): final task metrics",
                   [Table(["cell", "layers", "alpha init", *(n.removeprefix("task/") for n in names)], rows)])


def aux_evals(g: Group) -> Section | None:
    """RULER variable tracking and LEGO accuracies of the LM runs (forced choice)."""
    names = sorted({k for r in g.runs for k in r.metrics if k.startswith("eval/")})
    if not names:
        return None
    cells = _cells(g, ("sparse", "dense", "hypercube"))
    rows = [[_label(g, f, w), *(_agg(_runs(g, f, w), lambda r, n=n: r.metric(n), lambda v: f"{v:.1%}")
                                for n in names)] for f, w in cells]
    return Section("Auxiliary evaluations (forced choice; chance: RULER 1/9, LEGO 1/2)",
                   [Table(["cell", *(n.removeprefix("eval/") for n in names)], rows)])


def describe(g: Group) -> str:
    key = dict(g.key)
    steps = key.get("step budget")
    cells = {(r.family, r.window, r.n_layers, r.order) for r in g.runs}
    what = "LM" if g.task == "lm" else f"{g.task} n={g.n}"
    size = (f"length {key.get('length')}, {key.get('depth')} layers" if g.task == "lm" else "depths as listed")
    corpus = f", corpus {key['corpus']}" if key.get("corpus") else ""
    return (f"{what}: {len(g.runs)} runs ({len(cells)} cells), {steps} steps each (equal budget), {size}, "
            f"width {key.get('width')}, batch {key.get('batch size')}{corpus}, eval v{key.get('eval version')}")


def sections(g: Group, factor: int = 4) -> list[Section]:
    builders = (table1, seeds, lambda g: extrapolation(g, factor), position_bins, hypercube, aux_evals, count_ones,
                task_table)
    return [s for b in builders if (s := b(g)) is not None]
