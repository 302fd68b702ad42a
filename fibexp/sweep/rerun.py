"""`fibexp-sweep rerun RUN_ID`: train a logged run again, exactly. Its config comes from the store
(the resolved `config.yaml` the run logged), as overrides of every key on top of its task, so the
rerun goes through `fibexp-train` and all its checks; it is a new run (`<name>-rerun-<old id>`, its
own run folder) tagged `fibexp.rerun_of=<old id>` as soon as it opens. The code it trains is this
tree's: the run's commit (tag `fibexp.code` or `fibexp.git_sha`) is compared with it, and a
difference is said before training, as is a config hash that came out different. A sweep's parent
id reruns the sweep's cells whose newest run FAILED."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import yaml

from fibexp.errors import Refusal
from fibexp.sweep.detach import code_identity

SKIPPED = ("sweep", "ckpt_path")  # a rerun is no sweep's cell, and starts from step 0


def literal(value) -> str:
    """A value in Hydra's override grammar."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, list):
        return "[" + ",".join(literal(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{literal(v)}" for k, v in value.items()) + "}"
    return "'" + str(value).replace("\\", "\\\\").replace("'", "\\'") + "'"


def overrides_of(config: dict) -> list[str]:
    """The overrides that compose `config` (a run's resolved config): its task, then every leaf
    whose value differs from what `train` composes for that task (lists whole). Only those: a key
    the run's attention kind does not read is refused when set on the command line."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from fibexp.config.schema import CONF_DIR, register

    register()
    task = f"task={config['task']['name']}"
    with initialize_config_dir(CONF_DIR, version_base="1.3"):
        base = OmegaConf.to_container(compose("train", overrides=[task]), resolve=False, enum_to_str=True)
    return [task] + _differing({k: v for k, v in config.items() if k not in SKIPPED}, base, "")


def _differing(config: dict, base: dict, prefix: str) -> list[str]:
    out = []
    for key, value in config.items():
        default = base.get(key) if isinstance(base, dict) else None
        if isinstance(value, dict) and value and isinstance(default, dict):
            out += _differing(value, default, f"{prefix}{key}.")
        elif value != default or isinstance(default, str) and "${" in default:
            out.append(f"{prefix}{key}={literal(value)}")
    return out


def code_said(tags: dict, commit: str, diff: str) -> str:
    """One line comparing the code the run trained (tag fibexp.code, else fibexp.git_sha) with this tree's."""
    now = f"{commit[:12]}+{diff}"
    if ran := tags.get("fibexp.code"):
        if ran == f"{commit}+{diff}":
            return f"code: the same as the run's ({now})"
        ran = f"{ran.split('+')[0][:12]}+{ran.split('+')[-1]}"
    else:
        sha = tags.get("fibexp.git_sha", "unknown")
        ran = sha[:12] + ("-dirty" if sha.endswith("-dirty") else "")
        if sha.removesuffix("-dirty") == commit:
            if sha == commit and diff == "clean":
                return f"code: the same as the run's ({now})"
            return (f"code: the run's commit ({ran}) but uncommitted changes on one side or both (this tree is "
                    f"{now}): it may differ")
    return f"code: DIFFERENT from the run's: it trained {ran}, this tree is {now}; the rerun trains this tree's"


class Rerun:
    """Reruns of runs of one store."""

    def __init__(self, client, output_dir: Path):
        os.environ["MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"] = "false"  # this command's own process
        self.client, self.output_dir = client, output_dir
        self.commit, self.diff = code_identity()

    def run_of(self, run_id: str):
        from mlflow.exceptions import MlflowException

        try:
            return self.client.get_run(run_id)
        except MlflowException:
            raise Refusal("run_id", run_id, f"a run id of the store {self.client.tracking_uri}") from None

    def targets(self, run) -> list:
        """The run itself, or for a sweep's parent the newest run of each cell when it FAILED."""
        tags = run.data.tags
        if tags.get("fibexp.sweep_parent") != "true":
            return [run]
        found = self.client.search_runs([run.info.experiment_id], f"tags.`fibexp.sweep` = '{tags['fibexp.sweep']}'",
                                        order_by=["attributes.start_time DESC"], max_results=50000)
        newest = {}
        for r in found:
            if r.data.tags.get("fibexp.sweep_parent") != "true":
                newest.setdefault(r.data.tags.get("fibexp.config_hash"), r)
        return [r for r in newest.values() if r.info.status == "FAILED"]

    def again(self, old) -> str:
        """Train `old` again as a new run; its status."""
        path = self.client.download_artifacts(old.info.run_id, "config.yaml", str(self._tmp()))
        config = yaml.safe_load(Path(path).read_text())
        name = f"{old.info.run_name}-rerun-{old.info.run_id[:8]}"
        print(f"rerun of {old.info.run_name} ({old.info.run_id}, {old.info.status}) as {name}; "
              f"{code_said(old.data.tags, self.commit, self.diff)}", flush=True)
        cmd = [sys.executable, "-m", "fibexp.cli.train", *overrides_of(config), f"logger.run_name={literal(name)}"]
        root = Path(config.get("paths", {}).get("root") or ".")
        started = time.time()
        proc = subprocess.Popen(cmd, cwd=root if root.is_dir() else None)
        new = None
        while proc.poll() is None or new is None:
            new = new or self._tag(old, name, started)
            if proc.poll() is not None:
                break
            time.sleep(0.5)
        if new is None:
            print(f"rerun of {old.info.run_id}: fibexp-train exited {proc.returncode} before opening a run",
                  file=sys.stderr, flush=True)
            return "FAILED"
        run = self.client.get_run(new)
        if run.data.tags.get("fibexp.config_hash") != old.data.tags.get("fibexp.config_hash"):
            print(f"rerun {new}: its config hash {run.data.tags.get('fibexp.config_hash')} differs from the run's "
                  f"{old.data.tags.get('fibexp.config_hash')} (the code composes the logged config differently)",
                  flush=True)
        print(f"rerun {new} of {old.info.run_id}: {run.info.status}", flush=True)
        return run.info.status

    def _tag(self, old, name: str, since: float) -> str | None:
        """The rerun's run once it is open, tagged fibexp.rerun_of."""
        found = self.client.search_runs([old.info.experiment_id], f"attributes.run_name LIKE '{name}%' and "
                                        f"attributes.start_time >= {int(since * 1000)}", max_results=1)
        if not found:
            return None
        run_id = found[0].info.run_id
        if found[0].data.tags.get("fibexp.rerun_of") != old.info.run_id:
            self.client.set_tag(run_id, "fibexp.rerun_of", old.info.run_id)
        return run_id

    def _tmp(self) -> Path:
        import tempfile

        return Path(tempfile.mkdtemp(prefix="fibexp-rerun-"))
