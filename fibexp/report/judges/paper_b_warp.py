"""Paper B §5.1/§9, learned coordinates (B9): warp brings no advantage over the fixed hybrid, each
at its own best lr. A "no advantage" claim: its band is the paper's own seed spread of the hybrid
(fibexp.report.seeds.no_advantage); a window-256 claim like B4."""
from __future__ import annotations

from fibexp.report.claims import Result
from fibexp.report.judges.paper_b_char_lm import best, bpc_cells, lr_coverage
from fibexp.report.seeds import no_advantage

_f = lambda x: f"{x:.3f}"


def judge_b9(c, g):
    cells = bpc_cells(c, g, ("warp", "hybrid"))
    (lw, w), (lh, h) = best(g, "warp"), best(g, "hybrid")
    verdict, words = no_advantage(w, h, c.thresholds["band"])
    links = {r.metrics.get("model/links") for r in g.runs if r.family == "hypercube/warp"} - {None}
    return Result(verdict, f"bpc at each one's best lr: warp {w.show(_f)} (lr {lw:g}) vs hybrid {h.show(_f)} "
                           f"(lr {lh:g}): {words}" + (f"; warp links {max(links):,.0f}" if links else ""),
                  notes=lr_coverage(cells))
