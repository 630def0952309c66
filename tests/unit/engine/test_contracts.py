"""The contracts the trainer relies on (rlrm/inference/base.py, rlrm/engine/actor/base.py): every implementation
offers every member, so the trainer never asks which kind it holds."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from rlrm.config.loader import load_profile
from rlrm.config.schema import ActorConfig
from rlrm.engine.actor.actor import Actor
from rlrm.engine.actor.base import PolicyActor
from rlrm.engine.actor.group import RankGroupActor
from rlrm.inference.base import RolloutEngine
from rlrm.inference.hf import HFRolloutEngine
from rlrm.launch.client.rollout_engine import ServerRolloutEngine


def members(protocol: type) -> set[str]:
    """The names a Protocol declares: its methods, properties and annotated attributes."""
    declared = {n for n in vars(protocol) if not n.startswith("_")} | set(getattr(protocol, "__annotations__", {}))
    return declared - {"_is_protocol", "_is_runtime_protocol"}


def test_the_protocols_declare_what_the_trainer_used_to_probe_for():
    assert {"start", "take_metrics", "take_busy_intervals", "dtype", "generate", "update_weights", "close"} <= members(
        RolloutEngine
    )
    assert {"close", "broken", "peak_memory_gb", "write_shards", "has_ref_model", "dtype"} <= members(PolicyActor)


@pytest.mark.parametrize("engine", [HFRolloutEngine, ServerRolloutEngine])
def test_both_rollout_engines_offer_the_whole_engine_contract(engine):
    missing = sorted(n for n in members(RolloutEngine) if not hasattr(engine, n))
    assert missing == []


def test_both_actor_kinds_offer_the_whole_actor_contract(model):
    in_process = Actor(model, None, ActorConfig(), temperature=1.0, total_steps=1, n=2)
    profile = load_profile("tiny-rule", ["actor.use_kl_loss=true"])
    ranks = SimpleNamespace(world_size=2, spec=SimpleNamespace(device="cpu"), broken=None)
    on_ranks = RankGroupActor(ranks, model, profile)
    for actor in (in_process, on_ranks):
        missing = sorted(n for n in members(PolicyActor) if not hasattr(actor, n))
        assert missing == [], type(actor).__name__
    # "has a reference model" is a property of its own, not a placeholder object
    assert in_process.has_ref_model is False and on_ranks.has_ref_model is True


def test_the_in_process_actor_has_nothing_to_close_measure_or_shard(model, tmp_path):
    ref = Actor(model, model, ActorConfig(), temperature=1.0, total_steps=1, n=2)
    assert ref.has_ref_model is True
    assert ref.broken is None and ref.peak_memory_gb() is None
    ref.write_shards(tmp_path)
    ref.close()
    assert list(tmp_path.iterdir()) == []  # the checkpoint's model/ and state.pt hold everything
