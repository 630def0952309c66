"""Actor ranks as Ray actors on a two-node `ray.cluster_utils.Cluster`: one rank per node, reward workers on
both nodes, three tiny-rule steps that equal the same steps on one rank; a rank killed with SIGKILL is named."""

from __future__ import annotations

import importlib.util
import json
import os
import re

import pytest

from rlrm.config.loader import load_profile
from rlrm.engine.trainer import start_run, train

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="ray not installed (extra: ray)"),
]

SMALL = [
    "data.train_batch_size=4",
    "actor.mini_batch_size=2",
    "rollout.n=4",
    "trainer.val_every=0",
    "trainer.num_threads=1",
    "trainer.total_steps=3",
    "logging.console=none",
]
TIMING = ("timing_s/", "cpu_s/", "perf/", "idle/", "reward/latency")


@pytest.fixture(scope="module")
def two_nodes():
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    import ray
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, log_to_driver=False)
    try:
        yield cluster
    finally:
        ray.shutdown()
        cluster.shutdown()


def _rows(run):
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def test_ranks_one_per_node_train_as_one_rank(two_nodes, tmp_path, capfd):
    ray_sets = [
        "actor.world_size=2",
        "actor.ranks_on=ray",
        "actor.placement=STRICT_SPREAD",
        "reward.executor=ray",
        "reward.num_workers=2",
    ]
    spread = start_run(load_profile("tiny-rule", overrides=[*SMALL, *ray_sets]), tmp_path / "ray")
    train(spread)
    line = next(x for x in capfd.readouterr().err.splitlines() if x.startswith("actor: 2 ranks (ray)"))
    nodes = re.findall(r"rank \d on (\S+)", line)
    assert len(nodes) == 2 and nodes[0] != nodes[1], line  # one rank on each node (host/ip/node id)

    one = start_run(load_profile("tiny-rule", overrides=SMALL), tmp_path / "one")
    train(one)
    a, b = _rows(one), _rows(spread)
    assert [r["step"] for r in b] == [1, 2, 3]
    for x, y in zip(a, b):
        for key, value in x.items():
            if not key.startswith(TIMING) and isinstance(value, (int, float)):
                assert y[key] == pytest.approx(value, abs=1e-5), (x["step"], key)


def test_a_rank_killed_with_sigkill_is_named_with_its_node(two_nodes, tmp_path):
    import signal
    import time

    import ray
    import torch

    from rlrm.engine.actor.batch import collate
    from rlrm.engine.actor.group import RankGroupActor
    from rlrm.engine.actor.rank import RankSpec
    from rlrm.engine.executor.rank_procs import RankError
    from rlrm.engine.executor.ray_ranks import RayRanks
    from rlrm.engine.models.tiny import resolve_model_path
    from rlrm.inference.base import Completion
    from rlrm.inference.loading import load_causal_lm

    path = resolve_model_path("tiny:policy")
    profile = load_profile(
        "tiny-rule",
        overrides=[
            *SMALL,
            "actor.world_size=2",
            "actor.ranks_on=ray",
            "actor.placement=STRICT_SPREAD",
            "actor.collective_timeout_s=30",
        ],
    )
    ranks = RayRanks(RankSpec(profile, path, None, world_size=2, device="cpu", threads=1))
    ranks.start()
    actor = RankGroupActor(ranks, load_causal_lm(path, "float32", "cpu"), profile)
    try:
        batch = collate([Completion([5, 6, 7], [8, 9], [-1.0, -1.0], "stop")] * 4, pad_token_id=0)
        batch.group_ids = torch.tensor([0, 0, 1, 1])
        assert actor.compute_old_log_prob(batch).shape == (4, 2)
        pid = ray.get(ranks.actors[1].__ray_call__.remote(lambda self: os.getpid()))
        os.kill(pid, signal.SIGKILL)
        start = time.monotonic()
        with pytest.raises(RankError, match=rf"actor rank 1 on node {re.escape(ranks.nodes[1])} died"):
            actor.compute_old_log_prob(batch)
        assert time.monotonic() - start < 30
        with pytest.raises(RankError, match="stopped after an earlier failure"):
            actor.compute_old_log_prob(batch)
    finally:
        actor.close()
