"""The training loop end to end on the tiny policy: run folder, resume equivalence, Ctrl-C."""

from __future__ import annotations

import json

import pytest
import yaml
from small_run import SMALL_RUN

from rlrm.config.loader import load_profile
from rlrm.engine.checkpoint import list_checkpoints
from rlrm.engine.metrics.metrics_file import read_metrics
from rlrm.engine.trainer import start_run, train

# The shared small run, plus what this file checks: two optimizer steps a step (mini-batches of 2 prompts), a
# validation every 2 steps on 4 held-out prompts, a checkpoint every step.
SMALL = [
    *SMALL_RUN,
    "actor.mini_batch_size=2",
    "data.val_size=4",
    "trainer.val_every=2",
    "trainer.save_every=1",
    "trainer.keep_checkpoints=10",
]
N = 2  # rollout.n of SMALL_RUN
SAMPLES = 4 * N  # data.train_batch_size x rollout.n: samples a step


def _run(tmp_path, name, steps, extra=()):
    profile = load_profile("tiny-rule", SMALL + [f"trainer.total_steps={steps}", *extra])
    run_dir = start_run(profile, tmp_path / name)
    return run_dir, train(run_dir)


def _comparable(row):
    return {
        k: v for k, v in row.items() if not k.startswith(("timing_s/", "cpu_s/", "perf/", "reward/latency", "idle/"))
    }


@pytest.fixture(scope="module")
def served_disrm_run(tmp_path_factory, random_disrm_path):
    """One 2-step run scored by a served random DisRM (two replicas), read by two tests below."""
    extra = [
        "reward.kind=disrm",
        f"reward.server.model={random_disrm_path}",
        "reward.server.replicas=2",
        "reward.disrm.max_length=64",
    ]
    run_dir, result = _run(tmp_path_factory.mktemp("served-disrm"), "disrm", steps=2, extra=extra)
    return run_dir, result


def test_run_folder_layout_frozen_startup_objects_and_resume(tmp_path, tiny_policy_path):
    # One 2-step run checked three ways (once three runs): its folder's layout; the startup objects frozen while it
    # trains; and, resumed to 4 steps, the same metrics as an uninterrupted 4-step run.
    import gc

    frozen = []

    def record(phase, info):
        frozen.append(gc.get_freeze_count())

    gc.callbacks.append(record)
    try:
        run_dir, result = _run(tmp_path, "split", steps=2)
    finally:
        gc.callbacks.remove(record)
    # A full collection during training must not walk the ~100k+ objects that torch, transformers and the
    # models leave behind at startup; after the run they are collected as usual again.
    assert max(frozen) > 50_000 and gc.get_freeze_count() == 0
    _check_layout(run_dir, result)

    _, full = _run(tmp_path, "full", steps=4)
    from rlrm.engine.trainer import load_run_profile

    load_run_profile(run_dir, total_steps=4)  # what `rlrm train --resume DIR --steps 4` does
    resumed = train(run_dir)
    assert resumed.last_step == 4
    a = [_comparable(r) for r in read_metrics(tmp_path / "full" / "metrics.jsonl")]
    b = [_comparable(r) for r in read_metrics(run_dir / "metrics.jsonl")]
    assert [r["step"] for r in b] == [0, 1, 2, 3, 4]
    for row_a, row_b in zip(a, b):
        assert row_a.keys() == row_b.keys()
        for key in row_a:
            assert row_b[key] == pytest.approx(row_a[key], abs=1e-5), (row_a["step"], key)


def _check_layout(run_dir, result):
    """What a 2-step run (val_every=2, save_every=1) leaves in its folder."""
    assert result.last_step == 2 and not result.interrupted
    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert config["trainer"]["total_steps"] == 2 and config["rollout"]["n"] == N
    rows = read_metrics(run_dir / "metrics.jsonl")
    assert [r["step"] for r in rows] == [0, 1, 2]
    assert "val/accuracy" in rows[0] and "val/accuracy" in rows[2]
    for key in (
        "timing_s/gen",
        "timing_s/reward",
        "timing_s/update_actor",
        "timing_s/step",
        "perf/throughput",
        "actor/pg_loss",
        "actor/grad_norm",
        "critic/score/mean",
        "response_length/mean",
        "perf/max_memory_gb",
    ):
        assert key in rows[1], key
    assert 0.0 <= rows[1]["critic/score/mean"] <= 1.0
    assert rows[1]["batch/num_samples"] == SAMPLES
    # sync: the CPU time of generation and of the update alone (what bench simulate's calibration reads)
    assert 0 < rows[1]["cpu_s/gen"] and 0 < rows[1]["cpu_s/update_actor"] and rows[1]["perf/cpu_cores"] >= 1
    assert [p.name for p in list_checkpoints(run_dir)] == ["step_1", "step_2"]
    assert (run_dir / "checkpoints" / "step_2" / "model" / "config.json").is_file()
    trace = json.loads((run_dir / "trace.json").read_text())
    assert {e["name"] for e in trace["traceEvents"]} >= {"gen", "reward", "update_actor"}


def test_interrupt_saves_last_complete_step(tmp_path, tiny_policy_path, monkeypatch):
    from rlrm.engine.scheduling.sync import SyncScheduler

    real_step = SyncScheduler._step

    async def interrupting_step(self, step, timer):
        if step == 3:
            raise KeyboardInterrupt
        return await real_step(self, step, timer)

    monkeypatch.setattr(SyncScheduler, "_step", interrupting_step)
    run_dir, result = _run(tmp_path, "int", steps=4, extra=["trainer.save_every=0"])
    assert result.interrupted and result.last_step == 2
    assert [p.name for p in list_checkpoints(run_dir)] == ["step_2"]
    assert [r["step"] for r in read_metrics(run_dir / "metrics.jsonl")] == [0, 1, 2]
    monkeypatch.setattr(SyncScheduler, "_step", real_step)
    assert train(run_dir).last_step == 4


def test_training_with_a_served_disrm(served_disrm_run):
    run_dir, result = served_disrm_run
    assert result.last_step == 2
    rows = read_metrics(run_dir / "metrics.jsonl")
    assert rows[1]["reward/failures"] == 0 and rows[1]["reward/latency_p50"] > 0
    # a random DisRM gives real-valued logits, not the rule's 0/1
    assert rows[1]["critic/score/min"] != rows[1]["critic/score/max"]
    assert not {0.0, 1.0} >= {rows[1]["critic/score/min"], rows[1]["critic/score/max"]}


def test_a_reward_replica_killed_during_training_loses_no_sample(tmp_path, random_disrm_path, monkeypatch):
    from rlrm.engine.reward_service import RewardService
    from rlrm.engine.rewards.loop import RewardLoop

    services, calls = [], []
    real_start, real_score = RewardService.start, RewardLoop.score

    async def start(self):
        services.append(self)
        await real_start(self)

    async def score(self, sample):
        calls.append(sample.uid)
        if len(calls) == SAMPLES + SAMPLES // 2:  # mid-way through step 2
            services[0].pool.servers[0].kill()
        return await real_score(self, sample)

    monkeypatch.setattr(RewardService, "start", start)
    monkeypatch.setattr(RewardLoop, "score", score)
    run_dir, result = _run(
        tmp_path,
        "kill",
        steps=4,
        extra=[
            "trainer.mode=stream",
            "reward.kind=disrm",
            f"reward.server.model={random_disrm_path}",
            "reward.server.replicas=2",
            "reward.disrm.max_length=64",
            "reward.backoff_s=0.05",
            "reward.attempt_timeout_s=10",
            "reward.server.request_timeout_s=10",
        ],
    )
    assert result.last_step == 4 and len(calls) == 4 * SAMPLES
    rows = [r for r in read_metrics(run_dir / "metrics.jsonl") if r["step"] > 0]
    assert all(r["batch/num_samples"] == SAMPLES and r["reward/failures"] == 0 for r in rows)
    assert all(r["reward/defaulted"] == 0 and r["reward/dropped_groups"] == 0 for r in rows)
    # (the supervisor's restart of the dead replica is tested in test_reward_service; a short run may end first)


def test_colocated_reward_model_sleeps_between_scorings(tmp_path, random_disrm_path, monkeypatch):
    from rlrm.engine.reward_service import RewardService

    calls = []
    real_post_all = RewardService._post_all

    async def post_all(self, path, wait_s=0.0):
        await real_post_all(self, path, wait_s)
        calls.append(path)

    monkeypatch.setattr(RewardService, "_post_all", post_all)
    run_dir, result = _run(
        tmp_path,
        "coloc",
        steps=2,
        extra=[
            "reward.kind=disrm",
            f"reward.server.model={random_disrm_path}",
            "reward.placement=colocated",
            "reward.disrm.max_length=64",
        ],
    )
    assert result.last_step == 2
    # asleep from the start, then woken for each step's scoring and put back to sleep
    assert calls == ["/sleep?level=1"] + ["/wake_up", "/sleep?level=1"] * 2
    rows = [r for r in read_metrics(run_dir / "metrics.jsonl") if r["step"] > 0]
    assert all(r["reward/failures"] == 0 and "timing_s/reward_wake" in r for r in rows)


@pytest.mark.skipif(not __import__("importlib").util.find_spec("sglang_router"), reason="sglang-router not installed")
def test_a_colocated_judge_behind_the_router_sleeps_between_scorings(tmp_path, monkeypatch):
    # tiny-genrm's judge is served behind the SGLang router: the run's requests go to the router, /sleep and
    # /wake_up to each replica behind it (once a KeyError at the first /sleep: the balancer knew the router only)
    from rlrm.engine.reward_service import RewardService

    calls = []
    real_post_all = RewardService._post_all

    async def post_all(self, path, wait_s=0.0):
        await real_post_all(self, path, wait_s)
        calls.append((path, self.router is not None))

    monkeypatch.setattr(RewardService, "_post_all", post_all)
    settings = [
        "trainer.total_steps=2",
        "trainer.mode=sync",
        "reward.placement=colocated",
        "reward.server.router=sglang",
    ]
    run_dir = start_run(load_profile("tiny-genrm", SMALL + settings), tmp_path / "coloc-judge")
    assert train(run_dir).last_step == 2
    # asleep from the start; woken for each step's scoring (and the guard's canary calls), then put back to sleep
    paths = [path for path, behind_router in calls if behind_router]
    assert len(paths) == len(calls) >= 5 and paths == ["/sleep?level=1"] + ["/wake_up", "/sleep?level=1"] * (
        len(paths) // 2
    )
    rows = [r for r in read_metrics(run_dir / "metrics.jsonl") if r["step"] > 0]
    assert all(r["reward/failures"] == 0 and r["reward/model_calls"] > 0 for r in rows)


def test_legacy_in_trainer_disrm_trains_like_the_served_one_in_fp32(tmp_path, random_disrm_path, served_disrm_run):
    # Same seed, same model, fp32 on both paths: the two trainings see the same rewards. The served side is the
    # module's run above (two replicas: each sample is scored alone or in a batch, the same score to 1e-5).
    served_dir, _ = served_disrm_run
    legacy = ["reward.kind=disrm", f"reward.server.model={random_disrm_path}", "reward.disrm.max_length=64"]
    _run(tmp_path, "legacy", steps=2, extra=[*legacy, "reward.disrm.scorer=legacy", "reward.disrm.legacy_dtype=fp32"])
    rows_a = read_metrics(served_dir / "metrics.jsonl")
    rows_b = read_metrics(tmp_path / "legacy" / "metrics.jsonl")
    for ra, rb in zip(rows_a[1:], rows_b[1:]):
        for key in ("critic/score/mean", "critic/score/min", "critic/score/max"):
            assert rb[key] == pytest.approx(ra[key], abs=1e-5), key
        assert rb["reward/failures"] == 0


@pytest.mark.skipif(not __import__("importlib").util.find_spec("sglang_router"), reason="sglang-router not installed")
@pytest.mark.parametrize(
    "judge",
    [
        "tiny:policy",  # default tier: mechanics only (its verdicts mostly do not parse, and are counted)
        pytest.param("tiny:judge", marks=pytest.mark.slow),  # the tiny-genrm profile as shipped
    ],
)
def test_a_judge_replica_killed_during_tiny_genrm_training_loses_no_sample(
    tmp_path, tiny_policy_path, judge, monkeypatch
):
    # `rlrm train --profile tiny-genrm` with two judge replicas behind the SGLang router; one is killed
    # mid-way through step 2. Every sample must still be scored by the survivor or counted.
    from rlrm.engine.reward_service import RewardService
    from rlrm.engine.rewards.loop import RewardLoop

    services, calls = [], []
    real_start, real_score = RewardService.start, RewardLoop.score

    async def start(self):
        services.append(self)
        await real_start(self)

    async def score(self, sample):
        calls.append(sample.uid)
        if len(calls) == SAMPLES + SAMPLES // 2:
            services[0].pool.servers[0].kill()
        return await real_score(self, sample)

    monkeypatch.setattr(RewardService, "start", start)
    monkeypatch.setattr(RewardLoop, "score", score)
    profile = load_profile(
        "tiny-genrm",
        SMALL
        + [
            "trainer.total_steps=4",
            "trainer.mode=stream",
            f"reward.server.model={judge}",
            "reward.server.replicas=2",
            "reward.server.router=sglang",
            "reward.backoff_s=0.05",
            "reward.attempt_timeout_s=20",
            "reward.server.request_timeout_s=20",
            "reward.max_failure_rate=1",  # tiny:policy as a judge mostly gives no verdict: counted, not a reason to stop here
            "reward.guard.on_canary=off",  # every reward call counted below is a training sample's
        ],
    )
    run_dir = start_run(profile, tmp_path / "kill")
    result = train(run_dir)
    assert services[0].router is not None  # the judge traffic went through the router
    assert result.last_step == 4 and len(calls) == 4 * SAMPLES
    rows = [r for r in read_metrics(run_dir / "metrics.jsonl") if r["step"] > 0]
    assert all(r["batch/num_samples"] == SAMPLES and r["reward/dropped_groups"] == 0 for r in rows)
    # No sample failed for want of a server: the only failures are verdicts that did not parse,
    # and each of those was given the default score and counted.
    assert all(r["reward/failures"] == r["reward/unparsed"] == r["reward/defaulted"] for r in rows)
    assert all(r["reward/judge_completion_tokens"] > 0 for r in rows)


@pytest.mark.parametrize("tf32", [True, False])
def test_model_tf32_holds_while_the_run_trains_and_is_given_back(tmp_path, monkeypatch, tf32):
    """model.tf32 sets CUDA's float32 matrix products to TF32 (torch.backends.cuda.matmul.fp32_precision, a
    process-wide setting read by CUDA alone) for the run's updates and puts the caller's setting back when it
    ends; false touches nothing."""
    import torch

    from rlrm.engine.actor.actor import Actor

    matmul = torch.backends.cuda.matmul
    seen = []
    update = Actor.update

    def recording(self, *args, **kwargs):
        seen.append(matmul.fp32_precision)
        return update(self, *args, **kwargs)

    monkeypatch.setattr(Actor, "update", recording)
    before = matmul.fp32_precision
    matmul.fp32_precision = "ieee"  # the caller's own setting
    try:
        run_dir = start_run(
            load_profile("tiny-rule", [*SMALL_RUN, "trainer.total_steps=1", f"model.tf32={tf32}"]), tmp_path
        )
        train(run_dir)
        assert seen == ["tf32" if tf32 else "ieee"]
        assert matmul.fp32_precision == "ieee"
    finally:
        matmul.fp32_precision = before
