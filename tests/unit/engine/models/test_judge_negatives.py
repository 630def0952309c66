"""The tiny judge's adversarial training answers: labelled by the GSM8K rule, and the widths the recipe-4 judge misread."""

from __future__ import annotations

import random
from collections import Counter

from rlrm.engine.models.judge_negatives import KINDS, adversarial_response, other_width, repeated_lines
from rlrm.engine.models.tiny_judge import judge_answer
from rlrm.engine.models.tiny_pairs import reward_problems
from rlrm.engine.rewards.gsm8k import compute_score, extract_solution


def test_other_width_never_has_the_references_digit_count():
    rng = random.Random(0)
    for truth in ("0", "1", "7", "10", "11", "19", "20", "100"):
        made = [other_width(truth, rng) for _ in range(200)]
        assert all(v.isdigit() and len(v) != len(truth) for v in made), (truth, made)
        if len(truth) > 1:  # the reference's own leading and trailing digits are among them ("11" -> "1")
            assert truth[0] in made and (truth[-1].lstrip("0") or "0") in made


def test_repeated_lines_are_read_by_their_last_answer():
    rng = random.Random(1)
    seen = Counter()
    for _ in range(300):
        text = repeated_lines("12", rng)
        lines = text.split("####")[1:]
        assert 2 <= len(lines) <= 4
        seen[compute_score(text, "12") == 1.0] += 1
        assert extract_solution(text) == lines[-1].strip()
    assert seen[True] > 30 and seen[False] > 100  # the right number repeated is rewarded, as the rule does


def test_adversarial_answers_carry_the_rules_label_and_the_new_kinds():
    train, _ = reward_problems(0, 400, 4)
    rng = random.Random(2)
    items = [adversarial_response(ex, rng) for ex in train]
    assert all(i.label == int(compute_score(i.response, i.example.ground_truth) == 1.0) for i in items)
    kinds = Counter(i.kind for i in items)
    assert set(kinds) == set(KINDS) and kinds["width"] > kinds["echo"]  # drawn twice as often
    assert all(i.label == 0 for i in items if i.kind == "width")


def test_the_working_the_judge_is_taught_pads_the_shorter_number():
    # what the recipe-4 judge got wrong in the seed-4 run: it wrote "1-1 correct" for "#### 1" against 11
    assert judge_answer("#### 1", "11") == "0-1 wrong 1-1 correct\nScore: 0"
    assert judge_answer("#### 0\n#### 0", "2") == "0-2 wrong\nScore: 0"
    assert judge_answer("#### 17", "7") == "1-0 wrong 7-7 correct\nScore: 0"
