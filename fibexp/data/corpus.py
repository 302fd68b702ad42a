"""Reader for the frozen five-domain corpus shipped in ``fibexp/data/embedded``.

Why: The papers' measurement discipline (docs/papers.md) only lets runs be compared on the same frozen corpus, so the
corpus is checked against its sha256 manifest and identified by a fingerprint of that manifest.
Reading text is kept apart from tokenisation so that Hugging Face ``datasets`` sources can later
provide the same ``documents(domain, split)`` interface. Stdlib only; rebuilt by ``build_corpus``.
"""

from __future__ import annotations

import hashlib
import json
import lzma
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from fibexp.data.spec import DOMAINS
from fibexp.errors import Refusal

SPLITS = ("train", "heldout")
INTACT = "the embedded corpus as shipped (python -m fibexp.cli.build_corpus rebuilds it)"


class CorpusError(Refusal):
    """A missing, corrupted or mis-addressed corpus file: refused by the key or file that names it."""


def _check(value: str, allowed: tuple[str, ...], what: str) -> None:
    if value not in allowed:
        raise CorpusError(what, f"unknown {value!r}", ", ".join(allowed))


@dataclass(frozen=True)
class EmbeddedCorpus:
    """The shipped corpus restricted to ``domains``; cheap to build, files are read lazily."""

    root: Path = field(default_factory=lambda: Path(__file__).resolve().parent / "embedded")
    domains: tuple[str, ...] = DOMAINS

    def __post_init__(self) -> None:
        object.__setattr__(self, "root", Path(self.root))
        object.__setattr__(self, "domains", tuple(self.domains))
        for d in self.domains:
            _check(d, DOMAINS, "domain")

    def _file(self, domain: str, split: str) -> Path:
        return self.root / f"{domain}.{split}.jsonl.xz"

    @cached_property
    def _manifest(self) -> dict[str, str]:
        """File name -> sha256 for the selected domains' files, in manifest order."""
        path = self.root / "MANIFEST.sha256"
        try:
            lines = path.read_text("utf-8").splitlines()
        except OSError as e:
            raise CorpusError(str(path), f"cannot read manifest ({e.strerror})", INTACT) from None
        wanted = {self._file(d, s).name for d in self.domains for s in SPLITS}
        entries = {}
        for n, line in enumerate(lines, 1):
            digest, sep, name = line.partition("  ")
            if not sep or len(digest) != 64:
                raise CorpusError(f"{path}:{n}", f"malformed manifest line {line!r}", INTACT)
            if name in wanted:
                entries[name] = digest
        if missing := sorted(wanted - entries.keys()):
            raise CorpusError(str(path), f"no entry for {', '.join(missing)}", INTACT)
        return entries

    def verify(self) -> None:
        """Raise CorpusError unless every selected file exists and matches its manifest digest."""
        for name, digest in self._manifest.items():
            path = self.root / name
            try:
                actual = hashlib.sha256(path.read_bytes()).hexdigest()
            except OSError as e:
                raise CorpusError(str(path), f"cannot read ({e.strerror})", INTACT) from None
            if actual != digest:
                raise CorpusError(str(path), f"sha256 {actual[:12]}... != manifest {digest[:12]}...", INTACT)

    @cached_property
    def fingerprint(self) -> str:
        """12 hex chars identifying the frozen corpus (selected domains only): runs with different
        fingerprints must never be tabulated together."""
        text = "".join(f"{digest}  {name}\n" for name, digest in self._manifest.items())
        return hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]

    def documents(self, domain: str, split: str) -> Iterator[str]:
        """Document texts of one domain and split, in the frozen (build) order."""
        _check(domain, self.domains, "domain")
        _check(split, SPLITS, "split")
        path = self._file(domain, split)
        n = 0
        try:
            with lzma.open(path, "rt", encoding="utf-8") as f:
                for n, line in enumerate(f, 1):
                    yield json.loads(line)["text"]
        except (OSError, EOFError, lzma.LZMAError, UnicodeDecodeError) as e:
            raise CorpusError(str(path), f"unreadable near line {n + 1} ({e})", INTACT) from None
        except (ValueError, KeyError, TypeError) as e:
            raise CorpusError(f"{path}:{n}", f"bad record ({e!r})", INTACT) from None
