"""The language model and its token mixers; knows nothing of Hydra or MLflow."""
