"""reward.timeout_s, renamed: read as reward.attempt_timeout_s and reward.server.request_timeout_s from a profile,
`--set` and a run folder's config.yaml, with one note per process; old and new keys together are one error line;
the reward contract (and so the fingerprint of every existing run) does not change."""

from __future__ import annotations

import pytest
import yaml
from typer.testing import CliRunner

from rlrm.cli.main import app
from rlrm.config import renamed_keys
from rlrm.config.loader import load_profile
from rlrm.engine.rewards.contract import reward_contract
from rlrm.engine.trainer import load_run_profile, start_run
from rlrm.errors import ConfigError

NOTE = "note: reward.timeout_s is now reward.attempt_timeout_s and reward.server.request_timeout_s"
MODEL = {"name": "tiny:judge", "path": "/m", "weights": "sha256:0"}


@pytest.fixture(autouse=True)
def fresh_notes(monkeypatch):
    monkeypatch.setattr(renamed_keys, "_noted", set())  # each test sees this process's first note


def timeouts(profile) -> tuple[float, float]:
    return profile.reward.attempt_timeout_s, profile.reward.server.request_timeout_s


def write_profile(tmp_path, name: str, reward: dict, extends: str = "tiny-genrm"):
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump({"extends": extends, "reward": reward}))
    return str(path)


def test_the_old_key_in_a_profile_sets_both_new_keys_with_one_note(tmp_path, capsys):
    old = write_profile(tmp_path, "old", {"timeout_s": 45})
    assert timeouts(load_profile(old)) == (45.0, 45.0)
    assert timeouts(load_profile(old)) == (45.0, 45.0)
    notes = [line for line in capsys.readouterr().err.splitlines() if line.startswith("note:")]
    assert len(notes) == 1 and notes[0].startswith(NOTE)  # once per process, not once per load


def test_the_new_keys_mean_one_thing_each_and_say_nothing(tmp_path, capsys):
    new = write_profile(tmp_path, "new", {"attempt_timeout_s": 50, "server": {"request_timeout_s": 5}})
    assert timeouts(load_profile(new)) == (50.0, 5.0)
    assert timeouts(load_profile("tiny-genrm")) == (30.0, 30.0)  # the defaults of the old key, both kept
    assert "note:" not in capsys.readouterr().err


def test_old_and_new_keys_in_one_profile_are_one_error_line(tmp_path):
    both = write_profile(tmp_path, "both", {"timeout_s": 45, "server": {"request_timeout_s": 5}})
    with pytest.raises(ConfigError) as refused:
        load_profile(both)
    message = str(refused.value)
    assert "\n" not in message and message.startswith(f"{both}: reward.timeout_s and reward.server.request_timeout_s")
    assert "remove reward.timeout_s" in message


def test_set_with_the_old_key_overrides_both_new_keys_of_the_profile(tmp_path, capsys):
    new = write_profile(tmp_path, "new", {"attempt_timeout_s": 50, "server": {"request_timeout_s": 5}})
    assert timeouts(load_profile(new, ["reward.timeout_s=12"])) == (12.0, 12.0)  # the later layer wins
    assert timeouts(load_profile(new, ["reward.attempt_timeout_s=9"])) == (9.0, 5.0)
    assert capsys.readouterr().err.count("note:") == 1


def test_set_with_old_and_new_keys_together_is_one_error_line():
    with pytest.raises(ConfigError, match=r"^--set: reward.timeout_s and reward.attempt_timeout_s are both set"):
        load_profile("tiny-genrm", ["reward.timeout_s=12", "reward.attempt_timeout_s=9"])


def test_a_child_profile_with_the_old_key_overrides_its_parents_new_keys(tmp_path):
    write_profile(tmp_path, "parent", {"attempt_timeout_s": 50, "server": {"request_timeout_s": 5}})
    child = tmp_path / "child.yaml"
    child.write_text(yaml.safe_dump({"extends": "parent.yaml", "reward": {"timeout_s": 20}}))
    assert timeouts(load_profile(str(child))) == (20.0, 20.0)


def test_the_old_key_in_a_run_folder_resumes_as_both_and_is_rewritten_new(tmp_path, capsys):
    run = start_run(load_profile("tiny-genrm"), tmp_path / "run")
    config = run / "config.yaml"
    raw = yaml.safe_load(config.read_text())
    del raw["reward"]["attempt_timeout_s"], raw["reward"]["server"]["request_timeout_s"]
    raw["reward"]["timeout_s"] = 17.0  # config.yaml as an rlrm from before the rename wrote it
    config.write_text(yaml.safe_dump(raw, sort_keys=False))
    assert timeouts(load_run_profile(run)) == (17.0, 17.0)
    assert NOTE in capsys.readouterr().err
    load_run_profile(run, total_steps=3)  # a resume with a new step budget writes config.yaml again: new keys
    written = yaml.safe_load(config.read_text())["reward"]
    assert "timeout_s" not in written
    assert (written["attempt_timeout_s"], written["server"]["request_timeout_s"]) == (17.0, 17.0)


def test_the_reward_contract_is_the_same_under_old_new_or_no_timeout_keys(tmp_path):
    old = load_profile(write_profile(tmp_path, "old", {"timeout_s": 7}))
    new = load_profile(write_profile(tmp_path, "new", {"attempt_timeout_s": 7, "server": {"request_timeout_s": 7}}))
    other = load_profile("tiny-genrm", ["reward.attempt_timeout_s=90", "reward.server.request_timeout_s=2"])
    prints = {reward_contract(p.reward, MODEL).fingerprint for p in (old, new, other)}
    # tiny-genrm's fingerprint with this model identity at 4b6e896, before the rename: existing runs keep theirs
    assert prints == {"379bc095d42e1565d4f792e0f359ee92bbdd43bfebf071189d9f96de6f10df20"}


def test_profiles_show_with_the_old_key_prints_the_new_keys_and_the_note():
    shown = CliRunner().invoke(app, ["profiles", "show", "tiny-genrm", "--set", "reward.timeout_s=10"])
    assert shown.exit_code == 0, shown.output
    reward = yaml.safe_load(shown.stdout)["reward"]
    assert "timeout_s" not in reward
    assert (reward["attempt_timeout_s"], reward["server"]["request_timeout_s"]) == (10.0, 10.0)
    assert shown.stderr.startswith(NOTE) and shown.stderr.count("\n") == 1


def test_the_rate_limit_check_meets_the_attempt_deadline_not_the_request_timeout():
    # a request waits for its rate-limit slot inside its attempt, before it is sent: spacing requests 30 s apart
    # is refused under a 1-s attempt whatever the request timeout, and allowed under a 30-s attempt
    with pytest.raises(ConfigError, match=r"reward.limits.rpm=2 .* reward.attempt_timeout_s=1: .* at least 60"):
        load_profile(
            "tiny-genrm", ["reward.limits.rpm=2", "reward.attempt_timeout_s=1", "reward.server.request_timeout_s=60"]
        )
    allowed = load_profile(
        "tiny-genrm", ["reward.limits.rpm=2", "reward.attempt_timeout_s=30", "reward.server.request_timeout_s=1"]
    )
    assert timeouts(allowed) == (30.0, 1.0)
    # its twin for tokens: tiny-genrm's judge answers in up to 32 tokens, so 32 a minute spaces requests 60 s apart
    with pytest.raises(
        ConfigError, match=r"reward.limits.tpm=32 .* 60 s apart, .*attempt_timeout_s=30: .* at least 64"
    ):
        load_profile("tiny-genrm", ["reward.limits.tpm=32"])
    assert load_profile("tiny-genrm", ["reward.limits.tpm=64"]).reward.limits.tpm == 64
