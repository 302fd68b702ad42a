"""Trained runs in the Hugging Face ecosystem and deployment: the run's tokenizer, the
`transformers` export (`fibexp-export --format hf`), lm-evaluation-harness on it (`fibexp-eval`;
both need the `hf` extra) and the int8 measurement (`fibexp-export --int8`; torch only)."""
