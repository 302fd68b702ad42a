"""Hydra's Compose API on conf/ works in a fresh Python session (a notebook) that never imported
fibexp: the schemas are registered by the hydra_plugins.fibexp_schemas module Hydra loads itself."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

CONF = Path(__file__).resolve().parents[2] / "conf"

NOTEBOOK = r"""
import json, sys
from hydra import compose, initialize_config_dir
from hydra.errors import ConfigCompositionException
from hydra.utils import instantiate

before = sorted(m for m in sys.modules if m == "fibexp" or m.startswith("fibexp."))
with initialize_config_dir(sys.argv[1], version_base="1.3"):
    cfg = compose("train", overrides=["attention=fib_stagger", "model.n_layers=3", "model.d_model=32",
                                      "model.n_heads=2", "model.n_kv_heads=1", "model.vocab_size=64"])
    try:
        compose("train", overrides=["model.n_layer=3"])
        typo = None
    except ConfigCompositionException as e:
        typo = str(e)
model = instantiate(cfg.model)
print(json.dumps({"before": before, "type": type(model).__module__ + "." + type(model).__name__,
                  "alphas": model.alphas(), "typo": typo}))
"""


@pytest.mark.slow  # test-fast stays under 2 minutes (make test runs it)
def test_compose_and_instantiate_without_importing_fibexp():
    proc = subprocess.run([sys.executable, "-c", NOTEBOOK, str(CONF)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["before"] == []  # nothing of fibexp was imported by the notebook itself
    assert out["type"] == "fibexp.model.lm.LM"
    assert out["alphas"] == [0.5, 1.0, 1.5]  # the stagger schedule over 3 layers (docs/papers.md)
    assert "n_layer" in out["typo"]  # the typed schema is active: a misspelt key fails
    assert "[Hydra plugins scanner]" not in proc.stderr  # the plugin imports without warnings


def test_an_error_raised_outside_any_config_node_is_one_line_with_its_cause():
    """An interpolation a plugin resolves on its own (a launcher's params) fails with no key: the
    line names the cause instead of `: None`."""
    from omegaconf.errors import InterpolationResolutionError

    from fibexp.config.messages import omegaconf_line

    e = InterpolationResolutionError("ValueError raised while resolving interpolation: HydraConfig was not set")
    assert omegaconf_line(e, []) == ("config: does not resolve; allowed: a config whose interpolations resolve "
                                     "(ValueError raised while resolving interpolation: HydraConfig was not set)")
