"""`rlrm parity disrm --train-steps`: the two runs' reward curves compared step by step."""

from __future__ import annotations

import pytest

from rlrm.parity.train_curves import compare_curves


def test_a_step_whose_score_read_back_as_null_is_left_out():
    # a non-finite critic/score/mean is written as null and read back as None; before: None - float raised
    # TypeError after both trainings had run
    legacy = [{"step": 1, "critic/score/mean": 0.5}, {"step": 2, "critic/score/mean": None}]
    legacy.append({"step": 3, "critic/score/mean": 0.7})
    loop = [{"step": s, "critic/score/mean": v} for s, v in ((1, 0.4), (2, 0.6), (3, 0.5))]
    out = compare_curves(legacy, loop)
    assert out["steps"] == [1, 3]
    assert out["max_abs_diff"] == pytest.approx(0.2)  # |0.7 - 0.5|; step 1's is 0.1
