"""Trained runs in the Hugging Face ecosystem and deployment: the run's tokenizer, the
`transformers` export (`fibexp-export --format hf`). Needs the `hf` extra for `transformers`."""
