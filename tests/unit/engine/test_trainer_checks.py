"""Trainer checks before a run starts: colocated placement needs sync mode and servers rlrm can put to sleep."""

from __future__ import annotations

import pytest

from rlrm.config.loader import load_profile


def test_colocated_placement_needs_sync_mode():
    from rlrm.errors import ConfigError

    with pytest.raises(ConfigError, match="needs trainer.mode=sync"):
        load_profile(
            "tiny-rule",
            ["trainer.mode=stream", "reward.kind=disrm", "reward.server.model=/m", "reward.placement=colocated"],
        )


@pytest.mark.parametrize(
    ("settings", "said"),
    [
        (["reward.server.backend=vllm"], "not on reward.server.backend=vllm: use backend=embedded"),
        (["reward.server.backend=sglang"], "not on reward.server.backend=sglang: use backend=embedded"),
        (["reward.disrm.scorer=legacy"], "the legacy DisRM in the trainer has none to sleep"),
    ],
)
def test_colocated_placement_needs_reward_servers_rlrm_can_put_to_sleep(settings, said):
    """vLLM serves /sleep only in its dev mode with --enable-sleep-mode, SGLang has none: the run stopped at the
    first /sleep; the legacy DisRM has no server, and stayed on the accelerator while timing as if it slept."""
    from rlrm.errors import ConfigError

    base = ["reward.kind=disrm", "reward.server.model=/m", "reward.placement=colocated"]
    with pytest.raises(ConfigError, match=said):
        load_profile("tiny-rule", [*base, *settings])
    assert load_profile("tiny-rule", base).reward.placement == "colocated"


def test_parity_scores_a_colocated_profiles_reward_model_standalone():
    """Parity scores while nothing else runs: a colocated served side would sleep (503) through it all."""
    from rlrm.config.reward import RewardConfig
    from rlrm.parity.loop import loop_reward_config

    base = RewardConfig(kind="disrm", placement="colocated", server={"model": "/m"})
    assert loop_reward_config(base, "/m", dtype="fp32", max_length=64).placement == "standalone"
    # every score measured now (and timed), through this process's client (--template's tokenizer): a profile's
    # reward cache, keyed on the folder's contract, and its Ray workers would have used the folder's template
    shared = RewardConfig(kind="disrm", server={"model": "/m"}, cache={"path": "/tmp/c.sqlite"}, executor="ray")
    loop = loop_reward_config(shared, "/m", dtype="fp32", max_length=64)
    assert not loop.cache.active(loop.kind, loop.samples_verdicts) and loop.executor == "local"


def test_a_folder_is_discarded_only_when_nothing_was_trained(tmp_path):
    """A stopped run without a checkpoint: step-0 rows alone are nothing to keep; a trained step's row is the
    run's record (a second Ctrl-C during the last save, a full disk) and the folder stays."""
    from rlrm.engine.run_folder import discard_unresumable

    for rows, kept in (('{"step": 0, "val/accuracy": 0.1}\n', False), ('{"step": 0}\n{"step": 1}\n', True)):
        run = tmp_path / f"run-{kept}"
        run.mkdir()
        (run / "config.yaml").write_text("trainer: {}\n")
        (run / "metrics.jsonl").write_text(rows)
        assert discard_unresumable(run) is not kept
        assert run.exists() is kept
    run = tmp_path / "hung"  # step 1's rewards hung and failed it: the hung samples are the record to replay
    run.mkdir()
    (run / "config.yaml").write_text("trainer: {}\n")
    (run / "hung_rewards.jsonl").write_text('{"step": 1, "attempt": 1}\n')
    assert discard_unresumable(run) is False and run.exists()
