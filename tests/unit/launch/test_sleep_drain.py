"""A colocated server's /sleep waits for the model requests admitted before it (rlrm/launch/server/sleep.py): its
drain against a second /sleep and a /wake_up asked meanwhile. The weights' moves are recorded, not made."""

from __future__ import annotations

import asyncio
import threading

import torch

from rlrm.launch.server.sleep import SleepState


def gpu_state(moved: list[str]) -> SleepState:
    state = SleepState(torch.nn.Linear(2, 2), threading.Lock(), "cuda")
    state._move = lambda device: moved.append(device) or 1  # type: ignore[method-assign]
    return state


def test_the_weights_move_once_the_admitted_request_is_answered_and_a_second_sleep_returns_too():
    moved: list[str] = []

    async def scenario():
        state = gpu_state(moved)
        state.started()  # a request in the engine's batch window
        first = asyncio.create_task(state.sleep())
        await asyncio.sleep(0.01)
        second = asyncio.create_task(state.sleep())  # a client's retry: it replaced the event the first waited on
        await asyncio.sleep(0.01)
        assert moved == [] and not first.done()  # nothing moved under the request
        state.finished()
        return await asyncio.wait_for(asyncio.gather(first, second), 1.0)

    answers = asyncio.run(scenario())
    assert [a["is_sleeping"] for a in answers] == [True, True] and moved == ["cpu", "cpu"]


def test_a_wake_while_the_sleep_waits_keeps_the_weights_on_the_device():
    moved: list[str] = []

    async def scenario():
        state = gpu_state(moved)
        state.started()
        sleeping = asyncio.create_task(state.sleep())
        await asyncio.sleep(0.01)
        await state.wake_up()
        state.finished()
        return await sleeping, state.sleeping

    answer, still_sleeping = asyncio.run(scenario())
    # the sleep used to move the weights to the host after the wake had opened the gate: requests on a GPU 500'd
    assert moved == ["cuda"] and answer == {"is_sleeping": False, "moved_bytes": 0} and still_sleeping is False


def test_a_request_that_never_ends_holds_the_sleep_for_drain_s_only(monkeypatch, capsys):
    from rlrm.launch.server import sleep

    monkeypatch.setattr(sleep, "DRAIN_S", 0.05)
    moved: list[str] = []
    state = gpu_state(moved)
    state.started()
    assert asyncio.run(state.sleep())["is_sleeping"] is True and moved == ["cpu"]
    assert "1 requests still running after 0.05 s: sleeping anyway" in capsys.readouterr().err


def test_moves_start_from_where_the_weights_are_a_wake_while_awake_keeps_the_compiled_graphs():
    # "meta" stands in for the accelerator: a wake on weights already there, or a second sleep, moves nothing and
    # keeps what compiled decoding captured (it dropped every CUDA graph and reported bytes it never moved)
    released: list[int] = []
    awake = SleepState(torch.nn.Linear(4, 4).to("meta"), threading.Lock(), "meta", lambda: released.append(1))
    assert asyncio.run(awake.wake_up()) == {"is_sleeping": False, "moved_bytes": 0} and released == []

    asleep = SleepState(torch.nn.Linear(4, 4), threading.Lock(), "meta", lambda: released.append(1))  # on the host
    assert asyncio.run(asleep.sleep()) == {"is_sleeping": True, "moved_bytes": 0} and released == []
    assert asyncio.run(asleep.wake_up()) == {"is_sleeping": False, "moved_bytes": 80} and released == [1]
    assert next(asleep.model.parameters()).device.type == "meta"


def test_a_device_without_an_index_is_the_weights_device_of_its_type():
    # the server's home "cuda" (--device auto) against weights on cuda:0: torch.device("cuda") != cuda:0, so a wake
    # while awake still dropped the graphs on a GPU
    from rlrm.launch.server.sleep import on

    assert on(torch.device("cuda", 0), torch.device("cuda")) and on(torch.device("cuda", 1), torch.device("cuda", 1))
    assert not on(torch.device("cuda", 0), torch.device("cuda", 1)) and not on(
        torch.device("cpu"), torch.device("cuda")
    )
    assert on(torch.device("cpu"), torch.device("cpu"))
