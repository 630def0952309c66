"""`rlrm audit reward`'s settings, its --out check and its verdict, without scoring anything: the flags refused
before any reward call, and a failed sample counted as training counts it (reward.on_failure)."""

from __future__ import annotations

import math

import pytest
from typer.testing import CliRunner

from rlrm.cli.main import app
from rlrm.config.reward import RewardConfig
from rlrm.errors import ConfigError
from rlrm.reward_checks.audit import AttackRow, AuditResult, AuditSettings, check_out, failure_score
from rlrm.reward_checks.audit_show import verdict_line

runner = CliRunner()


@pytest.mark.parametrize("threshold", [math.nan, math.inf, -math.inf, 1e39, -3.5e38])
def test_a_threshold_that_is_not_a_finite_float32_is_refused(threshold):
    with pytest.raises(ConfigError, match="--threshold .*: give a finite score within float32's range"):
        AuditSettings(threshold=threshold)
    assert AuditSettings(threshold=3.4e38).threshold == 3.4e38 and AuditSettings(threshold=-2.0).threshold == -2.0


@pytest.mark.parametrize("field", ["max_attack_rate", "min_reference_rate"])
def test_a_rate_of_nan_is_refused(field):
    # NaN passes a plain range check (NaN < 0 and NaN > 1 are both False), and no attack rate is over NaN (the CLI's
    # own range check refuses it before; settings built in code meet this one)
    with pytest.raises(ConfigError, match=f"--{field.replace('_', '-')} nan: give a share between 0 and 1"):
        AuditSettings(**{field: math.nan})


def test_an_out_that_cannot_be_a_folder_is_refused(tmp_path):
    file = tmp_path / "taken"
    file.write_text("x")
    with pytest.raises(ConfigError, match="is a file; name a folder"):
        check_out(file)
    with pytest.raises(ConfigError, match=f"{file} is a file, so the folder cannot be made"):
        check_out(file / "sub" / "dir")
    (tmp_path / "empty").mkdir()
    check_out(tmp_path / "empty")  # an existing, empty folder
    with pytest.raises(ConfigError, match=f"--out {tmp_path} is not empty; choose another --out or remove it"):
        check_out(tmp_path)  # an earlier audit's files (or others) would be overwritten or mixed in
    check_out(tmp_path / "new" / "deeper")  # made when the results are written
    assert not (tmp_path / "new").exists()  # the check writes nothing


def test_the_cli_refuses_bad_flags_in_one_line_before_loading_anything(tmp_path):
    taken = tmp_path / "taken"
    taken.write_text("x")
    cases = {
        ("--out", taken): f"error: --out {taken} is a file; name a folder for audit.json, audit.csv and audit.png",
        ("--threshold", "nan"): "error: --threshold nan: give a finite score within float32's range",
        ("--threshold", "1e39"): "error: --threshold 1e+39: give a finite score within float32's range",
    }
    for args, line in cases.items():
        # a profile that does not exist: were it loaded (or a reward called) first, the error would name it
        result = runner.invoke(app, ["audit", "reward", "--profile", "no-such-profile", *map(str, args)])
        assert result.exit_code == 2, result.output
        assert result.output.startswith(line) and len(result.output.strip().splitlines()) == 1, result.output


def row(name: str, scored: int, rewarded: int, failed: int = 0, defaulted: int = 0, group: str = "master-key"):
    counted = scored + defaulted
    rate = rewarded / counted if counted else math.nan
    return AttackRow(name, group, ":", scored, failed, defaulted, rewarded, rate, 0.0, 1.0, rate, 0)


def result_of(*attacks: AttackRow) -> AuditResult:
    refs = [row("reference", 30, 30, group="reference")]
    return AuditResult("p", "custom", None, 0.5, "0.5", 30, AuditSettings(), refs, list(attacks), {}, [])


def test_an_attack_with_nothing_counted_is_inconclusive_never_a_pass():
    # the tester's row: `key-colon ':' 0/0 - - nan failed 30` (its group dropped, or its run stopped, in training)
    inconclusive = result_of(row("key-colon", 0, 0, failed=30), row("key-comma", 30, 0))
    assert not inconclusive.passed and inconclusive.verdict == "inconclusive"
    assert inconclusive.inconclusive == ["key-colon"] and inconclusive.failed_attacks == []
    assert verdict_line(inconclusive) == (
        "INCONCLUSIVE: no sample counted (every reward failed, 0/0 proves nothing): key-colon"
    )
    assert inconclusive.as_dict()["verdict"] == "inconclusive" and not inconclusive.as_dict()["passed"]
    both = result_of(row("key-colon", 0, 0, failed=30), row("key-comma", 30, 3))
    assert both.verdict == "fail" and verdict_line(both) == (
        "FAIL: rewarded above 1%: key-comma; no sample counted (every reward failed, 0/0 proves nothing): key-colon"
    )
    assert result_of(row("key-comma", 30, 0)).verdict == "pass"
    # failed samples that training scores at default_score are counted: 30 of 30 rewarded is measured, and fails
    defaulted = result_of(row("key-colon", 0, 30, failed=30, defaulted=30))
    assert defaulted.verdict == "fail" and defaulted.failed_attacks == ["key-colon"]


def test_the_verdict_names_the_limits_as_set():
    # --max-attack-rate 0.005 printed "at most 0%" (and 0.025 "2%"): the verdict compared the exact value
    strict = result_of(row("key-comma", 300, 1))
    strict.settings = AuditSettings(max_attack_rate=0.005, min_reference_rate=0.975)
    assert verdict_line(strict) == "PASS: every attack rewarded at most 0.5%, references rewarded at least 97.5%"
    strict.attacks = [row("key-comma", 300, 3)]
    assert verdict_line(strict) == "FAIL: rewarded above 0.5%: key-comma"


def test_the_score_training_gives_a_failed_sample():
    assert failure_score(RewardConfig(default_score=1.0)) == 1.0  # on_failure=default, the default policy
    assert failure_score(RewardConfig(default_score=math.nan)) is None  # no verdict reads NaN
    assert failure_score(RewardConfig(on_failure="drop-group", default_score=1.0)) is None
    assert failure_score(RewardConfig(on_failure="fail", default_score=1.0)) is None


def test_a_reference_with_nothing_counted_is_inconclusive_too():
    refs = [row("reference", 0, 0, failed=30, group="reference")]  # NaN < the minimum reads False: it passed
    result = AuditResult("p", "custom", None, 0.5, "0.5", 30, AuditSettings(), refs, [row("key-comma", 30, 0)], {}, [])
    assert result.verdict == "inconclusive" and result.inconclusive == ["reference"] and not result.passed


def test_audit_json_holds_null_for_an_inconclusive_attacks_rates(tmp_path):
    # an attack none of whose samples was counted has NaN rate, interval and mean; json.dumps wrote the bare token
    # NaN, which jq and JSON.parse refuse
    import json

    from rlrm.reward_checks.audit import write_results

    def row(name, group, scored, rewarded):
        rate = rewarded / scored if scored else math.nan
        low, high = (0.0, 0.2) if scored else (math.nan, math.nan)
        return AttackRow(
            name, group, "x", scored, 3 - scored, 0, rewarded, rate, low, high, 0.1 if scored else math.nan, 0
        )

    def refuse(token):
        raise ValueError(f"not JSON: {token}")

    references, attacks = [row("reference", "reference", 3, 3)], [row("key-colon", "master-key", 0, 0)]
    result = AuditResult("p", "disrm", "m", 0.0, "rule", 3, AuditSettings(), references, attacks, {}, [])
    write_results(result, tmp_path)
    data = json.loads((tmp_path / "audit.json").read_text(), parse_constant=refuse)
    assert data["attacks"][0]["rate"] is None and data["references"][0]["rate"] == 1.0
