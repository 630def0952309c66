"""The DisRM client's inputs from the reward model's folder: a tokenizer without a chat template is refused at once
(every sample failed after a step's rollout), and conversations are cut to the model's positions when it has fewer
than reward.disrm.max_length (the servers refused each longer one: 8 of 8 samples defaulted)."""

from __future__ import annotations

import asyncio
import shutil

import pytest

from rlrm.config.reward import RewardConfig
from rlrm.engine.rewards.base import RewardSample
from rlrm.engine.rewards.disrm import load_disrm_tokenizer, make_disrm_reward
from rlrm.errors import ModelError
from rlrm.inference.loading import check_chat_template


def _cfg(path, **disrm) -> RewardConfig:
    return RewardConfig(kind="disrm", server={"model": str(path)}, disrm=disrm)


class Recorder:
    """A balancer that answers every /classify with one score and keeps what was sent."""

    def __init__(self):
        self.sent: list[list[int]] = []

    async def post(self, path, body, timeout_s):
        self.sent.append(body["input"])
        return {"data": [{"probs": [0.25]}]}


def _sample(words: int) -> RewardSample:
    prompt = [{"role": "user", "content": "What is 2 + 2?"}]
    return RewardSample("p/0", 0, "openai/gsm8k", prompt, " ".join(["four"] * words), "4")


def test_conversations_are_cut_to_the_models_positions_when_it_has_fewer_than_max_length(random_disrm_path, capsys):
    cfg = _cfg(random_disrm_path)  # max_length 512; the DisRM has 64 positions
    tokenizer, limit = load_disrm_tokenizer(cfg, str(random_disrm_path))
    assert limit == 64 and "512 is more than the 64 tokens the DisRM takes" in capsys.readouterr().err
    balancer = Recorder()
    fn = make_disrm_reward(cfg, balancer, tokenizer, limit)
    long, short = asyncio.run(fn(_sample(80))), asyncio.run(fn(_sample(2)))
    assert len(balancer.sent[0]) == 64 and long.extra["disrm_truncated"] is True
    assert len(balancer.sent[1]) < 64 and short.extra["disrm_truncated"] is False
    assert long.score == short.score == 0.25

    refusing = _cfg(random_disrm_path, too_long="error")
    fn = make_disrm_reward(refusing, balancer, *load_disrm_tokenizer(refusing, str(random_disrm_path)))
    assert "conversations are refused over 64 tokens" in capsys.readouterr().err
    with pytest.raises(Exception, match=r"more than the DisRM takes \(64\)"):
        asyncio.run(fn(_sample(80)))

    fits = _cfg(random_disrm_path, max_length=32)
    assert load_disrm_tokenizer(fits, str(random_disrm_path))[1] == 32 and not capsys.readouterr().err


def test_a_disrm_whose_tokenizer_has_no_chat_template_is_refused_before_anything_scores(random_disrm_path, tmp_path):
    plain = tmp_path / "plain-text-rm"
    shutil.copytree(random_disrm_path, plain)
    (plain / "chat_template.jinja").unlink()  # a classifier trained on plain text
    check_chat_template(str(random_disrm_path), "reward.server.model")  # the template is there: nothing said
    with pytest.raises(ModelError, match=r"^reward.server.model .*plain-text-rm.* has no chat template"):
        check_chat_template(str(plain), "reward.server.model")
    with pytest.raises(ModelError, match="has no chat template"):
        load_disrm_tokenizer(_cfg(plain), str(plain))


def test_a_run_with_such_a_disrm_is_refused_before_its_folder_exists(random_disrm_path, tmp_path):
    from rlrm.config.loader import load_profile
    from rlrm.engine.run_checks import check_inputs

    plain = tmp_path / "plain-text-rm"
    shutil.copytree(random_disrm_path, plain)
    (plain / "chat_template.jinja").unlink()
    profile = load_profile("tiny-disrm", overrides=[f"reward.server.model={plain}", "reward.guard.on_canary=off"])
    with pytest.raises(ModelError, match=r"^reward.server.model \(the DisRM\) .* has no chat template"):
        check_inputs(profile)


def test_a_folder_holding_only_the_tokenizer_sets_no_limit(random_disrm_path, tmp_path, capsys):
    # servers of your own (reward.server.addresses) with reward.server.model naming the tokenizer's folder: it has no
    # config.json, and reading one failed the reward as it was built
    only = tmp_path / "tokenizer-only"
    shutil.copytree(random_disrm_path, only)
    (only / "config.json").unlink()
    for weights in only.glob("*.safetensors"):
        weights.unlink()
    assert load_disrm_tokenizer(_cfg(only), str(only))[1] == 512 and not capsys.readouterr().err


def test_only_the_vllm_servers_rlrm_launches_cap_a_long_disrm_at_4096(random_disrm_path, tmp_path, capsys):
    # the embedded server, SGLang, servers of your own and the legacy scorer take the model's positions: a
    # 131k-position DisRM with max_length 8192 was cut to 4096 whatever served it
    import json

    long = tmp_path / "long-rm"
    shutil.copytree(random_disrm_path, long)
    config = json.loads((long / "config.json").read_text())
    (long / "config.json").write_text(json.dumps({**config, "max_position_embeddings": 131072}))
    assert load_disrm_tokenizer(_cfg(long, max_length=8192), str(long))[1] == 8192
    vllm = RewardConfig(kind="disrm", server={"model": str(long), "backend": "vllm"}, disrm={"max_length": 8192})
    assert load_disrm_tokenizer(vllm, str(long))[1] == 4096
    assert "at most 4096 on the vLLM servers rlrm launches" in capsys.readouterr().err
