"""GSM8K scoring: verl's semantics, case by case."""

from __future__ import annotations

import pytest

from rlrm.engine.rewards.gsm8k import compute_score, extract_solution


@pytest.mark.parametrize(
    ("text", "truth", "method", "expected"),
    [
        ("3 + 4 = 7\n#### 7", "7", "strict", 1.0),
        ("#### 6\nno wait\n#### 7", "7", "strict", 1.0),  # the last #### counts
        ("#### 1,234", "1234", "strict", 1.0),  # commas removed
        ("#### -5", "-5", "strict", 1.0),
        ("the answer is 7", "7", "strict", 0.0),  # strict needs ####
        ("the answer is 7", "7", "flexible", 1.0),
        ("7 apples, then 8.", "8", "flexible", 0.0),  # "8." is the last number: no exact match
        ("I think 3 or 9", "9", "flexible", 1.0),
        ("#### 8", "7", "strict", 0.0),
        ("no digits here", "7", "flexible", 0.0),
    ],
)
def test_compute_score(text, truth, method, expected):
    assert compute_score(text, truth, method=method) == expected


def test_format_score_for_wrong_but_well_formed():
    assert compute_score("#### 8", "7", format_score=0.1) == pytest.approx(0.1)
    assert compute_score("no answer", "7", format_score=0.1) == 0.0  # nothing extracted: 0
    assert compute_score("#### 7", "7", score=2.0) == 2.0


def test_only_last_300_characters_are_searched():
    early = "#### 7\n" + "x" * 300
    assert extract_solution(early) is None
    assert compute_score(early, "7") == 0.0
    assert compute_score("x" * 400 + "#### 7", "7") == 1.0


def test_dollar_signs_are_removed():
    # the strict regex does not take '$' into its match, and '$' is stripped from what it took
    assert extract_solution("#### 12") == "12"
    assert compute_score("#### 1,000", "1000") == 1.0


def test_unknown_method():
    with pytest.raises(ValueError, match="strict"):
        extract_solution("#### 1", method="loose")
