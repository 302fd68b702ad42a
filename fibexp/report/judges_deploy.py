"""Paper B's deployability judge (B14, §8): under 8-bit quantization the sparse model degrades
more than the dense one (the paper: 1.32x as much, 3 seeds, no overlap) at a smaller size (3.2x).

fibexp's version reads what `fibexp-export RUN --int8` logged into each run: `int8/degradation`
(the relative held-out bpc increase from float to int8) and `int8/size_ratio` (float state bytes /
int8 state bytes). Every hypercube cell that was measured is ranked against dense attention in the
same comparison group, >= 3 seeds each, by the seed-range rule; the ratio of the mean degradations
and the size ratio are printed beside the paper's, and only the direction is judged: our models
are far smaller than the paper's Qwen3 (the embedding's share, which stays fp32, sets the size
ratio)."""
from __future__ import annotations

from fibexp.report.claims import NOT_REPRODUCED, REPRODUCED, TIE, Missing, cell_runs, compare, seeded
from fibexp.report.runs import Group, RunView

PAPER = "sparse degrades 1.32x as much as unmodified, 3 seeds, no overlap; 3.2x smaller"
_f = lambda x: f"{x:+.2%}"


def degradation(r: RunView) -> float | None:
    return r.metric("int8/degradation")


def _sizes(runs: list[RunView], what: str) -> list[float]:
    vals = [v for r in runs if (v := r.metric("int8/size_ratio")) is not None]
    if not vals:
        raise Missing(f"{what} runs have no int8/size_ratio (fibexp-export RUN --int8 or eval.int8=true logs it)")
    return vals


def judge_b14(c, g: Group):
    """Every quantized hypercube cell's degradation range wholly above dense attention's (overlap:
    tie; below: not reproduced), and every compared run's int8 state smaller by > min_size_ratio."""
    sparse = sorted({r.family for r in g.runs if r.kind == "hypercube" and degradation(r) is not None})
    if not sparse:
        raise Missing("needs hypercube runs measured by fibexp-export RUN --int8 or eval.int8=true (int8/degradation)")
    dense_runs = cell_runs(g, "dense")
    d = seeded(dense_runs, degradation, "dense (attention) with int8/degradation", "int8/degradation")
    sizes = _sizes(dense_runs, "dense")
    signs, ours = [], []
    for fam in sparse:
        runs = cell_runs(g, fam)
        s = seeded(runs, degradation, f"{fam} with int8/degradation", "int8/degradation")
        sizes += _sizes(runs, fam)
        sign = compare(s, d)
        signs.append(sign)
        ratio = f"{s.mean / d.mean:.2f}x as much" if d.mean > 0 else "dense does not degrade"
        where = {">": "no overlap", "~": "seed ranges overlap", "<": "less, no overlap"}[sign]
        ours.append(f"{fam.replace('hypercube/', '')} {s.show(_f)} vs dense {d.show(_f)}: {ratio} ({where})")
    small = min(sizes) > c.thresholds["min_size_ratio"]
    verdict = NOT_REPRODUCED if "<" in signs or not small else TIE if "~" in signs else REPRODUCED
    return (verdict, f"int8 bpc degradation: {'; '.join(ours)}; int8 {min(sizes):.2f}-{max(sizes):.2f}x smaller",
            PAPER)
