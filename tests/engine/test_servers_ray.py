"""One profile describes a multi-node run: on a two-node `ray.cluster_utils.Cluster`, one actor rank per node, the
rollout server placed on node 1 and the DisRM reward server on node 2 (by custom resources), 3 steps end to end."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import re

import pytest

from rlrm.config.loader import load_profile
from rlrm.engine.trainer import start_run, train

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="ray not installed (extra: ray)"),
]

SMALL = ["data.train_batch_size=4", "actor.mini_batch_size=2", "rollout.n=4", "rollout.max_new_tokens=12",
         "trainer.val_every=0", "trainer.val_before_train=false", "trainer.save_every=0", "trainer.num_threads=1",
         "trainer.total_steps=3", "logging.console=none"]  # fmt: skip
PLACED = ["actor.world_size=2", "actor.ranks_on=ray", "actor.placement=STRICT_SPREAD",
          "rollout.backend=server", "rollout.server.router=client", "rollout.server.threads=1",
          "rollout.server.launch_on=ray", "rollout.server.node_resource=rollout_host",
          "reward.server.launch_on=ray", "reward.server.node_resource=reward_host"]  # fmt: skip


@pytest.fixture(scope="module")
def two_nodes():
    """Node 1 (the head) offers `rollout_host`, node 2 `reward_host`; 2 CPUs each: a rank and a server."""
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    import ray
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2, "include_dashboard": False,
                                                            "resources": {"rollout_host": 1}})
    second = cluster.add_node(num_cpus=2, resources={"reward_host": 1})
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, log_to_driver=False)
    try:
        yield cluster.head_node.node_id, second.node_id
    finally:
        ray.shutdown()
        cluster.shutdown()


def test_ranks_rollout_and_reward_servers_run_where_the_profile_puts_them(two_nodes, tmp_path, capfd, tiny_policy_path):
    import ray

    first, second = two_nodes
    run = start_run(load_profile("tiny-disrm", [*SMALL, *PLACED]), tmp_path / "placed")
    assert train(run).last_step == 3
    err = capfd.readouterr().err.splitlines()

    ranks = next(x for x in err if x.startswith("actor: 2 ranks (ray)"))
    assert len(set(re.findall(r"rank \d on (\S+)", ranks))) == 2, ranks  # one rank on each node
    rollout = next(x for x in err if x.startswith("rollout.server: 1 replica (ray): replica 0 on "))
    reward = next(x for x in err if x.startswith("reward.server: 1 replica (ray): replica 0 on "))
    assert f"({first[:12]})" in rollout and f"({second[:12]})" in reward, (rollout, reward)

    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3]
    for row in rows:  # every score came from the DisRM server on node 2, none substituted
        assert row.get("reward/failures", 0) == 0 and row.get("reward/defaulted", 0) == 0, row
        assert math.isfinite(row["critic/score/mean"]) and row["critic/score/max"] > row["critic/score/min"]
        assert math.isfinite(row["actor/pg_loss"]) and row["actor/grad_norm"] > 0
    # the run's weights reached the rollout replica on node 1 after every update (SGLang's weight version)
    assert rows[-1].get("timing_s/update_weights", 0) > 0

    # teardown: both replicas stopped with the run (their owning actors killed, placement groups removed)
    import httpx

    for line in (rollout, reward):
        url = re.search(r" at (http://\S+)", line).group(1)
        with pytest.raises(httpx.ConnectError):
            httpx.get(url + "/health", timeout=5.0)
    groups = ray.util.placement_group_table().values()
    assert all(g["state"] == "REMOVED" for g in groups), [g["state"] for g in groups]
