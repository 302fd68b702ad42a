"""Reading fibexp checkpoints safely: a checkpoint is a pickle, and unpickling can run any code it
names, so every checkpoint fibexp opens (its own resume check, Lightning's resume, notebooks and
export) goes through `read`: the file's pickle is scanned for the globals it would call before
anything is unpickled, and then it is loaded with `torch.load(weights_only=True)`.

The allowlist is torch's own weights-only set (tensors, storages, dtypes, OrderedDict and plain
Python values) and nothing more, because that is all a fibexp checkpoint holds (Lightning 2.6 on
LitLM, checked on real checkpoints): the LM's state_dict; AdamW's state (tensors, floats, tuples);
LambdaLR's state, whose `lr_lambdas` entry is None for a plain function like ours (only callable
objects' attributes would be stored); the loops' progress counters; ModelCheckpoint's state (paths
as str, a tensor score); LitLM's `fibexp` entry (an int or None); no hyper_parameters (LitLM does
not save any) and, under 16-mixed, a GradScaler's floats. Anything else is refused by name.

A checkpoint of another model is refused too, with what differs: the model/attention config
written into every checkpoint by `SafeCheckpointIO` (under `fibexp.model`) and the parameters'
names and shapes."""
from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import torch
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO

from fibexp.errors import Refusal


IDENTITY_KEY = "fibexp.model"  # the model's config, as SafeCheckpointIO writes it into a checkpoint
MODEL_PREFIX = "model."  # LitLM holds the LM as `model`
SHOWN = 4  # differences named in a refusal; the rest are counted
WRITTEN = "a .ckpt file written by fibexp-train"  # what a checkpoint refused as unreadable or unsafe should be
PREVIOUS = "previous.ckpt"  # beside last.ckpt: the checkpoint last.ckpt replaced, kept as the fallback
log = logging.getLogger("fibexp.checkpoints")


class CheckpointError(Refusal):
    """The checkpoint is unreadable, needs code to unpickle, or belongs to another model."""

    unreadable: str | None = None  # why the file does not read (a damaged file, not a refused one)


def read(path: str | Path, key: str = "ckpt_path", map_location: Any = "cpu") -> dict:
    """The checkpoint at `path` as a dict, loaded weights-only. `key` names the input in the
    one-line refusal (`ckpt_path`, or `run` for a notebook's or export's run)."""
    path = Path(path)
    try:
        unsafe = torch.serialization.get_unsafe_globals_in_checkpoint(path)  # static: runs nothing
    except Exception as e:  # not a zip written by torch.save: nothing of ours, never unpickled
        raise _unreadable(key, path, e) from None
    if unsafe:
        raise CheckpointError(key, f"{path} needs {', '.join(sorted(unsafe))}, which a fibexp checkpoint "
                              "never contains", f"{WRITTEN} (refusing to unpickle it)")
    try:
        state = torch.load(path, map_location=map_location, weights_only=True)
        if not isinstance(state, dict) or not {"state_dict", "global_step"} <= set(state):
            raise KeyError("state_dict/global_step missing")
    except Exception as e:  # torch raises many kinds for a damaged file
        raise _unreadable(key, path, e) from None
    return state


def _fsync_dir(d: Path) -> None:
    fd = os.open(d, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def resumable(last: Path, move: bool = True) -> tuple[Path | None, str | None]:
    """(checkpoint to resume, warning) of a run dir's `checkpoints/last.ckpt`: last.ckpt if it
    reads; else `previous.ckpt` beside it if that reads (the unreadable last.ckpt is moved aside to
    `last.ckpt.unreadable`); else None (start over; the unreadable files moved aside likewise).
    `move=False` (the other ranks of a job whose rank 0 moves them) decides the same, moving nothing.
    A checkpoint that needs code to unpickle is never "unreadable": it is refused (CheckpointError)."""
    previous = last.with_name(PREVIOUS)
    bad = []
    for path in (last, previous):
        if not path.is_file():
            continue
        try:
            read(path)
            break
        except CheckpointError as e:
            if e.unreadable is None:
                raise
            bad.append((path, e.unreadable))
    else:
        path = None
    if not bad:
        return path, None
    for p, _ in bad if move else ():
        if p.exists():
            os.replace(p, p.with_name(p.name + ".unreadable"))
    what = "; ".join(f"{p.name} is not a readable checkpoint ({why})" for p, why in bad)
    if path is None:
        return None, f"{last.parent}: {what}; none is readable: starting over (moved aside as *.unreadable)"
    return path, f"{last.parent}: {what}; resuming from {path.name} (moved aside as {bad[0][0].name}.unreadable)"


def _unreadable(key: str, path: Path, e: Exception) -> CheckpointError:
    detail = str(e).splitlines()[0][:120] if str(e) else ""
    refusal = CheckpointError(key, f"{path} is not a readable checkpoint ({type(e).__name__}: {detail})",
                              f"{WRITTEN}; move it away to start over")
    refusal.unreadable = f"{type(e).__name__}: {detail}"
    return refusal


def model_identity(ident: dict) -> dict:
    """What makes two models the same for a checkpoint, out of a run's identity
    (`fibexp.config.identity.identity`): the model and attention config (the attention impl left
    out there: every impl computes the same offsets from the same weights)."""
    return {"model": ident["model"], "attention": ident["attention"]}


def _differences(theirs: dict, ours: dict, prefix: str = "") -> list[str]:
    """`<dotted key> <theirs> vs <ours>` for each config value that differs, in key order."""
    differ = []
    for k in sorted(theirs.keys() | ours.keys()):
        a, b = theirs.get(k, "(unset)"), ours.get(k, "(unset)")
        if isinstance(a, dict) and isinstance(b, dict):
            differ += _differences(a, b, f"{prefix}{k}.")
        elif a != b:
            differ.append(f"{prefix}{k} {a} vs {b}")
    return differ


def check_model(state: dict, path: Path, shapes: dict[str, tuple], ident: dict | None, key: str = "ckpt_path") -> None:
    """Refuse a checkpoint whose stored model config or parameters differ from this run's model
    (`shapes`: the LM's state_dict names and shapes; `ident`: `model_identity`). A checkpoint
    written before the config was stored is compared by its parameters alone."""
    differ = []
    stored = state.get(IDENTITY_KEY)
    if stored is not None and ident is not None:
        differ += _differences(stored, ident)
    theirs = {k[len(MODEL_PREFIX):]: tuple(v.shape) for k, v in state["state_dict"].items()
              if k.startswith(MODEL_PREFIX) and isinstance(v, torch.Tensor)}
    for k in [*shapes, *(k for k in theirs if k not in shapes)]:  # the model's order: embeddings first
        if k not in shapes:
            differ.append(f"{k} {list(theirs[k])} vs (none)")
        elif k not in theirs:
            differ.append(f"{k} (none) vs {list(shapes[k])}")
        elif theirs[k] != tuple(shapes[k]):
            differ.append(f"{k} {list(theirs[k])} vs {list(shapes[k])}")
    if differ:
        more = f" (+{len(differ) - SHOWN} more)" if len(differ) > SHOWN else ""
        raise CheckpointError(key, f"{path} is from another model (checkpoint vs this run): "
                              f"{', '.join(differ[:SHOWN])}{more}", "a checkpoint of this model")


def shapes_of(model: torch.nn.Module) -> dict[str, tuple]:
    """The names and shapes of `model`'s parameters and buffers: what `check_model` compares."""
    return {k: tuple(v.shape) for k, v in model.state_dict().items()}


def checkpoint_to_resume(ckpt_path: str | None, run_dir: Path, shapes: dict[str, tuple], model_ident: dict,
                         lead: bool = True) -> Path | None:
    """`ckpt_path` (the config's) None: the run dir's last.ckpt if any; 'last': it must exist; else
    the given file. The file is read weights-only (one that needs code to unpickle is refused by
    name, and its code never runs) and compared with this run's model (`shapes`, `shapes_of`) and `model_ident` (one of
    another model is refused with what differs). The run dir's own last.ckpt, when unreadable
    (truncated, cut mid-copy), falls back to previous.ckpt with one warning, or starts over when
    neither reads (`resumable`); a file named by ckpt_path is refused when unreadable.
    `lead`: rank 0, which moves unreadable files aside (the other ranks decide the same without
    touching them)."""
    last = run_dir / "checkpoints" / "last.ckpt"
    if lead and last.parent.is_dir():
        for cut in last.parent.glob(".*.tmp"):  # a write that was cut (the process killed): never a checkpoint
            cut.unlink(missing_ok=True)
    if ckpt_path in (None, "last"):
        path, warning = resumable(last, move=lead)
        if warning and lead:
            log.warning(warning)
        if path is None:
            if ckpt_path == "last":
                raise Refusal("ckpt_path", f"last but no readable checkpoint at {last}",
                              "null, last, or an existing .ckpt")
            return None
    else:
        path = Path(ckpt_path)
        if not path.is_file():
            raise Refusal("ckpt_path", f"{ckpt_path} but no checkpoint at {path}", "null, last, or an existing .ckpt")
    check_model(read(path), path, shapes, model_ident)
    return path


class SafeCheckpointIO(TorchCheckpointIO):
    """Lightning's checkpoint IO for fibexp runs (Trainer `plugins`): saves with the model's
    config beside the weights, so a checkpoint says which model it is; loads through `read`, so
    Lightning's own resume (`trainer.fit(ckpt_path=...)`) is weights-only as well."""

    def __init__(self, ident: dict | None = None):
        self.ident = ident

    def save_checkpoint(self, checkpoint: dict[str, Any], path, storage_options: Any | None = None) -> None:
        """Atomically: written to a temporary file beside `path`, fsynced, renamed over it; the
        file it replaces stays as `previous.ckpt` (the fallback when `path` is ever unreadable).
        A process killed mid-write leaves `path` and `previous.ckpt` as they were."""
        if self.ident is not None:
            checkpoint = {**checkpoint, IDENTITY_KEY: self.ident}
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        try:
            with open(tmp, "wb") as f:
                self._write(checkpoint, f)
                f.flush()
                os.fsync(f.fileno())
            if path.exists():  # keep the one being replaced: a hard link, so `path` never goes missing
                keep = path.with_name(f".{PREVIOUS}.{os.getpid()}.tmp")
                keep.unlink(missing_ok=True)
                os.link(path, keep)
                os.replace(keep, path.with_name(PREVIOUS))
            os.replace(tmp, path)
            _fsync_dir(path.parent)
        finally:
            tmp.unlink(missing_ok=True)

    @staticmethod
    def _write(checkpoint: dict[str, Any], f) -> None:
        torch.save(checkpoint, f)

    def load_checkpoint(self, path, map_location: Any = lambda storage, loc: storage,
                        weights_only: bool | None = None) -> dict[str, Any]:
        """Always weights-only, whatever `weights_only` the caller passes (Lightning passes None)."""
        if not Path(path).is_file():
            raise FileNotFoundError(f"Checkpoint file not found: {path}")
        return read(path, map_location=map_location)
