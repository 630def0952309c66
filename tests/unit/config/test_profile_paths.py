"""A relative reward.custom.path in a profile file is relative to that file's folder; one given with --set is
relative to the working directory."""

from __future__ import annotations

import pytest

from rlrm.config.loader import load_profile
from rlrm.errors import ConfigError

REWARD = "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n    return 0.0\n"


def test_a_profile_file_names_its_function_relative_to_itself(tmp_path, monkeypatch):
    (tmp_path / "mine" / "rewards").mkdir(parents=True)
    (tmp_path / "mine" / "rewards" / "score.py").write_text(REWARD)
    profile = tmp_path / "mine" / "p.yaml"
    profile.write_text("extends: tiny-rule\nreward:\n  kind: custom\n  custom:\n    path: rewards/score.py\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    loaded = load_profile(str(profile))
    assert loaded.reward.custom.path == str(tmp_path / "mine" / "rewards" / "score.py")


def test_a_set_path_stays_relative_to_the_working_directory(tmp_path, monkeypatch):
    (tmp_path / "score.py").write_text(REWARD)
    monkeypatch.chdir(tmp_path)
    loaded = load_profile("tiny-rule", ["reward.kind=custom", "reward.custom.path=score.py"])
    assert loaded.reward.custom.path == str(tmp_path / "score.py")
    monkeypatch.chdir(tmp_path.parent)
    with pytest.raises(ConfigError, match="reward.custom.path"):
        load_profile("tiny-rule", ["reward.kind=custom", "reward.custom.path=score.py"])


def test_the_shipped_fapo_profile_loads_from_any_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert load_profile("tiny-fapo").reward.custom.path.endswith("examples/rewards/fapo_judge.py")
