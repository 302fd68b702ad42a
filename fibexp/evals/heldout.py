"""The held-out evaluation protocol of language models (the papers' protocol, docs/papers.md): token-weighted mean
NLL per held-out set and length in contiguous, non-overlapping windows, the metric names of the
contract, the position bins, and one model's numbers at the training length (what the int8
measurement compares)."""
from __future__ import annotations

import math

import torch
from torch.utils.data import DataLoader, TensorDataset

from fibexp.evals.evaluator import Evaluator
from fibexp.model.lm import nll


class HeldoutPerplexity(Evaluator):
    """Token-weighted mean NLL per test loader (the papers' protocol); plan[i] = (held-out set,
    length factor k) of loader i; position bins from the 1x loaders."""

    def __init__(self, plan: list[tuple[str, int]], chars_per_token: dict[str, float] | None = None):
        self.plan, self.chars_per_token = plan, chars_per_token
        self.sums = self.counts = None
        self.pos: dict[int, torch.Tensor] = {}

    def update(self, model, batch, loader_idx=0):
        x, y = batch
        if self.sums is None:
            self.sums = torch.zeros(len(self.plan), dtype=torch.float64, device=x.device)
            self.counts = torch.zeros(len(self.plan), dtype=torch.float64, device=x.device)
        loss = nll(model, x, y).double()
        self.sums[loader_idx] += loss.sum()
        self.counts[loader_idx] += loss.numel()
        if self.plan[loader_idx][1] == 1:
            self.pos[loader_idx] = self.pos.get(loader_idx, 0) + loss.sum(0)

    def compute(self, reduce):
        sums, counts = reduce(self.sums), reduce(self.counts)
        metrics = evaluation_metrics(self.plan, (sums / counts).tolist(), self.chars_per_token)
        for i, pos in self.pos.items():
            pos = reduce(pos) / (counts[i] / pos.numel())
            metrics.update(position_bins(self.plan[i][0], pos.tolist()))
        return metrics


def evaluation_metrics(plan, mean_nll, chars_per_token=None) -> dict[str, float]:
    """Contract names: val/ppl/<set> (training length), extrap/ppl_x<k>/<set>,
    extrap/rel_x<k>/<set> = ppl_xk / ppl_x1 - 1, val/bpc/<set> for character runs, and the
    means over the sets (length_means)."""
    out = {}
    ppl = {(s, k): math.exp(m) for (s, k), m in zip(plan, mean_nll)}
    for (s, k), m in zip(plan, mean_nll):
        out[f"extrap/ppl_x{k}/{s}"] = ppl[s, k]
        if (s, 1) in ppl:
            out[f"extrap/rel_x{k}/{s}"] = ppl[s, k] / ppl[s, 1] - 1
        if k == 1:
            out[f"val/ppl/{s}"] = ppl[s, k]
            out[f"val/loss/{s}"] = m
            if chars_per_token:
                out[f"val/bpc/{s}"] = m / math.log(2) / chars_per_token[s]
    return out | length_means(out)


def length_means(metrics: dict[str, float]) -> dict[str, float]:
    """One number per length, so the MLflow runs table can rank runs: mean_ppl_<k>x, the mean of
    extrap/ppl_x<k>/<set>, and ppl_change_<k>x_pct (k > 1), the mean of 100 * extrap/rel_x<k>/<set>,
    both over the sets measured at every length (a set too short for the longest windows would
    make the lengths' means incomparable). Flat names: the report reads `extrap/<name>/<x>` as set x."""
    per_set: dict[str, dict[int, float]] = {}
    for key, v in metrics.items():
        if key.startswith("extrap/ppl_x"):
            k, s = key[len("extrap/ppl_x"):].split("/", 1)
            per_set.setdefault(s, {})[int(k)] = v
    factors = sorted({k for by_k in per_set.values() for k in by_k})
    sets = [s for s, by_k in per_set.items() if len(by_k) == len(factors)]
    if not sets:
        return {}
    out = {f"mean_ppl_{k}x": sum(per_set[s][k] for s in sets) / len(sets) for k in factors}
    if 1 in factors:
        out |= {f"ppl_change_{k}x_pct": 100 * sum(metrics[f"extrap/rel_x{k}/{s}"] for s in sets) / len(sets)
                for k in factors if k != 1}
    return out


def position_bins(name: str, per_position: list[float], bins: int = 8) -> dict[str, float]:
    """Mean NLL per position in 8 contiguous bins, edges linspace(0, T - 1, 9) (as the papers bin them)."""
    t = len(per_position)
    edges = [round(i * (t - 1) / bins) for i in range(bins + 1)]
    out = {}
    for j in range(bins):
        lo, hi = edges[j], (edges[j + 1] if j < bins - 1 else t)
        chunk = per_position[lo:hi] or per_position[lo:lo + 1]
        out[f"val/pos_loss/{name}/bin{j}"] = sum(chunk) / len(chunk)
    return out


def heldout(model: torch.nn.Module, dm, seq_len: int, batch_tokens: int) -> dict[str, float]:
    """val/ppl/<set>, val/loss/<set> and val/bpc/<set> of `model` at the training length, as the
    LM task's evaluation computes them (bpc for every tokenizer)."""
    names = dm.heldout_names
    ev = HeldoutPerplexity([(n, 1) for n in names], {n: dm.chars_per_token(n) for n in names})
    with torch.no_grad():
        for i, name in enumerate(names):
            loader = DataLoader(TensorDataset(*dm.heldout_windows(name, seq_len)), batch_size=max(1, batch_tokens // seq_len))
            for batch in loader:
                ev.update(model, batch, i)
    return {k: v for k, v in ev.compute(lambda t: t).items() if k.startswith(("val/ppl/", "val/bpc/"))}
