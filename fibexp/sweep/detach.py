"""A sweep that lives on the cluster without its submitting process (`hydra/launcher=slurm`,
`hydra.launcher.wait=false`): the code it runs is copied into its home (`snapshot`), its cells'
array and a last job that depends on them (`afterany`) are submitted, and the command returns.
The last job (`close`) reads the cells' outcomes from MLflow and the scheduler, closes the parent,
writes the summary (`summary.txt`) and attaches the report, as the waiting sweep does; `fibexp-sweep
cancel` closes it the same way once its jobs are stopped."""
from __future__ import annotations

import contextlib
import datetime
import functools
import hashlib
import shutil
import signal
import subprocess
import sys
from pathlib import Path

from fibexp.errors import JobDied, Refusal
from fibexp.sweep import failfast, interrupt, scheduler, state
from fibexp.sweep.outcome import cell_outcome

CODE_ENV = "FIBEXP_CODE"  # the code a job runs, <commit>+<diff hash>, for its run's tag fibexp.code
PACKAGES = ("fibexp", "hydra_plugins/fibexp_launchers", "hydra_plugins/fibexp_schemas",
            "hydra_plugins/fibexp_sweeper", "conf")


def _git(root: Path, *args: str) -> str | None:
    try:
        res = subprocess.run(["git", *args], cwd=root, capture_output=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return res.stdout.decode(errors="replace") if res.returncode == 0 else None


def code_source() -> Path:
    """The tree this process imports fibexp from (a checkout, or site-packages)."""
    import fibexp

    return Path(fibexp.__file__).resolve().parents[1]


def code_identity(root: Path | None = None) -> tuple[str, str]:
    """(commit, hash of the uncommitted diff of the package or `clean`) of the code under `root`
    (default: the tree this process imports); outside git ("none", a hash of the package's files)."""
    root = root or code_source()
    commit = (_git(root, "rev-parse", "HEAD") or "").strip()
    if commit:
        diff = _git(root, "diff", "HEAD", "--binary", "--", *[p for p in PACKAGES if (root / p).exists()]) or ""
        digest = hashlib.sha256(diff.encode()).hexdigest()[:12] if diff else "clean"
    else:
        h = hashlib.sha256()
        for p in PACKAGES:
            for f in sorted((root / p).rglob("*")) if (root / p).is_dir() else []:
                if f.is_file() and "__pycache__" not in f.parts:
                    h.update(str(f.relative_to(root)).encode() + f.read_bytes())
        commit, digest = "none", h.hexdigest()[:12]
    return commit, digest


def snapshot(home: Path, root: Path | None = None) -> dict:
    """The package the sweep runs (fibexp, its Hydra plugins, conf/) copied into
    `home/code/<version>/`; `version` is the commit and a hash of the uncommitted diff (outside git:
    a hash of the files). The same code again reuses its copy. Jobs put it first on PYTHONPATH."""
    root = root or code_source()
    commit, digest = code_identity(root)
    dest = home / "code" / f"{commit[:12]}-{digest}"
    if not dest.is_dir():
        tmp = dest.with_name(dest.name + ".partial")
        shutil.rmtree(tmp, ignore_errors=True)
        for p in PACKAGES:
            if (root / p).is_dir():
                shutil.copytree(root / p, tmp / p, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        tmp.rename(dest)
    return {"path": str(dest), "commit": commit, "diff": digest}


def refuse_if_live(home: Path, sweep_id: str) -> None:
    """A detached launch of this sweep still queued or running is not launched again beside it."""
    try:
        record = state.read(home)
    except (OSError, ValueError):
        return
    closer = record.get("closer")
    if closer and not scheduler.states([closer])[closer].ended:
        raise Refusal("sweep", sweep_id, f"one launch at a time: it is on the cluster (closing job {closer}); "
                      f"follow it with `fibexp-sweep status {sweep_id}`, or `fibexp-sweep cancel {sweep_id}`")


def _other_code(client, record: dict, todo: list[int], code: dict) -> list[str]:
    """The cells about to resume a run of this sweep that ran other code (tag fibexp.code)."""
    now = f"{code['commit']}+{code['diff']}"
    found = client.search_runs([record["experiment_id"]], f"tags.`fibexp.sweep` = '{record['id']}'", max_results=50000)
    ran = {r.data.tags.get("fibexp.config_hash"): r.data.tags.get("fibexp.code") for r in found
           if r.data.tags.get("fibexp.code")}
    cells = [record["cells"][i] for i in todo]
    return [f"{c['name']} (ran {ran[c['hash']]})" for c in cells if ran.get(c["hash"], now) != now]


def submit(sweep, launcher, client, record: dict, jobs: list[list[str]], todo: list[int]) -> dict:
    """Snapshot the code, submit the cells and the closing job, record them, say how to follow."""
    code = snapshot(sweep.home)
    if changed := _other_code(client, record, todo, code):
        print(f"Sweep {sweep.id}: {len(changed)} cell(s) resume runs trained on other code than this submission's "
              f"({code['commit'][:12]}+{code['diff']}): {', '.join(changed[:10])}", flush=True)
    record.update(code=code, detached=True, submitted=datetime.datetime.now().isoformat(timespec="seconds"))
    state.write(sweep.home, record)  # the closer may start at once: it reads the record
    # PYTHONSAFEPATH: `python -m` would otherwise put the job's working directory (the user's tree) first
    setup = [f"export PYTHONPATH={code['path']}${{PYTHONPATH:+:$PYTHONPATH}}", "export PYTHONSAFEPATH=1",
             f"export {CODE_ENV}={code['commit']}+{code['diff']}"]  # what the job's run is tagged fibexp.code
    ids, closer = launcher.submit_detached(jobs, functools.partial(close, str(sweep.home)), setup,
                                           f"{sweep.id}-close", (code_source(), Path(code["path"])))
    for i, job in zip(todo, ids):
        record["cells"][i]["job"] = job
    record["closer"] = closer
    record["arrays"] = sorted({j.split("_")[0] for j in ids})
    record["array_parallelism"] = getattr(launcher, "params", {}).get("array_parallelism")
    state.write(sweep.home, record)
    arrays = ", ".join(record["arrays"])
    at_once = f", at most {record['array_parallelism']} at once" if record["array_parallelism"] else ""
    print(f"Sweep {sweep.id}: {len(ids)} cell(s) submitted as Slurm array {arrays}{at_once}; closing job {closer} runs after "
          f"them (afterany); code {code['commit'][:12]} (diff {code['diff']}) copied to {code['path']}\n"
          f"  home:   {sweep.home}\n  status: fibexp-sweep status {sweep.id}\n  wait:   fibexp-sweep wait {sweep.id}\n"
          f"  cancel: fibexp-sweep cancel {sweep.id}", flush=True)
    return {"submitted": len(ids)}


def stopped_by(name: str) -> interrupt.Signals:
    sigs = interrupt.Signals()
    sigs.signum, sigs.count = getattr(signal, name, signal.SIGTERM), 1
    return sigs


def _died(folder: Path, job: str, states: dict) -> JobDied | None:
    """A cell's job that ended without submitit's result file died (killed, out of memory, ...)."""
    if (folder / f"{job}_0_result.pkl").is_file():
        return None
    st = states.get(job)
    word = st.state if st else "UNKNOWN"
    return JobDied(job, word, scheduler.reason(scheduler.log_of(folder, job), word))


@contextlib.contextmanager
def _as_launched(argv: list[str]):
    """sys.argv as the user launched the sweep: the resume line repeats their command."""
    before = sys.argv
    sys.argv = ["fibexp-train", *argv]
    try:
        yield
    finally:
        sys.argv = before


def close(home: str, stopped: interrupt.Signals | None = None) -> dict:
    """The closing job: each cell's outcome (MLflow, then the scheduler for a job that died), the
    code it ran tagged on its run, the summary in `summary.txt` (also printed), the parent closed
    and the report attached. `stopped`: the sweep was cancelled (cells and parent KILLED)."""
    from fibexp.sweep.summary import summarise  # the report and MLflow: imported by the closing job only
    from fibexp.tracking import waiting

    home = Path(home)
    record = state.read(home)
    client = waiting.Client(record["uri"], record.get("outage_wait_s", 60))
    cells = record["cells"]
    jobs = scheduler.states([c["job"] for c in cells if c.get("job")])
    folder = home / ".submitit"
    outcome, code = {}, record.get("code") or {}
    cut, failed = failfast.cut(home), failfast.failed(home)
    launched = [i for i, c in enumerate(cells) if not c.get("outcome")]  # launch index k: launched[k]
    for i, c in enumerate(cells):
        if c.get("outcome"):
            outcome[i] = tuple(c["outcome"])
            continue
        died = None if stopped else _died(folder, c["job"], jobs)
        outcome[i] = cell_outcome(client, record["experiment_id"], c["name"], Path(c["run_dir"]), c["hash"],
                                  stopped, died)
        if cut and outcome[i] == ("failed", None) and launched.index(i) not in failed:  # cancelled before it started
            outcome[i] = ("pending", None)
        if outcome[i][1] and code:
            client.set_tag(outcome[i][1], "fibexp.code", f"{code['commit']}+{code['diff']}")
    summary = home / "summary.txt"
    with open(summary, "w") as out, contextlib.redirect_stdout(out), contextlib.redirect_stderr(out), \
            _as_launched(record.get("argv", [])):
        try:
            counts = summarise(client, record["experiment_id"], record["parent"], record["id"],
                               [c["name"] for c in cells], outcome, stopped, home, cut)
        except SystemExit:
            counts = None
    print(summary.read_text(), end="", flush=True)
    return counts or {}
