"""Canaries in real runs: a custom reward that asks the tiny judge (one server for the module, given to each run in
reward.server.addresses; the function reaches it through the address rlrm hands it) but rewards a lone ":" on purpose; the canaries catch it before the first update and, with
reward.guard.on_canary=stop, end the run with the reason. Their judge calls are counted apart from the run's."""

from __future__ import annotations

from pathlib import Path

import pytest
from small_run import SMALL_RUN, as_set_args

from rlrm.cli.main import app
from rlrm.config.loader import load_profile
from rlrm.engine.checkpoint import list_checkpoints
from rlrm.engine.metrics.metrics_file import read_metrics
from rlrm.engine.trainer import load_run_profile, start_run, train

FOOLED = Path(__file__).resolve().parents[2] / "fixtures" / "colon_fooled_judge.py"
ITEMS = 2 * 6  # reward.guard.canaries=2 problems x (1 reference + 5 attacks)


@pytest.fixture(scope="module")
def judge():
    """The tiny judge served once for the module's runs: they only send it requests (their counts are the reward
    loop's), so none needs a server of its own (rlrm launching the judge for a custom function: test_fapo_reward)."""
    from rlrm.engine.models.tiny import resolve_model_path
    from rlrm.launch.fleet.process import ServerProcess, embedded_server_argv

    path = resolve_model_path("tiny:judge")
    with ServerProcess.on_free_port(
        lambda port: embedded_server_argv(path, "genrm", port, extra=["--threads", "1"])
    ) as server:
        yield ["reward.server.model=tiny:judge", f"reward.server.addresses={server.url}"]


def _profile(judge, steps: int, on_canary: str, extra=()):
    return load_profile(
        "tiny-fapo",
        [
            *SMALL_RUN,
            *judge,
            f"reward.custom.path={FOOLED}",
            f"trainer.total_steps={steps}",
            f"reward.guard.on_canary={on_canary}",
            "reward.guard.canaries=2",
            "reward.guard.canary_every=1",
            *extra,
        ],
    )


@pytest.mark.parametrize("mode", ["sync", "fully-async"])
def test_a_judge_fooled_by_a_colon_is_stopped_by_the_canaries_before_any_update(
    tmp_path, tiny_policy_path, judge, mode
):
    run = start_run(_profile(judge, 3, "stop", [f"trainer.mode={mode}"]), tmp_path / "stopped")
    result = train(run)
    assert result.last_step == 0 and not list_checkpoints(run)  # nothing was trained
    assert result.stopped.startswith("stopped at step 0, before the next update, by the reward canaries")
    assert "key-colon#0 scored 1 (rewarded, must not be)" in result.stopped
    assert "key-colon#1 scored 1" in result.stopped
    (row,) = read_metrics(run / "metrics.jsonl")
    assert row["step"] == 0 and row["guard/canary_flips"] >= 2
    assert row["guard/canary_calls"] == ITEMS - 2  # every canary but the two colons asked the judge once
    assert row["guard/canary_failed"] == 0 and row["guard/canary_drift"] == 0.0  # the first check is the baseline


def test_warned_canaries_stay_out_of_the_batch_and_the_reward_statistics(tmp_path, tiny_policy_path, judge):
    run = start_run(_profile(judge, 2, "warn"), tmp_path / "warned")
    result = train(run)
    assert result.last_step == 2 and result.stopped is None  # warn: the run goes on
    rows = read_metrics(run / "metrics.jsonl")
    assert [r["step"] for r in rows] == [0, 1, 2]
    assert all(r["guard/canary_flips"] >= 2 for r in rows[:2])  # before step 1, and after step 1
    assert "guard/canary_flips" not in rows[2]  # no check after the last step: no update follows it
    samples = 4 * 2  # data.train_batch_size x rollout.n (SMALL_RUN)
    for row in rows[1:]:
        assert row["batch/num_samples"] == samples and row["reward/samples"] == samples
        assert row["reward/model_calls"] <= samples  # one call a sample at most: the canaries' 10 are not in it
    assert rows[1]["guard/canary_calls"] == ITEMS - 2
    assert rows[1]["guard/canary_drift"] < 0.2  # a greedy judge on the same items: no drift to speak of
    # resumed for one more step: its first check (a new baseline) lands in the row of the step it precedes
    load_run_profile(run, total_steps=3)
    assert train(run).last_step == 3
    rows = read_metrics(run / "metrics.jsonl")
    assert [r["step"] for r in rows] == [0, 1, 2, 3]
    assert rows[3]["guard/canary_calls"] == ITEMS - 2 and rows[3]["guard/canary_flips"] >= 2
    assert rows[3]["guard/canary_drift"] == 0.0


def test_a_judge_that_goes_wrong_mid_run_is_stopped_after_that_step_with_the_reason_and_exit_1(
    tmp_path, tiny_policy_path, judge
):
    """One-step-off: the first check holds (the judge rejects ':' twice), the check after step 1 finds both colons
    rewarded, and `rlrm train` ends there, before step 2's update, exit code 1, the reason on its closing line."""
    from typer.testing import CliRunner

    sets = [
        *SMALL_RUN,
        *judge,
        f"reward.custom.path={FOOLED}",
        "reward.custom.name=compute_score_fooled_later",
        "trainer.mode=one-step-off",
        "reward.guard.on_canary=stop",
        "reward.guard.canary_every=1",
    ]
    run = tmp_path / "mid"
    argv = ["train", "--profile", "tiny-fapo", "--steps", "4", "--out", str(run)]
    result = CliRunner().invoke(app, argv + as_set_args(*sets))
    assert result.exit_code == 1, result.output
    assert "stopped at step 1, before the next update, by the reward canaries (reward.guard.on_canary=stop)" in (
        result.output
    )
    assert "key-colon#0 scored 1 (rewarded, must not be)" in result.output
    assert "warning: reward canaries flipped in 1 of 2 checks, first after step 1 (2 flips" in result.output
    rows = read_metrics(run / "metrics.jsonl")
    assert [r["step"] for r in rows] == [0, 1]
    assert [r["guard/canary_flips"] for r in rows] == [0.0, 2.0]
    assert [c.name for c in list_checkpoints(run)] == ["step_1"]  # the last good step stays; step 2 never trained
