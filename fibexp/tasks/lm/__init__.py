"""task=lm: language modelling on the corpus (the default task)."""
