"""CLI commands through Typer's CliRunner that start nothing: output, exit codes and one-line errors."""

from __future__ import annotations

import pytest
import yaml
from typer.testing import CliRunner

from rlrm.cli.main import app
from rlrm.config.loader import dump_profile, load_profile

runner = CliRunner()


def invoke(*args):
    return runner.invoke(app, list(args))


def test_profiles_list_and_show():
    result = invoke("profiles", "list")
    assert result.exit_code == 0
    assert "tiny-rule" in result.output and "gsm8k-rule" in result.output
    shown = invoke("profiles", "show", "tiny-rule", "--set", "rollout.n=3")
    assert shown.exit_code == 0
    assert yaml.safe_load(shown.output)["rollout"]["n"] == 3


def test_unknown_profile_is_one_line():
    result = invoke("train", "--profile", "nope")
    assert result.exit_code == 1
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: unknown profile 'nope'")
    assert "tiny-rule" in lines[0]


def test_bad_set_is_rejected():
    result = invoke("train", "--profile", "tiny-rule", "--set", "actor.lrr=1", "--dry-run")
    assert result.exit_code == 1
    assert "did you mean 'actor.lr'" in result.output


def test_dry_run_resolves_gsm8k_profile(tmp_path):
    result = invoke(
        "train", "--profile", "gsm8k-rule", "--dry-run", "--steps", "7", "--seed", "3", "--out", str(tmp_path / "r")
    )
    assert result.exit_code == 0, result.output
    body = yaml.safe_load(result.output.split("\n", 1)[1])
    assert body["trainer"]["total_steps"] == 7 and body["trainer"]["seed"] == 3
    assert body["rollout"]["n"] == 5 and body["model"]["path"] == "Qwen/Qwen2.5-0.5B-Instruct"
    assert not (tmp_path / "r").exists()  # a dry run writes nothing


def test_dry_run_checks_the_files_a_run_would_read(tmp_path):
    """A dry run shows the resolved profile, then refuses what the run would refuse before starting, with the run's
    one line: here a model folder that is not there and a data folder without its files."""
    missing_model = invoke(
        "train", "--profile", "tiny-rule", "--set", f"model.path={tmp_path / 'nomodel'}", "--dry-run"
    )
    assert missing_model.exit_code == 1
    assert "# run folder:" in missing_model.output  # the profile first
    last = missing_model.output.strip().splitlines()[-1]
    assert last.startswith("error:") and "nomodel" in last, missing_model.output
    empty = tmp_path / "data"
    empty.mkdir()
    settings = ["--set", "data.source=gsm8k", "--set", f"data.path={empty}", "--out", str(tmp_path / "run")]
    no_data = invoke("train", "--profile", "tiny-rule", *settings)
    dry = invoke("train", "--profile", "tiny-rule", *settings, "--dry-run")
    assert dry.exit_code == no_data.exit_code == 1
    assert dry.output.strip().splitlines()[-1] == no_data.output.strip() and str(empty) in no_data.output
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("profile", ["tiny-genrm", "tiny-rubric"])
def test_a_judge_temperature_the_sglang_router_refuses_is_one_line_before_anything_starts(profile, monkeypatch):
    """sglang-router answers a chat request with temperature above 2 with a 400: every judge call of step 1 failed.
    With the client router (rlrm's own servers take it) the same setting is a run."""
    monkeypatch.setattr("rlrm.launch.fleet.server_fleet.sglang_router_available", lambda: True)
    hot = ["--set", "reward.genrm.temperature=2.5", "--dry-run"]
    refused = invoke("train", "--profile", profile, *hot)
    assert refused.exit_code == 1
    last = refused.output.strip().splitlines()[-1]
    assert last.startswith("error: reward.genrm.temperature 2.5 is above 2") and "reward.server.router=client" in last
    assert invoke("train", "--profile", profile, *hot, "--set", "reward.server.router=client").exit_code == 0
    assert invoke("train", "--profile", profile, "--set", "reward.genrm.temperature=2", "--dry-run").exit_code == 0


def test_console_takes_only_its_three_displays():
    result = invoke("train", "--profile", "tiny-rule", "--console", "fancy", "--dry-run")
    assert result.exit_code == 1
    assert result.output.strip() == "error: --console 'fancy' is not a live display; use one of rich, plain, none"


def test_refuses_folder_holding_another_run(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text(dump_profile(load_profile("tiny-rule")))
    (run / "metrics.jsonl").write_text('{"step": 1}\n')
    result = invoke("train", "--profile", "tiny-rule", "--out", str(run))
    assert result.exit_code == 1
    assert "--resume" in result.output and "--overwrite" in result.output
    assert (run / "metrics.jsonl").read_text() == '{"step": 1}\n'  # nothing lost


@pytest.mark.parametrize("overwrite", [[], ["--overwrite"]], ids=["plain", "overwrite"])
def test_a_folder_of_other_files_is_never_a_run_to_replace(tmp_path, overwrite):
    """--out at a folder of somebody's files (not a run's: no config.yaml of one) is refused, --overwrite or not."""
    mine = tmp_path / "mine"
    (mine / "sub").mkdir(parents=True)
    (mine / "notes.txt").write_text("keep")
    (mine / "config.yaml").write_text("trainer: {max_epochs: 3}\nmodel: {lr: 0.1}\n")  # LightningCLI's shape
    result = invoke("train", "--profile", "tiny-rule", "--out", str(mine), *overwrite)
    assert result.exit_code == 1
    assert result.output.strip() == (
        f"error: {mine} is not empty and is not an rlrm run folder (no config.yaml of a run); choose another --out, "
        "or an empty or new folder (--overwrite replaces run folders only)"
    )
    assert sorted(p.name for p in mine.iterdir()) == ["config.yaml", "notes.txt", "sub"]
    assert (mine / "notes.txt").read_text() == "keep"


def test_resume_needs_a_run_folder(tmp_path):
    result = invoke("train", "--resume", str(tmp_path))
    assert result.exit_code == 1
    assert "not an rlrm run folder" in result.output


def test_resume_refuses_new_settings(tmp_path):
    result = invoke("train", "--resume", str(tmp_path), "--set", "actor.lr=1")
    assert result.exit_code == 1 and "--resume" in result.output


def test_train_needs_a_profile():
    result = invoke("train")
    assert result.exit_code == 1 and "--profile" in result.output


def test_debug_variable_shows_traceback(monkeypatch):
    monkeypatch.setenv("RLRM_DEBUG", "1")
    result = invoke("train", "--profile", "nope")
    assert result.exit_code != 0
    assert type(result.exception).__name__ == "ConfigError"


def test_models_prepare_reuses_the_cache(tiny_policy_path):
    result = invoke("models", "prepare", "--name", "policy")
    assert result.exit_code == 0, result.output
    assert f"policy: {tiny_policy_path}" in result.output and "ready" in result.output


def test_missing_model_path_leaves_no_run_folder(tmp_path):
    run = tmp_path / "run"
    result = invoke("train", "--profile", "tiny-rule", "--out", str(run), "--set", f"model.path={tmp_path}/nope")
    assert result.exit_code == 1
    assert "does not exist" in result.output and "nope" in result.output
    assert not run.exists()


def test_missing_dataset_file_leaves_no_run_folder(tmp_path):
    run = tmp_path / "run"
    result = invoke(
        "train",
        "--profile",
        "gsm8k-rule",
        "--out",
        str(run),
        "--set",
        "model.path=tiny:policy",
        "--set",
        f"data.path={tmp_path}/absent.jsonl",
    )
    assert result.exit_code == 1
    assert "absent.jsonl" in result.output
    assert not run.exists()


def test_bad_rows_in_local_gsm8k_file_name_file_and_row(tmp_path):
    data = tmp_path / "gsm.jsonl"
    data.write_text('{"question": "q1", "answer": "#### 1"}\n{"question": "q2"}\n')
    (tmp_path / "test.jsonl").write_text('{"question": "q1", "answer": "#### 1"}\n')
    result = invoke(
        "train",
        "--profile",
        "gsm8k-rule",
        "--out",
        str(tmp_path / "run"),
        "--set",
        "model.path=tiny:policy",
        "--set",
        f"data.path={data}",
        "--set",
        f"data.test_split={tmp_path / 'test.jsonl'}",
    )
    assert result.exit_code == 1
    assert "gsm.jsonl line 2" in result.output and "skip_bad_rows" in result.output


def test_a_missing_serve_extra_is_one_line_naming_it(monkeypatch):
    """Without fastapi (the `serve` extra) a run that starts an embedded server stops in one line, before any process."""
    import importlib.util

    import pytest

    from rlrm.errors import RlrmError
    from rlrm.launch.fleet.process import embedded_server_argv

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "fastapi" else real(name, *a))
    with pytest.raises(RlrmError, match=r"an embedded server needs fastapi.*pip install 'rlrm\[serve\]'"):
        embedded_server_argv("tiny:judge", "genrm", 8000)


def test_a_path_the_file_system_refuses_is_one_line(tmp_path):
    """A file where a folder goes (RLRM_MODELS_DIR, --cache-dir, --out under a file): the path and what to do."""
    in_the_way = tmp_path / "afile"
    in_the_way.write_text("x")
    result = invoke("models", "prepare", "--cache-dir", str(in_the_way / "models"))
    assert result.exit_code == 1
    assert result.output.strip() == (
        f"error: {in_the_way / 'models'}: Not a directory; a file is where a folder should be: move it, or choose "
        "another path"
    )


def test_other_os_errors_are_not_worded_as_a_path():
    import errno

    from rlrm.cli.common import path_error

    assert path_error(OSError(errno.ECONNREFUSED, "Connection refused")) is None  # a bug or a server: shown whole
    assert path_error(OSError(errno.EROFS, "Read-only file system", "/mnt/ro/run")) == (
        "/mnt/ro/run: Read-only file system; the file system is read-only: choose a folder you can write to"
    )


def test_a_folder_that_is_not_a_model_is_one_line_before_anything_loads(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "train.jsonl").write_text("{}\n")
    result = invoke("train", "--profile", "tiny-rule", "--set", f"model.path={data}", "--dry-run")
    assert result.exit_code == 1
    assert result.output.strip().splitlines()[-1] == (
        f"error: model.path '{data}' is a folder but not a model (no config.json in it); give the folder "
        "save_pretrained wrote, a hub id (org/name) or tiny:NAME"
    )


def test_every_command_lists_on_one_line_in_its_groups_help():
    """A group's command list shows each command's short help: one sentence on one line, not the docstring's
    first paragraph with its source line breaks (`rlrm --help` once broke `train`'s text mid-sentence)."""
    from rlrm.cli.reference import commands

    for path, command in commands():
        shown = command.short_help or (command.help or "").split("\n\n")[0]
        assert "\n" not in shown.strip(), f"{path}: give it a short_help of one line"
        assert len(shown) <= 100, f"{path}: its short help is {len(shown)} characters; keep it to one line"
    listed = CliRunner().invoke(app, ["--help"], env={"COLUMNS": "120"}).output
    assert "Train a policy with GRPO" in listed and "then\n" not in listed
