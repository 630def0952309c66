"""Hand-computed timelines: each mode's makespan on a two-sample case, the engines' cost models,
the reward loop's queue and retries, and the staleness bound of the real schedulers' rules."""

from __future__ import annotations

import numpy as np
import pytest

from rlrm.bench.simulate.draws import draw_workload
from rlrm.bench.simulate.engines import ContinuousEngine
from rlrm.bench.simulate.simulation import simulate
from rlrm.bench.simulate.spec import MODES, load_spec
from rlrm.bench.simulate.static import StaticEngine, _Chunk, _form

# One prompt, two samples of 20 tokens each, per step; every cost a round number:
# decode batch 20 iterations x 0.1 s = 2 s, reward 3 s per sample, old log-probs 0.5 s (on-policy
# modes only), one mini-batch 1 s, weight sync 0.25 s; nothing else costs anything.
TWO_SAMPLES = [
    "workload.steps=3",
    "workload.prompts_per_step=1",
    "workload.samples_per_prompt=2",
    "workload.mini_batch_prompts=1",
    "workload.prompt_tokens=fixed:10",
    "workload.response_tokens=fixed:20",
    "workload.max_response_tokens=64",
    "rollout.batching=static",
    "rollout.iteration_s=0.1",
    "rollout.iteration_s_per_seq=0",
    "reward.latency=fixed:3",
    "trainer.old_log_prob_s=0.5",
    "trainer.old_log_prob_s_per_token=0",
    "trainer.minibatch_s=1",
    "trainer.minibatch_s_per_token=0",
    "trainer.weight_sync_s=0.25",
]


def _run(mode: str, overrides=()):
    spec = load_spec(overrides=[*TWO_SAMPLES, *overrides])
    return simulate(spec, mode, draw_workload(spec))


def _ends(run) -> list[float]:
    return [round(row["perf/wall_s"], 6) for row in run.rows]


def test_sync_generates_then_scores_then_trains():
    # each step: generate 2 + score 3 + old log-probs 0.5 + mini-batch 1 + sync 0.25 = 6.75 s
    run = _run("sync")
    assert _ends(run) == [6.75, 13.5, 20.25]
    row = run.rows[0]
    assert row["timing_s/gen"] == pytest.approx(2) and row["timing_s/reward"] == pytest.approx(3)
    # trainer busy 0.5 + 1 + 0.25 = 1.75 of 6.75 s
    assert row["idle/trainer"] == pytest.approx(1 - 1.75 / 6.75)


@pytest.mark.parametrize("mode", ["stream", "pipeline"])
def test_stream_and_pipeline_hide_old_log_probs_behind_rewards(mode):
    # generate 2, then old log-probs (0.5) while the rewards (3) arrive, mini-batch 1, sync 0.25: 6.25 s a step
    run = _run(mode)
    assert _ends(run) == [6.25, 12.5, 18.75]
    assert run.rows[0]["timing_s/reward"] == pytest.approx(2.5)  # waited 3 - 0.5 for rewards


@pytest.mark.parametrize("mode", ["stream", "pipeline"])
def test_advantages_wait_for_the_scores(mode):
    # as above, with advantages of 0.4 s: they need the rewards (in at 5), so they run [5, 5.4] after the old
    # log-probs [2, 2.5] (as grpo.score after the wait, rlrm/engine/scheduling/stream.py), then the mini-batch
    # [5.4, 6.4] and the sync: 6.65 s a step (not 6.25, the advantages hidden behind the rewards)
    run = _run(mode, ["trainer.adv_s=0.4"])
    assert _ends(run) == [6.65, 13.3, 19.95]


def test_collation_is_charged_in_every_mode_and_the_old_log_probs_only_when_recomputed():
    # the trainer times collation with the old log-probs (rlrm/engine/step.py prepare), in every mode: 0.2 s here.
    # sync without the recompute: generate 2 + score 3 + collate 0.2 + mini-batch 1 + sync 0.25 = 6.45 s a step
    no_recompute = ["trainer.collate_s=0.2", "workload.recompute_old_log_prob=false"]
    assert _ends(_run("sync", no_recompute)) == [6.45, 12.9, 19.35]
    assert _ends(_run("sync", ["trainer.collate_s=0.2"])) == [6.95, 13.9, 20.85]  # and with it: + 0.5
    off = _run("one-step-off", ["trainer.collate_s=0.2"])  # never recomputes, still collates
    assert [row["timing_s/old_log_prob"] for row in off.rows] == pytest.approx([0.2] * 3)


def test_one_step_off_overlaps_the_next_batch_and_waits_for_the_running_decode_before_syncing():
    # t=0: batches 1 and 2 launched (version 0 >= k - 2), decoded together in one batch [0, 2], scored at 5.
    # step 1: train [5, 6] (no old log-probs off-policy), sync [6, 6.25]; version 1 launches batch 3: decode [6.25, 8.25].
    # step 2: batch 2 is scored: train [6.25, 7.25]; the sync waits for the running decode batch: [8.25, 8.5].
    # step 3: batch 3 scored at 8.25 + 3 = 11.25: train [11.25, 12.25], sync [12.25, 12.5].
    run = _run("one-step-off")
    assert _ends(run) == [6.25, 8.5, 12.5]
    assert run.rows[1]["timing_s/update_weights"] == pytest.approx(1.25)  # 1 s waiting for the engine's lock
    assert [row["async/staleness_max"] for row in run.rows] == [0, 1, 1]


def test_a_colocated_engine_and_the_trainer_share_the_device():
    # one-step-off as above, the engine on the trainer's device (slowdown 2). Step 2 trains (1 s of work) while
    # batch 3 decodes (2 s of work) from 6.25: both at half speed until the training is done at 8.25, the decode
    # has 1 s left, alone: 9.25; the sync waits for it: [9.25, 9.5]. Batch 3 is scored at 12.25: step 3 trains
    # [12.25, 13.25] and syncs [13.25, 13.5]. Step 1 overlaps nothing.
    run = _run("one-step-off", ["rollout.colocated_slowdown=2"])
    assert _ends(run) == [6.25, 9.5, 13.5]
    assert run.rows[1]["timing_s/update_actor"] == pytest.approx(2.0)
    # sync mode never overlaps generation and training: the device sharing changes nothing
    assert _ends(_run("sync", ["rollout.colocated_slowdown=2"])) == _ends(_run("sync"))


def test_fully_async_trains_batches_launched_ahead():
    # t=0: batches 1-3 launched (version 0 >= k - 3), decoded together [0, 2], all scored at 5; each step
    # trains one due group: [5, 6] + sync 0.25, [6.25, 7.25] + 0.25, [7.5, 8.5] + 0.25.
    run = _run("fully-async")
    assert _ends(run) == [6.25, 7.5, 8.75]
    assert [row["async/staleness_max"] for row in run.rows] == [0, 1, 2]


def test_the_same_draws_give_every_mode_the_same_tokens():
    spec = load_spec(overrides=[*TWO_SAMPLES, "workload.response_tokens=uniform:5:40"])
    draws = draw_workload(spec)
    tokens = {m: sum(r["perf/total_num_tokens"] for r in simulate(spec, m, draws).rows) for m in MODES}
    assert len(set(tokens.values())) == 1


def test_static_batch_formation_waits_for_more_requests_up_to_the_cap():
    # cap 4, wait 0.5: 3 requests at t=0 and 3 at t=0.2 -> a batch at 0.2 of the first 3 and one more
    queue = [_Chunk(0.0, np.arange(3)), _Chunk(0.2, np.arange(3, 6))]
    start, taken = _form(queue, free=0.0, cap=4, wait=0.5)
    assert start == pytest.approx(0.2) and np.concatenate([c.ids for c in taken]).tolist() == [0, 1, 2, 3]
    assert queue[0].ids.tolist() == [4, 5]
    # fewer than the cap: the engine waits its whole batch_wait
    start, taken = _form([_Chunk(1.0, np.arange(2))], free=0.0, cap=4, wait=0.5)
    assert start == pytest.approx(1.5) and len(taken) == 1


def _continuous(**rollout):
    spec = load_spec(
        overrides=["rollout.replicas=1", "rollout.iteration_s=0.1", *(f"rollout.{k}={v}" for k, v in rollout.items())]
    )
    gen_done, version = np.full((2, 3), np.inf), np.zeros((2, 3), dtype=np.int64)
    return ContinuousEngine(spec.rollout, gen_done, version), gen_done


def test_continuous_engine_shares_iterations_between_running_sequences():
    # 10 and 30 tokens at t=0; an iteration takes 0.1 + 0.05 per sequence: 0.2 s with both, 0.15 alone.
    # The short one is done after 10 shared iterations (2.0 s), the long one 20 iterations later (+3.0 s).
    engine, done = _continuous(iteration_s_per_seq=0.05)
    engine.arrive(0.0, 1, np.array([1, 1]), np.array([10, 30]))
    assert done[0, :2].tolist() == pytest.approx([2.0, 5.0])
    # A third request (10 tokens) at t=1: then 5 and 25 tokens are left; three share 0.25 s iterations until the
    # first is done (1 + 5 * 0.25 = 2.25), two share 0.2 s until the new one is (2.25 + 5 * 0.2 = 3.25), the
    # last runs alone (3.25 + 15 * 0.15 = 5.5).
    engine.arrive(1.0, 2, np.array([1]), np.array([10]))
    assert [done[0, 0], done[0, 1], done[1, 0]] == pytest.approx([2.25, 5.5, 3.25])


def test_continuous_engine_pauses_for_weight_sync_and_prefill():
    engine, done = _continuous(iteration_s_per_seq=0.05, prefill_s_per_token=0.01)
    engine.arrive(0.0, 1, np.array([10, 10]), np.array([10, 30]))  # 20 prompt tokens: 0.2 s of prefill first
    assert done[0, :2].tolist() == pytest.approx([2.2, 5.2])
    assert engine.sync(1.2, 0.5, version=1) == pytest.approx(1.7)  # 5 and 25 tokens left, decoding resumes at 1.7
    assert done[0, :2].tolist() == pytest.approx([2.7, 5.7])


def test_continuous_engine_over_its_cap_keeps_the_total_work():
    # cap 1: two sequences share one slot (0.1 s an iteration): the last finishes when 40 iterations are done
    engine, done = _continuous(max_running=1)
    engine.arrive(0.0, 1, np.array([1, 1]), np.array([10, 30]))
    assert done[0, 1] == pytest.approx(4.0) and done[0, 0] == pytest.approx(2.0)


def test_a_static_engine_never_starts_a_batch_inside_a_weight_sync():
    spec = load_spec(overrides=["rollout.batching=static", "rollout.iteration_s=0.1"])
    done, version = np.full((2, 2), np.inf), np.zeros((2, 2), dtype=np.int64)
    engine = StaticEngine(spec.rollout, done, version)
    assert engine.sync(0.0, 1.0, version=1) == pytest.approx(1.0)
    engine.arrive(0.5, 1, np.array([1, 1]), np.array([10, 20]))  # queued at 0.5, decoded [1, 3] with version 1
    assert done[0].tolist() == pytest.approx([3.0, 3.0]) and version[0].tolist() == [1, 1]


def test_reward_concurrency_cap_queues_calls():
    # one worker, one call at a time: the two samples' 3 s rewards run one after the other (sync: 2 + 6 + 1.75)
    run = _run("sync", ["reward.workers=1", "reward.max_concurrency=1"])
    assert _ends(run)[0] == pytest.approx(9.75)


def test_retries_and_failure_policies():
    # every attempt times out (latency 1 s > timeout 0.5 s): 3 attempts of 0.5 s and two backoffs
    # 0.1 * U[0.5, 1.0) and 0.2 * U[0.5, 1.0), as the reward loop's: each sample's reward takes 1.65 to 1.8 s
    fail = ["reward.latency=fixed:1", "reward.timeout_s=0.5", "reward.max_retries=2", "reward.backoff_s=0.1"]
    fail.append("reward.max_failure_rate=1")  # the budget never stops these runs (the default would, at step 1)
    spec = load_spec(overrides=[*TWO_SAMPLES, *fail])
    draws = draw_workload(spec)
    assert draws.failed.all() and (draws.attempts == 3).all()
    assert ((draws.reward_s >= 1.65) & (draws.reward_s < 1.8)).all()
    run = simulate(spec, "stream", draws)
    assert run.rows[0]["reward/failures"] == 2 and run.rows[0]["reward/defaulted"] == 2
    assert run.rows[0]["reward/timeouts"] == 6 and run.rows[0]["reward/retries"] == 4
    dropped = _run("stream", [*fail, "reward.on_failure=drop-group"])
    assert dropped.rows[0]["reward/dropped_groups"] == 1 and dropped.rows[0]["batch/num_samples"] == 0
    assert dropped.rows[0]["reward/failures"] == 2 and dropped.rows[0]["reward/samples"] == 2  # dropped, counted
    stopped = _run("stream", [*fail, "reward.on_failure=fail"])
    assert stopped.stopped and "on_failure is fail" in stopped.stopped and stopped.rows == []
    budget = _run("stream", [*fail[:-1], "reward.max_failure_rate=0.99"])
    assert budget.stopped == (
        "step 1: 2 of 2 reward samples failed (100%), over reward.max_failure_rate=0.99; the run stops here, "
        "as training would"
    )


@pytest.mark.parametrize("batching", ["static", "continuous"])
@pytest.mark.parametrize("max_staleness", [0, 1, 3])
def test_staleness_bound_holds_under_heavy_tailed_latency(batching, max_staleness):
    spec = load_spec(
        overrides=[
            "workload.steps=40",
            "workload.prompts_per_step=16",
            "workload.samples_per_prompt=4",
            "workload.mini_batch_prompts=4",
            "workload.response_tokens=uniform:5:200",
            "workload.max_response_tokens=200",
            f"workload.max_staleness={max_staleness}",
            f"rollout.batching={batching}",
            "rollout.replicas=2",
            "rollout.max_running=32",
            "reward.latency=pareto:0.5:1.2",
            "trainer.minibatch_s_per_token=0.0005",
        ]
    )
    draws = draw_workload(spec)
    lags = {m: [r["async/staleness_max"] for r in simulate(spec, m, draws).rows] for m in MODES}
    assert all(len(v) == 40 for v in lags.values())
    assert max(lags["sync"] + lags["stream"] + lags["pipeline"]) == 0
    assert max(lags["one-step-off"]) == 1
    assert max(lags["fully-async"]) == max_staleness  # reached, never passed
