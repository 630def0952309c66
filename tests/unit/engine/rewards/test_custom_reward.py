"""Custom reward functions called in process: async functions with optional keywords, and bad settings named."""

from __future__ import annotations

import asyncio

import pytest

from rlrm.config.reward import RewardConfig
from rlrm.engine.rewards.base import RewardSample
from rlrm.engine.rewards.factory import build_reward_fn
from rlrm.engine.rewards.loop import RewardLoop
from rlrm.errors import ConfigError

SAMPLE = RewardSample(
    uid="p0",
    index=0,
    data_source="synthetic",
    prompt=[{"role": "user", "content": "q"}],
    solution_str="abcdef #### 4",
    ground_truth="4",
    extra_info={"k": 1},
)


def write(tmp_path, source: str):
    path = tmp_path / "my_reward.py"
    path.write_text(source)
    return path


def score(cfg: RewardConfig):
    loop = RewardLoop(build_reward_fn(cfg), cfg)
    result = asyncio.run(loop.score(SAMPLE))
    return result, loop.take_metrics()


def test_async_function_with_a_name_and_optional_keywords(tmp_path):
    path = write(
        tmp_path,
        "async def judge(data_source, solution_str, ground_truth, extra_info, reward_router_address=1):\n"
        "    return 2.0 if reward_router_address is None else -1.0\n",
    )
    result, _ = score(RewardConfig(kind="custom", custom={"path": str(path), "name": "judge"}))
    assert result.score == 2.0


def test_bad_custom_settings_are_named(tmp_path):
    with pytest.raises(ValueError, match="needs reward.custom.path"):
        RewardConfig(kind="custom")
    with pytest.raises(ValueError, match="is not a Python file"):
        RewardConfig(kind="custom", custom={"path": str(tmp_path / "missing.py")})
    path = write(tmp_path, "def other(*a):\n    return 1.0\n")
    with pytest.raises(ConfigError, match="'compute_score' is not a function in .*functions there: other"):
        build_reward_fn(RewardConfig(kind="custom", custom={"path": str(path)}))
