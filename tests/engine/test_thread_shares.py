"""Generation beside the update shares the torch threads: each side gets its half, only where both run at once
in this process (rlrm/engine/thread_shares.py)."""

from __future__ import annotations

import pytest
import torch

from rlrm.config.loader import load_profile
from rlrm.engine.actor.actor import Actor
from rlrm.engine.thread_shares import split, thread_shares
from rlrm.engine.trainer import start_run, train
from rlrm.inference.hf import HFRolloutEngine

SMALL = [
    "data.train_batch_size=4",
    "actor.mini_batch_size=4",
    "actor.micro_batch_size=8",
    "rollout.n=4",
    "rollout.max_new_tokens=8",
    "trainer.val_every=0",
    "trainer.val_before_train=false",
    "trainer.save_every=0",
    "trainer.total_steps=2",
    "logging.console=none",
]


def test_split_gives_the_trainer_the_larger_half_and_each_at_least_one():
    assert [split(n) for n in (1, 2, 3, 4, 7)] == [(1, 1), (1, 1), (1, 2), (2, 2), (3, 4)]


@pytest.mark.parametrize(
    "sets, shares",
    [
        (["trainer.mode=fully-async"], (2, 2)),
        (["trainer.mode=one-step-off"], (2, 2)),
        (["trainer.mode=one-step-off", "trainer.num_threads=3"], (1, 2)),
        (["trainer.mode=fully-async", "trainer.max_staleness=0"], None),  # the rollouter never runs ahead
        (["trainer.mode=fully-async", "trainer.split_threads=false"], None),
        (["trainer.mode=fully-async", "actor.world_size=2"], None),  # the update runs in the ranks' processes
        (["trainer.mode=fully-async", "rollout.backend=server"], None),  # generation runs in the replicas
        (["trainer.mode=sync"], None),
        (["trainer.mode=stream"], None),
        (["trainer.mode=pipeline"], None),
    ],
)
def test_only_generation_beside_the_update_in_this_process_splits(sets, shares):
    profile = load_profile("tiny-rule", ["trainer.num_threads=4", *sets])
    assert thread_shares(profile) == shares


@pytest.mark.parametrize("mode, decode, update", [("fully-async", 1, 1), ("sync", 2, 2)])
def test_the_decode_loop_and_the_update_run_with_their_shares(
    tmp_path, tiny_policy_path, monkeypatch, mode, decode, update
):
    seen = {"decode": set(), "update": set()}
    run_batch, actor_update = HFRolloutEngine._run_batch, Actor.update

    def decoding(self, *args):
        seen["decode"].add(torch.get_num_threads())
        return run_batch(self, *args)

    def updating(self, *args, **kwargs):
        seen["update"].add(torch.get_num_threads())
        return actor_update(self, *args, **kwargs)

    monkeypatch.setattr(HFRolloutEngine, "_run_batch", decoding)
    monkeypatch.setattr(Actor, "update", updating)
    before = torch.get_num_threads()
    try:
        profile = load_profile("tiny-rule", [*SMALL, f"trainer.mode={mode}", "trainer.num_threads=2"])
        result = train(start_run(profile, tmp_path / mode))
    finally:
        torch.set_num_threads(before)
    assert result.last_step == 2
    assert seen == {"decode": {decode}, "update": {update}}
