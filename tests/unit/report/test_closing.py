"""The closing lines of `rlrm train`: start -> end of each headline metric, the audit's warning, the next command."""

from __future__ import annotations

from pathlib import Path

from rlrm.report.closing import closing_lines


def _rows(steps: int, reward, accuracy, agreement) -> list[dict]:
    rows = [{"step": 0, "val/accuracy": accuracy(0)}]
    for s in range(1, steps + 1):
        row = {"step": s, "critic/score/mean": reward(s), "reward/rule_agreement": agreement(s), "reward/samples": 64}
        if s % 5 == 0:
            row["val/accuracy"] = accuracy(s)
        rows.append(row)
    return rows


def test_a_run_that_learns_says_start_and_end_and_the_next_command():
    rows = _rows(20, lambda s: 0.1 + 0.01 * s, lambda s: 0.2 + 0.01 * s, lambda s: 0.98)
    lines = closing_lines(rows, Path("runs/x"))
    assert "  held-out accuracy 0.200 -> 0.400 (val/accuracy, step 0 -> 20)" in lines
    assert "  reward 0.110 -> 0.300 (critic/score/mean, step 1 -> 20)" in lines
    assert not [line for line in lines if "warning" in line]
    assert lines[-1] == "  next: rlrm report runs/x"


def test_a_run_that_fools_its_reward_is_named_in_the_closing_lines():
    """The reward rises while held-out accuracy and agreement with the rule fall: the audit's divergence."""
    rows = _rows(40, lambda s: 0.1 + 0.015 * s, lambda s: max(0.0, 0.16 - 0.004 * s), lambda s: 0.98 - 0.012 * s)
    rows[7]["reward/failures"] = 3
    lines = closing_lines(rows, Path("runs/x"))
    warnings = [line for line in lines if line.startswith("  warning: reward-hacking audit: divergence")]
    assert warnings, lines
    assert "  reward failures 3 of 2560 samples (reward/failures; see metrics.jsonl)" in lines
    assert "  reward agrees with the rule 0.97 -> 0.50 (reward/rule_agreement)" in lines


def test_the_canaries_checks_flips_and_cost_are_summed_up():
    rows = _rows(20, lambda s: 0.1, lambda s: 0.2, lambda s: 0.98)
    for row in rows:
        row["reward/model_calls"] = 64 * (row["step"] > 0)  # 20 steps x 64 = 1280 calls
    for step, flips, drift in ((0, 0, 0.0), (10, 2, 0.05)):
        rows[step].update({"guard/canary_calls": 10, "guard/canary_flips": flips, "guard/canary_drift": drift})
    lines = closing_lines(rows, Path("runs/x"))
    # 20 canary calls of 20 + 1280: 1.5%
    assert "  reward canaries: 2 checks, drift up to 0.05; 20 canary calls = 1.5% of all reward-model calls" in (
        " ".join(lines)
    )
    assert [line for line in lines if "canaries flipped in 1 of 2 checks, first after step 10 (2 flips" in line]
    assert not [
        line
        for line in closing_lines(_rows(3, lambda s: 0.1, lambda s: 0.2, lambda s: 0.9), Path("x"))
        if "canar" in line
    ]


def test_progress_lines_only_when_enabled_and_a_tick_while_waiting(capsys):
    import time

    from rlrm.launch.common import progress

    progress.say("hidden")
    with progress.waiting("never shown", every_s=0.01):
        time.sleep(0.05)
    assert capsys.readouterr().err == ""
    progress.enable()
    seen = ""
    try:
        with progress.waiting("replica starting", every_s=0.01):
            deadline = time.monotonic() + 5  # two ticks, however slow the machine; a ticker that never ticks fails
            while seen.count("... replica starting (") < 2 and time.monotonic() < deadline:
                time.sleep(0.01)
                seen += capsys.readouterr().err
    finally:
        progress.enable(False)
    err = seen + capsys.readouterr().err
    assert err.count("... replica starting (") >= 2, err


def test_the_reward_cache_and_contract_are_summed_up(tmp_path):
    from rlrm.config.reward import RewardConfig
    from rlrm.engine.rewards.contract import reward_contract
    from rlrm.engine.run_contract import check_run_contract

    rows = [{"step": 0}] + [
        {"step": s, "reward/samples": 16, "reward/cache_hits": h, "reward/cache_saved_model_calls": h}
        for s, h in ((1, 4), (2, 10))
    ]
    assert "  reward cache: 14 of 32 samples from the cache, 14 reward-model calls saved" in "\n".join(
        closing_lines(rows, tmp_path)
    )
    assert not [line for line in closing_lines(rows, tmp_path) if "reward contract" in line]  # no file: no line
    old = reward_contract(RewardConfig())
    check_run_contract(tmp_path, old, allow_change=False, step=0)
    assert f"  reward contract {old.short} (reward_contract.json)" in closing_lines(rows, tmp_path)
    new = reward_contract(RewardConfig(method="flexible"))
    check_run_contract(tmp_path, new, allow_change=True, step=2)
    assert f"  reward contract {new.short} (changed at step 2: parser) (reward_contract.json)" in closing_lines(
        rows, tmp_path
    )
    assert not [line for line in closing_lines(rows[:1], tmp_path) if "reward cache" in line]


def test_a_disrm_runs_reward_is_named_a_logit_beside_the_agreement(tmp_path):
    """A DisRM's raw logit fell (-5.1 -> -6.0) while its answers improved: the line must not read as a rate."""
    rows = _rows(20, lambda s: -5.1 - 0.045 * s, lambda s: 0.2 + 0.01 * s, lambda s: 0.80 + 0.01 * s)
    (tmp_path / "config.yaml").write_text("reward:\n  kind: disrm\n", encoding="utf-8")
    lines = closing_lines(rows, tmp_path)
    reward = next(line for line in lines if line.startswith("  reward ("))
    assert "raw logit" in reward and "-5.145 -> -6.000" in reward
    assert "  reward agrees with the rule 0.81 -> 1.00 (reward/rule_agreement)" in lines
    (tmp_path / "config.yaml").write_text("reward:\n  kind: genrm\n", encoding="utf-8")
    assert "  reward -5.145 -> -6.000 (critic/score/mean, step 1 -> 20)" in closing_lines(rows, tmp_path)


def test_steps_whose_updates_were_skipped_are_warned_of(tmp_path):
    rows = [{"step": 1, "actor/nonfinite_skipped": 1}, {"step": 2, "actor/nonfinite_skipped": 0}, {"step": 3}]
    lines = closing_lines(rows, tmp_path)
    warned = [line for line in lines if "actor/nonfinite_skipped" in line]
    assert warned == [
        "  warning: 1 mini-batch updates skipped for a non-finite loss or gradient in 1 of 2 steps "
        "(actor/nonfinite_skipped; under float16 a loss-scale overflow counts too); check the rewards (critic/score) "
        "and actor.lr"
    ]
    assert not [line for line in closing_lines(rows[1:], tmp_path) if "skipped" in line]


def test_a_canary_check_with_no_drift_reads_back_as_null_and_is_skipped(tmp_path):
    # drift is NaN when no canary was scored in both checks; metrics.jsonl holds null, read back as None.
    # before: max([None, 0.01]) raised TypeError after the run had finished
    from rlrm.engine.metrics.metrics_file import MetricsWriter, read_metrics

    writer = MetricsWriter(tmp_path / "metrics.jsonl")
    for step, drift in ((1, float("nan")), (2, 0.01)):
        writer.log({"step": step, "guard/canary_calls": 12.0, "guard/canary_drift": drift, "guard/canary_flips": 0.0})
    writer.close()
    rows = read_metrics(tmp_path / "metrics.jsonl")
    assert rows[0]["guard/canary_drift"] is None
    assert any("reward canaries: 2 checks, drift up to 0.01;" in line for line in closing_lines(rows, tmp_path))
    only_null = [{"step": 1, "guard/canary_calls": 12.0, "guard/canary_drift": None, "guard/canary_flips": 0.0}]
    assert any(line.startswith("  reward canaries: 1 checks;") for line in closing_lines(only_null, tmp_path))


def test_a_step_the_live_guard_flagged_is_repeated_in_the_closing_lines(tmp_path):
    # the closing lines ran the audit again with its own settings and could miss what the guard had flagged
    rows = _rows(30, lambda s: 0.3, lambda s: 0.5, lambda s: 0.9)
    for row in rows[22:25]:
        row["guard/divergence"] = 1.0
    warned = [line for line in closing_lines(rows, tmp_path) if "reward-hacking guard" in line]
    assert warned == [
        "  warning: the reward-hacking guard flagged 3 step(s), first step 22 (guard/divergence; reward.guard.window "
        "and min_drop)"
    ]


def test_the_reward_line_names_the_first_step_that_has_a_score():
    """A step that trained nothing (every group dropped: a judge down at the start) has no critic/score/mean; the
    line said "step 1" for step 2's score."""
    rows = [
        {"step": 1, "batch/num_samples": 0},
        {"step": 2, "critic/score/mean": 0.4},
        {"step": 3, "critic/score/mean": 0.6},
    ]
    assert "  reward 0.400 -> 0.600 (critic/score/mean, step 2 -> 3)" in closing_lines(rows, Path("runs/x"))


def test_the_next_command_can_be_pasted_into_a_shell_whatever_the_folder_is_called():
    import shlex

    folder = Path("runs/运行 目录/it's")
    line = closing_lines(_rows(3, lambda s: 0.1 * s, lambda s: 0.2, lambda s: 0.9), folder)[-1]
    assert shlex.split(line.split("next:", 1)[1]) == ["rlrm", "report", str(folder)]
