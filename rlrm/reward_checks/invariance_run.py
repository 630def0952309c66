"""`rlrm inspect reward --invariance`: the score-invariance check on the inspected samples, against the
server the reward loop just used (see `rlrm.engine.rewards.invariance`)."""

from __future__ import annotations

from rlrm.config.reward import RewardConfig
from rlrm.engine.rewards.base import RewardSample
from rlrm.engine.rewards.disrm import render_conversation
from rlrm.engine.rewards.invariance import InvarianceSettings, check_invariance


async def run_invariance(service, cfg: RewardConfig, samples: list[RewardSample], settings: InvarianceSettings) -> dict:
    """The samples rendered and cut as the DisRM client does, then scored in every batch setting."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(service.model_path)
    limit = cfg.disrm.max_length
    ids = [render_conversation(tokenizer, s.prompt, s.solution_str)[-limit:] for s in samples]
    return await check_invariance(
        service.balancer,
        cfg.server.request_model,
        ids,
        [s.uid for s in samples],
        settings,
        cfg.server.request_timeout_s,
        cfg.server.backend,
    )
