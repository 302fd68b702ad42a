"""Synthetic tasks and the chain evaluations: the generators' label rules on hand-checked cases,
determinism and resume of the training stream, a held-out set no training draw repeats, forced
choice against a hand-computed argmax, bad task input refused before a run exists, the task
sweeps, and (slow) count-ones learning only with rotating wiring, every task's metric contract
and a diverged run recorded as a result, through one mixed sweep."""
from __future__ import annotations

import random
import re
import subprocess
import sys
from math import comb
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig

from fibexp import sweep
from fibexp.checks import rules
from fibexp.cli import train as cli_train
from fibexp.config import identity, schema
from fibexp.config.overrides import expand
from fibexp.evals import chains
from fibexp.evals.evaluator import forced_choice
from fibexp.model.lm import LM
from fibexp.tasks import registry as tasks
from fibexp.tasks.synthetic import IGNORE, SyntheticData, generator, row_keys
from fibexp.training import run as training_run
from helpers.cli import refused
from helpers.mlflow_runs import fibexp_runs, undeclared_and_missing
from helpers.sweeps import compose_train

CONF = Path(schema.CONF_DIR)
SWEEPS = CONF.parent / "sweeps"


def task_of(*overrides: str):
    cfg = compose_train(["paths.root=.", *overrides])
    rules.validate(cfg)
    return tasks.build(cfg)


# --- generators: the label rules ------------------------------------------------------------

def test_count_ones_answer_is_the_number_of_ones_read_at_position_0():
    t = task_of("task=count_ones", "attention=hypercube", "model.seq_len=16", "model.n_layers=4")
    b = t.draw(generator(1), 64)
    assert b["x"].shape == (64, 16) and set(b["x"].unique().tolist()) <= {0, 1}
    for row, y in zip(b["x"].tolist(), b["y"].tolist()):
        assert y[0] == sum(row) and y[1:] == [IGNORE] * 15
    assert t.cfg.model.vocab_size == 17  # n + 1 classes, set by the task


def test_shift_copy_targets_the_token_d_back_named_by_the_marker():
    t = task_of("task=shift_copy", "model.seq_len=8", "task.distances=[2,3]", "task.payloads=4")
    assert t.cfg.model.vocab_size == 8 and t.group_names == ("d2", "d3")
    # by hand: markers x // 4 = 0 1 0 1 0 1 0 1, so t copies from t - 2 (even t) or t - 3 (odd t)
    y, group = t.targets(torch.tensor([[1, 6, 2, 7, 0, 4, 3, 5]]))
    assert y.tolist() == [[IGNORE, IGNORE, 1, 1, 2, 2, 0, 0]]
    assert group.tolist() == [[-1, -1, 0, 1, 0, 1, 0, 1]]
    b = t.draw(generator(2), 5)
    assert b["x"].shape == (5, 8) and int(b["x"].max()) < 8
    assert torch.equal(t.targets(b["x"])[0], b["y"]) and torch.equal(t.targets(b["x"])[1], b["group"])


def test_kv_retrieval_places_key_value_and_query_and_scores_the_value():
    t = task_of("task=kv_retrieval", "model.seq_len=64", "task.min_distance=4", "task.max_distance=40",
                "task.bands=[4,16,41]", "task.filler_tokens=10", "task.key_tokens=10", "task.value_tokens=10")
    assert t.cfg.model.vocab_size == 30 and t.group_names == ("band4_16", "band16_41")
    b = t.draw(generator(3), 32)
    for x, y, g, c in zip(b["x"].tolist(), b["y"].tolist(), b["group"].tolist(), b["choices"].tolist()):
        key, value = x[-1], y[-1]
        assert 10 <= key < 20 and 20 <= value < 30 and y[:-1] == [IGNORE] * 63
        kpos = [i for i, v in enumerate(x[:-1]) if v == key]
        assert len(kpos) == 1 and x[kpos[0] + 1] == value
        d = 63 - (kpos[0] + 1)  # the value is d positions before the query
        assert 4 <= d <= 40 and g[-1] == (0 if d < 16 else 1) and g[:-1] == [-1] * 63
        values = [v for v in x if v >= 20]
        keys = [v for v in x if 10 <= v < 20]
        assert sorted(values) == sorted(c) and len(set(c)) == 5 and value in c  # the 5 values in the prompt
        assert len(keys) == 6 and len(set(keys)) == 5  # K* twice, 4 distinct distractor keys
        for i, v in enumerate(x[:-1]):
            if 10 <= v < 20:
                assert 20 <= x[i + 1] < 30  # every key is followed by its value
    assert t.chance(b) == pytest.approx(0.2)


def test_training_stream_is_a_function_of_seed_and_step_and_resumes_in_place():
    t = task_of("task=count_ones", "attention=hypercube", "model.seq_len=16", "model.n_layers=4",
                "task.heldout_examples=2048")
    dm = SyntheticData(t, batch_size=8, seed=5)
    first = [b["x"] for _, b in zip(range(6), dm.stream())]
    again = [b["x"] for _, b in zip(range(6), dm.stream())]
    resumed = [b["x"] for _, b in zip(range(2), dm.stream(offset=4))]
    assert all(torch.equal(a, b) for a, b in zip(first, again))
    assert torch.equal(resumed[0], first[4]) and torch.equal(resumed[1], first[5])
    assert not torch.equal(first[0], first[1])
    other_seed = next(iter(SyntheticData(t, batch_size=8, seed=6).stream()))["x"]
    assert not torch.equal(other_seed, first[0])


def test_heldout_set_is_fixed_and_never_drawn_for_training():
    # n = 13: 8,192 possible inputs, 2,048 held out; unguarded, 3,200 training draws would
    # repeat about 800 held-out examples.
    t = task_of("task=count_ones", "attention=dense", "model.seq_len=13", "task.heldout_examples=2048")
    dm = SyntheticData(t, batch_size=64, seed=0)
    held = set(row_keys(dm.heldout["x"]))
    assert torch.equal(dm.heldout["x"], SyntheticData(t, 64, seed=99).heldout["x"])  # not the run's seed
    drawn = [k for _, b in zip(range(50), dm.stream()) for k in row_keys(b["x"])]
    assert len(drawn) == 3200 and not held & set(drawn)
    raw = [k for s in range(50) for k in row_keys(t.draw(generator(0, 0, s), 64)["x"])]
    assert len(held & set(raw)) > 300  # the guard is what keeps them apart


def test_chance_is_the_majority_guess_of_the_heldout_set():
    t = task_of("task=count_ones", "attention=hypercube", "model.seq_len=16", "model.n_layers=4")
    held = t.heldout()
    assert len(held["x"]) == 4096
    counts = torch.bincount(held["y"][:, 0])
    assert t.chance(held) == pytest.approx(float(counts.max()) / 4096)
    assert t.chance(held) == pytest.approx(comb(16, 8) / 2**16, abs=0.02)  # 19.6%


# --- RULER and LEGO --------------------------------------------------------------------------

class Letters:
    """A tokenizer stand-in: one id per character, " =" and " ;" are two ids each."""
    eos_id = 0
    chars = "\0 =;" + "abcdefghijklmnopqrstuvwxyz" + "ABCDEFGHIJKLMNOPQRSTUVWXYZ" + "0123456789"
    n_vocab = len(chars)

    def encode(self, text):
        return [self.chars.index(c) for c in text]


def resolve(prompt: list[int], a: chains.Alphabet) -> int:
    """An interpreter for the statements: what the queried variable holds."""
    body, query = prompt[:-1 - len(a.eq)], prompt[-1 - len(a.eq)]
    step = len(a.sep)
    statements, cur = [], []
    i = 0
    while i < len(body):
        if body[i:i + step] == a.sep:
            statements.append(cur)
            cur, i = [], i + step
        else:
            cur.append(body[i])
            i += 1
    binding = {}
    for s in statements:
        assert s[1:1 + len(a.eq)] == a.eq
        binding[s[0]] = s[1 + len(a.eq):]
    values, ops = a.values[:2], a.values[2:4]

    def value(var):
        rhs = binding[var]
        if len(rhs) == 1:
            return rhs[0] if rhs[0] not in binding else value(rhs[0])
        op, src = rhs
        v = value(src)
        return v if op == ops[0] else values[1 - values.index(v)]

    return value(query)


def test_ruler_chain_value_and_lego_parity():
    a = chains.alphabet(Letters())
    assert not set(a.variables) & set(a.values) and not {0, *a.eq, *a.sep} & set(a.variables + a.values)
    rng = random.Random(0)
    for hops in (2, 3, 4):
        for _ in range(20):
            prompt, cands, answer = chains.ruler_sample(rng, a, hops)
            assert resolve(prompt, a) == answer and len(cands) == 9 and len(set(cands)) == 9 and answer in cands
            assert prompt.count(a.sep[0]) // len(a.sep) >= hops + 8
    for length in (2, 3, 4):
        for _ in range(20):
            prompt, cands, answer = chains.lego_sample(rng, a, length)
            assert resolve(prompt, a) == answer and cands == a.values[:2]
    # hand-checked: x = a ; y = flip x ; z = flip y  ->  z = a;  w = flip z -> b
    x, y, z, w = a.variables[:4]
    va, vb = a.values[:2]
    flip = a.values[3]
    eq, sep = a.eq, a.sep
    stmts = [[w, *eq, flip, z], [x, *eq, va], [z, *eq, flip, y], [y, *eq, flip, x]]
    prompt = [t for s in stmts for t in (*s, *sep)]
    assert resolve(prompt + [z, *eq], a) == va and resolve(prompt + [w, *eq], a) == vb


def test_chain_suites_are_fixed_and_one_length_per_entry():
    a = chains.alphabet(Letters())
    s1, s2 = chains.suites(a), chains.suites(a)
    assert sorted(s1) == sorted([f"eval/ruler_vt/hop{k}" for k in (2, 3, 4)] + [f"eval/lego/len{k}" for k in (2, 3, 4)])
    for name, (prompts, cands, answers) in s1.items():
        assert len(prompts) == 120 and len({len(p) for p in prompts}) == 1
        assert s2[name] == (prompts, cands, answers)
    lego = s1["eval/lego/len3"][2]
    assert 0.3 < sum(v == a.values[0] for v in lego) / 120 < 0.7  # both answers occur


def tiny_lm(vocab: int, causal=True, **kw) -> LM:
    torch.manual_seed(0)
    return LM(n_layers=2, d_model=16, n_heads=2, n_kv_heads=1, vocab_size=vocab, seq_len=64,
              attention={"kind": "dense", "causal": causal}, **kw).eval()


def test_forced_choice_matches_a_hand_computed_argmax():
    model = tiny_lm(50)
    rng = random.Random(1)
    prompts = [[rng.randrange(50) for _ in range(12)] for _ in range(16)]
    cands = [rng.sample(range(50), 5) for _ in range(16)]
    with torch.no_grad():
        chosen = forced_choice(model(torch.tensor(prompts))[:, -1], torch.tensor(cands)).tolist()
        for p, c, got in zip(prompts, cands, chosen):
            last = model(torch.tensor([p]))[0, -1].tolist()  # one prompt at a time
            assert got == max(c, key=lambda i: last[i])
    answers = [c[0] for c in cands]
    hand = sum(g == a for g, a in zip(chosen, answers)) / 16
    assert chains.accuracy(model, prompts, cands, answers, "cpu") == pytest.approx(hand)


def test_task_accuracy_scores_forced_choice_and_bands_by_hand():
    t = task_of("task=kv_retrieval", "model.seq_len=64", "task.min_distance=4", "task.max_distance=40",
                "task.bands=[4,16,41]", "task.filler_tokens=10", "task.key_tokens=10", "task.value_tokens=10")
    model = tiny_lm(30)
    batch = t.draw(generator(4), 40)
    evaluator, _ = t.evaluation(SyntheticData(t, 8, 0))
    with torch.no_grad():
        evaluator.update(model, batch)
        m = evaluator.compute(lambda x: x)
        logits = model(batch["x"])[:, -1].tolist()
    hits = {0: [], 1: []}
    for row, c, y, g in zip(logits, batch["choices"].tolist(), batch["y"][:, -1].tolist(), batch["group"][:, -1].tolist()):
        hits[g].append(max(c, key=lambda i: row[i]) == y)
    assert m["task/acc"] == pytest.approx(sum(hits[0] + hits[1]) / 40)
    assert m["task/acc/band4_16"] == pytest.approx(sum(hits[0]) / len(hits[0]))
    assert m["task/acc/band16_41"] == pytest.approx(sum(hits[1]) / len(hits[1]))


# --- configs: the task sets the model; bad input is refused ---------------------------------

@pytest.mark.parametrize("name", sorted(set(tasks.TASKS) - {"graft"}))  # graft needs a model folder: tests/e2e/test_graft.py
def test_every_task_composes_validates_and_builds(name):
    overrides = [f"task={name}"] + (["attention=hypercube"] if name == "count_ones" else [])
    cfg = compose_train(["paths.root=.", *overrides])
    rules.validate(cfg)
    with torch.device("meta"):
        lm = training_run.instantiate(cfg.model)
    assert cfg.task.name == name and lm.embed.num_embeddings == tasks.get(name).vocab_size(cfg)
    assert (name == "count_ones") != bool(cfg.attention.causal)


def test_task_is_part_of_the_run_identity_and_name():
    lm, co = compose_train(["paths.root=."]), compose_train(["paths.root=.", "task=count_ones", "attention=hypercube"])
    assert identity.identity(lm)["task"] == {"name": "lm"} and identity.run_name(lm) == "dense-s42"
    assert identity.run_name(co) == "count_ones-hypercube-rot-s42" and identity.cell(co) == "hypercube/rot"
    # generated data: the corpus keys play no part in a task's identity; its own keys do
    assert identity.config_hash(co) == identity.config_hash(compose_train(["paths.root=.", "task=count_ones", "attention=hypercube",
                                                                      "data.domains=[drama]"]))
    assert identity.config_hash(co) != identity.config_hash(compose_train(["paths.root=.", "task=count_ones", "attention=hypercube",
                                                                      "task.heldout_seed=1"]))
    assert identity.config_hash(lm) != identity.config_hash(compose_train(["paths.root=.", "eval.aux=false"]))


BAD = [
    (["task=count_ones", "attention=hypercube", "attention.causal=true"], "attention.causal: True; allowed: False"),
    (["task=count_ones", "attention=fib_stagger"], "attention.kind: sparse; allowed: dense, hypercube"),
    (["task=count_ones", "attention=hypercube", "model.seq_len=48"], "model.seq_len: 48; allowed: a power of two"),
    (["task=count_ones", "model.seq_len=8"], "model.seq_len: 8; allowed: >= 14"),
    (["task=count_ones", "attention=hypercube", "model.vocab_size=10"], "model.vocab_size: 10; allowed: >= 65"),
    (["task=count_ones", "task.heldout_examples=100"], "task.heldout_examples: 100; allowed: >= 2048"),
    (["task=shift_copy", "model.seq_len=256"], "model.seq_len: 256; allowed: > 350"),
    (["task=shift_copy", "attention=fib_fixed", "task.alpha_init=stagger"], "task.alpha_init: stagger"),
    (["task=shift_copy", "attention=fib_learned", "task.alpha_init=stagger", "attention.alpha_init=uniform"],
     "attention.alpha_init: uniform; allowed: stagger"),
    (["task=kv_retrieval", "model.seq_len=512"], "model.seq_len: 512; allowed: >= 902"),
    (["task=kv_retrieval", "task.bands=[32,900]"], "task.bands"),
    (["task=assoc_recall", "task.difficulty=extreme"], "task.difficulty: 'extreme'; allowed: easy, medium, hard"),
    (["task=assoc_recall", "model.seq_len=60"], "model.seq_len: 60; allowed: a multiple of task.group_size=8"),
    (["task=assoc_recall", "task.group_size=2"], "task.group_size: 2; allowed: an integer >= 3"),
    (["task=assoc_recall", "attention.causal=false"], "attention.causal: False; allowed: True for task=assoc_recall"),
    (["task.name=count_ones"], "task.name: count_ones; allowed: lm"),
    (["attention.causal=false"], "attention.causal: False; allowed: True for task=lm"),
]


@pytest.mark.parametrize("overrides, message", BAD)
def test_bad_task_input_is_refused_with_one_line_naming_the_key(overrides, message):
    with pytest.raises(ValueError) as e:
        rules.validate(compose_train(["paths.root=.", *overrides]))
    assert message in str(e.value) and len(str(e.value).splitlines()) == 1


@pytest.mark.parametrize("overrides, key", [(["task=regression"], "task"),
                                            (["task=count_ones", "attention=hypercube", "attention.causal=true"],
                                             "attention.causal")])
def test_bad_task_is_refused_before_a_run_exists(overrides, key, tmp_path, tiny, monkeypatch, capsys):
    out = tmp_path / "outputs"
    assert key in refused([*tiny, f"paths.output_dir={out}", *overrides], monkeypatch, capsys)
    assert not (out / "mlflow.db").exists()  # no tracking store, so no run


# --- sweeps -----------------------------------------------------------------------------------

def sweep_cells(name: str, overrides: list[str], pick=None):
    """The sweep's cells, and the job configs of the cells `pick` selects (all by default)."""
    with initialize_config_dir(str(SWEEPS), version_base="1.3"):
        loader = GlobalHydra.instance().config_loader()
        master = compose(name, overrides=[f"hydra.searchpath=[file://{CONF}]", "paths.root=.", *overrides],
                         return_hydra_config=True)
        cells = expand([dict(g) for g in master.hydra.sweeper.grids], overrides, loader)
        composed = [loader.load_sweep_config(master, c) for c in (cells if pick is None else pick(cells))]
    return cells, composed


def checked(composed) -> None:
    """What the sweeper does with every cell before any job starts."""
    check = sweep._Checks()  # a Refusal fails the test
    for c in composed:
        HydraConfig.instance().set_config(c)
        check([], c)


def test_count_ones_sweep_is_paper_b_s_experiments_with_a_recipe_per_scale():
    cells, composed = sweep_cells("count_ones", [])  # default scale (cpu): every cell composes and validates
    got = {(identity.cell(c), c.model.n_layers, c.model.seq_len, c.attention.order) for c in composed}
    assert got == {("hypercube/fixed", 6, 64, "rot"), ("hypercube/rot", 6, 64, "rot"), ("hypercube/dense", 6, 64, "rot"),
                   ("dense", 6, 64, "rot"), ("hypercube/rot", 5, 64, "rot"), ("hypercube/rot", 12, 64, "rot"),
                   ("hypercube/rot", 16, 64, "rot"), ("hypercube/rot", 8, 256, "rot"), ("hypercube/rot", 16, 256, "rot"),
                   ("hypercube/rot", 16, 64, "random"), ("hypercube/rot", 16, 64, "gray")}
    assert len(cells) == 11 and len({identity.config_hash(c) for c in composed}) == 11
    checked(composed)
    for c in composed:
        assert c.task.name == "count_ones" and not c.attention.causal and c.model.vocab_size == c.model.seq_len + 1
        assert (c.model.d_model, c.data.batch_size, c.trainer.max_steps) == (64, 32, 600)
    _, paper = sweep_cells("count_ones", ["scale=paper"], pick=lambda cells: cells[:1] + cells[-1:])
    for c in paper:
        assert (c.model.d_model, c.data.batch_size, c.trainer.max_steps, c.optim.lr) == (64, 128, 1500, 3e-3)
        assert c.model.ffn_hidden is None and c.model.n_heads == 4 and c.trainer.accelerator == "gpu"  # no paper60m leaks
    _, smoke = sweep_cells("count_ones", ["scale=smoke"], pick=lambda cells: cells[-1:])
    assert smoke[0].trainer.max_steps == 8 and smoke[0].model.vocab_size == 65
    checked(smoke)


def test_probe_sweep_is_depth_by_alpha_init_plus_static_stagger():
    cells, composed = sweep_cells("probe", [])
    got = {(identity.cell(c), c.model.n_layers, c.task.alpha_init, c.attention.alpha_init) for c in composed}
    assert got == {("sparse/fib/learned/W8", n, i, i) for n in (2, 4, 8) for i in ("uniform", "stagger")} | \
        {("sparse/fib/stagger/W8", n, "uniform", "uniform") for n in (2, 4, 8)}
    assert all(c.task.name == "shift_copy" and c.model.seq_len == 512 and c.model.vocab_size == 512 for c in composed)
    checked(composed)
    _, paper = sweep_cells("probe", ["scale=paper"], pick=lambda cells: cells[:1])
    assert (paper[0].model.d_model, paper[0].trainer.max_steps, paper[0].data.batch_size, paper[0].optim.lr) == \
        (256, 2500, 2, 1e-3)


# --- slow: learning, and every task's contract through one mixed sweep ------------------------

@pytest.mark.slow
def test_count_ones_learns_with_rotation_and_stays_at_chance_without(tmp_path, monkeypatch):
    """Paper B's claim at n = 16, 4 layers (= log2 n): rot reaches every position, fixed one."""
    out = tmp_path / "outputs"
    # Lightning's MLFlowLogger calls mlflow.set_tracking_uri, which exports MLFLOW_TRACKING_URI:
    # set through monkeypatch, it is undone afterwards, so later subprocesses do not log here.
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{out}/mlflow.db")
    for schedule in ("rot", "fixed"):
        monkeypatch.setattr(sys, "argv", ["fibexp-train", "task=count_ones", "attention=hypercube",
                                          f"attention.schedule={schedule}", "model.n_layers=4", "model.seq_len=16",
                                          "trainer.max_steps=600", "data.batch_size=64", "trainer.threads=1",
                                          "trainer.checkpoint_every_n_steps=600", f"paths.output_dir={out}",
                                          "hydra.run.dir=" + str(out / "runs" / schedule)])
        cli_train.main()
    _, found = fibexp_runs(out)
    m = {r.data.tags["fibexp.cell"]: r.data.metrics for r in found}
    assert m["hypercube/rot"]["task/acc"] >= 0.9
    assert abs(m["hypercube/fixed"]["task/acc"] - m["hypercube/fixed"]["task/chance"]) <= 0.08
    assert m["hypercube/fixed"]["task/chance"] == pytest.approx(comb(16, 8) / 2**16, abs=0.02)


MIXED = """\
defaults:
  - train
  - _self_
  - scale: smoke
  - optional task/scale@_global_: ${task}_${scale}
  - override hydra/sweeper: fibexp

trainer:
  threads: 1

hydra:
  sweeper:
    grids:
      - attention: fib_stagger
      - task: count_ones
        attention: hypercube
        attention.schedule: rot,fixed
        model.n_layers: 4
        model.seq_len: 16
      - task: shift_copy
        attention: fib_learned
        task.alpha_init: stagger
      - task: kv_retrieval
        model.seq_len: 96
        task.max_distance: 90
        task.bands: [16,48,90]
      - task: count_ones
        attention: dense
        model.seq_len: 16
        trainer.callbacks: '[{_target_:fibexp.training.faults.Diverge,at_step:3}]'
"""


@pytest.mark.slow
def test_one_sweep_mixes_tasks_and_records_each_contract(tmp_path, cache_dir):
    (tmp_path / "mixed.yaml").write_text(MIXED)
    out = tmp_path / "outputs"
    cmd = [sys.executable, "-m", "fibexp.cli.train", "-m", "--config-dir", str(tmp_path), "--config-name", "mixed",
           f"hydra.searchpath=[file://{CONF}]", f"paths.output_dir={out}", f"paths.cache_dir={cache_dir}"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert re.search(r"Sweep mixed-[0-9a-f]{8}: 6 finished, 0 skipped, 0 failed", proc.stdout), proc.stdout
    client, found = fibexp_runs(out)
    runs = {r.info.run_name: r for r in found if "fibexp.task" in r.data.tags}
    assert set(runs) == {"sparse-fib-stagger-W8-s42", "count_ones-hypercube-rot-s42", "count_ones-hypercube-fixed-s42",
                         "shift_copy-sparse-fib-learned-W8-s42", "kv_retrieval-dense-s42", "count_ones-dense-s42"}
    assert all(r.info.status == "FINISHED" for r in runs.values())

    lm = runs["sparse-fib-stagger-W8-s42"]
    assert lm.data.tags["fibexp.task"] == "lm" and lm.data.tags["fibexp.cell"] == "sparse/fib/stagger/W8"
    for k in (2, 3, 4):
        assert 0 <= lm.data.metrics[f"eval/ruler_vt/hop{k}"] <= 1 and 0 <= lm.data.metrics[f"eval/lego/len{k}"] <= 1

    for name in ("count_ones-hypercube-rot-s42", "shift_copy-sparse-fib-learned-W8-s42", "kv_retrieval-dense-s42"):
        r = runs[name]
        m, task = r.data.metrics, r.data.tags["fibexp.task"]
        assert name.startswith(task) and r.data.tags["fibexp.corpus"] == f"synthetic/{task}/v1"
        assert {"train/loss", "task/acc", "task/chance"} <= set(m) and not any(k.startswith("val/") for k in m)
        assert r.data.params["task.name"] == task and int(r.data.params["trainer.max_steps"]) == 8
        history = client.get_metric_history(r.info.run_id, "train/loss")
        assert max(h.step for h in history) == 7
    assert runs["count_ones-hypercube-rot-s42"].data.params["model.vocab_size"] == "17"
    for name, r in runs.items():  # each task logs exactly the metrics its spec declares (what fibexp-plan reads)
        if name != "count_ones-dense-s42":  # diverged: no evaluation
            assert undeclared_and_missing(client, r) == (set(), set()), name

    probe = runs["shift_copy-sparse-fib-learned-W8-s42"].data.metrics
    assert {"task/acc/d200", "task/acc/d350", "alpha/layer_0", "alpha/layer_1"} <= set(probe)
    assert probe["task/chance"] < 0.01  # 512 equally likely targets
    start = [0.51, 1.49]  # stagger over 2 layers, ends 0.01 inside [0.5, 1.5]
    final = [probe["alpha/layer_0"], probe["alpha/layer_1"]]
    assert probe["task/alpha_range"] == pytest.approx(max(final) - min(final), abs=1e-6)
    assert probe["task/alpha_shift"] == pytest.approx(sum(abs(a - b) for a, b in zip(final, start)) / 2, abs=1e-4)
    kv = runs["kv_retrieval-dense-s42"].data.metrics
    assert kv["task/chance"] == pytest.approx(0.2) and {"task/acc/band16_48", "task/acc/band48_90"} <= set(kv)

    diverged = runs["count_ones-dense-s42"]
    assert diverged.data.tags["fibexp.diverged"] == "true" and diverged.data.metrics["train/diverged_step"] == 3
    assert not any(k.startswith("task/") for k in diverged.data.metrics)
    assert all("fibexp.diverged" not in r.data.tags for n, r in runs.items() if n != "count_ones-dense-s42")
