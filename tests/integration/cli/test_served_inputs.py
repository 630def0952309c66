"""Bad rollout-server inputs through the real CLI: one line, exit 1, no run folder left behind."""

from __future__ import annotations

from held_ports import refused_port  # tests/fixtures/held_ports.py
from small_run import as_set_args  # tests/fixtures/small_run.py
from typer.testing import CliRunner

from rlrm.cli.main import app


def test_a_dead_rollout_server_address_is_one_line_and_leaves_no_run(tmp_path, tiny_policy_path):
    with refused_port() as port:  # nothing listens there, and no other test's server can meanwhile
        dead = f"http://127.0.0.1:{port}"
        out = tmp_path / "run"
        result = CliRunner().invoke(
            app,
            [
                "train",
                "--profile",
                "tiny-rule",
                "--console",
                "none",
                "--steps",
                "1",
                "--out",
                str(out),
                "--set",
                "rollout.backend=server",
                "--set",
                f"rollout.server.addresses={dead}",
                "--set",
                "rollout.server.start_timeout_s=1",
                "--set",
                "trainer.num_threads=1",
            ],
        )
    assert result.exit_code == 1
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        f"error: rollout.server.addresses[0] {dead} cannot serve the policy: "
    )
    assert lines[0].endswith("(still after 1 s: rollout.server.start_timeout_s)")
    assert not out.exists()


def test_vllm_rollout_servers_in_an_overlapping_mode_are_accepted(tmp_path):
    result = CliRunner().invoke(app, ["train", "--profile", "gsm8k-rule-served", "--mode", "one-step-off", "--dry-run"])
    assert result.exit_code == 0, result.output


def test_a_judge_given_as_the_rollout_address_is_one_line_and_leaves_no_run(tmp_path, tiny_genrm_server):
    # a judge generates too (/generate answers), but takes no weights: the first sync would fail mid-run
    judge = tiny_genrm_server  # the session's (tests/integration/conftest.py): the refused run only asks it
    out = tmp_path / "run"
    sets = ["rollout.backend=server", "rollout.server.start_timeout_s=60", "trainer.num_threads=1"]
    sets.append(f"rollout.server.addresses={judge.url}")
    args = ["train", "--profile", "tiny-rule", "--console", "none", "--steps", "1", "--out", str(out)]
    result = CliRunner().invoke(app, [*args, *as_set_args(*sets)])
    lines = result.output.strip().splitlines()
    assert result.exit_code == 1 and len(lines) == 1, lines
    assert lines[0].startswith(f"error: rollout.server.addresses[0] {judge.url} cannot serve the policy: "), lines
    assert "role 'genrm', which takes no weights" in lines[0] and "--role policy" in lines[0]
    assert not out.exists()
