"""A trained run as a `transformers` `save_pretrained` folder: safetensors weights, config.json
with `auto_map` (the modelling code, fibexp/deploy/modeling_fibexp.py, copied beside it), and the
run's tokenizer as a `PreTrainedTokenizerFast` (tokenizer.json + tokenizer_config.json)."""
from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from fibexp.deploy.restore import load_run, locate, run_tokenizer
from fibexp.errors import Refusal


def requirements():
    try:
        import safetensors  # noqa: F401
        import transformers
    except ImportError as e:
        raise ValueError(f"--format hf needs the `hf` extra ({e.name} is missing); "
                         "install it with: pip install -e '.[hf]'") from None
    return transformers


def model_node(cfg: DictConfig) -> dict:
    node = OmegaConf.to_container(cfg.model, resolve=True)
    attention = dict(node.get("attention") or {})
    attention.pop("_target_", None)
    node["attention"] = attention
    node.pop("_target_", None)
    return node


def tokenizer_json(cfg: DictConfig, tokenizer) -> str:
    """The `tokenizers` JSON of a run's BPE tokenizer (the cached file it was loaded from)."""
    if tokenizer.kind != "bpe":
        raise Refusal("data.tokenizer", cfg.data.tokenizer, "bpe, for a transformers export (a `tokenizers` BPE; "
                      "the char vocabulary and hf: tokenizers are not exported yet)")
    return (Path(cfg.paths.cache_dir) / "tokenizer" / f"{tokenizer.name}.json").read_text(encoding="utf-8")


def save_hf(cfg: DictConfig, model, tokenizer, out: Path) -> Path:
    """Write the folder; `tokenizer` is the run's fibexp Tokenizer (BPE)."""
    transformers = requirements()
    raw = tokenizer_json(cfg, tokenizer)  # refuses a tokenizer it cannot export before anything is written
    save_model(model_node(cfg), model, out, eos_id=tokenizer.eos_id, bos_id=tokenizer.bos_id)
    hf_tokenizer(tokenizer, raw, transformers).save_pretrained(str(out))
    return out


def save_model(node: dict, model, out: Path, eos_id: int | None = 0, bos_id: int | None = None) -> Path:
    """The weights, config.json (with `auto_map`) and modeling_fibexp.py; `node` is the run's
    model config (LM's keyword arguments, attention included)."""
    requirements()
    from fibexp.deploy.modeling_fibexp import FibexpConfig, FibexpForCausalLM

    FibexpConfig.register_for_auto_class()
    FibexpForCausalLM.register_for_auto_class("AutoModelForCausalLM")
    hf_cfg = FibexpConfig(fibexp_model=node, eos_token_id=eos_id, bos_token_id=bos_id, pad_token_id=eos_id)
    hf_model = FibexpForCausalLM(hf_cfg)
    hf_model.lm.load_state_dict(model.state_dict())
    out.mkdir(parents=True, exist_ok=True)
    hf_model.eval().save_pretrained(str(out))
    return out


def hf_tokenizer(tokenizer, raw: str, transformers):
    """The run's tokenizer as a PreTrainedTokenizerFast (the same `tokenizers` JSON)."""
    from tokenizers import Tokenizer as HFTokenizer

    tok = HFTokenizer.from_str(raw)
    eos = tok.id_to_token(tokenizer.eos_id)
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=eos, pad_token=eos,
                                                bos_token=None if tokenizer.bos_id is None else tok.id_to_token(tokenizer.bos_id))
    return fast


def export_run(run, out: Path | None = None, tracking_uri: str | None = None) -> tuple[DictConfig, object, Path, float]:
    """`fibexp-export RUN --format hf`: (the run's config, its LM, the folder written, max |logit
    deviation| of the folder loaded back); `out` defaults to <run dir>/hf. ValueError (one line)
    for a run without a checkpoint or a tokenizer that does not export, before anything is written."""
    requirements()
    cfg, model = load_run(run, tracking_uri)
    out = out or locate(run, tracking_uri)[2].parent.parent / "hf"
    save_hf(cfg, model, run_tokenizer(cfg), out)
    return cfg, model, out, verify(model, out, int(cfg.model.seq_len), int(cfg.model.vocab_size))


def verify(model, out: Path, seq_len: int, vocab_size: int, seed: int = 0) -> float:
    """Load the folder back as transformers would (offline, trusted code) and compare logits."""
    import os

    import torch
    from transformers import AutoModelForCausalLM

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    loaded = AutoModelForCausalLM.from_pretrained(str(out), trust_remote_code=True).eval()
    ids = torch.randint(0, vocab_size, (2, seq_len), generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        return float((loaded(ids).logits - model.eval()(ids)).abs().max())
