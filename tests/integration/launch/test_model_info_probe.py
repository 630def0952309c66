"""The `/get_model_info` probe (rlrm/launch/client/replica_info.py) against a real aiohttp server on a free port:
a busy answer (503) is asked again, so the model checks it feeds are not skipped by one bad moment; a route the
server does not serve (404: vLLM, hosted APIs) is "reports nothing" at once.

    PYTHONPATH=$PWD python -m pytest -q tests/integration/launch/test_model_info_probe.py
"""

from __future__ import annotations

import pytest
from held_ports import refused_port  # tests/fixtures/held_ports.py
from threaded_app import ThreadedApp

from rlrm.launch.client.replica_info import TrainerModel, check_replicas, model_info
from rlrm.launch.common.model_info import ENGINE_NAME


class InfoServer(ThreadedApp):
    """Answers /get_model_info with `status` for the first `busy` calls, then `final` (200 with `info`, or 404)."""

    def __init__(self, busy: int, final: int = 200, status: int = 503):
        super().__init__()
        self.busy, self.final, self.status = busy, final, status
        self.calls = 0
        self.info = {"tokenizer_size": 7, "vocab_size": 7, "model_path": "/models/other", "weight_version": "3"}

    def routes(self, app) -> None:
        app.router.add_get("/get_model_info", self._get_model_info)

    async def _get_model_info(self, request):
        from aiohttp import web

        self.calls += 1
        if self.calls <= self.busy:
            return web.json_response({"error": "busy"}, status=self.status)
        if self.final != 200:
            return web.json_response({"detail": "Not Found"}, status=self.final)
        return web.json_response(self.info)


@pytest.mark.parametrize("status", [503, 429, 500])
def test_a_busy_answer_is_asked_again_and_the_check_still_runs(status):
    with InfoServer(busy=2, status=status) as server:
        assert model_info(server.url, {}, pause_s=0.01)["tokenizer_size"] == 7
        assert server.calls == 3
        server.calls = 0
        with pytest.raises(Exception, match="tokenizer size 7, but the trainer's policy tiny:policy has 9"):
            check_replicas([server.url], None, TrainerModel("tiny:policy", 7, 9, None))


@pytest.mark.parametrize("status", [400, 422])
def test_an_answer_that_is_not_model_info_is_nothing_reported_at_once(status):
    with InfoServer(busy=1, status=status) as server:
        assert model_info(server.url, {}, pause_s=0.01) == {}
        assert server.calls == 1  # not busy: asking again would get the same answer


def test_a_route_the_server_does_not_serve_is_nothing_reported_at_once():
    with InfoServer(busy=0, final=404) as server:
        assert model_info(server.url, {}, pause_s=0.01) == {}
        assert server.calls == 1
        versions, max_context, dtype, gpus = check_replicas([server.url], None, TrainerModel("tiny:policy", 7, 9, None))
        assert versions == {server.url: None} and max_context is None and dtype is None and gpus == {server.url: None}


def test_a_server_busy_every_time_is_reported_after_the_tries_not_forever():
    with InfoServer(busy=100) as server:
        assert model_info(server.url, {}, tries=3, pause_s=0.01) == {}
        assert server.calls == 3


def test_no_server_at_all_is_tried_again_then_nothing():
    with refused_port() as port:  # nothing listens there, and no other test's server can meanwhile
        assert model_info(f"http://127.0.0.1:{port}", {}, tries=2, pause_s=0.01) == {}


@pytest.mark.parametrize(
    ("reported", "expected"),
    [
        ({"dtype": "float32"}, "float32"),
        ({"dtype": "float32", "tf32": False}, "float32"),
        ({"dtype": "float32", "tf32": True}, "tf32"),  # --tf32 on a GPU: another precision than any actor's dtype
        ({"dtype": "bfloat16", "tf32": False}, "bfloat16"),
    ],
)
def test_an_embedded_replica_reports_its_precision_tf32_included(reported, expected):
    with InfoServer(busy=0) as server:
        server.info = {**server.info, "engine": ENGINE_NAME, **reported}
        assert check_replicas([server.url], None, None)[2] == expected
        server.info["engine"] = "vllm"  # other code: its precision is unknown, whatever it reports
        assert check_replicas([server.url], None, None)[2] is None


def test_each_replica_names_its_gpu_or_none():
    with InfoServer(busy=0) as on_gpu, InfoServer(busy=0) as off_gpu:
        on_gpu.info = {**on_gpu.info, "gpu_uuid": "GPU-8d1c"}
        off_gpu.info = {**off_gpu.info, "gpu_uuid": None}
        assert check_replicas([on_gpu.url, off_gpu.url], None, None)[3] == {on_gpu.url: "GPU-8d1c", off_gpu.url: None}
