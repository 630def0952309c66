"""Held-out accuracy reads answers by reward.rule (rlrm/engine/held_out.py): MATH's boxes, GSM8K's `#### N`."""

from __future__ import annotations

import asyncio

from rlrm.config.schema import Profile
from rlrm.engine.data.example import Example
from rlrm.engine.held_out import evaluate_held_out
from rlrm.inference.base import Completion

ANSWERS = ["so \\boxed{\\dfrac12}", "\\boxed{3}", "#### 0.5", "no answer"]  # each test prompt's scripted response


class ScriptedEngine:
    """Answers prompt k (its one token id) with response token k: ANSWERS[k] once decoded."""

    async def generate(self, prompt_ids, sampling):
        return Completion(prompt_ids, [prompt_ids[0]], [0.0], "stop")


class Tokenizer:
    def batch_decode(self, ids, skip_special_tokens=True):
        return [ANSWERS[row[0]] for row in ids]


def held_out(raw: dict) -> dict:
    examples = [Example(f"t/{k}", [{"role": "user", "content": "q"}], "0.5", "math") for k in range(len(ANSWERS))]
    profile = Profile.model_validate(raw)
    return asyncio.run(evaluate_held_out(ScriptedEngine(), Tokenizer(), profile, examples, [[k] for k in range(4)]))


def test_math_rule_reads_boxes_and_normalises_them():
    scores = held_out({"reward": {"rule": "math"}})
    assert scores["val/accuracy"] == 1 / 4  # \dfrac12 is 0.5; 3 is not; `#### 0.5` has no box
    assert scores["val/format_rate"] == 2 / 4


def test_gsm8k_rule_reads_hashes():
    scores = held_out({})
    assert scores["val/accuracy"] == 1 / 4 and scores["val/format_rate"] == 1 / 4  # only `#### 0.5`
