"""kill -9 of the only rollout replica: requests wait for the supervisor's restart instead of failing at once."""

from __future__ import annotations

import asyncio

from rlrm.config.servers import RolloutServerConfig
from rlrm.inference.base import SamplingParams
from rlrm.inference.weight_files import WeightFiles
from rlrm.launch.client.rollout_engine import ServerRolloutEngine
from rlrm.launch.client.wire import SGLangWire
from rlrm.launch.fleet.server_fleet import ServerFleet


def test_requests_during_the_restart_of_the_only_replica_wait_for_it(tiny_policy_path, tmp_path):
    fleet = ServerFleet(
        RolloutServerConfig(router="client", threads=1, replicas=1, max_retries=1).fleet_spec(),
        role="policy",
        model_path=str(tiny_policy_path),
    )
    engine = ServerRolloutEngine(
        fleet, SGLangWire(), WeightFiles(str(tmp_path)), request_timeout_s=60, sync_timeout_s=60
    )
    prompts = [[5, 6, 7 + i] for i in range(4)]
    sampling = [SamplingParams(max_new_tokens=6, seed=i) for i in range(4)]

    async def scenario():
        await engine.start()
        try:
            reference = await asyncio.gather(*(engine.generate(p, s) for p, s in zip(prompts, sampling)))
            engine.fleet.pool.servers[0].kill()  # kill -9 of the only replica's process group
            # before: both attempts (max_retries=1) hit the dead port at once and the step failed
            after = await asyncio.gather(*(engine.generate(p, s) for p, s in zip(prompts, sampling)))
            return reference, after, engine.take_metrics()
        finally:
            await engine.close()

    reference, after, metrics = asyncio.run(scenario())
    assert [c.token_ids for c in after] == [c.token_ids for c in reference]  # served again, the same weights
    assert metrics["rollout/replica_restarts"] == 1
