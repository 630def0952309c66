"""Synthetic arithmetic word problems in GSM8K's answer format (`... #### N`).

    train, test = synthetic_splits(SyntheticConfig(), PROMPT_SUFFIX)

Each problem combines `num_operands` numbers with the configured operators in a short story;
its worked solution is one equation line and the `#### N` answer, e.g.
"Mia has 12 pens. She buys 7 more pens. How many pens does Mia have now?" -> "12 + 7 = 19\\n#### 19".
Splits are seeded and disjoint (no question appears in both).
"""

from __future__ import annotations

import random

from rlrm.config.schema import SyntheticConfig
from rlrm.engine.data.example import Example
from rlrm.errors import ConfigError

DATA_SOURCE = "synthetic/arith"
_NAMES = ["Mia", "Tom", "Ava", "Leo", "Zoe", "Sam", "Ivy", "Max", "Eli", "Ana", "Ben", "Kim"]
_THINGS = ["apples", "pens", "books", "coins", "cards", "stamps", "shells", "marbles", "cookies", "stickers"]
_START = "{name} has {a} {thing}."
_STEPS = {
    "+": ["{pron} buys {b} more {thing}.", "{pron} finds {b} more {thing}.", "A friend gives {obj} {b} {thing}."],
    "-": ["{pron} gives away {b} {thing}.", "{pron} loses {b} {thing}.", "{pron} sells {b} {thing}."],
    "*": ["Then {pron_l} gets {b} times as many {thing}."],
}
_QUESTION = "How many {thing} does {name} have now?"
_PRONOUNS = {"Mia": "She", "Ava": "She", "Zoe": "She", "Ivy": "She", "Ana": "She", "Kim": "She"}


def make_problem(rng: random.Random, cfg: SyntheticConfig) -> tuple[str, str, int]:
    """One (question, worked solution, answer)."""
    name, thing = rng.choice(_NAMES), rng.choice(_THINGS)
    pron = _PRONOUNS.get(name, "He")
    obj = "her" if pron == "She" else "him"
    while True:
        values = [rng.randint(cfg.min_value, cfg.max_value) for _ in range(cfg.num_operands)]
        ops = [rng.choice(cfg.ops) for _ in range(cfg.num_operands - 1)]
        total, ok = values[0], True
        for op, b in zip(ops, values[1:]):
            total = total + b if op == "+" else total - b if op == "-" else total * b
            if total < 0 and not cfg.allow_negative:
                ok = False
        if ok:
            break
    sentences = [_START.format(name=name, a=values[0], thing=thing)]
    for op, b in zip(ops, values[1:]):
        step = rng.choice(_STEPS[op])
        sentences.append(step.format(pron=pron, pron_l=pron.lower(), obj=obj, b=b, thing=thing))
    sentences.append(_QUESTION.format(thing=thing, name=name))
    expr = str(values[0])
    for op, b in zip(ops, values[1:]):
        expr = f"{expr} {op} {b}" if op != "*" or len(ops) == 1 else f"({expr}) {op} {b}"
    solution = f"{expr} = {total}\n#### {total}"
    return " ".join(sentences), solution, total


def synthetic_splits(cfg: SyntheticConfig, prompt_suffix: str) -> tuple[list[Example], list[Example]]:
    """Seeded, disjoint train and test splits of `cfg.num_train` and `cfg.num_test` problems."""
    rng = random.Random(cfg.seed)
    seen: set[str] = set()
    splits: dict[str, list[Example]] = {"test": [], "train": []}
    wanted = {"test": cfg.num_test, "train": cfg.num_train}
    attempts = 0
    limit = 50 * (cfg.num_train + cfg.num_test)
    for split in ("test", "train"):  # test first, so changing num_train never changes the test split
        while len(splits[split]) < wanted[split]:
            attempts += 1
            if attempts > limit:
                raise ConfigError(
                    f"cannot make {wanted[split]} distinct {split} problems from these data.synthetic settings; "
                    f"widen min_value..max_value, add ops, or lower data.synthetic.num_{split}"
                )
            question, solution, answer = make_problem(rng, cfg)
            if question in seen:
                continue
            seen.add(question)
            index = len(splits[split])
            splits[split].append(
                Example(
                    uid=f"synthetic/{split}/{index}",
                    prompt=[{"role": "user", "content": f"{question} {prompt_suffix}".strip()}],
                    ground_truth=str(answer),
                    data_source=DATA_SOURCE,
                    extra_info={"split": split, "index": index, "question": question, "solution": solution},
                )
            )
    return splits["train"], splits["test"]
