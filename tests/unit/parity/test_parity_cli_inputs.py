"""`rlrm parity disrm` options and inputs refused in one line (exit 2) and --dry-run, without a server."""

from __future__ import annotations

import json

import pytest
import typer
from typer.testing import CliRunner

from rlrm.cli import parity

app = typer.Typer()
app.add_typer(parity.app, name="parity")  # as rlrm.cli.main mounts it


runner = CliRunner()


def invoke(*args):
    return runner.invoke(app, ["parity", "disrm", *map(str, args)])


def one_error_line(result) -> str:
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    return lines[0]


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--train-steps", "3"], "--train-steps trains a profile's policy: pass --profile"),
        (["--train-steps", "3", "--profile", "tiny-rule", "--matrix"], "drop --matrix/--address"),
        (["--world-size", "4096"], "needs a core per gloo rank"),
        (["--legacy-dtype", "fp8"], "--legacy-dtype 'fp8': use one of bf16, fp16, fp32"),
        (["--matrix", "--address", "http://127.0.0.1:9"], "--matrix needs rlrm to start them"),
        (["--max-length", "65"], "more than the reward model's 64 positions"),
    ],
)
def test_bad_options_are_one_line_and_exit_2(random_disrm_path, input_file, args, needle):
    result = invoke("--input", input_file, "--model", random_disrm_path, *args)
    assert result.exit_code == 2
    assert needle in one_error_line(result)


def test_bad_inputs_and_models_are_one_line_and_exit_2(random_disrm_path, tiny_policy_path, tmp_path, input_file):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"prompt": "q", "group_id": 1}))
    result = invoke("--input", bad, "--model", random_disrm_path)
    assert result.exit_code == 2 and "line 1: missing field(s) response" in one_error_line(result)
    result = invoke("--input", input_file, "--model", tiny_policy_path)
    assert result.exit_code == 2 and "not a sequence classifier" in one_error_line(result)
    result = invoke("--input", input_file, "--profile", "nope")
    assert result.exit_code == 2 and "unknown profile 'nope'" in one_error_line(result)


def test_dry_run_prints_the_resolved_settings(random_disrm_path, input_file):
    result = invoke("--input", input_file, "--model", random_disrm_path, "--matrix", "--dry-run")
    assert result.exit_code == 0, result.output
    resolved = json.loads(result.output)
    assert resolved["legacy_dtypes"] == ["bf16", "fp16", "fp32"] and resolved["loop_dtypes"] == ["fp32", "bf16"]
    assert resolved["max_length"] == 64 and resolved["rtol"] == 0.125
