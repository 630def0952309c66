"""vLLM's rollout log-probs come after top-p/top-k filtering; the actor's before. A profile that would train on
them unrecomputed (off-policy modes, recompute_old_log_prob=never) with filtering on is refused in one line."""

from __future__ import annotations

import pytest

from rlrm.config.loader import load_profile
from rlrm.errors import ConfigError

VLLM = ["rollout.backend=server", "rollout.server.backend=vllm"]


@pytest.mark.parametrize(
    ("extra", "where"),
    [
        (["rollout.top_p=0.9", "trainer.mode=one-step-off"], "trainer.mode=one-step-off"),
        (["rollout.top_k=20", "trainer.mode=fully-async"], "trainer.mode=fully-async"),
        (["rollout.top_p=0.9", "actor.recompute_old_log_prob=never"], "actor.recompute_old_log_prob=never"),
    ],
)
def test_filtering_where_vllm_log_probs_are_trained_on_is_refused(extra, where):
    with pytest.raises(ConfigError, match=rf"on vLLM rollout servers with {where}: vLLM's log-probs come after"):
        load_profile("tiny-rule", [*VLLM, *extra])


@pytest.mark.parametrize(
    "extra",
    [
        ["rollout.top_p=0.9"],  # sync, recompute auto: the actor recomputes them
        ["trainer.mode=one-step-off"],  # no filtering
        ["rollout.top_p=0.9", "trainer.mode=one-step-off", "rollout.server.backend=embedded"],
    ],
)
def test_recomputed_or_unfiltered_log_probs_pass(extra):
    load_profile("tiny-rule", [*VLLM, *extra])
