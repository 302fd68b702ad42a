"""The `data` group's typed parts and their offline checks (names, weights, rule syntax), so the
config layer can run them for every sweep cell without reading a file: `data.source=hf` takes a
list of Hugging Face `datasets` sources (SourceConf), each one a "domain" named by its `name`.
Opening files and datasets happens in `fibexp.data.sources.open_corpus`."""
from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Optional

from omegaconf import MISSING, DictConfig

from fibexp.errors import refuse

DOMAINS = ("drama", "prose", "encyclopedic", "docs", "code")  # the embedded corpus's domains
MAX_VOCAB = 65536  # token ids are stored as uint16 up to here (fibexp's own tokenizers stay below it)
WIDE_VOCAB = 2**32  # embedded-corpus caches of a larger pretrained vocabulary (Qwen3's 151,669) store uint32
BPE_MIN_VOCAB = 257  # 256 byte symbols + the separator
SOURCES = ("embedded", "hf")
TOKENIZERS = "bpe, char, hf:<tokenizer.json, folder or Hub id[@revision]>"
HELDOUT_RULES = "every:<n >= 2>, last_shard, tail:<0 < fraction < 1>"


# The characters of each embedded domain's training text (written by build_corpus, checked
# against the corpus by tests/unit/test_corpus.py): the char tokenizer's vocabulary, known
# before anything is read.
CHARS_FILE = Path(__file__).resolve().parent / "embedded" / "CHARS.json"


@lru_cache(maxsize=1)
def _embedded_chars() -> dict[str, str]:
    return json.loads(CHARS_FILE.read_text(encoding="utf-8"))


def char_vocab(domains) -> int:
    """Ids of the char tokenizer on these embedded domains: the separator, the unknown character
    and each distinct character of their training text."""
    chars = _embedded_chars()
    return 2 + len(set().union(*(chars[d] for d in domains if d in chars)))


def token_dtype(n_vocab: int) -> str:
    """The numpy dtype of a token file: uint16 while the ids fit (every existing cache), else uint32."""
    return "uint16" if n_vocab <= MAX_VOCAB else "uint32"


def file_dtype(path) -> str:
    """A token file's dtype, from its suffix (.u16 or .u32), so readers need no sidecar."""
    return "uint32" if str(path).endswith(".u32") else "uint16"


_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")  # it becomes part of metric and param names


@dataclass
class PartConf:
    """One more dataset whose documents join a source's training text (e.g. MATH's subject
    configs beside OpenMathInstruct-2); arguments as for `datasets.load_dataset`."""

    path: str = MISSING
    config: Optional[str] = None
    data_files: Any = None  # str, list of str, or {split: str | list}; globs and URLs allowed
    split: str = "train"
    revision: Optional[str] = None
    text_field: Any = "text"  # a column, or a list of columns joined by a blank line
    config_kwargs: dict[str, Any] = field(default_factory=dict)  # builder options, e.g. {encoding: latin-1}


@dataclass
class SourceConf:
    """A source of `data.source=hf`: one dataset (`path` a Hub id, a local folder, or a builder
    such as json/parquet/text/csv with `data_files`), its share of training tokens, and how its
    held-out set is taken. `name` names the held-out set in the metrics (val/ppl/<name>)."""

    name: str = MISSING
    path: str = MISSING
    config: Optional[str] = None
    data_files: Any = None
    split: str = "train"
    revision: Optional[str] = None  # pin a commit: the fingerprint cannot see a moving branch
    text_field: Any = "text"
    config_kwargs: dict[str, Any] = field(default_factory=dict)
    weight: float = 1.0  # share of training tokens (normalised over data.sources)
    heldout_split: Optional[str] = None  # held-out text from this split of the dataset, else `heldout`
    heldout: str = "every:10"  # every:<n>: document i held out iff i % n == n - 1 (by document);
    # last_shard: the split's last file is held out, training reads the others;
    # tail:<f>: the last fraction f of the text (characters) as one block
    heldout_tokens: int = 0  # held-out set stops after this many tokens (whole documents); 0: all
    max_chars: int = 0  # read only the first N characters of the dataset; 0: all
    extra: list[PartConf] = field(default_factory=list)  # training-only datasets, streamed first


def get(node, key, default=None):
    """A key of a config node, whether a dataclass (validate) or a DictConfig/dict (open_corpus)."""
    return node.get(key, default) if isinstance(node, (dict, DictConfig)) else getattr(node, key, default)


def parse_heldout(source, key: str) -> tuple:
    """("split", name) | ("every", n) | ("shard",) | ("tail", fraction); a Refusal naming `key`."""
    split, rule = get(source, "heldout_split"), str(get(source, "heldout", "every:10"))
    if split:
        if rule != "every:10":
            refuse(f"{key}.heldout", f"{rule!r} with heldout_split={split!r}", "one of the two")
        return ("split", str(split))
    kind, _, arg = rule.partition(":")
    try:
        if kind == "every" and int(arg) >= 2:
            return ("every", int(arg))
        if kind == "tail" and 0 < float(arg) < 1:
            return ("tail", float(arg))
    except ValueError:
        pass
    if rule == "last_shard":
        return ("shard",)
    refuse(f"{key}.heldout", repr(rule), f"{HELDOUT_RULES}, or set heldout_split")


def _check_fields(part, key: str) -> None:
    tf = get(part, "text_field", "text")
    fields = [tf] if isinstance(tf, str) else list(tf or [])
    if not fields or not all(isinstance(f, str) and f for f in fields):
        refuse(f"{key}.text_field", repr(tf), "a column name or a list of column names")
    files = get(part, "data_files")
    items = list(files.values()) if hasattr(files, "values") else [files]
    for item in items:
        if item is not None and not (isinstance(item, str) or all(isinstance(f, str) for f in item)):
            refuse(f"{key}.data_files", repr(files), "a path, glob or URL, a list of them, or {split: paths}")


def check_data(data) -> None:
    """Offline checks of a `data` config node (DataConf or DictConfig): tokenizer spelling and,
    for `hf`, the sources' names, weights and held-out rules. Refusals."""
    tok = str(data.tokenizer)
    if tok not in ("bpe", "char") and not (tok.startswith("hf:") and len(tok) > 3):
        refuse("data.tokenizer", f"unknown {tok!r}", TOKENIZERS)
    if data.source not in SOURCES:
        refuse("data.source", f"unknown {data.source!r}", ", ".join(SOURCES))
    if get(data, "train_tokens", 0) < 0:
        refuse("data.train_tokens", get(data, "train_tokens"), ">= 0 (0: all of every source)")
    if data.source != "hf":
        return
    sources = list(get(data, "sources") or [])
    if not sources:
        refuse("data.sources", "[]", "a list of {name, path, data_files, weight, ...} (see conf/data/hf.yaml)")
    if get(data, "mixture"):
        refuse("data.mixture", dict(data.mixture), "null with data.source=hf (weights are data.sources[i].weight)")
    names = []
    for i, s in enumerate(sources):
        key = f"data.sources[{i}]"
        name = str(get(s, "name"))
        if not _NAME.match(name) or name in names:
            refuse(f"{key}.name", repr(name), "unique names of letters, digits, _ . -")
        names.append(name)
        w = float(get(s, "weight", 1.0))
        if not 0 <= w < math.inf:
            refuse(f"{key}.weight", w, ">= 0 and finite, with a positive sum over data.sources")
        for k in ("heldout_tokens", "max_chars"):
            if int(get(s, k, 0)) < 0:
                refuse(f"{key}.{k}", get(s, k), ">= 0 (0: no limit)")
        parse_heldout(s, key)
        _check_fields(s, key)
        for j, part in enumerate(get(s, "extra") or []):
            _check_fields(part, f"{key}.extra[{j}]")
    if sum(float(get(s, "weight", 1.0)) for s in sources) <= 0:
        refuse("data.sources[*].weight", "all zero", ">= 0, with a positive sum over data.sources")
