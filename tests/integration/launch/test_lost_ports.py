"""A port rlrm picked and another process bound first, while the server was starting (seen in CI at 2002b91: a run's
router stopped with "Address already in use"): the server starts again on a fresh port. A port the user chose, or the
port of a server its clients already know, is never moved: that stays an error naming the cause."""

from __future__ import annotations

import socket
import sys

import pytest
from held_ports import reserved_port  # tests/fixtures/held_ports.py

from rlrm.launch.common import http
from rlrm.launch.fleet.process import ServerProcess, ServerStartError, embedded_server_argv, with_port
from rlrm.launch.fleet.router import router_metrics_url, sglang_router_argv


def _bound() -> socket.socket:
    """A port bound and not listening, without SO_REUSEADDR: a connect finds nothing there (rlrm's check before a
    launch passes), and a server's bind fails as it does after losing the race."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    return sock


def _argv_on(model: str):
    return lambda port: embedded_server_argv(model, "policy", port, extra=["--threads", "1"])


def test_a_server_that_lost_its_port_while_starting_starts_on_a_fresh_one(tiny_policy_path, capfd):
    argv_on = _argv_on(str(tiny_policy_path))
    with _bound() as taken:
        lost = taken.getsockname()[1]
        with ServerProcess(argv_on(lost), port=lost, argv_on=argv_on) as server:
            assert server.moves == [lost] and server.port != lost
            assert server.url == f"http://127.0.0.1:{server.port}" and str(server.port) in server.argv
            assert http.get(server.url + "/health", timeout_s=5).status == 200
            assert "Address already in use" not in server.log_tail(50)  # the dead start's log is not read again
    line = f"rlrm: another process took port {lost} before the server there bound it; starting it on port {server.port}"
    assert line in capfd.readouterr().err


def test_a_server_waited_on_until_it_listens_moves_too_and_is_then_known(tiny_policy_path):
    """`wait_listening` (a replica gated on its weights answers 503 until they come) moves a server that lost its
    port as `wait_ready` does; once it answers, its clients may hold the address, so it moves no more."""
    argv_on = _argv_on(str(tiny_policy_path))
    with _bound() as taken:
        lost = taken.getsockname()[1]
        server = ServerProcess(argv_on(lost), port=lost, argv_on=argv_on)
        server.launch()
        try:
            server.wait_listening()
            assert server.moves == [lost] and server.port != lost and str(server.port) in server.argv
            assert http.get(server.url + "/health", timeout_s=5).status == 200
            assert server._mover() is None  # known now: a restart stays on this port
        finally:
            server.stop()


def test_a_port_taken_before_the_launch_is_left_before_anything_starts(tiny_policy_path):
    """Taken between picking and launching (a listener there): the server is launched on a fresh port at once,
    never pointed at the other process's server, whose /health would be read as this one's."""
    argv_on = _argv_on(str(tiny_policy_path))
    with _bound() as taken:
        taken.listen()
        lost = taken.getsockname()[1]
        with ServerProcess(argv_on(lost), port=lost, argv_on=argv_on) as server:
            assert server.moves == [lost] and http.get(server.url + "/health", timeout_s=5).status == 200


def test_the_router_moves_too_and_its_metrics_page_follows():
    def argv_on(port: int) -> list[str]:
        return sglang_router_argv(["http://127.0.0.1:9"], port, metrics_port, "127.0.0.1")

    with _bound() as taken, reserved_port() as metrics_port:  # the router's metrics port, held for it meanwhile
        lost = taken.getsockname()[1]
        with ServerProcess(argv_on(lost), port=lost, argv_on=argv_on, start_timeout_s=30) as router:
            assert router.moves == [lost]
            page = http.get(router_metrics_url(router), timeout_s=5)
            assert page.status == 200 and router_metrics_url(router) == f"http://127.0.0.1:{metrics_port}/metrics"


def test_a_port_the_user_chose_is_not_moved(tiny_policy_path):
    with _bound() as taken:
        port = taken.getsockname()[1]
        server = ServerProcess(_argv_on(str(tiny_policy_path))(port), start_timeout_s=60)
        with pytest.raises(ServerStartError, match="exited with code 1 while starting: .*is in use"):
            server.start()
        assert server.moves == [] and server.port == port


def test_a_server_its_clients_know_restarts_on_its_own_port_or_not_at_all(tiny_policy_path):
    argv_on = _argv_on(str(tiny_policy_path))
    server = ServerProcess.on_free_port(argv_on, start_timeout_s=60)
    try:
        server.start()
        port = server.port
        server.kill()
        # held from here on (tests/fixtures/held_ports.py): no other test's server takes the port between the two
        # restarts, while this test's own listener and the server may still listen on it
        with reserved_port(port):
            with socket.socket() as taken:  # the port went to another process while the server was down
                taken.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # past the dead server's TIME_WAIT
                taken.bind(("127.0.0.1", port))
                taken.listen()
                with pytest.raises(ServerStartError, match="is in use"):
                    server.restart()
            assert server.port == port and server.moves == []
            server.restart()  # the port is free again: back where its clients (balancer, router) look for it
        assert server.url == f"http://127.0.0.1:{port}" and http.get(server.url + "/health", timeout_s=5).status == 200
    finally:
        server.stop()


# a server that dies of something else after a line about a port of its own (torch's c10d store warns so)
DIES_OF_SOMETHING_ELSE = """
import sys
print("[W socket.cpp:464] The server socket has failed to bind to [::]:29500 (errno: 98 - Address already in use).")
for i in range(6):
    print(f"loading shard {i}")
print("RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB", flush=True)
sys.exit(1)
"""


def test_a_server_that_died_of_something_else_is_not_moved():
    argv_on = lambda port: [sys.executable, "-c", DIES_OF_SOMETHING_ELSE, "--port", str(port)]  # noqa: E731
    server = ServerProcess.on_free_port(argv_on, start_timeout_s=30)
    with pytest.raises(ServerStartError, match="exited with code 1 while starting: RuntimeError: CUDA out of memory"):
        server.start()
    assert server.moves == []


def test_a_move_changes_only_the_port_of_the_command_line():
    argv = ["python", "-m", "rlrm.launch.server", "--port", "8001", "--threads", "1"]
    assert with_port(argv, 9002) == ["python", "-m", "rlrm.launch.server", "--port", "9002", "--threads", "1"]
    assert argv[4] == "8001"  # a copy


def test_two_servers_handed_the_same_port_never_share_it(tiny_policy_path):
    """Both bind with SO_REUSEADDR (a restart on its own port is not refused for TIME_WAIT), which let a second
    socket bind a port nobody listened on yet: two servers handed one free port both bound it, and the launcher of
    the one whose listen failed after its model loaded read the other's /health as its own. Listening at bind time
    refuses the second at once, and its launcher moves it."""
    from rlrm.errors import RlrmError
    from rlrm.launch.common.ports import bind_port

    with reserved_port() as port:  # no other test's server is handed it before the first binds it
        held = bind_port("127.0.0.1", port)  # the first server, still loading its model
    try:
        with pytest.raises(RlrmError, match=f"port {port} on 127.0.0.1 is in use"):
            bind_port("127.0.0.1", port).close()
        argv_on = _argv_on(str(tiny_policy_path))
        with ServerProcess(argv_on(port), port=port, argv_on=argv_on) as second:
            assert second.port != port and second.moves == [port]  # it moved rather than sharing the first's port
            assert http.get(second.url + "/health", timeout_s=5).status == 200
    finally:
        held.close()
