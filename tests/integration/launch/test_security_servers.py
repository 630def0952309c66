"""A run's servers as an attacker would meet them (real subprocesses on free loopback ports): a launched replica has
a key of its own, weight-update groups are joined one at a time and never keep the server from stopping, bad
group requests are 400 at once, no server listens off loopback without a key unless told, and a judge given as a
rollout address is refused at start."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import httpx
import pytest
from held_ports import reserved_port  # tests/fixtures/held_ports.py

from rlrm.config.servers import RolloutServerConfig
from rlrm.inference.weight_files import WeightFiles
from rlrm.launch.client.rollout_engine import ServerRolloutEngine
from rlrm.launch.client.wire import SGLangWire
from rlrm.launch.common.ports import free_port
from rlrm.launch.fleet.health import check_servers
from rlrm.launch.fleet.process import ServerProcess, ServerStartError, embedded_server_argv
from rlrm.launch.fleet.server_fleet import ServerFleet, fleet_key

INIT = "/init_weights_update_group"


def _state(model_path, shift=0.0):
    from pathlib import Path

    from safetensors.torch import load_file

    return {k: v + shift for k, v in load_file(str(Path(model_path) / "model.safetensors")).items()}


def test_a_launched_replica_has_a_fresh_key_in_its_environment_only(tiny_policy_path, tmp_path):
    cfg = RolloutServerConfig(router="client", threads=1)
    key = fleet_key(cfg.fleet_spec(), cfg.read_api_key())
    assert key and key != fleet_key(cfg.fleet_spec(), cfg.read_api_key())  # fresh for every run
    fleet = ServerFleet(cfg.fleet_spec(), role="policy", model_path=str(tiny_policy_path), api_key=key)
    files = WeightFiles(str(tmp_path))
    engine = ServerRolloutEngine(fleet, SGLangWire(), files, api_key=key, request_timeout_s=60, sync_timeout_s=60)

    async def run():
        await engine.start()
        try:
            await asyncio.to_thread(engine.update_weights, _state(tiny_policy_path, 0.01), 1)  # the trainer: fine
            (server,) = fleet.pool.servers
            url = server.url
            with open(f"/proc/{server.proc.pid}/cmdline", "rb") as f:
                argv = f.read().decode()
            with open(f"/proc/{server.proc.pid}/environ", "rb") as f:
                environ = f.read().decode()
            assert key not in argv and f"RLRM_API_KEY={key}" in environ
            assert f"--weights-dir\0{files.root}" in argv and oct(files.root.stat().st_mode)[-3:] == "700"
            other = WeightFiles(str(tmp_path / "attacker")).write(_state(tiny_policy_path, 0.5), version=999999)
            body = {"model_path": str(other), "weight_version": 999999}
            assert httpx.post(url + "/update_weights_from_disk", json=body, timeout=30).status_code == 401
            with_key = httpx.post(
                url + "/update_weights_from_disk", json=body, headers={"Authorization": f"Bearer {key}"}, timeout=30
            ).json()
            assert with_key["success"] is False and "weights folder" in with_key["message"]
            assert httpx.get(url + "/get_weight_version", headers={"Authorization": f"Bearer {key}"}).json() == {
                "weight_version": "1"
            }
        finally:
            await engine.close()

    asyncio.run(run())
    assert not files.root.exists()


class _Silent:
    """A port that accepts connections and never answers: a weight-update master that never comes. `reached` is
    set once a join connected (what a test waits for, rather than a fixed sleep)."""

    def __enter__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.reached = threading.Event()
        self.held: list[socket.socket] = []  # open, never answered (a closed one would fail the join at once)
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:  # closed: the test is over
                return
            self.held.append(conn)
            self.reached.set()

    def __exit__(self, *exc):
        self.sock.close()
        for conn in self.held:
            conn.close()


def _init(url, port, rank=1, timeout=60.0, **changes):
    body = {"master_address": "127.0.0.1", "master_port": port, "rank_offset": rank, "world_size": 2}
    body["backend"] = "gloo"
    return httpx.post(url + INIT, json={**body, **changes}, timeout=timeout)


def test_a_join_flood_gets_409_loads_still_work_and_sigterm_stops_the_server(tiny_policy_path, tmp_path):
    join_timeout_s = 120
    extra = ["--threads", "1", "--weights-dir", str(tmp_path), "--weight-sync-timeout-s", str(join_timeout_s)]
    proc = ServerProcess.on_free_port(
        lambda port: embedded_server_argv(str(tiny_policy_path), "policy", port, extra=extra)
    )
    proc.start()
    pending = []
    try:
        with _Silent() as master:

            def join() -> None:
                try:
                    pending.append(_init(proc.url, master.port, timeout=join_timeout_s))
                except httpx.HTTPError as exc:  # the server stopped under it: what this test does
                    pending.append(exc)

            first = threading.Thread(target=join, daemon=True)
            first.start()
            assert master.reached.wait(60)  # the first join is under way
            flood = [_init(proc.url, master.port, timeout=30) for _ in range(6)]
            assert [r.status_code for r in flood] == [409] * 6
            assert "one group at a time" in flood[0].json()["error"]["message"]
            # a normal load still works while the join is pending
            path = WeightFiles(str(tmp_path)).write(_state(tiny_policy_path, 0.02), version=1)
            load = httpx.post(proc.url + "/update_weights_from_disk", json={"model_path": str(path)}, timeout=60)
            assert load.json()["success"] is True
            assert httpx.get(proc.url + "/health", timeout=10).status_code == 200
            assert first.is_alive()  # still joining
            t0 = time.monotonic()
            os.killpg(proc.proc.pid, signal.SIGTERM)
            proc.proc.wait(timeout=join_timeout_s)
            stopped_s = time.monotonic() - t0
        # stopped long before the join would have given up (the bound it would otherwise wait out)
        assert stopped_s < join_timeout_s / 4, stopped_s
    finally:
        proc.stop()


def test_bad_group_requests_are_400_at_once_and_a_join_is_bounded(tiny_policy_path):
    extra = ["--threads", "1", "--weight-sync-timeout-s", "1"]  # each stuck join below waits it out
    with ServerProcess.on_free_port(
        lambda port: embedded_server_argv(str(tiny_policy_path), "policy", port, extra=extra)
    ) as proc:
        out_of_range = _init(proc.url, 70000, timeout=30)
        assert out_of_range.status_code == 400 and "master_port" in out_of_range.json()["error"]["message"]
        empty = _init(proc.url, 29500, master_address="  ", timeout=30)  # hung until the join timed out before
        assert empty.status_code == 400 and "master_address" in empty.json()["error"]["message"]
        rank = _init(proc.url, 29500, rank=5, timeout=30)
        assert rank.status_code == 400 and "rank_offset 5" in rank.json()["error"]["message"]
        with _Silent() as master:  # each join gives up at its bound (torch's own store would wait forever)
            for _ in range(3):
                gave_up = _init(proc.url, master.port, timeout=60)
                reached = f"the master was {'' if master.reached.is_set() else 'never '}reached"
                assert gave_up.status_code == 200, f"{gave_up.text} ({reached}); the server's log: {proc.log_tail(20)}"
                assert gave_up.json()["success"] is False
                assert "did not answer within 1 s" in gave_up.json()["message"]
            # the threads left stuck are counted: no flood piles them up
            assert _init(proc.url, master.port, timeout=60).status_code == 409
        assert httpx.get(proc.url + "/health", timeout=10).status_code == 200


def test_no_server_listens_off_loopback_without_a_key_unless_told(tiny_policy_path):
    env = {k: v for k, v in os.environ.items() if k != "RLRM_API_KEY"}
    argv = [sys.executable, "-m", "rlrm.launch.server", "--model", str(tiny_policy_path), "--host", "0.0.0.0"]
    # the port is bound (and free) before the key is checked: held until then (tests/fixtures/held_ports.py)
    with reserved_port(host="0.0.0.0") as port:
        out = subprocess.run(argv + ["--port", str(port)], env=env, capture_output=True, text=True, timeout=120)
    lines = out.stderr.strip().splitlines()
    assert out.returncode == 1 and len(lines) == 1
    assert "refusing to serve on 0.0.0.0 without an API key" in lines[0] and "--allow-unauthenticated" in lines[0]

    from typer.testing import CliRunner

    from rlrm.cli.main import app

    with reserved_port(host="0.0.0.0") as port:
        args = ["launch", "server", "--model", str(tiny_policy_path), "--host", "0.0.0.0", "--port", str(port)]
        result = CliRunner().invoke(app, args, env={"RLRM_API_KEY": ""})
    assert result.exit_code == 1 and result.output.startswith("error: refusing to serve on 0.0.0.0 without an API key")


def test_a_judge_given_as_a_rollout_address_is_refused_at_start(tiny_genrm_server):
    judge = tiny_genrm_server  # the session's (tests/integration/conftest.py): only asked what it serves
    with pytest.raises(ServerStartError) as err:
        asyncio.run(check_servers([judge.url], "policy", None, None, 30, what="rollout.server.addresses"))
    message = str(err.value)
    assert "rollout.server.addresses[0]" in message and "role 'genrm'" in message and "\n" not in message


def test_launched_reward_servers_get_a_fresh_key_too(random_disrm_path):
    from rlrm.config.reward import RewardConfig
    from rlrm.engine.reward_service import RewardService

    cfg = RewardConfig(  # no api_key_env
        kind="disrm", server={"model": str(random_disrm_path), "request_timeout_s": 20}, attempt_timeout_s=20
    )
    body = {"input": [[5, 6, 7]], "use_activation": False}

    async def scenario():
        service = RewardService(cfg)
        await service.start()
        try:
            (server,) = service.pool.servers
            scored = await service.balancer.post("/classify", body, 20)  # the run's own client holds the key
            refused = httpx.post(server.url + "/classify", json=body, timeout=20).status_code
            return service.api_key, scored, refused
        finally:
            await service.close()

    key, scored, refused = asyncio.run(scenario())
    assert key and len(key) >= 40 and refused == 401 and len(scored["data"][0]["probs"]) == 1


_PRINTS_ITS_KEY = r"""
import os, sys
args = sys.argv[1:]
key = args[args.index("--api-key") + 1]
print(f"server_args=ServerArgs(model_path='/m', port={args[args.index('--port') + 1]}, api_key={key!r}, tp_size=1)")
print(f"env key {os.environ['RLRM_API_KEY']} and a hosted one: api_key: sk-not-ours-123456")
print("RuntimeError: CUDA error: out of memory", flush=True)
sys.exit(1)
"""


def test_a_key_a_server_prints_before_it_fails_is_hidden_in_the_error_line(tmp_path):
    """SGLang takes its key on argv (--api-key) and logs its server_args, key included: a server that fails soon
    after puts that line in the tail rlrm shows (and the user pastes). Keys on argv or in the env rlrm gives it,
    and any api_key=... field, are hidden."""
    script = tmp_path / "prints_its_key.py"
    script.write_text(_PRINTS_ITS_KEY)
    port = free_port("127.0.0.1")
    argv = [sys.executable, str(script), "--port", str(port), "--api-key", "sk-argv-key-0123456789"]
    server = ServerProcess(argv, port=port, start_timeout_s=20, env={"RLRM_API_KEY": "env-key-9876543210"})
    with pytest.raises(ServerStartError) as caught:
        server.start()
    said = str(caught.value)
    assert "CUDA error: out of memory" in said and "<key hidden>" in said
    for secret in ("sk-argv-key-0123456789", "env-key-9876543210", "sk-not-ours-123456"):
        assert secret not in said and secret not in server.why(lines=5) and secret not in server.death()
