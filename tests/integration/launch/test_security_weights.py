"""Weight loads on a real embedded policy server (subprocess, free loopback port) as an attacker would try them:
the weights-folder rule with one message for missing and outside paths, NaN weights, a version going back, a
named pipe among the files, and a slow load that must not stop /health or /generate."""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

import httpx
import pytest
import torch

from rlrm.inference.weight_files import WeightFiles
from rlrm.launch.common.ports import free_port
from rlrm.launch.fleet.process import ServerProcess, embedded_server_argv

LOAD = "/update_weights_from_disk"


def _state(model_path, shift=0.0):
    from safetensors.torch import load_file

    return {k: v + shift for k, v in load_file(str(Path(model_path) / "model.safetensors")).items()}


@pytest.fixture(scope="module")
def weights_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("run-weights")


@pytest.fixture(scope="module")
def server(tiny_policy_path, weights_dir):
    extra = ["--threads", "1", "--weights-dir", str(weights_dir)]
    with ServerProcess.on_free_port(
        lambda port: embedded_server_argv(str(tiny_policy_path), "policy", port, extra=extra)
    ) as proc:
        yield proc


def _load(url: str, path, version=None, timeout=60) -> dict:
    return httpx.post(url + LOAD, json={"model_path": str(path), "weight_version": version}, timeout=timeout).json()


def _version(url: str) -> str:
    return httpx.get(url + "/get_weight_version", timeout=10).json()["weight_version"]


def test_paths_outside_the_weights_folder_get_the_message_of_a_missing_path(
    server, weights_dir, tiny_policy_path, tmp_path
):
    outside = WeightFiles(str(tmp_path / "other-run")).write(_state(tiny_policy_path, 0.5), version=9)  # loadable
    junk = tmp_path / "notes.txt"
    junk.write_text("not weights")
    link = weights_dir / "link-out"
    link.symlink_to(outside, target_is_directory=True)
    tries = {
        "existing weights outside": outside,
        "an existing file that is no safetensors": junk,
        "a missing path outside": tmp_path / "nothing-here",
        "a missing path inside": weights_dir / "v404",
        "a link inside that points outside": link,
        "climbing out with ..": weights_dir / os.path.relpath(outside, weights_dir),
    }
    messages = {}
    for what, path in tries.items():
        answer = _load(server.url, path, version=50)
        assert answer["success"] is False, what
        messages[what] = answer["message"].replace(repr(str(path)), "PATH")
    assert len(set(messages.values())) == 1, messages  # nothing tells an existing path from a missing one
    assert "inside this server's weights folder" in messages["a missing path inside"]
    assert _version(server.url) == "0"
    # the server's own model folder stays loadable (back to the base weights, version 0)
    assert _load(server.url, tiny_policy_path, version=0)["success"] is True


def test_nan_weights_and_a_version_going_back_are_refused(server, weights_dir, tiny_policy_path):
    files = WeightFiles(str(weights_dir))
    base = _load(server.url, tiny_policy_path, version=0)
    assert base["success"] is True
    nan = _state(tiny_policy_path)
    name = next(iter(nan))
    nan[name] = nan[name] * float("nan")
    refused = _load(server.url, files.write(nan, version=3), version=3)
    assert refused["success"] is False and "NaN or infinite" in refused["message"] and name in refused["message"]
    assert _version(server.url) == "0"

    assert _load(server.url, files.write(_state(tiny_policy_path, 0.01), version=5), version=5)["success"] is True
    back = _load(server.url, files.write(_state(tiny_policy_path, 0.02), version=4), version=4)
    assert back["success"] is False and "does not increase" in back["message"]
    same = _load(server.url, files.current, version=5)
    assert same["success"] is False and _version(server.url) == "5"
    assert _load(server.url, files.current, version=6)["success"] is True  # forward again: fine
    assert _version(server.url) == "6"
    assert _load(server.url, tiny_policy_path, version=0)["success"] is True  # the explicit reset
    files.close()


def test_a_named_pipe_among_the_files_is_refused_without_freezing_the_server(server, weights_dir, tiny_policy_path):
    folder = WeightFiles(str(weights_dir)).write(_state(tiny_policy_path, 0.03), version=20)
    os.rename(folder / "model.safetensors", folder / "a.safetensors")
    pipe = folder / "z.safetensors"
    os.mkfifo(pipe)
    answers = {}
    load = threading.Thread(target=lambda: answers.update(_load(server.url, folder, version=20, timeout=30)))
    load.start()
    try:
        # a server frozen by the pipe answers nothing: these time out and the test fails
        assert httpx.get(server.url + "/health", timeout=10).status_code == 200
        body = {"input_ids": [5, 6], "sampling_params": {"max_new_tokens": 2, "temperature": 0}}
        assert httpx.post(server.url + "/generate", json=body, timeout=10).status_code == 200
        load.join(timeout=30)
        assert not load.is_alive()
        assert answers["success"] is False and "z.safetensors is not a regular file" in answers["message"]
    finally:
        _unblock(pipe)
        load.join(timeout=5)
    # a file cut short is refused before anything is read as well
    pipe.unlink()
    data = (folder / "a.safetensors").read_bytes()
    (folder / "a.safetensors").write_bytes(data[: len(data) // 2])
    cut = _load(server.url, folder, version=21)
    assert cut["success"] is False and "a.safetensors is cut short" in cut["message"]


def _unblock(pipe: Path) -> None:
    """Give a reader blocked on the pipe (the server before this was fixed) its writer, so that it can go on."""
    try:
        fd = os.open(pipe, os.O_WRONLY | os.O_NONBLOCK)
        os.close(fd)
    except OSError:
        pass  # no reader: nothing is blocked


SLOW_SERVER = (
    "import time\n"
    "from rlrm.launch.server import weight_source as w\n"
    "read = w.WeightSource.read\n"
    "def slow(self, *args):\n"
    "    time.sleep(4.0)\n"
    "    return read(self, *args)\n"
    "w.WeightSource.read = slow\n"
    "from rlrm.launch.server.app import main\n"
    "main()\n"
)


def test_health_and_generate_answer_while_a_slow_load_runs(tiny_policy_path, tmp_path):
    """The load is made slow (4 s) inside a real server; requests sent during it answer before it ends."""
    argv = embedded_server_argv(
        str(tiny_policy_path), "policy", free_port(), extra=["--threads", "1", "--weights-dir", str(tmp_path)]
    )
    argv = [sys.executable, "-c", SLOW_SERVER] + argv[3:]  # the same options, the load slowed down
    folder = WeightFiles(str(tmp_path)).write(_state(tiny_policy_path, 0.04), version=2)
    with ServerProcess.movable(argv) as proc:
        answers = {}
        load = threading.Thread(target=lambda: answers.update(_load(proc.url, folder, version=2)))
        load.start()
        ok = []
        body = {"input_ids": [5, 6], "sampling_params": {"max_new_tokens": 2, "temperature": 0}}
        while load.is_alive() and len(ok) < 3:
            ok.append(httpx.get(proc.url + "/health", timeout=30).status_code)
            ok.append(httpx.post(proc.url + "/generate", json=body, timeout=30).status_code)
        answered_during_load = load.is_alive()
        load.join(timeout=60)
        assert answered_during_load and ok[:3] == [200, 200, 200]
        assert answers["success"] is True and _version(proc.url) == "2"


def test_a_weights_folder_and_a_model_reached_through_links_are_loaded_by_the_paths_the_server_was_given(
    tiny_policy_path, tmp_path
):
    """`/scratch -> /mnt/nvme/scratch` as rollout.server.weights_dir, `models/current -> models/qwen-v2` as the model:
    the client names both as given, so each sync and each reset to the base weights (a restart before the first
    sync, a resume on running servers) uses them; a link inside the folder still may not lead out of it."""
    real, weights = tmp_path / "nvme", tmp_path / "scratch"
    real.mkdir()
    os.symlink(real, weights)
    model = tmp_path / "current-policy"
    os.symlink(tiny_policy_path, model)
    outside = tmp_path / "outside"
    outside.mkdir()
    WeightFiles(str(outside)).write(_state(tiny_policy_path, 0.02), 7)
    os.symlink(next(outside.glob("rlrm-weights-*")) / "v7", real / "escape")
    extra = ["--threads", "1", "--weights-dir", str(weights)]
    with ServerProcess.on_free_port(lambda port: embedded_server_argv(str(model), "policy", port, extra=extra)) as s:
        files = WeightFiles(str(weights))
        answer = _load(s.url, files.write(_state(tiny_policy_path, 0.01), 1), "1")
        assert answer["success"] is True, answer
        assert _version(s.url) == "1"
        answer = _load(s.url, model, "0")  # back to its own model, by the path it was started with
        assert answer["success"] is True, answer
        assert _version(s.url) == "0"
        escape = _load(s.url, weights / "escape", "2")
        assert escape["success"] is False and "inside this server's weights folder" in escape["message"]
        assert _version(s.url) == "0"


def test_a_model_link_pointed_elsewhere_after_the_start_is_not_the_servers_own_model(tmp_path):
    """Started from models/current -> policy-v1: a load of models/current is its own base weights while the link
    leads there; pointed at another folder since (by whoever may write models/), it is refused, never loaded as
    version 0."""
    from safetensors.torch import save_file

    from rlrm.launch.server.weight_source import WeightSource

    v1, elsewhere = tmp_path / "models" / "policy-v1", tmp_path / "not-allowed"
    for folder, value in ((v1, 0.0), (elsewhere, 1.0)):
        folder.mkdir(parents=True)
        save_file({"w": torch.full((2,), value)}, str(folder / "model.safetensors"))
    link = tmp_path / "models" / "current"
    link.symlink_to(v1)
    (tmp_path / "weights").mkdir()
    source = WeightSource(str(tmp_path / "weights"), str(link))
    assert source.is_own_model(str(link)) and source.read(str(link), None)["w"].sum() == 0
    link.unlink()
    link.symlink_to(elsewhere)
    assert not source.is_own_model(str(link))
    with pytest.raises(ValueError, match="inside this server's weights folder"):
        source.read(str(link), None)


def test_a_file_of_the_servers_own_hub_snapshot_loads_though_it_links_to_the_blobs(tmp_path):
    """A hub cache's snapshot (snapshots/<hash>/model.safetensors -> ../../blobs/<sha>): its folder and its files
    are the server's own model, by the folder they are in; a file outside that folder is not."""
    from safetensors.torch import save_file

    from rlrm.launch.server.weight_source import WeightSource

    repo = tmp_path / "hub" / "models--org--tiny"
    blobs, snap = repo / "blobs", repo / "snapshots" / "abc123"
    blobs.mkdir(parents=True)
    snap.mkdir(parents=True)
    save_file({"w": torch.zeros(2)}, str(blobs / "sha256deadbeef"))
    os.symlink("../../blobs/sha256deadbeef", snap / "model.safetensors")
    (tmp_path / "weights").mkdir()
    source = WeightSource(str(tmp_path / "weights"), str(snap))
    assert "w" in source.read(str(snap), None) and "w" in source.read(str(snap / "model.safetensors"), None)
    with pytest.raises(ValueError):
        source.read(str(blobs / "sha256deadbeef"), None)
