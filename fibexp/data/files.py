"""Local input files checked before a run exists, without the libraries that open them (datasets,
tokenizers, torch): a data or tokenizer file that is missing, empty, binary where text is
expected, or not in its encoding is refused in one line naming the key and the file. The readers
keep their own checks (a file can change after this), and name the file too."""
from __future__ import annotations

import codecs
import glob
import json
import os
from pathlib import Path

from fibexp.data.spec import get
from fibexp.errors import refuse

# datasets 5.2's packaged builders (datasets.packaged_modules; tests/unit/test_preflight.py holds
# them equal): a source whose `path` is one of them reads `data_files`.
BUILDERS = ("arrow", "audiofolder", "conll", "csv", "eval", "fasta", "fastq", "genbank", "harbor", "hdf5", "iceberg",
            "imagefolder", "json", "lance", "meshfolder", "mmcif", "niftifolder", "pandas", "parquet", "pdb",
            "pdffolder", "text", "tsfile", "videofolder", "vortex", "webdataset", "xml")
TEXT_BUILDERS = ("json", "text", "csv")  # builders reading text, checked for their encoding
ARCHIVES = (".zip", ".tar", ".tgz", ".tar.gz", ".gz", ".bz2", ".xz", ".zst")  # fetched and extracted first
BLOCK = 4 << 20  # text files are decoded whole, this many bytes at a time (100 MB: about 0.2 s)


def is_url(entry: str) -> bool:
    return "://" in entry


def resolve_entry(entry: str, key: str) -> list[str]:
    """The local files a data_files entry names (a path or a glob); URLs as they are."""
    if is_url(entry):
        return [entry]
    path = os.path.abspath(os.path.expanduser(entry))
    if glob.has_magic(path):
        found = sorted(p for p in glob.glob(path, recursive=True) if os.path.isfile(p))
        if not found:
            refuse(f"{key}.data_files", f"no file matches {entry}", "existing files, globs or URLs")
        return found
    if os.path.isdir(path):
        refuse(f"{key}.data_files", f"{entry} is a folder", f"existing files, globs (e.g. {entry.rstrip('/')}/*.jsonl) "
               "or URLs")
    if not os.path.isfile(path):
        refuse(f"{key}.data_files", f"{entry} does not exist", "existing files, globs or URLs")
    return [path]


def _entries(files) -> list[str]:
    if files is None:
        return []
    if isinstance(files, str):
        return [files]
    if hasattr(files, "values"):
        return [e for v in files.values() for e in ([v] if isinstance(v, str) else list(v))]
    return [str(e) for e in files]


def _decodes(path: str, encoding: str) -> str | None:
    """None if the whole file decodes in `encoding`, else the byte where it first does not: a bad
    byte deep in a large file is found here, before any cache is written, not by the tokenizer."""
    decoder = codecs.getincrementaldecoder(encoding)()
    done = 0
    with open(path, "rb") as f:
        while True:
            block = f.read(BLOCK)
            pending = len(decoder.getstate()[0])  # the bytes of a character cut by the last block
            try:
                decoder.decode(block, final=not block)
            except UnicodeDecodeError as e:
                return f"byte {done - pending + e.start}"
            if not block:
                return None
            done += len(block)


def check_text_file(path: str, key: str, what: str, encoding: str = "utf-8") -> None:
    """A text file: not empty, not binary (a NUL byte), decoding in `encoding`."""
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            head = f.read(1 << 16)
    except OSError as e:
        refuse(key, f"{path} cannot be read ({e.strerror})", f"a readable {what}")
    if size == 0:
        refuse(key, f"{path} is empty", f"a {what} with content")
    try:
        utf8 = codecs.lookup(encoding).name in ("utf-8", "utf-8-sig")
    except LookupError:
        refuse(f"{key.rpartition('.')[0]}.config_kwargs.encoding", encoding, "an encoding Python knows (utf-8, "
               "latin-1, ...)")
    if utf8 and (nul := head.find(b"\x00")) >= 0:
        refuse(key, f"{path} is binary (a NUL byte at byte {nul})", f"a {what} in {encoding}")
    if utf8 and (where := _decodes(path, encoding)):
        refuse(key, f"{path} is not {encoding} (at {where})", f"a {what} in {encoding} (another encoding: "
                                                             "config_kwargs: {encoding: <name>})")


def check_json_file(path: str, key: str, what: str) -> None:
    """JSON or JSON Lines: its first record parses."""
    check_text_file(path, key, what)
    with open(path, encoding="utf-8-sig", errors="replace") as f:
        first = f.readline()
        while first and not first.strip():
            first = f.readline()
    start = first.lstrip()[:1]
    if start == "{":
        try:
            json.loads(first)
            return
        except ValueError as e:
            if first.rstrip().endswith("}"):  # one JSON record per line, and this one does not parse
                refuse(key, f"{path} line 1 is not JSON ({e})", f"a {what}: JSON Lines or a JSON document")
            return  # a JSON document spread over lines: datasets reads it whole
    if start != "[":
        refuse(key, f"{path} is not JSON (starts with {first.strip()[:20]!r})",
               f"a {what}: JSON Lines or a JSON document")


def check_sources(data) -> None:
    """The local data files of `data.source=hf` (each source's and its extra parts'): every entry
    names existing files, and text builders' files are non-empty text in their encoding."""
    if get(data, "source") != "hf":
        return
    for i, s in enumerate(get(data, "sources") or []):
        parts = [(f"data.sources[{i}]", s)] + [(f"data.sources[{i}].extra[{j}]", p)
                                               for j, p in enumerate(get(s, "extra") or [])]
        for key, part in parts:
            builder = str(get(part, "path"))
            if builder not in BUILDERS:
                continue
            kwargs = get(part, "config_kwargs") or {}
            encoding = str(kwargs.get("encoding") or "utf-8")
            for entry in _entries(get(part, "data_files")):
                for path in resolve_entry(entry, key):
                    if is_url(path) or path.endswith(ARCHIVES):
                        continue
                    what = f"{builder} data file"
                    if builder == "json":
                        check_json_file(path, f"{key}.data_files", what)
                    elif builder in TEXT_BUILDERS:
                        check_text_file(path, f"{key}.data_files", what, encoding)
                    elif os.path.getsize(path) == 0:
                        refuse(f"{key}.data_files", f"{path} is empty", f"a {what} with content")


def tokenizer_file(spec: str) -> Path | None:
    """The local tokenizer.json an `hf:` tokenizer names (a file, or a folder holding one); None
    for a Hub id."""
    local = Path(spec[3:]).expanduser()
    return local / "tokenizer.json" if local.is_dir() else local if local.exists() else None


def check_tokenizer(spec: str) -> None:
    """An `hf:` tokenizer given as a local file: a `tokenizers` JSON document."""
    path = tokenizer_file(spec) if spec.startswith("hf:") else None
    if path is None:
        return
    what = "tokenizers JSON file (tokenizer.json)"
    if not path.is_file():
        refuse("data.tokenizer", f"{spec} ({path} does not exist)", f"hf:<{what}, a folder holding one, or a Hub id>")
    check_text_file(str(path), "data.tokenizer", what)
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as e:
        refuse("data.tokenizer", f"{spec} ({path} is not JSON: {e})", f"a {what}")
    if not isinstance(doc, dict) or "model" not in doc:
        refuse("data.tokenizer", f"{spec} ({path} has no tokenizer model)", f"a {what}")
