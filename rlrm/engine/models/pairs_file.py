"""A small chosen/rejected pairs file from the synthetic task, in RewardBench's jsonl shape, for
`rlrm eval rm --pairs` on the tiny reward models.

    path = write_pairs_file(cache_dir, seed=0)     # <cache>/pairs-v3-seed0.jsonl, written by `rlrm models prepare`

Each row: `prompt` (the problem as the policy sees it), `chosen` (the worked solution, right answer),
`rejected` (a near miss in the policy's format, wrong by the GSM8K rule), `subset` (which kind of
near miss: wrong-sum, wrong-final, misread-operand), `ground_truth` (for judges given a reference)
and `id`. The problems are the reward models' held-out ones (`tiny_pairs.reward_problems`): none
was trained on. Deterministic for a seed.
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

from rlrm.engine.models.tiny_pairs import reward_problems, wrong_response
from rlrm.errors import writing_to

NUM_TRAIN, NUM_TEST = 6000, 256  # the reward models' recipe (tiny_judge / tiny_disrm), so held-out means held-out
PAIRS = 192
SUBSETS = {"result": "wrong-sum", "final": "wrong-final", "operand": "misread-operand"}


def pairs_path(cache_dir: Path, seed: int = 0) -> Path:
    from rlrm.engine.models.tiny import RECIPE_VERSION

    return Path(cache_dir) / f"pairs-v{RECIPE_VERSION}-seed{seed}.jsonl"


def synthetic_pairs(seed: int = 0, count: int = PAIRS) -> list[dict]:
    """`count` rows from the held-out problems (both operand ranges, alternating)."""
    _, heldout = reward_problems(seed, NUM_TRAIN, NUM_TEST)
    big, small = heldout[:NUM_TEST], heldout[NUM_TEST:]
    problems = [ex for pair in zip(big, small) for ex in pair][:count]
    rng = random.Random(seed + 77)
    rows = []
    for i, ex in enumerate(problems):
        wrong = wrong_response(ex, rng)
        while wrong.label == 1:  # a misread operand can land on the right answer: draw again
            wrong = wrong_response(ex, rng)
        rows.append(
            {
                "id": f"pair-{i}",
                "prompt": ex.prompt[-1]["content"],
                "chosen": ex.extra_info["solution"],
                "rejected": wrong.response,
                "subset": SUBSETS[wrong.kind],
                "ground_truth": ex.ground_truth,
            }
        )
    return rows


def write_pairs_file(cache_dir: Path, seed: int = 0) -> Path:
    """Write (atomically) and return the pairs file next to the tiny models."""
    path = pairs_path(cache_dir, seed)
    text = "".join(json.dumps(r) + "\n" for r in synthetic_pairs(seed))
    if path.is_file() and path.read_text(encoding="utf-8") == text:
        return path  # written before: nothing to write (a read-only or another user's cache serves it)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with writing_to(path):
            tmp.write_text(text)
        tmp.replace(path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path
