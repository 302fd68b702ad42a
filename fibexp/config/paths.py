"""Where a run writes and what it resumes from, checked from the config alone before anything is
created: the outputs and cache folders (writable, on a real filesystem), the run dir and a sweep
cell's dir inside paths.output_dir, every other path Hydra writes (`hydra.output_subdir`, the job
log, the launcher's folder) inside them too, and the checkpoint file named by ckpt_path. Nothing is
created or opened for writing to find out."""
from __future__ import annotations

import os
import zipfile
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from fibexp.errors import first_line, refuse

# Kernel and virtual filesystems: a folder there cannot hold a run (writes fail or vanish).
PSEUDO_FS = frozenset({"proc", "sysfs", "devtmpfs", "devpts", "cgroup", "cgroup2", "debugfs", "tracefs",
                       "securityfs", "pstore", "bpf", "configfs", "fusectl", "mqueue", "hugetlbfs", "autofs",
                       "binfmt_misc", "efivarfs", "rpc_pipefs", "nsfs"})


def _mounts() -> list[tuple[str, str]]:
    """(mount point, filesystem type) of this machine's mounts, longest mount point first."""
    try:
        lines = Path("/proc/self/mounts").read_text(encoding="utf-8").splitlines()
    except OSError:
        return []
    out = []
    for line in lines:
        parts = line.split()
        if len(parts) >= 3:
            out.append((parts[1].encode().decode("unicode_escape"), parts[2]))
    return sorted(out, key=lambda m: -len(m[0]))


def filesystem_of(path: Path) -> str | None:
    """The filesystem type holding `path` (an existing path), None where the mounts cannot be read."""
    text = str(path)
    for point, fstype in _mounts():
        if text == point or text.startswith(point.rstrip("/") + "/"):
            return fstype
    return None


def writable(path: Path, key: str, what: str) -> None:
    """`path` is a folder this process can write, or can be created: its nearest existing ancestor
    is a writable folder on a real filesystem (nothing is created to find out)."""
    path = path.resolve()
    probe = path
    while not probe.exists():
        probe = probe.parent
    if not probe.is_dir():
        refuse(key, f"{path} ({probe} is a file)", f"a folder fibexp can create and write ({what})")
    fstype = filesystem_of(probe)
    if fstype in PSEUDO_FS:
        refuse(key, f"{path} ({probe} is on the kernel's {fstype} filesystem)",
               f"a folder on a disk filesystem this user can write ({what})")
    if not os.access(probe, os.W_OK | os.X_OK):
        refuse(key, f"{path} ({probe} is not writable)", f"a folder this user can write ({what})")


def _inside(path: Path, folder: Path) -> bool:
    return path.resolve().is_relative_to(folder.resolve())


def run_dir_of(config: DictConfig) -> Path:
    """The run dir Hydra is about to create for this config (hydra.run.dir, resolved as run_job does),
    refused outside paths.output_dir: a run's folder, checkpoints and lock live under the outputs tree,
    where reruns and sweeps look for them (logger.run_name's charset keeps the default inside)."""
    run_dir = Path(str(config.hydra.run.dir))
    outputs = Path(str(config.paths.output_dir)).resolve()
    if not _inside(run_dir, outputs):
        refuse("hydra.run.dir", run_dir, f"a folder inside paths.output_dir ({outputs})")
    return run_dir


def cell_dir_of(config: DictConfig, sweep_dir: Path | None = None) -> Path:
    """The run dir of one cell of a multirun, hydra.sweep.dir / hydra.sweep.subdir (`sweep_dir`:
    the fibexp sweeper's own folder in place of hydra.sweep.dir), refused outside paths.output_dir
    as run_dir_of refuses hydra.run.dir: a sweep folder elsewhere would carry its cells with it."""
    outputs = Path(str(config.paths.output_dir)).resolve()
    allowed = f"a folder inside paths.output_dir ({outputs})"
    given = Path(str(config.hydra.sweep.dir))
    if not _inside(given, outputs):
        refuse("hydra.sweep.dir", given, allowed)
    cell_dir = (sweep_dir or given) / str(config.hydra.sweep.subdir)
    if not _inside(cell_dir, outputs):
        refuse("hydra.sweep.subdir", config.hydra.sweep.subdir,
               f"a path that keeps each cell's run dir in {allowed}; the default subdir needs hydra.sweep.dir "
               f"two levels below it, e.g. {outputs}/sweeps/<name>")
    hydra_paths(config, cell_dir)
    return cell_dir


JOB_LOG = "${hydra.runtime.output_dir}/${hydra.job.name}.log"  # Hydra's job log: in the run dir, named after the job
SUBMITIT = "${hydra.sweep.dir}/.submitit/%j"  # submitit's folder: in the sweep's (checked by cell_dir_of)


def hydra_paths(config: DictConfig, run_dir: Path) -> None:
    """Every other file Hydra writes for a job stays in its run dir (`hydra.output_subdir`: the
    saved config; the job log, `hydra.job.name`.log, and any log handler's file) or, for the
    launcher's own files (`hydra.launcher.submitit_folder`), inside paths.output_dir."""
    hydra = config.hydra
    subdir = hydra.get("output_subdir")
    if subdir is not None and (Path(str(subdir)).is_absolute() or not _inside(run_dir / str(subdir), run_dir)):
        refuse("hydra.output_subdir", subdir, f"null, or a folder inside the run dir ({run_dir}), e.g. .hydra")
    name = str(hydra.job.name)
    if not name or "/" in name or name.startswith(".") or "\x00" in name:
        refuse("hydra.job.name", name, "a plain file name (letters, digits, _ - ; it names the run's log file)")
    outputs = Path(str(config.paths.output_dir))
    for node in ("job_logging", "hydra_logging"):
        logging = hydra._get_node(node) if node in hydra.keys() else None
        handlers = logging._get_node("handlers") if isinstance(logging, DictConfig) and "handlers" in logging.keys() \
            else None
        for h in handlers.keys() if isinstance(handlers, DictConfig) else ():
            handler = handlers._get_node(h)
            has = isinstance(handler, DictConfig) and "filename" in handler.keys()
            raw = handler._get_node("filename")._value() if has else None
            if raw is None or raw == JOB_LOG:
                continue
            # as run_job resolves it: hydra.runtime.output_dir is the run dir once the job starts
            probe = OmegaConf.create({"hydra": {"runtime": {"output_dir": str(run_dir.resolve())},
                                                "job": {"name": name}}, "file": raw})
            file = OmegaConf.select(probe, "file", throw_on_resolution_failure=False)
            if file is not None and not _inside(Path(str(file)), outputs):
                refuse(f"hydra.{node}.handlers.{h}.filename", file, f"a file inside paths.output_dir ({outputs.resolve()})")
    launcher = hydra._get_node("launcher") if "launcher" in hydra.keys() else None
    has = isinstance(launcher, DictConfig) and "submitit_folder" in launcher.keys()
    raw = launcher._get_node("submitit_folder")._value() if has else None
    folder = None if raw in (None, SUBMITIT) else launcher.submitit_folder  # the default is in hydra.sweep.dir
    if folder is not None and not _inside(Path(str(folder)), outputs):  # %j and the like are folder names here
        refuse("hydra.launcher.submitit_folder", folder, f"a folder inside paths.output_dir ({outputs.resolve()})")


def check_checkpoint_file(cfg: DictConfig, run_dir: Path | None) -> None:
    """ckpt_path, as far as a file can tell: a given file exists and is a torch.save archive;
    `last` needs a checkpoint in the run dir (the run dir's own are read, not refused: an unreadable
    last.ckpt falls back to previous.ckpt)."""
    ckpt = cfg.ckpt_path
    if ckpt == "last":
        if run_dir is not None:  # a sweep's cells: their jobs check
            last = run_dir / "checkpoints" / "last.ckpt"
            if not last.is_file() and not last.with_name("previous.ckpt").is_file():
                refuse("ckpt_path", f"last but no readable checkpoint at {last}", "null, last, or an existing .ckpt")
        return
    if ckpt is None:
        return
    path = Path(ckpt)
    if not path.is_file():
        refuse("ckpt_path", f"{ckpt} but no checkpoint at {path}", "null, last, or an existing .ckpt")
    why = "empty" if path.stat().st_size == 0 else None
    if why is None:
        try:
            with zipfile.ZipFile(path) as z:
                if not any(n.endswith("data.pkl") for n in z.namelist()):
                    why = "a zip archive without data.pkl"
        except (zipfile.BadZipFile, OSError) as e:
            why = f"not a zip archive: {first_line(e)}"
    if why:
        refuse("ckpt_path", f"{path} is not a readable checkpoint ({why})",
               "a .ckpt file written by fibexp-train (torch.save's zip archive); move it away to start over")
