"""Each library line printed once in a cell's log: submitit's logger keeps its own console handler
and propagates to the root, to which Hydra's job logging gives one too."""
from __future__ import annotations

import io
import logging

from fibexp.training import logs


def test_a_library_line_reaches_the_log_once():
    out = io.StringIO()
    root, lib = logging.getLogger(), logging.getLogger("submitit")
    hydra_handler, own = logging.StreamHandler(out), logging.StreamHandler(out)
    saved = (root.handlers[:], root.level, lib.handlers[:], lib.propagate, lib.level)
    try:
        root.handlers, lib.handlers = [hydra_handler], [own]
        root.setLevel(logging.INFO)
        lib.propagate, lib.level = True, logging.INFO
        lib.info("Job completed successfully")
        assert out.getvalue().count("Job completed successfully") == 2  # what cells' logs showed
        logs.quiet()
        lib.info("Exiting after successful completion")
        assert out.getvalue().count("Exiting after successful completion") == 1
        assert lib.handlers == [] and root.handlers == [hydra_handler]
    finally:
        root.handlers, root.level = saved[0], saved[1]
        lib.handlers, lib.propagate, lib.level = saved[2], saved[3], saved[4]


def test_a_logger_alone_keeps_its_handler():
    """Without a root handler (a plain script), the library's own handler is the only one: kept."""
    root, lib = logging.getLogger(), logging.getLogger("lightning.pytorch")
    own = logging.StreamHandler(io.StringIO())
    saved = (root.handlers[:], lib.handlers[:])
    try:
        root.handlers, lib.handlers = [], [own]
        logs.once()
        assert lib.handlers == [own]
    finally:
        root.handlers, lib.handlers = saved
