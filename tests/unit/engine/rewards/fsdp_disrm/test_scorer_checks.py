"""The in-trainer DisRM scorer's checks before it starts workers: not a DisRM, or more ranks than cores."""

from __future__ import annotations

import os

import pytest

from rlrm.engine.executor.world_size import check_world_size
from rlrm.engine.rewards.fsdp_disrm.rank import load_token_scorer
from rlrm.errors import ConfigError, ModelError


def test_a_causal_lm_or_several_labels_is_not_a_disrm(tiny_policy_path, tmp_path):
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    with pytest.raises(ModelError, match="no trained classification head"):
        load_token_scorer(str(tiny_policy_path))  # loads, but the score head would be random
    two = AutoModelForSequenceClassification.from_pretrained(tiny_policy_path, num_labels=2)
    two.save_pretrained(tmp_path)
    AutoTokenizer.from_pretrained(tiny_policy_path).save_pretrained(tmp_path)
    with pytest.raises(ModelError, match="num_labels=2"):
        load_token_scorer(str(tmp_path))


def test_world_size_beyond_the_cores_is_refused():
    with pytest.raises(ConfigError, match="needs a core per gloo rank"):
        check_world_size((os.cpu_count() or 1) + 1, "cpu")
