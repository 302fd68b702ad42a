"""The language model and its token mixers; knows nothing of Hydra or MLflow."""
from fibexp.model.lm import LM
from fibexp.model.mixers import AttentionSpec

__all__ = ["LM", "AttentionSpec"]
