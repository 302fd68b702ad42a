"""A trained fibexp LM as a `transformers` model (`fibexp-export --format hf` writes this file
into the folder; `AutoModelForCausalLM.from_pretrained(DIR, trust_remote_code=True)` loads it).

It imports the installed fibexp package rather than copying its code: the model is fibexp's own
`LM`, built from the config's `fibexp_model` (the run's model node, attention included), so the
logits equal fibexp's exactly. `generate()` recomputes the whole prefix at every token
(`use_cache` is off: transformers' cache classes hold per-layer keys and values, which the shift
layers do not have; fibexp-generate is the constant-cache path)."""
from __future__ import annotations

import torch
from transformers import GenerationMixin, PretrainedConfig, PreTrainedModel
from transformers.modeling_outputs import CausalLMOutput

from fibexp.model.lm import LM


class FibexpConfig(PretrainedConfig):
    model_type = "fibexp"

    def __init__(self, fibexp_model: dict | None = None, **kwargs):
        self.fibexp_model = dict(fibexp_model or {})
        m = self.fibexp_model
        kwargs.setdefault("use_cache", False)
        kwargs.setdefault("tie_word_embeddings", False)  # LM ties its head to the embedding itself
        super().__init__(**kwargs)
        if m:
            self.vocab_size = m["vocab_size"]
            self.hidden_size = m["d_model"]
            self.num_hidden_layers = m["n_layers"]
            self.num_attention_heads = m["n_heads"]
            self.max_position_embeddings = m["seq_len"]


class FibexpForCausalLM(PreTrainedModel, GenerationMixin):
    config_class = FibexpConfig
    base_model_prefix = "lm"
    main_input_name = "input_ids"
    _supports_cache_class = False

    def __init__(self, config: FibexpConfig):
        super().__init__(config)
        kwargs = {k: v for k, v in config.fibexp_model.items() if k != "_target_"}
        self.lm = LM(**kwargs)
        self.post_init()

    def _init_weights(self, module):
        pass  # LM initialises itself; from_pretrained then loads the run's weights

    def get_input_embeddings(self):
        return self.lm.embed

    def forward(self, input_ids: torch.LongTensor, attention_mask=None, labels=None, **kwargs):
        logits = self.lm(input_ids)
        loss = None
        if labels is not None:
            loss = torch.nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1).float(), labels[:, 1:].flatten(),
                                                     ignore_index=-100)
        return CausalLMOutput(loss=loss, logits=logits)

    def prepare_inputs_for_generation(self, input_ids, attention_mask=None, **kwargs):
        return {"input_ids": input_ids}
