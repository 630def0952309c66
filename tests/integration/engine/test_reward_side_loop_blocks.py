"""An async reward that blocks its event loop (rlrm/engine/rewards/side_loop.py) fails its own sample, not the
others: once a call on a loop times out, new calls and retries run elsewhere until that loop answers again.

Runs threads that stay blocked for the test's length (daemon threads: the process exits without them).
"""

from __future__ import annotations

import asyncio
import time

import pytest

from rlrm.config.reward import RewardConfig
from rlrm.engine.rewards.base import RewardSample
from rlrm.engine.rewards.factory import build_reward_fn
from rlrm.engine.rewards.loop import RewardLoop
from rlrm.engine.rewards.side_loop import SideLoop

BLOCKS_ON_ONE = """
import asyncio, time

async def compute_score(data_source, solution_str, ground_truth, extra_info):
    if solution_str == "hang":
        time.sleep(20)  # blocks its event loop: a sync call inside async def
    await asyncio.sleep(0.01)
    return 1.0
"""


def test_one_sample_that_blocks_the_loop_fails_only_itself(tmp_path):
    path = tmp_path / "blocks.py"
    path.write_text(BLOCKS_ON_ONE)
    cfg = RewardConfig(
        kind="custom",
        custom={"path": str(path)},
        attempt_timeout_s=1.0,
        max_retries=1,
        backoff_s=0.1,
        on_failure="default",
    )
    loop = RewardLoop(build_reward_fn(cfg), cfg)
    texts = ["hang"] + ["ok"] * 7
    samples = [RewardSample(f"p{i}", i, "d", [{"role": "user", "content": "q"}], t, "3") for i, t in enumerate(texts)]
    results = asyncio.run(loop.score_all(samples))
    metrics = loop.take_metrics()
    # the 7 others were stuck behind the blocker on its loop: their first attempts time out, their retries
    # (which the blocker's retry would block again on a shared fresh loop) answer in 10 ms each
    assert [r.score for r in results[1:]] == [1.0] * 7
    assert results[0].extra["reward_failed"] and metrics["reward/failures"] == 1


def test_a_loop_that_answers_after_a_timeout_serves_again_and_a_stand_in_took_the_calls_meanwhile():
    side = SideLoop("fn", grace_s=5.0)

    async def loop_id():
        return id(asyncio.get_running_loop())

    async def slow_to_cancel():
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            time.sleep(1.5)  # cleanup that holds its loop for a while: no answer to the health check yet
            raise

    async def main():
        home = await side.call(loop_id)
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(side.call(slow_to_cancel), 0.1)
        started = time.perf_counter()
        during = await side.call(loop_id)  # after SETTLE_S, not behind the cleanup: a stand-in loop of its own
        during_s = time.perf_counter() - started
        await asyncio.sleep(2.5)  # the cleanup ended; the check's no-op was answered
        return home, during, during_s, await side.call(loop_id)

    home, during, during_s, after = asyncio.run(main())
    assert during != home and during_s < 1.0
    assert (
        after == home and side.abandoned == 0
    )  # loop-bound state a function keeps survives a timeout on a healthy loop


def test_the_next_call_after_a_timeout_on_a_healthy_loop_stays_on_the_functions_loop():
    # a function that only awaited something that never ends leaves its loop healthy: the next sample's call must
    # run there, where its loop-bound state (an aiohttp session kept between calls) lives, not on a stand-in
    side = SideLoop("fn", grace_s=5.0)
    loops = []

    async def fn(hang):
        loops.append(asyncio.get_running_loop())
        if hang:
            await asyncio.sleep(30)
        return 1.0

    async def main():
        await side.call(fn, False)
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(side.call(fn, True), 0.2)
        await side.call(fn, False)  # another sample, at once

    asyncio.run(main())
    assert loops[2] is loops[0]
