"""Profiles: every built-in profile loads; extends, overrides and errors behave."""

from __future__ import annotations

import pytest

from rlrm.config.loader import list_profiles, load_profile, profiles_dir
from rlrm.config.schema import Profile
from rlrm.errors import ConfigError

PROFILE_NAMES = sorted(p.stem for p in profiles_dir().glob("*.yaml"))


def test_there_are_profiles():
    assert {"tiny-rule", "gsm8k-rule"} <= set(PROFILE_NAMES)


@pytest.mark.parametrize("name", PROFILE_NAMES)
def test_every_profile_loads_and_describes_itself(name):
    profile = load_profile(name)
    assert isinstance(profile, Profile)
    assert profile.description, f"{name} has no description"
    first_line = (profiles_dir() / f"{name}.yaml").read_text().splitlines()[0]
    assert first_line.startswith("#"), f"{name} must start with a comment saying what it is for"
    assert list_profiles()[name] == profile.description


def test_overrides_are_typed():
    p = load_profile("tiny-rule", ["actor.lr=2e-4", "rollout.n=4", "trainer.val_before_train=false"])
    assert p.actor.lr == pytest.approx(2e-4)
    assert p.rollout.n == 4
    assert p.trainer.val_before_train is False


def test_a_hydra_style_mapping_is_read_as_hydra_reads_it():
    # `{a:1,b:2}` (no space after the colon, as Hydra and verl's command lines write it) used to be keys "a:1" and
    # "b:2" with no values, refused as "Input should be a valid number (got None)"
    p = load_profile("tiny-rule", ["reward.component_weights={correct:1.0,format:2e-1}"])
    assert p.reward.component_weights == {"correct": 1.0, "format": pytest.approx(0.2)}
    spaced = load_profile("tiny-rule", ["reward.component_weights={correct: 1.0, format: 0.2}"])
    assert spaced.reward.component_weights == p.reward.component_weights
    from rlrm.config.loader import _parse_override

    assert _parse_override("k={url:http://h:80/v1,on:true}") == ("k", {"url": "http://h:80/v1", "on": True})
    assert _parse_override("k=Q: {question}") == ("k", "Q: {question}")  # text, not the mapping {Q: {question: }}
    assert _parse_override("k=- a") == ("k", "- a")
    assert _parse_override("k=[a, b]") == ("k", ["a", "b"])


def test_quoted_and_other_scripts_digits_stay_text():
    # `'0612'` was read as the number 612 and `١٢٣` (Arabic-Indic digits) as 123: a run name of digits was refused
    # ("Input should be a valid string (got 612)"), whatever the quoting
    for text in ("'0612'", '"0612"', "١٢٣", "２０２４"):
        assert load_profile("tiny-rule", [f"trainer.run_name={text}"]).trainer.run_name == text.strip("'\"")
    assert load_profile("tiny-rule", ["actor.lr=1e-4"]).actor.lr == pytest.approx(1e-4)  # a number, unquoted


def test_a_double_quoted_value_is_kept_as_written():
    # YAML's double quotes read the `\b` of `\boxed{}` as a backspace: every prompt asked for a box it could not show
    suffix = "Please reason step by step, and put your final answer within \\boxed{}."
    for written in (f'"{suffix}"', f"'{suffix}'", suffix):
        assert load_profile("tiny-rule", [f"data.prompt_suffix={written}"]).data.prompt_suffix == suffix
    assert load_profile("tiny-rule", ['trainer.run_name="say \\"hi\\""']).trainer.run_name == 'say "hi"'
    # YAML's escapes where nothing is LaTeX: a newline stays one
    assert load_profile("tiny-rule", ['data.prompt_suffix="\\nAnswer after ####."']).data.prompt_suffix == (
        "\nAnswer after ####."
    )


@pytest.mark.parametrize(
    ("override", "needle"),
    [
        ("actor.lrr=1e-4", "did you mean 'actor.lr'"),
        ("actr.lr=1e-4", "did you mean 'actor'"),
        ("actor.lr=abc", "actor.lr"),
        ("rollout.n=0", "rollout.n"),
        ("trainer.mode=turbo", "trainer.mode"),
        ("actor.lr.x=1", "has no sub-keys"),
        ("actor.lr", "section.key=value"),
        ("actor.kl_loss_type=k9", "kl_loss_type"),
    ],
)
def test_bad_overrides_name_the_key(override, needle):
    with pytest.raises(ConfigError, match=needle.replace(".", r"\.").replace("(", r"\(")):
        load_profile("tiny-rule", [override])


def test_unknown_profile_lists_available():
    with pytest.raises(ConfigError, match="available: .*tiny-rule"):
        load_profile("tiny-rul")


def _write(path, text):
    path.write_text(text)
    return path


def test_extends_merges_deeply(tmp_path, monkeypatch):
    monkeypatch.setenv("RLRM_PROFILES_DIR", str(tmp_path))
    _write(tmp_path / "base.yaml", "description: base\nactor:\n  lr: 0.001\n  grad_clip: 0.5\nrollout:\n  n: 4\n")
    _write(tmp_path / "child.yaml", "extends: base\ndescription: child\nactor:\n  lr: 0.002\n")
    p = load_profile("child")
    assert p.actor.lr == pytest.approx(0.002)
    assert p.actor.grad_clip == pytest.approx(0.5)  # inherited
    assert p.rollout.n == 4
    assert p.description == "child"


def test_extends_a_file_names_the_file_beside_the_profile(tmp_path, monkeypatch):
    """`extends: base.yaml` in mine/child.yaml is mine/base.yaml, whatever folder rlrm runs from."""
    mine = tmp_path / "mine"
    mine.mkdir()
    _write(mine / "base.yaml", "extends: tiny-rule\nrollout:\n  n: 3\n")
    _write(mine / "child.yaml", "extends: base.yaml\nactor:\n  lr: 0.002\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    p = load_profile(str(mine / "child.yaml"))
    assert p.rollout.n == 3 and p.actor.lr == pytest.approx(0.002)


def test_extends_cycle_is_an_error(tmp_path, monkeypatch):
    monkeypatch.setenv("RLRM_PROFILES_DIR", str(tmp_path))
    _write(tmp_path / "a.yaml", "extends: b\n")
    _write(tmp_path / "b.yaml", "extends: a\n")
    with pytest.raises(ConfigError, match="cycle"):
        load_profile("a")


def test_unknown_key_in_file_names_path(tmp_path):
    path = _write(tmp_path / "p.yaml", "rollout:\n  temprature: 0.5\n")
    with pytest.raises(ConfigError, match=r"'rollout.temprature'; did you mean 'rollout.temperature'"):
        load_profile(str(path))


def test_invalid_yaml_and_non_mapping(tmp_path):
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_profile(str(_write(tmp_path / "bad.yaml", "actor: [1,\n")))
    with pytest.raises(ConfigError, match="mapping"):
        load_profile(str(_write(tmp_path / "list.yaml", "- 1\n- 2\n")))


def test_cross_field_validation():
    with pytest.raises(ConfigError, match="multiple of"):
        load_profile("tiny-rule", ["actor.mini_batch_size=5"])
    with pytest.raises(ConfigError, match="min_value"):
        load_profile("tiny-rule", ["data.synthetic.min_value=50", "data.synthetic.max_value=10"])
    with pytest.raises(ConfigError, match="rollout.backend is server .*: set rollout.compile=off"):
        load_profile("tiny-rule", ["rollout.backend=server", "rollout.compile=cudagraphs"])
    assert load_profile("tiny-rule", ["rollout.compile=inductor"]).rollout.compile == "inductor"


def test_model_rewards_need_a_model():
    with pytest.raises(ConfigError, match="needs reward.server.model"):
        load_profile("tiny-rule", ["reward.kind=genrm"])
    p = load_profile("tiny-rule", ["reward.kind=disrm", "reward.server.model=/some/rm", "reward.on_failure=drop-group"])
    assert p.reward.model_kind == "disrm" and p.reward.on_failure == "drop-group"


def _float_fields(model, prefix=""):
    """Key paths of every float field of the profile schema (tuples of floats included)."""
    from pydantic import BaseModel

    for name, info in model.model_fields.items():
        ann = info.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            yield from _float_fields(ann, f"{prefix}{name}.")
        elif ann is float or ann == (float | None):
            yield f"{prefix}{name}"
        elif getattr(ann, "__args__", None) == (float, float):
            yield f"{prefix}{name}.1"


FLOAT_KEYS = sorted(_float_fields(Profile))
# NaN is meaningful here: parity runs give failed samples a NaN score so that they are reported.
NAN_ALLOWED = {"reward.default_score"}


def test_the_schema_walk_finds_the_float_fields():
    assert {
        "actor.lr",
        "actor.betas.1",
        "rollout.temperature",
        "reward.inject.fail_rate",
        "reward.attempt_timeout_s",
    } <= set(FLOAT_KEYS)


@pytest.mark.parametrize("key", [k for k in FLOAT_KEYS if k not in NAN_ALLOWED])
@pytest.mark.parametrize("value", ["inf", "-inf", "nan"])
def test_non_finite_floats_are_refused_with_the_key_path(key, value):
    if key == "actor.betas.1":
        override = f"actor.betas=[0.9,{value}]"
    else:
        override = f"{key}={value}"
    with pytest.raises(
        ConfigError, match=rf"^--set {key.replace('.', '[.]')}: Input should be a finite number"
    ):  # named as given
        load_profile("tiny-rule", [override])


def test_bounds_that_catch_typos_say_why():
    with pytest.raises(
        ConfigError, match=r"rollout\.n: .*at most 1024 samples per prompt: every step generates and holds"
    ):
        load_profile("tiny-rule", ["rollout.n=1e9"])
    with pytest.raises(
        ConfigError, match=r"train_batch_size x rollout.n = 2,000,000 completions per step, over 1,000,000"
    ):
        load_profile("tiny-rule", ["data.train_batch_size=2000", "actor.mini_batch_size=1", "rollout.n=1000"])
    with pytest.raises(ConfigError, match=r"actor\.lr: Input should be less than or equal to 1"):
        load_profile("tiny-rule", ["actor.lr=1e39"])


def test_an_empty_profile_is_an_error(tmp_path):
    empty = tmp_path / "empty.yaml"
    empty.write_text("# only a comment\n")
    with pytest.raises(ConfigError, match=r"empty\.yaml: the profile is empty; give at least `extends: NAME`"):
        load_profile(str(empty))
