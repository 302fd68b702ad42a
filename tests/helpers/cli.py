"""Running fibexp-train in-process as the console script does (sys.argv patched)."""
from __future__ import annotations

import sys

import pytest

from fibexp.cli import train as cli_train


def refused(argv: list[str], monkeypatch, capsys) -> str:
    """fibexp-train's one stderr line for argv (exit 2)."""
    monkeypatch.setattr(sys, "argv", ["fibexp-train", *argv])
    with pytest.raises(SystemExit) as exit_:
        cli_train.main()
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err
