"""The one refusal: its line, the context a caller adds without rephrasing it, and bad input
raised as a Refusal where it is found (no `ValueError("<key>: ...; allowed: ...")` left to parse)."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

from fibexp.errors import OutOfMemory, Refusal, refuse

ROOT = Path(__file__).resolve().parents[2]


def test_a_refusal_is_one_line_naming_key_value_and_allowed():
    e = Refusal("model.n_layers", "0\n1", "an integer >= 1")
    assert str(e) == "model.n_layers: 0\\n1; allowed: an integer >= 1"
    assert (e.key, e.value, e.allowed) == ("model.n_layers", "0\n1", "an integer >= 1")
    assert isinstance(e, ValueError)  # `except ValueError` callers keep working
    with pytest.raises(Refusal, match="^seed: -1; allowed: an integer >= 0$"):
        refuse("seed", -1, "an integer >= 0")


def test_within_adds_context_and_keeps_what_was_refused():
    e = Refusal("attention.window", 3, "an integer >= 4")
    cell = e.within(" [cell: seed=1 attention.window=3]")
    assert str(cell) == "attention.window: 3; allowed: an integer >= 4 [cell: seed=1 attention.window=3]"
    assert (cell.key, cell.value, cell.allowed) == ("attention.window", 3, "an integer >= 4")
    assert str(e) == "attention.window: 3; allowed: an integer >= 4"  # the original is unchanged
    oom = OutOfMemory("data.batch_size", 64, 3 * 2**30, 2**30, "rss", 5).within(" [cell: x=1]")
    assert type(oom) is OutOfMemory and (oom.held, oom.step) == (3 * 2**30, 5)
    assert str(oom).endswith("model.n_layers [cell: x=1]")


def test_the_refusal_of_a_hydra_error_is_built_not_parsed():
    from omegaconf.errors import InterpolationResolutionError

    from fibexp.checks import messages

    e = InterpolationResolutionError("no resolver for x")
    r = messages.omegaconf_refusal(e, [])
    assert (r.key, r.value) == ("config", "does not resolve") and "no resolver for x" in r.allowed
    assert messages.hydra_refusal(RuntimeError("a bug"), []) is None  # not Hydra's: shown with its traceback


def test_what_a_target_refuses_while_hydra_builds_it_is_that_refusal():
    from hydra.errors import InstantiationException
    from hydra.utils import instantiate

    from fibexp.checks import messages

    def refusal(node: dict) -> Refusal:
        with pytest.raises(InstantiationException) as e:
            instantiate(node)
        return messages.instantiation_refusal(e.value)

    own = refusal({"_target_": "fibexp.science.wiring.cube_dims", "n": 6})
    assert str(own) == "model.seq_len: 6; allowed: a power of two >= 2 (hypercube length)"
    nested = refusal({"_target_": "builtins.list", "_args_": [{"_target_": "fibexp.science.wiring.cube_dims", "n": 3}]})
    assert (nested.key, nested.value) == ("model.seq_len", 3)
    library = refusal({"_target_": "fibexp.science.wiring.cube_dims", "m": 6})
    assert library.key == "_target_" and "unexpected keyword argument 'm'" in str(library)


def test_refusals_below_the_config_layer_carry_their_key():
    """The science, the model and the corpus raise a Refusal whose key a sweep can test."""
    from fibexp.data.corpus import CorpusError, EmbeddedCorpus
    from fibexp.science import patterns, wiring

    with pytest.raises(Refusal) as e:
        wiring.cube_dims(6)
    assert (e.value.key, e.value.value) == ("model.seq_len", 6)
    with pytest.raises(Refusal) as e:
        patterns.attended_distances(0, "fib", 2.0, 8)
    assert e.value.key == "alpha" and str(e.value) == "alpha: 2.0; allowed: 0.5 <= alpha <= 1.5"
    with pytest.raises(CorpusError) as e:
        EmbeddedCorpus(domains=("poetry",))
    assert isinstance(e.value, Refusal) and (e.value.key, e.value.value) == ("domain", "unknown 'poetry'")


def _hand_built_refusals(path: Path, root: Path = ROOT) -> list[str]:
    """Calls (`raise X(...)`, `return X(...)`, of any class) whose message holds "; allowed" or
    "allowed:": a refusal's line phrased by hand instead of a Refusal given key, value and allowed."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.Call):
            continue
        text = "".join(c.value for arg in node.args for c in ast.walk(arg)
                       if isinstance(c, ast.Constant) and isinstance(c.value, str))
        if "; allowed" in text or "allowed:" in text:
            found.append(f"{path.relative_to(root)}:{node.lineno}")
    return found


def test_no_bad_input_is_a_message_phrased_as_a_refusal():
    files = sorted((ROOT / "fibexp").rglob("*.py")) + sorted((ROOT / "hydra_plugins").rglob("*.py"))
    assert len(files) > 40
    line_builder = ROOT / "fibexp" / "errors.py"  # Refusal builds its own line, the one place
    assert [hit for f in files if f != line_builder for hit in _hand_built_refusals(f)] == []
    assert not hasattr(Refusal, "of")  # no refusal is parsed back from a message


def test_the_scan_finds_any_exception_phrased_as_a_refusal(tmp_path):
    planted = tmp_path / "planted.py"
    planted.write_text('def f(k):\n    raise ValueError(f"model.x: {k}; "\n                     "allowed: 1")\n'
                       '    raise errors.RunNotFound(f"run: {k}; allowed: a run dir")\n'
                       '    return DecodeError(f"length {k}; allowed: at most 4")\n'
                       '    raise Refusal("model.x", k, "1")\n'
                       '    raise RunNotFound(k, "a run dir")\n')
    assert _hand_built_refusals(planted, tmp_path) == ["planted.py:2", "planted.py:4", "planted.py:5"]
