"""What a single run's checks hand on to its job (fibexp.checks.checked): the job of the config the
checks passed takes their result (identity, run name, the meta model's shapes) as Hydra hands it
its copy of the config, once; a config no check of this process passed is checked where it is taken."""
from __future__ import annotations

import copy

from hydra import compose, initialize_config_dir
from omegaconf import open_dict, read_write

from fibexp.checks import checked, preflight
from fibexp.config import identity, schema
from fibexp.tasks import registry as tasks


def _composed(tmp_path, tiny, *more):
    with initialize_config_dir(schema.CONF_DIR, version_base="1.3"):
        return compose("train", overrides=[*tiny, f"paths.output_dir={tmp_path / 'outputs'}", "task=count_ones",
                                           f"paths.cache_dir={tmp_path / 'cache'}", *more], return_hydra_config=True)


def _job_copy(cfg):
    """What Hydra's run_job passes the task function: a deep copy without the `hydra` node."""
    job = copy.deepcopy(cfg)
    with read_write(job), open_dict(job):
        del job["hydra"]
    return job


def test_the_job_takes_what_the_checks_learned_once(tmp_path, tiny):
    cfg = _composed(tmp_path, tiny)
    preflight.before_run(cfg, machine=False)
    job = _job_copy(cfg)
    got = checked.taken(job)
    assert (got.config_hash, got.cell, got.name) == (identity.config_hash(job), identity.cell(job), identity.run_name(job))
    assert got.ident == identity.identity(job)
    model = tasks.build(job).build_model()
    assert got.shapes == {k: tuple(v.shape) for k, v in model.state_dict().items()}
    assert got.typed.model.d_model == 32
    again = checked.taken(job)  # handed on once: a second job of it is checked where it is taken
    assert again is not got and again.shapes is None and again.config_hash == got.config_hash


def test_another_config_is_checked_where_it_is_taken(tmp_path, tiny):
    cfg = _composed(tmp_path, tiny)
    preflight.before_run(cfg, machine=False)
    other = _job_copy(_composed(tmp_path, tiny, "seed=7"))
    got = checked.taken(other)
    assert got.shapes is None and got.name.endswith("-s7")
    assert got.config_hash == identity.config_hash(other) != identity.config_hash(_job_copy(cfg))
