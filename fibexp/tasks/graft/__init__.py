"""task=graft: a pretrained causal LM with k attention layers replaced by Eq. (1) layers (paper B §8)."""
