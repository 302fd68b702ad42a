"""Language modelling on the frozen corpus (the default task): next-token loss on random training
windows; evaluation = held-out perplexity at 1x/2x/4x the training length in contiguous,
non-overlapping windows (fibexp.evals.heldout), the position-resolved loss, and then the forward
speed by paper A's protocol (fibexp.evals.latency), the RULER/LEGO chain evaluations (`eval.aux`)
and the int8 copy against the float model (`eval.int8`)."""
from __future__ import annotations

from pathlib import Path

from torch.utils.data import DataLoader, TensorDataset

from fibexp import plots
from fibexp.data.datamodule import TokenDataModule
from fibexp.errors import refuse
from fibexp.evals import chains, int8, latency
from fibexp.evals.heldout import HeldoutPerplexity
from fibexp.model import census
from fibexp.model.lm import nll
from fibexp.tasks.task import Task


class LanguageModelling(Task):
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
        bpc = self.cfg.data.tokenizer == "char" or self.config.bpc_always
        cpt = {n: dm.chars_per_token(n) for n in dm.heldout_names} if bpc else None
        return HeldoutPerplexity(plan, cpt), loaders

    def final_metrics(self, model, dm, initial_alphas, forward_context):
        # claim A9's speed first, on the run's device with the trained weights, before the copies below
        out = latency.metrics(model, self.cfg.model.vocab_size, self.cfg.model.seq_len)
        # paper B's census (model/links, model/weights; attn/effective_partners for dynamics) on held-out windows
        sample = dm.heldout_windows(dm.heldout_names[0], self.cfg.model.seq_len)[0][:8] if dm.heldout_names else None
        out.update(census.metrics(model, sample, forward_context))
        if self.cfg.eval.aux:
            out.update(chains.evaluate(model, dm.tokenizer, next(model.parameters()).device, forward_context))
        if self.cfg.eval.int8:
            out.update(int8.measure(model, dm, self.cfg.model.seq_len, self.cfg.eval.batch_tokens))
        return out

    def figures(self, metrics):
        return {"ppl_vs_length.png": plots.ppl_vs_length(metrics, self.cfg.model.seq_len)}

    def objective(self, metrics):
        val = [v for k, v in metrics.items() if k.startswith("val/loss/")]
        return sum(val) / len(val)
