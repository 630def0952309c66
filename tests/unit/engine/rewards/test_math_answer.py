"""MATH answers (rlrm/engine/math_answer.py, rlrm/engine/rewards/answers.py): the last box, LaTeX normalised as verl's
math_reward.py does, and the rule reward, rule agreement and inspect details that read answers through reward.rule."""

from __future__ import annotations

import asyncio

import pytest

from rlrm.config.reward import RewardConfig
from rlrm.engine.math_answer import compute_score, extract_solution, is_equiv, last_boxed, normalize
from rlrm.engine.rewards.agreement import rule_agreement
from rlrm.engine.rewards.answers import check_answer
from rlrm.engine.rewards.base import RewardResult, RewardSample
from rlrm.engine.rewards.rule import make_rule_reward
from rlrm.reward_checks.details import rule_detail


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("so $\\boxed{5}$.", "5"),
        ("\\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),  # nested braces kept whole
        ("first \\boxed{1} then \\boxed{2}", "2"),  # the last box
        ("\\fbox{7}", "7"),
        ("\\boxed{3} and \\fbox{4}", "4"),  # the last of either command
        ("$\\boxed 42$ done", "42"),  # a box without braces: up to the dollar sign
        ("cut at the limit \\boxed{\\frac{1}{", None),  # an unclosed box is no answer
        ("no box here: 5", None),
        ("\\boxed", None),
        ("\\boxed{}", ""),  # an empty box: found, but no answer (the format without content)
    ],
)
def test_last_boxed(text, expected):
    assert last_boxed(text) == expected
    assert extract_solution(text) == (expected or None)


@pytest.mark.parametrize(
    ("answer", "truth"),
    [
        ("\\dfrac12", "\\frac{1}{2}"),
        ("\\tfrac{1}{2}", "\\frac12"),
        ("1/2", "\\frac{1}{2}"),
        ("0.5", "\\frac{1}{2}"),
        ("\\left( 1, 2 \\right)", "(1,2)"),
        ("90^\\circ", "90"),
        ("90^{\\circ}", "90"),
        ("\\$5", "5"),
        ("10\\text{ cm}", "10"),
        ("x = 3", "3"),
        ("k=3", "3"),
        (".5", "0.5"),
        ("\\sqrt2", "\\sqrt{2}"),
        ("2 \\sqrt 3", "2\\sqrt{3}"),
        ("50\\%", "50"),
        ("\\frac1{72}", "\\frac{1}{72}"),
        ("1,\\!000", "1,000"),
    ],
)
def test_equivalent_answers(answer, truth):
    assert is_equiv(answer, truth), (normalize(answer), normalize(truth))


@pytest.mark.parametrize(
    ("answer", "truth"),
    [
        ("\\frac{2}{4}", "\\frac{1}{2}"),  # nothing is evaluated, as in verl's rule
        ("0.25", "\\frac14"),
        ("\\sqrt23", "\\sqrt{23}"),  # LaTeX's \sqrt23 is \sqrt{2}3
        ("12", "1/2"),
        ("03/4", "\\frac{3}{4}"),
        ("5", "-5"),
    ],
)
def test_different_answers(answer, truth):
    assert not is_equiv(answer, truth)


def test_compute_score_and_boxed_ground_truths():
    assert compute_score("so \\boxed{\\dfrac{1}{2}}", "\\frac12") == 1.0
    assert compute_score("so \\boxed{3}", "\\boxed{3}") == 1.0  # a truth stored boxed is read as its content
    assert compute_score("so \\boxed{4}", "3", format_score=0.1) == 0.1
    assert compute_score("no answer", "3", format_score=0.1) == 0.0
    assert is_equiv(None, None) and not is_equiv(None, "3")


def math_cfg(**kw) -> RewardConfig:
    return RewardConfig(rule="math", **kw)


def sample(response: str, truth: str) -> RewardSample:
    return RewardSample("p0", 0, "math", [{"role": "user", "content": "q"}], response, truth)


def test_check_answer_by_rule():
    text = "so the answer is \\boxed{\\frac{3}{4}}, not #### 7"
    assert check_answer(math_cfg(), text, "3/4") == ("\\frac{3}{4}", True)
    assert check_answer(RewardConfig(), text, "7") == ("7", True)  # gsm8k: the last `#### N`
    assert check_answer(RewardConfig(), text, "3/4") == ("7", False)
    assert check_answer(math_cfg(), "#### 7", "7") == (None, False)  # math reads only boxes


def test_the_rule_reward_scores_math_answers():
    reward = make_rule_reward(math_cfg(format_score=0.2, score=2.0))
    right, wrong, none = (
        asyncio.run(reward(sample(text, "\\frac{1}{2}"))) for text in ("\\boxed{1/2}", "\\boxed{2}", "1/2")
    )
    assert (right.score, right.extra["acc"], right.extra["has_answer"]) == (2.0, 1.0, True)
    assert (wrong.score, wrong.extra["acc"], wrong.extra["has_answer"]) == (0.2, 0.0, True)
    assert (none.score, none.extra["acc"], none.extra["has_answer"]) == (0.0, 0.0, False)


def test_rule_agreement_and_inspect_details_read_math_answers():
    cfg = RewardConfig(kind="genrm", server={"model": "m"}, rule="math")
    pairs = [
        (sample("\\boxed{\\frac12}", "0.5"), RewardResult(1.0)),  # right by the MATH rule, judge says right: agree
        (sample("\\boxed{2}", "0.5"), RewardResult(1.0)),  # wrong, judge says right: disagree
        (sample("#### 0.5", "0.5"), RewardResult(0.0)),  # no box: wrong by the MATH rule, judge says wrong: agree
    ]
    assert rule_agreement(cfg, pairs) == (pytest.approx(2 / 3), 3)
    detail = rule_detail(sample("\\boxed{\\frac12}", "0.5"), RewardConfig(rule="math"))
    assert detail == {"rule": "math", "extracted_answer": "\\frac12", "rule_score": 1.0}
    assert rule_detail(sample("#### 5", "5"), RewardConfig())["method"] == "strict"
