"""rlrm.stats.quantile: numpy's default (linear) quantile, by hand and against numpy bit for bit."""

from __future__ import annotations

import random

import numpy as np
import pytest

from rlrm.stats import quantile


def test_linear_interpolation_between_the_closest_ranks():
    values = [4.0, 1.0, 3.0, 2.0]  # sorted 1 2 3 4; position (n - 1) * q = 3q
    assert quantile(values, 0.0) == 1.0 and quantile(values, 1.0) == 4.0
    assert quantile(values, 0.5) == 2.5  # position 1.5: halfway between 2 and 3
    assert quantile(values, 0.9) == pytest.approx(3.7)  # position 2.7: 3 + 0.7 * (4 - 3)
    assert quantile([5.0], 0.99) == 5.0
    # nearest rank (the reward loop's old p99) would give 100 here, the largest value; linear gives
    # 1 + 0.99 * 99 = 99.01 on 1..100
    assert quantile(range(1, 101), 0.99) == pytest.approx(99.01)


def test_the_same_bits_as_numpy():
    rng = random.Random(0)
    for _ in range(2000):
        values = [rng.lognormvariate(0, 3) * rng.choice((1, -1)) for _ in range(rng.randint(1, 40))]
        q = rng.choice((0.0, 0.5, 0.9, 0.99, 1.0, rng.random()))
        assert quantile(values, q) == float(np.quantile(np.array(values), q))


def test_no_values_or_a_q_outside_0_1_is_an_error():
    with pytest.raises(ValueError, match="no values"):
        quantile([], 0.5)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        quantile([1.0], 1.5)


def test_wilson_interval_by_hand():
    from rlrm.stats import wilson_interval

    # 0 of 30: center = (0 + z^2/60) / (1 + z^2/30) = half: [0, (z^2/30) / (1 + z^2/30)] = [0, 0.12805/1.12805]
    low, high = wilson_interval(0, 30)
    assert low == 0.0 and high == pytest.approx(0.113514, abs=1e-6)
    # 5 of 10 (Wilson's own example shape): symmetric around 0.5, z = 1.96 -> [0.2366, 0.7634]
    low, high = wilson_interval(5, 10)
    assert (low, high) == (pytest.approx(0.236593, abs=1e-6), pytest.approx(0.763407, abs=1e-6))
    assert wilson_interval(30, 30) == (pytest.approx(1 - 0.113514, abs=1e-6), 1.0)
    assert all(map(np.isnan, wilson_interval(0, 0)))
