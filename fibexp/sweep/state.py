"""A sweep's record, `sweep.json` in its home: what `fibexp-sweep` needs to follow, wait for,
cancel or close it from any process (its store, parent run, cells, their jobs and the code they
run), written by the submitting process. Torch- and MLflow-free: `fibexp-sweep` answers an unknown
sweep before importing either."""
from __future__ import annotations

import json
import os
from pathlib import Path

from fibexp.errors import Refusal

FILE = "sweep.json"


def write(home: Path, record: dict) -> None:
    """Atomically: a reader never sees half a record."""
    home.mkdir(parents=True, exist_ok=True)
    tmp = home / f".{FILE}.{os.getpid()}"
    tmp.write_text(json.dumps(record, indent=1))
    os.replace(tmp, home / FILE)


def read(home: Path) -> dict:
    return json.loads((Path(home) / FILE).read_text())


def homes(output_dir: Path) -> list[Path]:
    """Every sweep home under `output_dir` with a record, newest first."""
    found = [p.parent for p in (Path(output_dir) / "sweeps").glob(f"*/{FILE}")]
    return sorted(found, key=lambda p: (p / FILE).stat().st_mtime, reverse=True)


def find(sweep: str, output_dir: Path) -> Path:
    """A sweep's home from its id or its folder; a refusal in one line when there is none."""
    given = Path(sweep)
    if (given / FILE).is_file():
        return given
    matches = [h for h in homes(output_dir) if read(h).get("id") == sweep or h.name == sweep]
    if not matches:
        known = ", ".join(read(h)["id"] for h in homes(output_dir)[:5]) or "none yet"
        raise Refusal("sweep", sweep, f"a sweep id or home folder under {Path(output_dir) / 'sweeps'} "
                      f"(fibexp-sweep list; newest: {known})")
    return matches[0]
