"""task=graft (paper B §8, claim B13): a pretrained Hugging Face causal LM with k attention layers
replaced by Eq. (1) layers (`task.replace=eq1`) or kept and fine-tuned as the control
(`task.replace=attention`), every other weight frozen; trained and evaluated like task=lm on the
corpus tokenized by the model's own tokenizer, scored in bits per character (`val/bpc/<set>`).
With `eval.int8=true` a run also measures its model against its int8 copy (claim B14, paper B §8:
fibexp.evals.int8, as for task=lm), k=0's unmodified model included."""
from __future__ import annotations

import torch

from fibexp.errors import Refusal, first_line
from fibexp.evals import int8
from fibexp.model.graft import GraftedLM, graft
from fibexp.tasks.graft.config import graft_layers
from fibexp.tasks.lm.task import LanguageModelling


class Graft(LanguageModelling):
    def build_model(self, weights: bool = True) -> GraftedLM:
        """The pretrained model (float32, offline: nothing is downloaded), grafted; `weights` False:
        the architecture from its config.json alone."""
        t = self.conf
        try:
            from transformers import AutoConfig, AutoModelForCausalLM
        except ImportError:
            raise Refusal("task.name", "graft without transformers", "task=graft with the `hf` extra installed "
                          "(pip install -e '.[hf]'; make install does)") from None
        try:
            if weights:
                hf = AutoModelForCausalLM.from_pretrained(t.model, local_files_only=True, dtype=torch.float32)
            else:
                hf = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(t.model, local_files_only=True))
        except (OSError, ValueError, KeyError, RuntimeError) as e:  # transformers' many ways to say "not here"
            raise Refusal("task.model", f"{t.model} (cannot be loaded offline: {type(e).__name__}: "
                          f"{first_line(e)[:160]})", "a causal LM folder or a Hub name in the local cache") from None
        layers = graft_layers(t.layers, int(t.k), int(hf.config.num_hidden_layers))
        return GraftedLM(graft(hf.train(), layers, t.replace, int(self.cfg.model.seq_len), t.schedule, t.init))

    def final_metrics(self, model, dm, initial_alphas, forward_context):
        """What was trained: every weight (`model/weights`) and the trainable ones (`graft/trainable`);
        with eval.int8, the int8/... metrics."""
        out = {"model/weights": float(model.n_params()), "graft/trainable": float(model.n_trainable())}
        if self.cfg.eval.int8:
            out.update(int8.measure(model, dm, self.cfg.model.seq_len, self.cfg.eval.batch_tokens))
        return out

    def figures(self, metrics):
        return {}
