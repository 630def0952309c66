"""The legacy FSDP2 scorer (world size 1, in this process) against a plain forward, and bad models."""

from __future__ import annotations

import pytest
import torch

from rlrm.errors import ConfigError, ModelError
from rlrm.parity.inputs import encode_samples
from rlrm.parity.legacy import LegacyConfig
from rlrm.parity.workers import LegacyWorkerGroup, check_world_size


def plain_scores(path, ids) -> torch.Tensor:
    """One unpadded forward per sample: the score HF's classifier pools at the last token."""
    from transformers import AutoModelForSequenceClassification

    model = AutoModelForSequenceClassification.from_pretrained(path).eval()
    with torch.no_grad():
        return torch.tensor([model(input_ids=torch.tensor([s])).logits[0, 0].item() for s in ids])


@pytest.mark.parametrize(
    "batching",
    [{"micro_batch_size": 5}, {"max_tokens_per_batch": 150}, {"rmpad": True, "micro_batch_size": 7}],
    ids=["count", "token-budget", "rmpad"],
)
def test_fp32_legacy_scores_match_a_plain_forward(random_disrm_path, arithmetic_samples, batching):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(random_disrm_path)
    enc = encode_samples(tok, arithmetic_samples, max_length=64)
    assert any(enc.truncated) and not all(enc.truncated)  # mixed lengths, some cut to 64
    cfg = LegacyConfig(str(random_disrm_path), dtype="fp32", pad_token_id=tok.pad_token_id, threads=1, **batching)
    with LegacyWorkerGroup(cfg) as group:
        out = group.score(enc.ids, enc.response_tokens)
    assert out.token_level.dtype == torch.float32
    assert out.token_level.shape == (len(enc.ids), max(enc.response_tokens))
    # each score sits on its response's last token, nothing else is set
    assert (out.token_level != 0).sum(-1).tolist() == [1] * len(enc.ids)
    rows = torch.arange(len(enc.ids))
    assert torch.equal(out.token_level[rows, torch.tensor(enc.response_tokens) - 1], out.scores)
    assert out.scores.tolist() == pytest.approx(plain_scores(random_disrm_path, enc.ids).tolist(), abs=1e-5)


def test_a_causal_lm_or_several_labels_is_not_a_disrm(tiny_policy_path, tmp_path):
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from rlrm.parity.legacy import load_token_scorer
    from rlrm.parity.options import check_reward_model

    with pytest.raises(ModelError, match="is a Qwen2ForCausalLM, not a sequence classifier"):
        check_reward_model(str(tiny_policy_path))
    with pytest.raises(ModelError, match="no trained classification head"):
        load_token_scorer(str(tiny_policy_path))  # loads, but the score head would be random
    two = AutoModelForSequenceClassification.from_pretrained(tiny_policy_path, num_labels=2)
    two.save_pretrained(tmp_path)
    AutoTokenizer.from_pretrained(tiny_policy_path).save_pretrained(tmp_path)
    with pytest.raises(ModelError, match="num_labels=2"):
        check_reward_model(str(tmp_path))
    with pytest.raises(ModelError, match="num_labels=2"):
        load_token_scorer(str(tmp_path))


def test_world_size_beyond_the_cores_is_refused():
    import os

    with pytest.raises(ConfigError, match="needs a core per gloo rank"):
        check_world_size((os.cpu_count() or 1) + 1, "cpu")
