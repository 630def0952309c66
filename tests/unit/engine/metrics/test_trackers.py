"""The trackers setting and the rows trackers get, without a training run."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from rlrm.config.loader import load_profile

ROWS = [
    {"step": 0, "val/accuracy": 0.25},
    {
        "step": 1,
        "critic/score/mean": 0.5,
        "response_length/mean": 13.0,
        "reward/failures": 0,
        "note": "text",
        "flag": True,
    },
    {
        "step": 2,
        "critic/score/mean": 0.75,
        "response_length/mean": 14.5,
        "reward/failures": 2,
        "actor/grad_norm": math.nan,
    },
]


def tensorboard_scalars(folder: Path) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(folder))
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def test_trackers_setting():
    assert load_profile("tiny-rule", ["logging.trackers=mlflow"]).logging.trackers == ["mlflow"]
    assert load_profile("tiny-rule", ["logging.trackers=[wandb, wandb]"]).logging.trackers == ["wandb"]
    with pytest.raises(Exception, match="logging.trackers"):
        load_profile("tiny-rule", ["logging.trackers=[neptune]"])


def test_mlflow_names_stay_apart_whatever_order_keys_come_in():
    # 'reward/a@b' after 'reward/a_b_2' and 'reward/a_b' looped forever: the suffix did not move
    from rlrm.engine.metrics.trackers import MlflowTracker

    tracker = object.__new__(MlflowTracker)
    tracker._names = {}
    names = [tracker._name(k) for k in ("reward/a_b_2", "reward/a_b", "reward/a@b", "reward/a#b", "reward/a_b_2")]
    assert names == ["reward/a_b_2", "reward/a_b", "reward/a_b_1", "reward/a_b_3", "reward/a_b_2"]
