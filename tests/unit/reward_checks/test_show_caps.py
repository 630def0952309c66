"""`rlrm inspect reward`'s table never prints a whole megabyte: long texts and removed text are cut, saying so."""

from __future__ import annotations

from rlrm.reward_checks.show import SHOW_CHARS, sample_rows


def test_a_huge_truncation_is_cut_and_counted():
    removed = "line of a long response\n" * 40_000  # ~1 MB, the DisRM's max_length removed it
    r = {
        "prompt": [{"role": "user", "content": "q"}],
        "response": removed,
        "rendered_text": "tail",
        "truncation": {"tokens_removed": 200_000, "side": "left", "removed_text": removed},
        "tokens": 60,
        "max_length": 60,
        "score_token": None,
        "raw_score_float32": "0.5",
        "score": 0.5,
    }
    rows = dict(sample_rows(r))
    shown = rows["truncation"]
    assert len(shown) < 2 * SHOW_CHARS  # before: all 40,000 lines
    assert f"{len(removed) - SHOW_CHARS} more chars" in shown and "more lines, cut here; --json has them" in shown
    assert len(rows["response"]) < 2 * SHOW_CHARS + 200
