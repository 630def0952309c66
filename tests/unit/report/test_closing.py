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


def test_progress_lines_only_when_enabled_and_a_tick_while_waiting(capsys):
    import time

    from rlrm.launch.common import progress

    progress.say("hidden")
    with progress.waiting("never shown", every_s=0.01):
        time.sleep(0.05)
    assert capsys.readouterr().err == ""
    progress.enable()
    try:
        with progress.waiting("replica starting", every_s=0.05):
            time.sleep(0.18)
    finally:
        progress.enable(False)
    err = capsys.readouterr().err
    assert err.count("... replica starting (") >= 2, err
