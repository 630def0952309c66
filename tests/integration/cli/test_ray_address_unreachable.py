"""A well-formed `actor.ray_address` where no Ray head answers is one line naming the setting, within the probe's
bound, before a run folder exists (issue 23). Loopback only: a closed port stands in for a head that is down, a
port that accepts and never answers for an unreachable host, a plain-HTTP server for the wrong service.

Before: `ray.init` on such a GCS address retried for minutes (killed at 240 s, no line); on a Ray Client address
it ended after 30 s in a traceback.
"""

from __future__ import annotations

import functools
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from small_run import as_set_args  # tests/fixtures/small_run.py
from typer.testing import CliRunner

from rlrm.cli.main import app
from rlrm.engine import run_checks
from rlrm.launch.common.ray_head import RayHeadUnreachable, check_ray_head

TRAIN = ["train", "--profile", "tiny-rule", "--console", "none", "--steps", "1"]
PROBE_S = 10.0  # check_ray_head's default bound


@pytest.fixture
def silent_port():
    """A port that accepts connections (the kernel's backlog) and never answers."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    yield sock.getsockname()[1]
    sock.close()


@pytest.fixture
def closed_port():
    """A port nothing listens on, held bound so that no other test's server can listen there meanwhile."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield sock.getsockname()[1]


def _train(tmp_path, address: str):
    sets = ["actor.world_size=2", "actor.ranks_on=ray", f"actor.ray_address={address}"]
    started = time.perf_counter()
    result = CliRunner().invoke(app, [*TRAIN, "--out", str(tmp_path / "run"), *as_set_args(*sets)])
    return result, time.perf_counter() - started


def _one_line(result) -> str:
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 1 and len(lines) == 1 and lines[0].startswith("error: "), result.output
    return lines[0]


def test_a_head_that_is_down_is_one_line_and_no_run_folder(tmp_path, closed_port):
    result, _ = _train(tmp_path, f"127.0.0.1:{closed_port}")
    line = _one_line(result)
    assert f"actor.ray_address=127.0.0.1:{closed_port}: cannot connect (Connection refused)" in line, line
    assert "check that a Ray head (ray start --head --port=PORT) runs there" in line
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(("scheme", "probe_s"), [("", PROBE_S), ("ray://", 3.0)])
def test_a_head_that_never_answers_is_one_line_within_the_bound(tmp_path, silent_port, scheme, probe_s, monkeypatch):
    if probe_s != PROBE_S:  # the default bound is shown by the GCS case; the Ray Client case waits a shorter one
        monkeypatch.setattr(run_checks, "check_ray_head", functools.partial(check_ray_head, timeout_s=probe_s))
    result, took_s = _train(tmp_path, f"{scheme}127.0.0.1:{silent_port}")
    line = _one_line(result)
    assert f"actor.ray_address={scheme}127.0.0.1:{silent_port}: no answer within {probe_s:g} s" in line, line
    assert ("Ray Client server" in line) == bool(scheme)
    assert took_s < 3 * probe_s  # the probe's bound, not ray.init's minutes
    assert not (tmp_path / "run").exists()


def test_another_service_on_the_port_is_named_as_not_ray():
    class Hello(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's name
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Hello)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with pytest.raises(RayHeadUnreachable) as info:
            check_ray_head(f"127.0.0.1:{server.server_address[1]}", "reward.ray_address", timeout_s=5)
    finally:
        server.shutdown()
    assert "reward.ray_address=127.0.0.1:" in str(info.value)
    assert "answered b'<!DOCTYP" in str(info.value) and "which is not Ray (gRPC)" in str(info.value)


@pytest.mark.slow
def test_a_real_ray_head_passes_the_probe():
    """The probe's idea of "answers as Ray" holds for Ray's own GCS (HTTP/2 SETTINGS first)."""
    import importlib.util
    import os

    if importlib.util.find_spec("ray") is None:
        pytest.skip("ray not installed (extra: ray)")
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    import shutil
    import tempfile

    import ray

    temp = tempfile.mkdtemp(prefix="rlrm-ray-")  # short: Ray's socket paths must fit in 107 bytes
    ray.init(address="local", num_cpus=1, include_dashboard=False, _temp_dir=temp)  # its own, never another test's
    try:
        port = ray.get_runtime_context().gcs_address.rpartition(":")[2]
        check_ray_head(f"127.0.0.1:{port}", "actor.ray_address", timeout_s=PROBE_S)
    finally:
        ray.shutdown()
        shutil.rmtree(temp, ignore_errors=True)


def test_resume_with_a_head_that_is_down_leaves_config_yaml_as_it_was(tmp_path, closed_port):
    from rlrm.config.loader import dump_profile, load_profile

    run = tmp_path / "run"
    run.mkdir()
    sets = ["actor.world_size=2", "actor.ranks_on=ray", f"actor.ray_address=127.0.0.1:{closed_port}"]
    (run / "config.yaml").write_text(dump_profile(load_profile("tiny-rule", sets)))
    before = (run / "config.yaml").read_text()
    result = CliRunner().invoke(app, ["train", "--resume", str(run), "--steps", "5"])
    line = _one_line(result)
    assert f"actor.ray_address=127.0.0.1:{closed_port}: cannot connect" in line, line
    assert (run / "config.yaml").read_text() == before and sorted(p.name for p in run.iterdir()) == ["config.yaml"]
