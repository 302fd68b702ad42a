"""The language model and its token mixers; knows nothing of Hydra, MLflow or tasks. `spec` (the
attention schema) imports no torch; `lm.LM` is the model Hydra instantiates."""
