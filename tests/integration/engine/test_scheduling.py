"""Scheduling modes on the tiny policy: the maths of a step never changes between modes, the
staleness bound holds, and the idle ratios agree with the phase times they come from."""

from __future__ import annotations

import json

import pytest
import torch
from small_run import SMALL_RUN

from rlrm.config.loader import load_profile
from rlrm.engine.metrics.metrics_file import read_metrics
from rlrm.engine.rewards.budget import RewardBudgetExceeded
from rlrm.engine.rewards.loop import RewardError, RewardLoop
from rlrm.engine.trainer import start_run, train

SMALL = list(SMALL_RUN)
N = 2  # rollout.n of SMALL_RUN
SAMPLES = 4 * N  # data.train_batch_size x rollout.n: samples a step


def _run(tmp_path, name, mode, steps, extra=()):
    profile = load_profile("tiny-rule", SMALL + [f"trainer.mode={mode}", f"trainer.total_steps={steps}", *extra])
    run_dir = start_run(profile, tmp_path / name)
    result = train(run_dir)
    assert result.last_step == steps and not result.interrupted
    return run_dir, read_metrics(run_dir / "metrics.jsonl")


def _weights(run_dir, step):
    from safetensors.torch import load_file

    return load_file(str(run_dir / "checkpoints" / f"step_{step}" / "model" / "model.safetensors"))


def _assert_same_training(run_a, rows_a, run_b, rows_b, steps):
    for a, b in zip(rows_a, rows_b):
        for key in (
            "critic/score/mean",
            "critic/advantages/max",
            "actor/pg_loss",
            "actor/grad_norm",
            "perf/total_num_tokens",
        ):
            assert b[key] == a[key], (a["step"], key)
    wa, wb = _weights(run_a, steps), _weights(run_b, steps)
    assert wa.keys() == wb.keys()
    for name in wa:
        assert (wa[name] == wb[name]).all(), name


# logging only (every sample written, step 1's requests traced one by one): the 2-step runs of every mode below
# share it, so test_samples_log_and_bounded_trace reads the same runs as the tests of the step's maths
LOGGED = ("logging.save_samples=true", "logging.trace_detail_steps=1")


@pytest.fixture(scope="module")
def shared_run(tmp_path_factory, tiny_policy_path):
    """shared_run(mode, extra=LOGGED) -> (run dir, metrics rows, the weight versions the rollout engine got): a
    2-step run made on first use and read by every test of this module that asks for the same mode and settings
    (they only read it)."""
    from rlrm.inference.hf import HFRolloutEngine

    update = HFRolloutEngine.update_weights
    runs = {}

    def get(mode: str, extra=LOGGED):
        key = (mode, tuple(extra))
        if key not in runs:
            versions = []

            def recording(self, state_dict, version):
                versions.append(version)
                update(self, state_dict, version)

            with pytest.MonkeyPatch.context() as patch:
                patch.setattr(HFRolloutEngine, "update_weights", recording)
                run_dir, rows = _run(tmp_path_factory.mktemp(mode), mode, mode, steps=2, extra=extra)
            runs[key] = (run_dir, rows, versions)
        return runs[key]

    return get


@pytest.mark.parametrize("mode", ["sync", "stream", "pipeline", "one-step-off", "fully-async"])
def test_every_mode_publishes_each_steps_weights_once_in_order(shared_run, mode):
    # the weight sync is each mode's own call (rlrm/engine/weights.py): the engine must get version k after update k
    _, _, versions = shared_run(mode)
    assert versions == [1, 2]


def test_stream_equals_sync_at_zero_latency(shared_run):
    sync_dir, sync_rows, _ = shared_run("sync")
    stream_dir, stream_rows, _ = shared_run("stream")
    _assert_same_training(sync_dir, sync_rows, stream_dir, stream_rows, steps=2)
    assert all(r["async/staleness_max"] == 0 for r in stream_rows)


@pytest.mark.parametrize("mode", ["stream", "pipeline"])
def test_a_dropped_group_is_dropped_alike_in_sync_and_overlapping_modes(shared_run, mode):
    # Seeded injected failures fail the same samples in every mode; their groups must leave the
    # update the same way (stream and pipeline compute log-probs before the scores are known).
    extra = [
        "reward.inject.fail_rate=0.15",
        "reward.inject.seed=5",
        "reward.max_retries=0",
        "reward.on_failure=drop-group",
    ]
    sync_dir, sync_rows, _ = shared_run("sync", extra)  # one sync run for both modes
    other_dir, other_rows, _ = shared_run(mode, extra)
    assert [r["reward/dropped_groups"] for r in sync_rows] == [r["reward/dropped_groups"] for r in other_rows]
    assert (
        0 < sum(r["reward/dropped_groups"] for r in sync_rows) < 2 * 4
    )  # some dropped, some trained (4 groups a step)
    for a, b in zip(sync_rows, other_rows):
        assert b["batch/num_samples"] == a["batch/num_samples"]
        for key in ("critic/score/mean", "critic/advantages/max", "actor/pg_loss", "actor/grad_norm"):
            assert b.get(key) == pytest.approx(a.get(key), rel=1e-5, abs=1e-7), (a["step"], key)
    wa, wb = _weights(sync_dir, 2), _weights(other_dir, 2)
    for name in wa:
        assert torch.allclose(wa[name], wb[name], rtol=1e-5, atol=1e-7), name


def test_pipeline_equals_sync_mini_batch_by_mini_batch(tmp_path, tiny_policy_path):
    # Two mini-batches of two groups, two PPO epochs: the first epoch is pipelined.
    extra = ["actor.mini_batch_size=2", "actor.ppo_epochs=2"]
    sync_dir, sync_rows = _run(tmp_path, "sync", "sync", steps=2, extra=extra)
    pipe_dir, pipe_rows = _run(tmp_path, "pipe", "pipeline", steps=2, extra=extra)
    _assert_same_training(sync_dir, sync_rows, pipe_dir, pipe_rows, steps=2)


@pytest.mark.parametrize(("mode", "bound"), [("one-step-off", 1), ("fully-async", 2)])
def test_staleness_never_exceeds_its_bound(tmp_path, tiny_policy_path, mode, bound):
    # Random per-sample latency makes groups finish out of order; the bound must still hold.
    extra = [f"trainer.max_staleness={bound}", "reward.inject.latency=uniform:0:0.3", "reward.inject.seed=3"]
    run_dir, rows = _run(tmp_path, mode, mode, steps=5, extra=extra)
    assert max(r["async/staleness_max"] for r in rows) <= bound
    assert max(r["async/staleness_max"] for r in rows) >= 1  # it did run off-policy
    assert all(r["batch/num_samples"] == SAMPLES for r in rows)
    assert all(r["reward/failures"] == 0 for r in rows)
    # each step counts the rewards of the samples it trains, not those scored ahead while it waited
    assert all(r["reward/samples"] == SAMPLES and r["reward/injected_latency_mean"] > 0 for r in rows)


def test_sync_idle_ratio_matches_the_phase_times(tmp_path, tiny_policy_path):
    # Fixed injected latency: in sync the trainer idles through generation and scoring, so
    # idle/trainer must equal (gen + reward) / step time measured by the phase timers.
    run_dir, rows = _run(tmp_path, "idle", "sync", steps=3, extra=["reward.inject.latency=fixed:0.4"])
    for r in rows:
        predicted = (r["timing_s/gen"] + r["timing_s/reward"]) / r["perf/time_per_step"]
        assert r["idle/trainer"] == pytest.approx(predicted, rel=0.10)
        assert r["idle/reward_wait"] == pytest.approx(r["timing_s/reward"] / r["perf/time_per_step"], rel=0.10)
        assert r["timing_s/reward"] >= 0.4
    trace = json.loads((run_dir / "trace.json").read_text())["traceEvents"]
    spans = [e for e in trace if e["ph"] == "X"]
    rewards = [e for e in spans if e["cat"] == "reward"]
    assert len(rewards) == 3 * SAMPLES and all(e["args"]["injected_latency_s"] == pytest.approx(0.4) for e in rewards)
    assert sum(e["cat"] == "generate" for e in spans) == 3 * SAMPLES
    assert sum(e["cat"] == "minibatch" for e in spans) == 3  # one mini-batch per step here
    assert {e["cat"] for e in spans} >= {"trainer", "gen_wait", "reward_wait", "rollout"}


def test_overlap_mode_traces_every_request_and_reward(tmp_path, tiny_policy_path):
    run_dir, rows = _run(tmp_path, "trace", "one-step-off", steps=2, extra=["reward.inject.latency=fixed:0.05"])
    trace = json.loads((run_dir / "trace.json").read_text())["traceEvents"]
    spans = [e for e in trace if e["ph"] == "X"]
    assert sum(e["cat"] == "generate" for e in spans) >= 2 * SAMPLES  # two batches trained, maybe a third started
    rewards = [e for e in spans if e["cat"] == "reward"]
    assert len(rewards) >= 2 * SAMPLES
    assert all(e["args"]["injected_latency_s"] == pytest.approx(0.05) for e in rewards)
    assert all(e["dur"] >= 0.05e6 for e in rewards)


def test_injected_failures_are_counted_never_zeroed(tmp_path, tiny_policy_path):
    extra = [
        "reward.inject.fail_rate=1.0",
        "reward.max_retries=1",
        "reward.backoff_s=0",
        "reward.on_failure=drop-group",
        "reward.max_failure_rate=1",
    ]  # go on although every sample failed: what is counted is under test
    _, rows = _run(tmp_path, "fail", "stream", steps=1, extra=extra)
    row = rows[0]
    assert row["reward/injected_failures"] == SAMPLES * 2  # every attempt of every sample
    assert row["reward/failures"] == SAMPLES and row["reward/dropped_groups"] == 4
    assert row["batch/num_samples"] == 0 and "actor/pg_loss" not in row


@pytest.mark.parametrize("mode", ["sync", "stream"])
def test_samples_log_and_bounded_trace(shared_run, mode):
    run_dir, rows, _ = shared_run(mode)
    lines = [json.loads(line) for line in (run_dir / "samples.jsonl").read_text().splitlines()]
    assert [r["step"] for r in lines] == [1] * SAMPLES + [2] * SAMPLES
    assert all(r["score"] in (0.0, 1.0) and r["response"] and r["prompt"][-1]["role"] == "user" for r in lines)
    assert sum(r["score"] for r in lines if r["step"] == 1) == pytest.approx(rows[0]["critic/score/mean"] * SAMPLES)
    trace = json.loads((run_dir / "trace.json").read_text())["traceEvents"]
    generate = [e for e in trace if e.get("cat") == "generate"]
    assert len(generate) == SAMPLES and all(e["args"]["batch"] == 1 for e in generate)  # detail for step 1 only
    assert sum(e.get("name") == "update_actor" for e in trace) == 2  # phases for every step


# Prompts longer than 42 tokens are dropped (about a quarter here), so a batch often holds fewer groups than a step
# trains and fully-async fills the step with groups of later batches (max_staleness 2: up to two batches ahead).
FULLY_ASYNC_DROPPING = ("data.prompt_too_long=drop", "data.max_prompt_length=42", "logging.save_samples=true")


def _trained_uids(run_dir):
    from collections import Counter

    rows = [json.loads(line) for line in (run_dir / "samples.jsonl").read_text().splitlines()]
    return Counter(r["uid"] for r in rows)


def _assert_each_prompt_trained_once(tmp_path, split, steps):
    """The run `split`, stopped and resumed, trained the prompts an uninterrupted run trains, each once (n samples)."""
    from rlrm.engine.trainer import load_run_profile

    full, rows = _run(tmp_path, "full", "fully-async", steps, FULLY_ASYNC_DROPPING)
    assert sum(r["data/dropped_prompts"] for r in rows[1:]) > 0
    load_run_profile(split, total_steps=steps)
    assert train(split).last_step == steps
    assert _trained_uids(split) == _trained_uids(full)
    assert set(_trained_uids(full).values()) == {N}


# (5, 4): the checkpoint of step 3 must name batch 5's prompts trained at step 3, though batch 5 was taken whole
# (the rollouter forgets a batch once every group of it is taken)
@pytest.mark.parametrize(("steps", "stop_at"), [(4, 3), (5, 4)])
def test_fully_async_resume_trains_each_prompt_once(tmp_path, tiny_policy_path, monkeypatch, steps, stop_at):
    from rlrm.engine.scheduling.fully_async import FullyAsyncScheduler

    real = FullyAsyncScheduler.train_step

    async def interrupted(self, step, timer):
        if step == stop_at:
            raise KeyboardInterrupt
        return await real(self, step, timer)

    monkeypatch.setattr(FullyAsyncScheduler, "train_step", interrupted)
    overrides = ["trainer.mode=fully-async", f"trainer.total_steps={steps}", *FULLY_ASYNC_DROPPING]
    split = start_run(load_profile("tiny-rule", SMALL + overrides), tmp_path / "split")
    assert train(split).last_step == stop_at - 1
    monkeypatch.setattr(FullyAsyncScheduler, "train_step", real)
    _assert_each_prompt_trained_once(tmp_path, split, steps)


def _bounded_waits(monkeypatch, limit_s: float = 60.0) -> None:
    """A step that waits `limit_s` for a change of the rollouter fails the test, where it would hang the suite."""
    import asyncio

    from rlrm.engine.scheduling.rollouter import Rollouter

    wait = Rollouter.wait_changed

    async def bounded(self, groups=()):
        try:
            await asyncio.wait_for(wait(self, groups), limit_s)
        except asyncio.TimeoutError:
            raise AssertionError(f"the step waited {limit_s:g} s for a change that never came") from None

    monkeypatch.setattr(Rollouter, "wait_changed", bounded)


@pytest.mark.parametrize(
    "extra", [["data.max_prompt_length=42", "trainer.max_staleness=0"], ["data.max_prompt_length=41"]]
)
def test_fully_async_trains_the_short_batches_left_by_the_length_filter(tmp_path, tiny_policy_path, monkeypatch, extra):
    # Batches that lost prompts hold fewer groups than a step trains, and the rollouter may launch no more before
    # the step publishes: the step waited for groups that could never come (sync trains the short batch).
    _bounded_waits(monkeypatch)
    overrides = ["trainer.mode=fully-async", "trainer.total_steps=4", "data.prompt_too_long=drop", *extra]
    run_dir = start_run(load_profile("tiny-rule", SMALL + overrides), tmp_path / "r")
    assert train(run_dir).last_step == 4
    rows = read_metrics(run_dir / "metrics.jsonl")[1:]
    assert sum(r["data/dropped_prompts"] for r in rows) > 0


def test_fully_async_a_failed_step_leaves_its_prompts_to_the_resumed_run(
    tmp_path, tiny_policy_path, monkeypatch, capsys
):
    # Step 2 runs out of memory after taking its groups, some of batch 3: they were never trained, so the
    # checkpoint (step 1) must not list them in trained_ahead, or the resumed run would never train them.
    from rlrm.engine.step import GRPOStep

    real, calls = GRPOStep.prepare, []

    def out_of_memory_at_step_2(self, completions, off_policy, timer):
        calls.append(1)  # fully-async prepares once a step
        if len(calls) == 2:
            raise RuntimeError("CUDA out of memory (simulated)")
        return real(self, completions, off_policy, timer)

    monkeypatch.setattr(GRPOStep, "prepare", out_of_memory_at_step_2)
    overrides = ["trainer.mode=fully-async", "trainer.total_steps=4", *FULLY_ASYNC_DROPPING]
    split = start_run(load_profile("tiny-rule", SMALL + overrides), tmp_path / "split")
    with pytest.raises(RuntimeError, match="simulated"):
        train(split)
    # the held-out set loses its long prompts too, and val/accuracy is over the rest: said at the start
    assert "held-out prompts are longer than data.max_prompt_length=42" in capsys.readouterr().err
    monkeypatch.setattr(GRPOStep, "prepare", real)
    _assert_each_prompt_trained_once(tmp_path, split, 4)


@pytest.mark.parametrize("mode", ["sync", "one-step-off", "fully-async"])
def test_each_step_counts_the_rewards_of_its_own_samples(tmp_path, tiny_policy_path, mode):
    # one-step-off scores batch k+1 while step k waits: those rewards are step k+1's, as in sync
    _, rows = _run(tmp_path, mode, mode, steps=3)
    assert [r["reward/samples"] for r in rows] == [SAMPLES] * 3


# pipeline checks the budget before each mini-batch, inside the update: stopped before the first one, the actor is
# still step 1's (it was refused as "stopped partway", and a run with save_every=0 lost every step)
@pytest.mark.parametrize("mode", ["sync", "one-step-off", "pipeline"])
@pytest.mark.parametrize(
    ("on_failure", "stopped_by"),
    [("default", RewardBudgetExceeded), ("fail", RewardError)],
)
def test_failed_rewards_of_batch_2_stop_step_2_not_step_1(
    tmp_path, tiny_policy_path, monkeypatch, mode, on_failure, stopped_by
):
    # Every sample of batch 2 fails (batch 1's all score). Step 1 must train and be checkpointed in every mode,
    # though one-step-off scores batch 2 while step 1 waits: its failures are step 2's (budget and fail policy).
    import contextvars

    from rlrm.call_errors import CallError
    from rlrm.engine.checkpoint import list_checkpoints
    from rlrm.engine.scheduling.rollouter import Rollouter
    from rlrm.engine.scheduling.sync import SyncScheduler

    batch = contextvars.ContextVar("batch", default=0)  # set in each sample's task (overlap) or the step's (sync)
    attempts, sample, step = RewardLoop._attempts, Rollouter._sample, SyncScheduler._step

    async def failing_from_batch_2(self, reward_sample):
        return CallError("injected for batch 2") if batch.get() >= 2 else await attempts(self, reward_sample)

    async def sample_of_batch(self, group, j, sampling):
        batch.set(group.batch)
        return await sample(self, group, j, sampling)

    async def step_of_batch(self, k, timer):
        batch.set(k)
        return await step(self, k, timer)

    monkeypatch.setattr(RewardLoop, "_attempts", failing_from_batch_2)
    monkeypatch.setattr(Rollouter, "_sample", sample_of_batch)
    monkeypatch.setattr(SyncScheduler, "_step", step_of_batch)
    extra = [f"trainer.mode={mode}", "trainer.total_steps=3", f"reward.on_failure={on_failure}"]
    run_dir = start_run(load_profile("tiny-rule", [*SMALL, *extra, "reward.max_failure_rate=0.25"]), tmp_path / "r")
    with pytest.raises(stopped_by) as stopped:
        train(run_dir)
    if on_failure == "default":  # the budget counts step 2's own samples: all 8 failed
        assert str(stopped.value).startswith(f"step 2: {SAMPLES} of {SAMPLES} reward samples failed")
    assert [c.name for c in list_checkpoints(run_dir)] == ["step_1"]


HANG_AFTER_8 = """
import asyncio
calls = 0


async def compute_score(data_source, solution_str, ground_truth, extra_info):
    global calls
    calls += 1
    if calls > 8:  # every sample of batch 2 hangs
        await asyncio.sleep(30)
    return 1.0
"""


def test_hung_records_are_written_under_the_step_whose_timeouts_count_them(tmp_path, tiny_policy_path, monkeypatch):
    # one-step-off scores batch 2 while step 1 trains: its hangs were written under step 1, counted under step 2
    import time
    from collections import Counter

    from rlrm.engine.step import GRPOStep

    fn = tmp_path / "hang.py"
    fn.write_text(HANG_AFTER_8)
    real_train, calls = GRPOStep.train, []

    def slow_first_update(self, batch, timer):
        calls.append(1)
        if len(calls) == 1:
            time.sleep(2.0)  # batch 2's attempts time out meanwhile
        return real_train(self, batch, timer)

    monkeypatch.setattr(GRPOStep, "train", slow_first_update)
    settings = [
        "trainer.mode=one-step-off",
        "trainer.total_steps=2",
        "reward.kind=custom",
        f"reward.custom.path={fn}",
        "reward.custom.isolation=thread",
        "reward.attempt_timeout_s=0.3",
        "reward.max_retries=0",
        "reward.max_failure_rate=1.0",
        "reward.backoff_s=0",
    ]
    run = start_run(load_profile("tiny-rule", [*SMALL, *settings]), tmp_path / "r")
    assert train(run).last_step == 2
    timeouts = {r["step"]: r["reward/timeouts"] for r in read_metrics(run / "metrics.jsonl")}
    hung = Counter(json.loads(line)["step"] for line in (run / "hung_rewards.jsonl").read_text().splitlines())
    assert timeouts == {1: 0, 2: SAMPLES} and {s: hung.get(s, 0) for s in timeouts} == timeouts


CANCELLED_ONCE = """
import asyncio
calls = 0


async def compute_score(data_source, solution_str, ground_truth, extra_info):
    global calls
    calls += 1
    if calls == 10:  # one sample of step 2: something it awaited was cancelled, not the run
        raise asyncio.CancelledError()
    return 1.0
"""


@pytest.mark.parametrize("mode", ["sync", "stream", "fully-async"])
def test_a_reward_ended_by_a_cancelled_error_is_a_failed_sample(tmp_path, tiny_policy_path, monkeypatch, mode):
    # it escaped the reward loop: the overlapping modes waited forever for its group, sync read it as Ctrl-C
    _bounded_waits(monkeypatch)
    fn = tmp_path / "fn.py"
    fn.write_text(CANCELLED_ONCE)
    settings = [
        f"trainer.mode={mode}",
        "trainer.total_steps=3",
        "reward.kind=custom",
        f"reward.custom.path={fn}",
        "reward.custom.isolation=thread",
        "reward.max_failure_rate=1.0",
    ]
    run = start_run(load_profile("tiny-rule", [*SMALL, *settings]), tmp_path / "r")
    result = train(run)
    assert result.last_step == 3 and not result.interrupted
    assert sum(r["reward/failures"] for r in read_metrics(run / "metrics.jsonl")) == 1
