"""Launch settings refused in one line before anything starts: a host `rlrm launch server` cannot listen on, reward
server addresses that are not URLs (and one address given as a string)."""

from __future__ import annotations

import pytest
from held_ports import reserved_port  # tests/fixtures/held_ports.py
from typer.testing import CliRunner

from rlrm.cli.main import app
from rlrm.launch.common.ports import free_port

HOSTS = "bind 127.0.0.1 (this machine only), 0.0.0.0 (every interface) or one of this machine's own addresses"


def _launch(*args: str):
    return CliRunner().invoke(app, ["launch", "server", "--model", "tiny:policy", *args])


def _launch_on_free_port(args: list[str]):
    """`_launch` with "{free}" in `args` replaced by a port held while the command runs: it is checked free before
    the errors after it, and no other test's server is handed it meanwhile (tests/fixtures/held_ports.py)."""
    with reserved_port() as port:
        return _launch(*[a.replace("{free}", str(port)) for a in args])


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--port", "70000"], "error: --port 70000 is not a TCP port; use one in 1-65535"),
        (["--port", "-1"], "error: --port -1 is not a TCP port; use one in 1-65535"),
        # TEST-NET-1 (RFC 5737): an address no machine here has
        (
            ["--host", "192.0.2.1", "--port", "{free}"],
            f"error: --host 192.0.2.1 is not an address of this machine; {HOSTS}",
        ),
        (
            ["--host", "no-such-host.invalid", "--port", "{free}"],
            "error: --host no-such-host.invalid does not resolve to an address",
        ),
        (["--backend", "vllm", "--port", "0", "--dry-run"], "error: --port 0 is not a TCP port; use one in 1-65535"),
    ],
)
def test_launch_server_refuses_what_it_cannot_listen_on_in_one_line(args, message):
    result = _launch_on_free_port(args)
    assert result.exit_code == 1
    assert len(result.output.strip().splitlines()) == 1 and result.output.startswith(message), result.output


@pytest.mark.parametrize(
    ("addresses", "entry"),
    [
        ('["not a url"]', "entry 0 ('not a url')"),
        ('["http://127.0.0.1:8000", "127.0.0.1:8001"]', "entry 1 ('127.0.0.1:8001')"),
        ('["http://127.0.0.1:99999"]', "entry 0 ('http://127.0.0.1:99999')"),
        ('["ftp://h:1"]', "entry 0 ('ftp://h:1')"),
    ],
)
def test_reward_server_addresses_must_be_urls(addresses, entry):
    result = CliRunner().invoke(
        app, ["train", "--profile", "tiny-disrm", "--set", f"reward.server.addresses={addresses}", "--dry-run"]
    )
    assert result.exit_code == 1 and len(result.output.strip().splitlines()) == 1
    assert f"reward.server.addresses: {entry} is not an http(s) URL of a server" in result.output, result.output


def test_one_address_may_be_given_as_a_string():
    result = CliRunner().invoke(
        app, ["train", "--profile", "tiny-disrm", "--set", "reward.server.addresses=http://127.0.0.1:8000", "--dry-run"]
    )
    assert result.exit_code == 0 and "- http://127.0.0.1:8000" in result.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--role", "policy", "--device", "cpu", "--compile", "cudagraphs", "--port", "{free}"],
            "error: --compile cudagraphs needs a GPU, and this server's device is cpu: use --compile off",
        ),
        (
            ["--compile", "fast", "--port", "{free}"],
            "error: unknown --compile 'fast': use off, cudagraphs (GPU) or inductor",
        ),
        (
            ["--role", "disrm", "--compile", "inductor", "--port", "{free}"],
            "error: --compile inductor speeds up generation (roles policy and genrm); a disrm server scores",
        ),
        (
            ["--backend", "vllm", "--compile", "cudagraphs", "--port", "{free}", "--dry-run"],
            "error: --compile is the embedded server's; vllm places its model, picks its kernels, batches its "
            "requests and captures its CUDA graphs itself: drop --compile",
        ),
        (
            ["--backend", "vllm", "--batch-wait-ms", "100", "--port", "{free}", "--dry-run"],
            "error: --batch-wait-ms is the embedded server's; vllm places its model",
        ),
        (
            ["--backend", "sglang", "--tf32", "--port", "{free}", "--dry-run"],
            "error: --tf32 is the embedded server's; sglang places its model, picks its kernels",
        ),
        (
            ["--backend", "vllm", "--device", "cuda", "--port", "{free}", "--dry-run"],
            "error: --device is the embedded server's; vllm places its model",
        ),
        (
            ["--device", "tpu", "--port", "{free}"],
            "error: --device 'tpu' is not a device; use auto, cpu, cuda or cuda:N",
        ),
        (["--device", "cuda:x", "--port", "{free}"], "error: --device 'cuda:x' is not a device"),
    ],
)
def test_launch_server_refuses_a_device_or_compile_it_cannot_serve_with_in_one_line(args, message):
    result = _launch_on_free_port(args)
    assert result.exit_code == 1
    assert len(result.output.strip().splitlines()) == 1 and result.output.startswith(message), result.output


def test_launch_server_batches_as_a_launched_policy_replica_when_told(monkeypatch, tiny_policy_path):
    """`--batch-wait-ms 100 --batch-gap-ms 5` give a hand-started embedded server the batching of the replicas rlrm
    launches for rollout.server (its defaults); without them it waits 2 ms, no gap. A negative one is refused."""
    import rlrm.launch.server.app as server_app

    served = []
    monkeypatch.setattr(server_app, "serve", lambda cfg, host, port, **kw: served.append(cfg))
    model = ["launch", "server", "--model", str(tiny_policy_path), "--role", "policy", "--device", "cpu"]
    with reserved_port() as port:  # checked free before `serve` (tests/fixtures/held_ports.py)
        told = CliRunner().invoke(app, [*model, "--port", str(port), "--batch-wait-ms", "100", "--batch-gap-ms", "5"])
        plain = CliRunner().invoke(app, [*model, "--port", str(port)])
    assert told.exit_code == plain.exit_code == 0, told.output + plain.output
    assert (served[0].batch_wait_ms, served[0].batch_gap_ms) == (100.0, 5.0)
    assert (served[1].batch_wait_ms, served[1].batch_gap_ms) == (2.0, None)
    negative = CliRunner().invoke(app, [*model, "--port", str(free_port()), "--batch-gap-ms", "-1"])
    assert negative.exit_code == 2 and "--batch-gap-ms" in negative.output


def test_launch_server_refuses_a_folder_that_holds_no_model_before_saying_it_serves(tmp_path):
    with reserved_port() as port:  # checked free before the model folder (tests/fixtures/held_ports.py)
        result = CliRunner().invoke(app, ["launch", "server", "--model", str(tmp_path), "--port", str(port)])
    assert result.exit_code == 1 and len(result.output.strip().splitlines()) == 1, result.output
    assert result.output.startswith(f"error: --model '{tmp_path}' is a folder but not a model (no config.json in it)")
