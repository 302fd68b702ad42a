"""Write a tiny RANDOM Qwen3 to graft into offline (task=graft's tests, make reproduce SCALE=smoke).
Qwen3-0.6B's weights cannot be downloaded here.

    .venv/bin/python -m fibexp.cli.tiny_qwen outputs/tiny-qwen3

A Qwen3-architecture causal LM with random weights, saved as a `save_pretrained` folder with a
byte-level tokenizer (256 bytes + <|endoftext|>). Not a pretrained model: its bpc says nothing
about paper B's numbers. torch, transformers and tokenizers are imported only to write it."""
from __future__ import annotations

import argparse
from pathlib import Path

EOS = "<|endoftext|>"


def byte_tokenizer():
    """A lossless byte-level `tokenizers` BPE without merges: id 0 the separator, then the 256 bytes."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    vocab = {EOS: 0, **{ch: i + 1 for i, ch in enumerate(alphabet)}}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([EOS])
    return tok


def save_tiny_qwen3(out, n_layers: int = 12, hidden: int = 32, seed: int = 0) -> Path:
    """Write the folder (config.json, model.safetensors, tokenizer.json) and return it."""
    import torch
    from transformers import PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM

    tok = byte_tokenizer()
    config = Qwen3Config(vocab_size=tok.get_vocab_size(), hidden_size=hidden, intermediate_size=2 * hidden,
                         num_hidden_layers=n_layers, num_attention_heads=2, num_key_value_heads=1, head_dim=hidden // 2,
                         max_position_embeddings=4096, tie_word_embeddings=True, eos_token_id=0, pad_token_id=0,
                         bos_token_id=None)
    torch.manual_seed(seed)
    out = Path(out)
    Qwen3ForCausalLM(config).eval().save_pretrained(str(out))
    PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=EOS, pad_token=EOS).save_pretrained(str(out))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fibexp.cli.tiny_qwen", description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?", default="outputs/tiny-qwen3", help="the folder to write (default: %(default)s)")
    args = parser.parse_args(argv)
    print(save_tiny_qwen3(args.out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
