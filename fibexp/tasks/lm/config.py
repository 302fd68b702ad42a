"""task=lm's config (no keys of its own: the corpus, model and eval groups say it all) and the
metrics of a language model's held-out protocol, which task=graft declares too."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from fibexp.errors import refuse
from fibexp.tasks.config import TaskConf, census_metrics, training_metrics

AUX_METRICS = tuple(f"eval/ruler_vt/hop{k}" for k in (2, 3, 4)) + tuple(f"eval/lego/len{k}" for k in (2, 3, 4))
INT8_TOTALS = ("int8/bytes_float", "int8/bytes_int8", "int8/size_ratio", "int8/degradation")
POS_BINS = 8  # val/pos_loss/<set>/bin<j>, j < 8 (fibexp.evals.heldout.position_bins)
# forward-only tokens/s by paper A's latency protocol (task=lm; claim A9): median of the timed passes, min, max
LATENCY = {"perf/fwd_tokens_per_s", "perf/fwd_tokens_per_s_min", "perf/fwd_tokens_per_s_max"}


def heldout_sets(cfg) -> list[str]:
    """The held-out sets an LM run is scored on: the corpus domains (embedded) or the sources'
    names (hf), assuming each holds at least one window at the training length."""
    return [str(s.name) for s in cfg.data.sources] if cfg.data.source == "hf" else [str(d) for d in cfg.data.domains]


def heldout_metrics(cfg, bpc_always: bool = False) -> set[str]:
    """fibexp.evals.heldout: ppl and loss per set at the training length, ppl and its change at every
    eval.extrapolation factor and their means over the sets, the position bins, and bpc for
    characters (for every tokenizer with `bpc_always`)."""
    factors = [int(k) for k in cfg.eval.extrapolation]
    bpc = bpc_always or cfg.data.tokenizer == "char"
    out = set()
    for s in heldout_sets(cfg):
        for k in factors:
            out.add(f"extrap/ppl_x{k}/{s}")
            if 1 in factors:
                out.add(f"extrap/rel_x{k}/{s}")
        if 1 in factors:
            out |= {f"val/ppl/{s}", f"val/loss/{s}"} | ({f"val/bpc/{s}"} if bpc else set())
            out |= {f"val/pos_loss/{s}/bin{j}" for j in range(POS_BINS)}
    if heldout_sets(cfg):  # fibexp.evals.heldout.length_means
        out |= {f"mean_ppl_{k}x" for k in factors}
        out |= {f"ppl_change_{k}x_pct" for k in factors if k != 1} if 1 in factors else set()
    return out


def int8_metrics(cfg) -> set[str]:
    """fibexp.evals.int8 (eval.int8): both models' ppl and bpc per set, their sizes and the degradation."""
    if not cfg.eval.int8:
        return set()
    return {f"int8/{m}/{s}" for s in heldout_sets(cfg) for m in ("ppl", "ppl_float", "bpc", "bpc_float")} | set(
        INT8_TOTALS)


@dataclass
class LMConf(TaskConf):
    name: str = "lm"

    uses_corpus: ClassVar[bool] = True
    bpc_always: ClassVar[bool] = False  # val/bpc/<set> whatever the tokenizer, not only for char runs

    @classmethod
    def check(cls, cfg) -> None:
        if not bool(cfg.attention.causal):
            refuse("attention.causal", cfg.attention.causal, "True for task=lm (next-token prediction)")

    @classmethod
    def metric_names(cls, cfg) -> set[str]:
        """Training, the held-out protocol, the census, the forward speed, and with eval.aux /
        eval.int8 their measurements."""
        return heldout_metrics(cfg, cls.bpc_always) | training_metrics(cfg) | census_metrics(cfg) | int8_metrics(cfg) | (
            LATENCY | (set(AUX_METRICS) if cfg.eval.aux else set()))
