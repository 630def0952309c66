"""`rlrm parity disrm`'s check of the reward model, before anything is loaded or started."""

from __future__ import annotations

import pytest

from rlrm.errors import ModelError
from rlrm.parity.options import check_reward_model


def test_a_causal_lm_or_several_labels_is_not_a_disrm(tiny_policy_path, random_disrm_path, tmp_path):
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    assert check_reward_model(str(random_disrm_path)) == 64  # its positions
    with pytest.raises(ModelError, match="is a Qwen2ForCausalLM, not a sequence classifier"):
        check_reward_model(str(tiny_policy_path))
    two = AutoModelForSequenceClassification.from_pretrained(tiny_policy_path, num_labels=2)
    two.save_pretrained(tmp_path)
    AutoTokenizer.from_pretrained(tiny_policy_path).save_pretrained(tmp_path)
    with pytest.raises(ModelError, match="num_labels=2"):
        check_reward_model(str(tmp_path))
