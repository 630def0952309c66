"""Actor ranks without processes: batches split by whole groups, and more local ranks than cores refused before anything starts."""

from __future__ import annotations

import pytest
import torch

from rlrm.engine.actor.batch import collate
from rlrm.engine.actor.shards import gather_rows, split_for_ranks
from rlrm.inference.base import Completion

N = 4  # samples per prompt


def _completions():
    # 6 groups of 4: even groups answer with 1-3 tokens, odd ones with 9-14, so the ranks hold different
    # numbers of tokens; mini-batches of 3 groups go 2 + 1 to the two ranks, so they also hold different
    # numbers of sequences (the one-group rank padded with masked-out rows)
    gen = torch.Generator().manual_seed(3)
    out = []
    for g in range(6):
        prompt = torch.randint(5, 400, (6 + g,), generator=gen).tolist()
        for j in range(N):
            length = (1 + j % 3) if g % 2 == 0 else (9 + j + g // 2 * 2)
            tokens = torch.randint(5, 400, (length,), generator=gen).tolist()
            out.append(Completion(prompt, tokens, [-2.0] * length, "length"))
    return out


def test_split_keeps_groups_whole_and_pads_with_masked_rows(tiny_policy_path):
    batch = collate(_completions()[: 3 * N], pad_token_id=0)
    batch.group_ids = torch.arange(len(batch)) // N
    shards = split_for_ranks(batch, 2)
    assert [len(s.batch) for s in shards] == [8, 8]  # 3 groups: 2 + 1, the short shard padded
    assert sorted(r for s in shards for r in s.rows) == list(range(12))
    for s in shards:
        assert {int(batch.group_ids[r]) for r in s.rows} == {int(g) for g in s.batch.group_ids[: len(s.rows)]}
        assert len({int(batch.group_ids[r]) for r in s.rows}) * N == len(s.rows)  # whole groups
        assert s.batch.response_mask[len(s.rows) :].sum() == 0  # padding counts for nothing
    back = gather_rows([s.batch.response_mask for s in shards], shards, len(batch))
    assert torch.equal(back, batch.response_mask)


def test_more_local_ranks_than_cores_are_refused_before_anything_starts():
    import os

    from rlrm.config.loader import load_profile
    from rlrm.engine.run_checks import check_inputs
    from rlrm.errors import ConfigError

    too_many = (os.cpu_count() or 1) + 1
    profile = load_profile("tiny-rule", overrides=[f"actor.world_size={too_many}", "trainer.device=cpu"])
    with pytest.raises(ConfigError, match=rf"actor.world_size {too_many} on CPU needs a core per gloo rank"):
        check_inputs(profile)
    check_inputs(load_profile("tiny-rule", overrides=[f"actor.world_size={too_many}", "actor.ranks_on=ray"]))


def test_a_dev_shm_too_small_for_the_policy_is_refused_before_the_ranks_start(tmp_path, monkeypatch):
    # Docker's default 64 MB /dev/shm: the first weight sync failed with torch's "unable to allocate shared
    # memory(shm) ... No space left on device", naming neither /dev/shm nor --shm-size
    from collections import namedtuple

    import torch

    from rlrm.engine.actor import group
    from rlrm.errors import ConfigError

    model = torch.nn.Linear(1024, 1024)  # 4 MiB of float32 state
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(group.shutil, "disk_usage", lambda path: usage(2**30, 0, 2**20))
    with pytest.raises(ConfigError, match=r"has 1 MiB free and the actor ranks pass the policy's 4 MiB state"):
        group.check_shm_room(model, tmp_path)
    monkeypatch.setattr(group.shutil, "disk_usage", lambda path: usage(2**30, 0, 2**23))
    group.check_shm_room(model, tmp_path)  # 8 MiB: room
    group.check_shm_room(model, tmp_path / "none")  # no /dev/shm (macOS): nothing to check
