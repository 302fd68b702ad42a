"""Chain-resolution evaluations of a trained language model (not trained tasks): RULER variable
tracking and LEGO, scored by forced choice, after the held-out evaluation of every LM run.

Statements are `VAR = X ;` sequences: " =" and " ;" are encoded with the run's own tokenizer,
variable and value tokens are single ids from two disjoint ranges of its vocabulary (the middle
of it, away from the separator). The query is `VAR_final =`; the model's answer is the
candidate with the highest next-token logit (one forward pass), which isolates the multi-hop
resolution from whether the model learned the output format and gives a clean chance level.

- RULER VT: v0 = value, v_i = v_{i-1} for 2/3/4 hops, plus 8 distractor statements binding fresh
  variables to fresh values, all shuffled; forced choice among the 9 values (chance 1/9).
- LEGO: values {a, b}, ops {identity, flip}: v0 = value, v_i = op_i v_{i-1}, chain lengths
  2/3/4, shuffled; 2-way forced choice (chance 0.5).
120 samples per hop or length from a fixed seed: every run is scored on the same prompts (for
its tokenizer). All prompts of one hop count have the same length, so each is one batch."""
from __future__ import annotations

import random
from dataclasses import dataclass

import torch

from fibexp.errors import Refusal
from fibexp.evals.evaluator import forced_choice

RULER_HOPS = (2, 3, 4)
LEGO_LENGTHS = (2, 3, 4)
SAMPLES = 120
DISTRACTORS = 8
RULER_SEED, LEGO_SEED = 4001, 4002
RANGE = 200  # ids per range (fewer when the vocabulary is small)


@dataclass
class Alphabet:
    eq: list[int]  # " =" in the run's tokenizer
    sep: list[int]  # " ;"
    variables: list[int]
    values: list[int]  # disjoint from variables; LEGO uses values[:2] as {a, b} and values[2:4] as its ops


def alphabet(tokenizer) -> Alphabet:
    eq, sep = tokenizer.encode(" ="), tokenizer.encode(" ;")
    special = {tokenizer.eos_id, *eq, *sep}
    pool = [i for i in range(tokenizer.n_vocab) if i not in special]
    n = min(RANGE, len(pool) // 2)
    if n < DISTRACTORS + max(RULER_HOPS):
        raise Refusal("model.vocab_size", f"{tokenizer.n_vocab} ids", f"enough for {DISTRACTORS + max(RULER_HOPS)} "
                      "variable and value ids each (RULER/LEGO); or eval.aux=false")
    start = (len(pool) - 2 * n) // 2
    return Alphabet(eq, sep, pool[start:start + n], pool[start + n:start + 2 * n])


def _prompt(statements: list[list[int]], query: int, a: Alphabet) -> list[int]:
    return [t for s in statements for t in (*s, *a.sep)] + [query, *a.eq]


def ruler_sample(rng: random.Random, a: Alphabet, hops: int, distractors: int = DISTRACTORS):
    """(prompt ids, candidate ids, answer id)."""
    value = rng.choice(a.values)
    chain = rng.sample(a.variables, hops)
    statements = [[chain[0], *a.eq, value]] + [[chain[i], *a.eq, chain[i - 1]] for i in range(1, hops)]
    fresh_vars = rng.sample([v for v in a.variables if v not in chain], distractors)
    fresh_vals = rng.sample([v for v in a.values if v != value], distractors)
    statements += [[v, *a.eq, x] for v, x in zip(fresh_vars, fresh_vals)]
    rng.shuffle(statements)
    candidates = [value, *fresh_vals]
    rng.shuffle(candidates)  # a tie cannot favour the answer
    return _prompt(statements, chain[-1], a), candidates, value


def lego_sample(rng: random.Random, a: Alphabet, length: int):
    """(prompt ids, candidate ids, answer id): v0 = a|b, v_i = identity|flip v_{i-1}."""
    values, ops = a.values[:2], a.values[2:4]
    chain = rng.sample(a.variables, length)
    cur = rng.randrange(2)
    statements = [[chain[0], *a.eq, values[cur]]]
    for i in range(1, length):
        flip = rng.randrange(2)
        cur ^= flip
        statements.append([chain[i], *a.eq, ops[flip], chain[i - 1]])
    rng.shuffle(statements)
    return _prompt(statements, chain[-1], a), list(values), values[cur]


def suites(a: Alphabet, samples: int = SAMPLES) -> dict[str, tuple[list, list, list]]:
    """{metric name: (prompts, candidates, answers)}; every prompt of one entry has one length."""
    out = {}
    for name, seed, ks, make in [("eval/ruler_vt/hop{}", RULER_SEED, RULER_HOPS, ruler_sample),
                                 ("eval/lego/len{}", LEGO_SEED, LEGO_LENGTHS, lego_sample)]:
        rng = random.Random(seed)
        for k in ks:
            out[name.format(k)] = tuple(map(list, zip(*(make(rng, a, k) for _ in range(samples)))))
    return out


@torch.no_grad()
def accuracy(model, prompts: list[list[int]], candidates: list[list[int]], answers: list[int], device) -> float:
    """Share of prompts whose forced choice (one forward pass for the whole batch) is the answer."""
    ids = torch.tensor(prompts, device=device)
    logits = model(ids)[:, -1].float()
    chosen = forced_choice(logits, torch.tensor(candidates, device=device))
    return float((chosen == torch.tensor(answers, device=device)).float().mean())


def evaluate(model, tokenizer, device, forward_context) -> dict[str, float]:
    """eval/ruler_vt/hop<k> and eval/lego/len<k> for a trained LM."""
    a = alphabet(tokenizer)
    with forward_context():
        return {name: accuracy(model, *suite, device) for name, suite in suites(a).items()}
