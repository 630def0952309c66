"""A reward function that ends in a CancelledError of its own (a task it awaited was cancelled: an HTTP client's,
a gather's) is a failed sample, and the run's own stop of a sample's scoring (Ctrl-C, a mode's close()) stops it,
never read as the attempt's deadline. Each on the Python running the suite and as Python 3.10 runs it (`py310`:
the attempt in a task of its own, rlrm/engine/rewards/deadline.py `_within_task`, and every CancelledError read
as the task's own, as rlrm/engine/rewards/threads.py `being_cancelled` does before 3.11)."""

from __future__ import annotations

import asyncio

import pytest

import rlrm.engine.rewards.loop as loop_module
import rlrm.engine.rewards.side_loop as side_loop_module
from rlrm.config.reward import RewardConfig
from rlrm.engine.rewards.base import RewardSample
from rlrm.engine.rewards.deadline import _within_task
from rlrm.engine.rewards.factory import build_reward_fn
from rlrm.engine.rewards.loop import RewardLoop
from rlrm.engine.rewards.side_loop import SideLoop
from rlrm.engine.rewards.threads import FunctionCancelled

SAMPLE = RewardSample(
    uid="p0",
    index=0,
    data_source="t",
    prompt=[{"role": "user", "content": "Q?"}],
    solution_str="#### 3",
    ground_truth="3",
    extra_info={},
)


@pytest.fixture(params=["native", "py310"])
def python(request, monkeypatch) -> str:
    if request.param == "py310":
        monkeypatch.setattr(loop_module, "within", _within_task)
        for module in (loop_module, side_loop_module):
            monkeypatch.setattr(module, "being_cancelled", lambda: True, raising=False)
    return request.param


def _cfg(**kw) -> RewardConfig:
    return RewardConfig(**{"attempt_timeout_s": 5.0, "max_retries": 2, "backoff_s": 0.0, "num_workers": 2, **kw})


async def _scored(loop: RewardLoop) -> str:
    try:
        result = await loop.score(SAMPLE)
    except asyncio.CancelledError:
        return "escaped as CancelledError"
    return result.extra.get("reward_error", f"scored {result.score}")


@pytest.mark.parametrize(
    ("raised", "said"),
    [
        (None, "reward function fn raised CancelledError"),
        ("closed", "reward function fn raised CancelledError: closed"),
    ],
)
def test_a_functions_own_cancelled_error_is_a_failed_sample_not_the_runs_stop(python, raised, said):
    # it escaped RewardLoop.score on 3.10: sync read it as Ctrl-C, the overlapping modes waited for its group forever
    async def fn(sample):
        if raised is not None:
            raise asyncio.CancelledError(raised)
        inner = asyncio.ensure_future(asyncio.sleep(10))
        asyncio.get_running_loop().call_later(0.01, inner.cancel)  # a library cancels a task of its own
        return await inner

    loop = RewardLoop(fn, _cfg())
    assert asyncio.run(_scored(loop)) == said
    assert loop.take_metrics()["reward/failures"] == 1


@pytest.mark.parametrize(("timeout_s", "stop_after_s"), [(0.2, 0.1), (0.1, 0.2)])
def test_a_stopped_run_is_not_retried_nor_written_as_hung(python, timeout_s, stop_after_s):
    # 3.10 read the stop, once the deadline had fired during the function's cleanup, as a timeout: the sample was
    # tried twice more, written 3 times to hung_rewards.jsonl, and given a failed score
    calls = []

    async def fn(sample):
        calls.append(1)
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            await asyncio.sleep(0.3)  # its cleanup
            raise

    loop = RewardLoop(fn, _cfg(attempt_timeout_s=timeout_s))

    async def main():
        task = asyncio.ensure_future(loop.score(SAMPLE))
        await asyncio.sleep(stop_after_s)
        task.cancel()  # Ctrl-C, a mode's close()
        try:
            return f"returned {await task!r}"
        except asyncio.CancelledError:
            return "CancelledError"

    assert (asyncio.run(main()), len(calls), len(loop.take_hung())) == ("CancelledError", 1, 0)


CANCELLED = """
import asyncio


async def compute_score(data_source, solution_str, ground_truth, extra_info):
    raise asyncio.CancelledError()  # something it awaited was cancelled, not the run
"""


def test_an_async_functions_own_cancelled_error_on_its_side_loop_is_a_failed_sample(python, tmp_path):
    # reward.custom.isolation=thread: the function runs on a side loop (rlrm/engine/rewards/side_loop.py)
    path = tmp_path / "fn.py"
    path.write_text(CANCELLED)
    loop = RewardLoop(build_reward_fn(_cfg(kind="custom", custom={"path": str(path), "isolation": "thread"})), _cfg())
    said = asyncio.run(_scored(loop))
    assert said.startswith("reward function compute_score raised CancelledError") and said.endswith("CancelledError()")
    assert loop.take_metrics()["reward/failures"] == 1


def test_the_side_loop_tells_a_functions_own_cancelled_error_from_its_callers(python):
    # on 3.10 the function's own came back as the caller's cancel: read as a deadline, the healthy loop suspected
    async def own():
        raise asyncio.CancelledError()

    seen = []

    async def slow():
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise

    async def main():
        side = SideLoop("fn", grace_s=1.0)
        home = side._pick()
        with pytest.raises(FunctionCancelled, match=r"CancelledError raised in own: CancelledError\(\)"):
            await side.call(own)
        assert not side._suspects and side._home is home  # its loop was not suspected
        with pytest.raises(asyncio.TimeoutError):  # the caller's deadline: the call cancelled, its loop checked
            await asyncio.wait_for(side.call(slow), 0.1)
        for _ in range(100):
            if seen:
                break
            await asyncio.sleep(0.01)
        return seen

    assert asyncio.run(main()) == ["cancelled"]
