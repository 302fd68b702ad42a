"""Language modelling on the frozen corpus (the default task): next-token loss on random training
windows; evaluation = held-out perplexity at 1x/2x/4x the training length in contiguous,
non-overlapping windows, the position-resolved loss, and then the RULER/LEGO chain evaluations
(`eval.aux`), and the int8 copy against the float model (`eval.int8`)."""
from __future__ import annotations

import math
from pathlib import Path
from typing import ClassVar

import torch
from torch.utils.data import DataLoader, TensorDataset

from fibexp import plots
from fibexp.data.datamodule import TokenDataModule
from fibexp.model.lm import nll
from fibexp.model import census
from fibexp.tasks import chains
from fibexp.errors import refuse
from fibexp.tasks.base import Evaluator, Task
from fibexp.tasks.spec import LMSpec


class LanguageModelling(LMSpec, Task):
    bpc_always: ClassVar[bool] = False  # val/bpc/<set> whatever the tokenizer (task=graft), not only for char runs

    def data_fingerprint(self, corpus) -> str:
        return corpus.fingerprint

    def datamodule(self, corpus) -> TokenDataModule:
        c = self.cfg
        d = c.data
        return TokenDataModule(corpus, d.tokenizer, c.model.vocab_size, Path(c.paths.cache_dir), c.model.seq_len,
                               d.batch_size, dict(d.mixture) if d.mixture else None, d.eval_tokens, c.seed,
                               d.num_workers)

    def prepared(self, dm: TokenDataModule) -> None:
        """After the tokenizer exists: the model must have an id for every token."""
        if dm.n_vocab > self.cfg.model.vocab_size:
            refuse("model.vocab_size", f"{self.cfg.model.vocab_size} < the tokenizer's {dm.n_vocab}", f">= {dm.n_vocab}")

    def loss(self, model, batch):
        x, y = batch
        return nll(model, x, y).mean(), x.numel()

    def evaluation(self, dm: TokenDataModule):
        """One loader per (held-out set, extrapolation factor): same windows protocol at each length."""
        plan, loaders = [], []
        for name in dm.heldout_names:
            for k in self.cfg.eval.extrapolation:
                length = k * self.cfg.model.seq_len
                x, y = dm.heldout_windows(name, length)
                if len(x):
                    plan.append((name, k))
                    loaders.append(DataLoader(TensorDataset(x, y), batch_size=max(1, self.cfg.eval.batch_tokens // length)))
        bpc = self.cfg.data.tokenizer == "char" or self.bpc_always
        cpt = {n: dm.chars_per_token(n) for n in dm.heldout_names} if bpc else None
        return HeldoutPerplexity(plan, cpt), loaders

    def final_metrics(self, model, dm, initial_alphas, forward_context):
        # paper B's census (model/links, model/weights; attn/effective_partners for dynamics) on held-out windows
        sample = dm.heldout_windows(dm.heldout_names[0], self.cfg.model.seq_len)[0][:8] if dm.heldout_names else None
        out = census.metrics(model, sample, forward_context)
        if self.cfg.eval.aux:
            out.update(chains.evaluate(model, dm.tokenizer, next(model.parameters()).device, forward_context))
        if self.cfg.eval.int8:
            from fibexp.tasks import int8  # torch's quantization modules load only when asked for

            out.update(int8.measure(model, dm, self.cfg.model.seq_len, self.cfg.eval.batch_tokens))
        return out

    def figures(self, metrics):
        return {"ppl_vs_length.png": plots.ppl_vs_length(metrics, self.cfg.model.seq_len)}

    def objective(self, metrics):
        val = [v for k, v in metrics.items() if k.startswith("val/loss/")]
        return sum(val) / len(val)


class HeldoutPerplexity(Evaluator):
    """Token-weighted mean NLL per test loader (SPEC "Evaluations"); plan[i] = (held-out set,
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
    extrap/rel_x<k>/<set> = ppl_xk / ppl_x1 - 1, and val/bpc/<set> for character runs."""
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
    return out


def position_bins(name: str, per_position: list[float], bins: int = 8) -> dict[str, float]:
    """Mean NLL per position in 8 contiguous bins, edges linspace(0, T - 1, 9) (SPEC)."""
    t = len(per_position)
    edges = [round(i * (t - 1) / bins) for i in range(bins + 1)]
    out = {}
    for j in range(bins):
        lo, hi = edges[j], (edges[j + 1] if j < bins - 1 else t)
        chunk = per_position[lo:hi] or per_position[lo:lo + 1]
        out[f"val/pos_loss/{name}/bin{j}"] = sum(chunk) / len(chunk)
    return out
