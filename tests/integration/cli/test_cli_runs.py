"""CLI commands through Typer's CliRunner: output, exit codes and one-line errors."""

from __future__ import annotations

import subprocess
import sys

from tests.unit.cli.test_cli import invoke


def test_help_imports_nothing_heavy():
    code = (
        "import sys; from rlrm.cli.main import app\n"
        "from typer.testing import CliRunner\n"
        "r = CliRunner().invoke(app, ['--help']); assert r.exit_code == 0, r.output\n"
        "heavy = [m for m in ('torch', 'transformers', 'ray', 'matplotlib', 'vllm', 'sglang', 'datasets') if m in sys.modules]\n"
        "print(','.join(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_train_end_to_end(tmp_path, tiny_policy_path):
    run = tmp_path / "run"
    args = [
        "train",
        "--profile",
        "tiny-rule",
        "--steps",
        "1",
        "--out",
        str(run),
        "--console",
        "plain",
        "--set",
        "data.train_batch_size=4",
        "--set",
        "actor.mini_batch_size=4",
        "--set",
        "rollout.n=2",
        "--set",
        "data.val_size=4",
        "--set",
        "trainer.num_threads=1",
    ]
    result = invoke(*args)
    assert result.exit_code == 0, result.output
    assert f"done: 1 steps in {run}" in result.output
    assert (run / "config.yaml").is_file() and (run / "checkpoints" / "step_1").is_dir()
    again = invoke(*args)  # the folder now holds a run: refused, untouched
    assert again.exit_code == 1 and "--overwrite" in again.output
    resumed = invoke("train", "--resume", str(run), "--steps", "2", "--console", "none")
    assert resumed.exit_code == 0, resumed.output
    assert "done: 2 steps" in resumed.output
    for again in ([], ["--steps", "1"]):  # a finished run, and a budget it has passed: said, nothing started
        idle = invoke("train", "--resume", str(run), *again, "--console", "none")
        assert idle.exit_code == 0 and idle.output.strip().startswith(f"nothing to train: {run} has"), idle.output
        assert "continue it with --steps N above 2" in idle.output
    assert "total_steps: 2" in (run / "config.yaml").read_text()  # the smaller budget was not written


def test_doctor_reports_torch():
    result = invoke("doctor")
    assert result.exit_code == 0
    assert "torch" in result.output and "vllm" in result.output


def test_a_bad_option_value_is_rlrm_s_one_line_not_a_usage_box():
    """`--steps 0` and a mistyped option: one `error:` line naming the option and the help to read, exit 2."""
    for argv, needle in (
        (["train", "--profile", "tiny-rule", "--steps", "0", "--dry-run"], "'--steps'"),
        (["train", "--profile", "tiny-rule", "--stepz", "3"], "--stepz"),
        (["report"], "'PATH'"),
    ):
        done = subprocess.run([sys.executable, "-m", "rlrm", *argv], capture_output=True, text=True)
        lines = done.stderr.strip().splitlines()
        assert done.returncode == 2, done.stderr
        assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0], done.stderr
        assert f"`rlrm {argv[0]} --help`" in lines[0]
    grouped = subprocess.run([sys.executable, "-m", "rlrm", "bench"], capture_output=True, text=True)
    assert grouped.returncode == 2 and "reward-latency" in grouped.stdout + grouped.stderr


def test_a_models_dir_that_is_a_file_is_one_line_and_leaves_no_run_folder(tmp_path, monkeypatch):
    in_the_way = tmp_path / "afile"
    in_the_way.write_text("x")
    monkeypatch.setenv("RLRM_MODELS_DIR", str(in_the_way))
    result = invoke("train", "--profile", "tiny-rule", "--steps", "1", "--out", str(tmp_path / "run"))
    assert result.exit_code == 1
    assert result.output.strip().splitlines()[-1].startswith(f"error: {in_the_way}")
    assert not (tmp_path / "run").exists()  # nothing half-made blocks the next --out
